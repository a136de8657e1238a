"""Bind the server's sockets before anything slow happens.

`clearsight serve` binds its address first, so a bad or busy `--port` or `--host` is one
line and exit 1 before the models load, and the "serving" line names the port actually
bound (`--port 0` picks a free one). uvicorn is then handed these sockets: binding them
itself would fail only after the models loaded, with its own traceback and exit code 3,
which clearsight reserves for "some inputs failed".
"""

from __future__ import annotations

import errno
import socket

from clearsight.errors import OptionError

MAX_PORT = 65535


def check_port(port: int) -> None:
    """0 (any free port) to 65535, or an `OptionError` naming `--port`."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= MAX_PORT:
        raise OptionError("port", f"must be 0 to {MAX_PORT}, got {port}")


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound (not yet listening) TCP sockets for every address `host` resolves to, as
    asyncio's own `create_server` would bind them; errors name `--host` or `--port`."""
    check_port(port)
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise OptionError("host", f"cannot resolve {host!r} ({_reason(exc)})") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            if sockets and port == 0:  # the same free port on every address
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise _bind_error(exc, host, address[1]) from None
            sock.set_inheritable(True)
    except BaseException:
        close_all(sockets)
        raise
    if not sockets:
        raise OptionError("host", f"{host!r} has no IPv4 or IPv6 address")
    return sockets


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def url(sock: socket.socket) -> str:
    """The address a bound socket serves, as a URL: http://127.0.0.1:8000, http://[::1]:80."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"


def _bind_error(exc: OSError, host: str, port: int) -> OptionError:
    if exc.errno == errno.EADDRINUSE:
        return OptionError("port", f"{port} is already in use on {host}; pick another --port")
    if exc.errno == errno.EACCES:
        return OptionError("port", f"not allowed to bind {port} on {host} (ports below 1024 "
                                   "usually need privileges)")  # fmt: skip
    if exc.errno == errno.EADDRNOTAVAIL:
        return OptionError("host", f"{host} is not an address of this machine")
    return OptionError("port", f"cannot bind {port} on {host} ({_reason(exc)})")


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


__all__ = ["MAX_PORT", "bind_sockets", "check_port", "close_all", "url"]
