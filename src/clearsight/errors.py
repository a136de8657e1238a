"""User-facing errors.

Every error a user can cause (bad file, bad argument, unknown name) is a `ClearsightError`
with a one-line message that names the file or argument. The CLI prints the message and exits
non-zero without a traceback; anything else is a bug and keeps its traceback. An error
raised inside OpenCV or FFmpeg (`cv2.error`, PyAV's `av.error.*`) that a caller did not
turn into one of these is still shown as one line (`library_reason`), per input in a folder
run, never as an internal error.
"""

import re

_OPENCV_DETAIL = re.compile(r"error: \(-?\d+:[^)]*\) (?P<detail>.+)$")


class ClearsightError(Exception):
    """An error caused by input, reported to the user as one line."""


class ImageReadError(ClearsightError):
    """An image file is missing, unreadable, corrupt or too large."""


class ImageWriteError(ClearsightError):
    """An image could not be written."""


class PairingError(ClearsightError):
    """Paired data does not match up (unmatched names, differing sizes)."""


class UnknownNameError(ClearsightError):
    """An unknown model, architecture or metric preset was asked for."""


class ArtifactError(ClearsightError):
    """A model artifact is missing, corrupt or of an unsupported version."""


class OptionError(ClearsightError, ValueError):
    """A bad option value; `option` names it (Python spelling, e.g. "stage_threshold").

    Raised once, where the option is validated (`InferenceOptions`); the CLI prints it as
    `--option: detail` with its own flag name.
    """

    def __init__(self, option: str, detail: str) -> None:
        super().__init__(f"{option}: {detail}")
        self.option = option
        self.detail = detail


def check_whole_number(option: str, value: object, low: int = 1) -> None:
    """An OptionError naming `option` unless `value` is an int (not a bool) >= `low`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise OptionError(option, f"must be a whole number >= {low}, got {value!r}")


def check_unit_interval(option: str, value: object) -> float:
    """An OptionError naming `option` unless `value` is a number in [0, 1] (a score
    threshold); checked where a run starts, so a bad one is not a failure per input."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise OptionError(option, f"must be in [0, 1], got {value!r}")
    return float(value)


class ModelOutputError(ClearsightError):
    """A model returned a tensor of the wrong shape for its input (batch, channels, size)."""


class VideoReadError(ClearsightError):
    """A video (or folder of numbered frames) is missing, unreadable, truncated or too large."""


class VideoWriteError(ClearsightError):
    """A video could not be written (container cannot hold a codec, encoder failed)."""


def library_reason(exc: BaseException, file_name: str | None = None) -> str | None:
    """One line for an error raised inside OpenCV (`cv2.error`) or FFmpeg (PyAV's
    `av.error.*`): the library's own words without its version, source file and line
    ("OpenCV: The input image must have ..."), with the file PyAV names (or `file_name`
    for it, where the path is not the reader's to see); None for any other exception.
    Told apart by module, so this module imports neither library."""
    library = type(exc).__module__.split(".")[0]
    text = " ".join(str(exc).split())
    if library == "cv2":
        m = _OPENCV_DETAIL.search(text)
        return f"OpenCV: {m['detail'] if m else text or 'error'}"
    if library == "av":
        detail = getattr(exc, "strerror", None) or text or type(exc).__name__
        filename = getattr(exc, "filename", None)
        if filename and file_name is not None:
            filename = file_name
        return f"{filename}: FFmpeg: {detail}" if filename else f"FFmpeg: {detail}"
    return None


def is_library_error(exc: BaseException) -> bool:
    """Whether `exc` was raised inside OpenCV or FFmpeg (see `library_reason`)."""
    return library_reason(exc) is not None
