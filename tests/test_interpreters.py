"""Real interpreters: a target venv with verl installed editable, and ascendfix itself on Python 3.10."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest
from ascendfix import demo

from tests.stack import DEMO_PATCHES

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target_venv(tmp_path_factory):
    """A venv with the demo verl checkout installed editable (pip -e), as the guide installs verl."""
    base = tmp_path_factory.mktemp("target")
    workspace = demo.build(base / "ws")
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    result = subprocess.run(
        [python, "-m", "pip", "install", "-q", "-e", str(workspace.verl)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot pip install -e into a venv here: {result.stderr.strip()[-300:]}")
    return python, workspace


def test_editable_install_resolves_to_its_checkout(target_venv, ascendfix_cli):
    python, workspace = target_venv
    result = ascendfix_cli(
        "apply", "--device", "npu", "--python", str(python), "--only", "verl-dapo-no-interleave", "--json"
    )
    assert result.returncode == 0, result.stderr
    (patch,) = json.loads(result.stdout)["patches"]
    assert patch["state"] == "applied"  # found the checkout, so recipe/ is there
    assert "# ascendfix: verl-dapo-no-interleave" in (workspace.verl / "recipe/dapo/dapo_ray_trainer.py").read_text()
    assert ascendfix_cli("revert", "--python", str(python)).returncode == 0
    dapo = "recipe/dapo/dapo_ray_trainer.py"
    assert (workspace.verl / dapo).read_bytes() == (demo.standins("verl") / dapo).read_bytes()


def test_ascendfix_runs_on_python_3_10(tmp_path, python310):
    venv_dir = tmp_path / "py310"
    subprocess.run([str(python310), "-m", "venv", str(venv_dir)], check=True)
    python = venv_dir / "bin" / "python"
    install = subprocess.run([python, "-m", "pip", "install", "-q", str(REPO)], capture_output=True, text=True)
    if install.returncode != 0:
        pytest.skip(f"cannot install dependencies for Python 3.10: {install.stderr.strip()[-300:]}")
    result = subprocess.run(
        [venv_dir / "bin" / "ascendfix", "demo", "--dir", str(tmp_path / "demo")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(reverted)") == len(DEMO_PATCHES)
