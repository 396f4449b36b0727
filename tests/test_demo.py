"""The demo depends on nothing of the machine's, and a step that fails says why."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from ascendfix import cli, demo
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent


def test_a_ray_cluster_on_the_machine_does_not_reach_the_demo(tmp_path):
    # something answers at RAY_ADDRESS (a listener that is no Ray cluster): run's gate would refuse the job
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        host, port = listener.getsockname()
        address = f"{host}:{port}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": address, "TMPDIR": str(tmp_path)}
        result = subprocess.run(
            [sys.executable, "-m", "ascendfix", "demo", "--dir", str(tmp_path / "demo")],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "e2e 8.035 tokens/s per device" in result.stdout
    assert address not in result.stdout + result.stderr


def test_the_isolated_environment_hides_the_machines_cluster(tmp_path):
    env = demo.isolated_env({"RAY_ADDRESS": "10.0.0.1:6166", "PATH": "/bin"}, tmp_path)
    assert env == {"PATH": "/bin", "RAY_TMPDIR": str(tmp_path / "ray-tmp")}


def test_a_failed_run_step_names_its_reason_and_the_demo_still_reverts(tmp_path, monkeypatch):
    said = (
        b"hint (env): x\nproblem (ray): the Ray cluster at 10.0.0.1:6166 has 0 NPU registered\n"
        b"error: preflight found 1 problem(s)\n"
    )

    def refused(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 1, stderr=said)

    monkeypatch.setattr(demo.subprocess, "run", refused)
    result = CliRunner().invoke(cli.main, ["demo", "--dir", str(tmp_path / "demo")])
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last == (
        "error: demo: step 5 failed: problem (ray): the Ray cluster at 10.0.0.1:6166 has 0 NPU registered; "
        "error: preflight found 1 problem(s)"
    )
    assert "train.log" not in result.output  # no report step after a failed run
    assert result.output.count("(reverted)") == 5  # the workspace is left as it was found
    assert "6. revert" in result.output
