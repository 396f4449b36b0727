"""The command line as a user meets it: exit codes, one-line errors, JSON, nothing half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stack import make_stack

REPO = Path(__file__).resolve().parent.parent


def run(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "ascendfix", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


@pytest.fixture
def stack(tmp_path):
    return make_stack(tmp_path)


def test_apply_status_revert_through_the_cli(stack):
    before = stack.snapshot()
    applied = run("apply", "--device", "npu", *stack.root_args(), "--json")
    assert applied.returncode == 0, applied.stderr
    data = json.loads(applied.stdout)
    assert data["profile"] == "verl-796871d-demo" and data["device"] == "npu"
    assert [p["state"] for p in data["patches"]] == ["applied"] * 5
    status = run("status", "--device", "npu", *stack.root_args(), "--json")
    assert status.returncode == 0
    assert {p["id"]: p["state"] for p in json.loads(status.stdout)["patches"]}["verl-grpo-no-interleave"] == "applied"
    reverted = run("revert", *stack.root_args())
    assert reverted.returncode == 0 and "reverted" in reverted.stdout
    assert stack.snapshot() == before
    assert run("status", "--device", "npu", *stack.root_args()).returncode == 1  # not in the asked state


def test_diff_is_plain_when_piped(stack):
    result = run("diff", "--device", "npu", *stack.root_args())
    assert result.returncode == 0
    assert "+is_cuda_available = False  # ascendfix: verl-cuda-probe-off" in result.stdout
    assert "\x1b[" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["apply", "--device", "npu", "--root", "verl"], "--root 'verl': expected PKG=DIR"),
        (["apply", "--device", "npu", "--root", "verl=/nonexistent"], "/nonexistent is not a directory"),
        (["apply", "--profile", "nope", "--device", "npu"], "unknown profile 'nope'"),
        (["apply", "--device", "npu", "--only", "nope"], "--only nope: not a patch of profile"),
        (["status", "--device", "npu", "--python", "/nonexistent/python"], "--python /nonexistent/python: no such"),
        (["show", "/tmp/does-not-exist.toml"], "no such manifest file"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_refusal_is_exit_1_and_writes_nothing(stack):
    stack.file("verl", "verl/utils/device.py").write_bytes(b"def broken(:\n")
    before = stack.snapshot()
    result = run("apply", "--device", "npu", *stack.root_args())
    assert result.returncode == 1
    assert "refused, nothing was changed" in result.stderr and "Traceback" not in result.stderr
    assert stack.snapshot() == before


def test_no_device_found_asks_for_one(stack, monkeypatch):
    env_path = os.environ.get("PATH", "")
    if any((Path(p) / name).exists() for p in env_path.split(":") for name in ("npu-smi", "nvidia-smi")):
        pytest.skip("this machine has an accelerator tool on PATH")
    if Path("/usr/local/Ascend/driver").exists():
        pytest.skip("this machine has an Ascend driver")
    result = run("apply", *stack.root_args())
    assert result.returncode == 2 and "pass --device npu or --device cuda" in result.stderr


def test_profiles_and_show_json():
    listed = json.loads(run("profiles", "--json").stdout)
    assert listed[0]["name"] == "verl-796871d"
    shown = json.loads(run("show", "verl-796871d", "--json").stdout)
    assert shown["name"] == "verl-796871d" and "verl-grpo-no-interleave" in shown["patches"]


def test_python_target_interpreter_without_the_package(stack):
    python310 = Path("/root/.pyenv/versions/3.10.13/bin/python3.10")
    if not python310.exists():
        pytest.skip("no Python 3.10 interpreter on this machine")
    result = run("status", "--device", "npu", "--python", str(python310), "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 1
    assert all("not installed in" in p["reason"] for p in data["patches"] if p["state"] == "drifted")


def test_demo_runs_the_whole_job_and_leaves_the_workspace_as_it_found_it(tmp_path):
    result = run("demo", "--dir", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr
    assert "interleave=False  # ascendfix: verl-grpo-no-interleave" in result.stdout
    assert result.stdout.count("(reverted)") == 5
    assert (
        "e2e 8.035 tokens/s per device" in result.stdout and "(world 128, update 26.830, vllm 14.841)" in result.stdout
    )
    assert (tmp_path / "demo" / "run" / "train.log").read_text().count(" - training/global_step:") == 6
    assert json.loads((tmp_path / "demo" / "run" / "run.json").read_text())["exit_status"] == 0
    pristine = make_stack(tmp_path / "compare")
    demo_stack = type(pristine)(tmp_path / "demo" / "verl-checkout", tmp_path / "demo" / "site-packages", None)
    assert demo_stack.snapshot() == pristine.snapshot()
