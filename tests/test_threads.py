"""Compute threads sleep when idle: the `clearsight` command sets OMP_WAIT_POLICY=PASSIVE
before torch loads (unless the environment sets a policy), and ONNX Runtime sessions spin
only when OMP_WAIT_POLICY=ACTIVE asks for it. (The time this saves on a loaded machine is
measured by benchmarks/thread_contention.py, not here.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clearsight.runtime.ort_backend import make_session

SPIN = "session.intra_op.allow_spinning"

PROBE = """
import os, sys
import clearsight.cli
assert "torch" not in sys.modules, "torch loaded before the command could set the policy"
sys.argv = ["clearsight", "--version"]
try:
    clearsight.cli.main()
except SystemExit:
    pass
print("policy=" + os.environ.get("OMP_WAIT_POLICY", ""))
"""


def _policy_seen_by_the_command(policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout
    return out.strip().splitlines()[-1]


def test_the_command_makes_idle_threads_sleep_unless_told_otherwise() -> None:
    assert _policy_seen_by_the_command(None) == "policy=PASSIVE"
    assert _policy_seen_by_the_command("ACTIVE") == "policy=ACTIVE"


def _identity_onnx() -> bytes:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


@pytest.mark.parametrize(("policy", "spin"), [(None, "0"), ("PASSIVE", "0"), ("ACTIVE", "1")])
def test_onnx_runtime_threads_spin_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, policy: str | None, spin: str
) -> None:
    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    session = make_session(_identity_onnx(), threads=2)
    assert session.get_session_options().get_session_config_entry(SPIN) == spin
