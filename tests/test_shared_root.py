"""pip's default layout: verl and torch in one site-packages, reached by more than one name. Each distinct folder
is planned, locked and journaled once (real verl 0.5.0 wheel and torch 2.10.0 files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from ascendfix.errors import RefusedError
from ascendfix.patching import engine, journal
from ascendfix.patching.journal import PlannedWrite
from ascendfix.profile import manifest

from tests import cli, upstream

pytestmark = pytest.mark.upstream

DEVICE = "verl/utils/device.py"
SHARDS = upstream.SHARD_INTERNALS


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "venv" / "lib" / "site-packages"
    shutil.copytree(upstream.torch_tree("2.10.0") / "torch", root / "torch")
    shutil.copytree(upstream.verl_tree("0.5.0") / "verl", root / "verl")
    return root


def team_profile(folder):
    """A team profile whose own patch edits the file of the bundled verl-cuda-probe-off (which it drops)."""
    (folder / "patches").mkdir(parents=True)
    text = (manifest.resources.data_dir("patches") / "verl-cuda-probe-off.toml").read_text()
    (folder / "patches" / "team-probe.toml").write_text(text.replace('id = "verl-cuda-probe-off"', 'id = "team-probe"'))
    (folder / "team.toml").write_text(
        'extends = "verl-796871d"\nname = "team"\n[devices.npu]\nadd_patches = ["team-probe"]\n'
        'drop_patches = ["verl-cuda-probe-off"]\n'
    )
    return folder / "team.toml"


def test_the_bundled_profile_reverts_a_team_patch_in_a_shared_site_packages(site, tmp_path):
    stock = (site / DEVICE).read_bytes()
    roots = ["--root", f"verl={site}", "--root", f"torch={site}"]
    team = team_profile(tmp_path / "team")
    applied = cli.run("apply", "--profile", str(team), "--device", "npu", *roots, timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert b"# ascendfix: team-probe" in (site / DEVICE).read_bytes()
    reverted = cli.run("revert", "--profile", "verl-796871d", *roots, timeout=120)
    assert reverted.returncode == 0, reverted.stderr
    assert (site / DEVICE).read_bytes() == stock
    assert not (site / ".ascendfix").exists()
    status = cli.run("status", "--device", "npu", *roots, timeout=120)
    assert status.returncode == 1  # usable again: not applied, no refusal


def test_a_file_planned_twice_in_one_transaction_is_refused_before_anything_is_written(site):
    restore = engine.restorer(manifest.load_profile("verl-796871d"))
    write = PlannedWrite(DEVICE, b"x = 1\n", None)
    before = (site / DEVICE).read_bytes()
    with journal.session([site], {}, restore) as session, pytest.raises(RefusedError, match="planned twice"):
        session.write("revert", {site: [write, write]})
    assert (site / DEVICE).read_bytes() == before and not (site / ".ascendfix").exists()


def test_a_symlinked_prefix_and_a_root_naming_the_same_folder_is_one_lock_not_a_wait(tmp_path):
    """A venv reached through a symlinked prefix (its python finds verl below the link), with --root naming the
    real site-packages for torch: one folder, locked once, planned once."""
    venv = tmp_path / "real-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    shutil.copytree(upstream.torch_tree("2.10.0") / "torch", site / "torch")
    shutil.copytree(upstream.verl_tree("0.5.0") / "verl", site / "verl")
    (tmp_path / "venv").symlink_to(venv)
    python = tmp_path / "venv" / "bin" / "python"
    done = cli.run("apply", "--device", "npu", "--python", str(python), "--root", f"torch={site}", timeout=60)
    assert done.returncode == 0 and "waiting" not in done.stderr, done.stderr
    assert b"# ascendfix: verl-cuda-probe-off" in (site / DEVICE).read_bytes()
    assert set(json.loads((site / ".ascendfix" / "state.json").read_text())["files"]) >= {DEVICE, SHARDS}
    status = cli.run(
        "status", "--device", "npu", "--python", str(python), "--root", f"torch={site}", "--json", timeout=120
    )
    assert {p["state"] for p in json.loads(status.stdout)["patches"]} == {"applied", "not-applicable"}


def test_a_lock_held_by_this_process_is_a_bug_not_a_wait(site):
    from ascendfix.patching import tree

    with tree.locked([site]), pytest.raises(RuntimeError, match="already holds"), tree.locked([site]):
        pass
    assert os.path.isdir(site)
