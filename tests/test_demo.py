"""The demo depends on nothing of the machine's, and a step that fails says why."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from ascendfix import cli, demo, resources
from ascendfix.profile import manifest
from ascendfix.profile.records import DEFAULT_VARIANT
from click.testing import CliRunner

from tests.stack import DEMO_PATCHES

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, ascendfix_cli):
    """The demo, run once as a process, with something answering at RAY_ADDRESS (a listener that is no
    Ray cluster: run's gate would refuse the job if the demo let it through); (result, address, folder)."""
    tmp_path = tmp_path_factory.mktemp("demo")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        host, port = listener.getsockname()
        address = f"{host}:{port}"
        env = {"RAY_ADDRESS": address, "TMPDIR": str(tmp_path)}
        result = ascendfix_cli("demo", "--dir", tmp_path / "demo", env=env)
    return result, address, tmp_path / "demo"


def test_a_ray_cluster_on_the_machine_does_not_reach_the_demo(demo_run):
    result, address, _ = demo_run
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "e2e 8.035 tokens/s per device" in result.stdout
    assert address not in result.stdout + result.stderr


def test_the_demos_run_json_is_data_through_and_through(demo_run):
    result, _, folder = demo_run
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    record = json.loads((folder / "run" / "run.json").read_text())
    assert record["preflight"] == "correctness only (--no-preflight)"
    (hint,) = record["preflight_hints"]  # the demo's train.sh runs none of verl's trainers
    assert hint["source"] == "overrides"
    assert hint["message"].startswith("the command runs none of verl.trainer.main_ppo")
    profile = manifest.load_profile(str(folder / "profile.toml"))  # the workspace's patches, as applied
    assert {(p["id"], p["variant"], p["state"]) for p in record["patches"]} == {
        (pid, profile.variants.get(pid, DEFAULT_VARIANT), "applied") for pid in profile.devices["npu"].patches
    }
    assert record["profile"] == "verl-796871d-demo"
    assert (record["exit_status"], record["killed"], record["steps"]) == (0, False, 6)

    def strings(value):
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    reprs = [s for s in strings(record) if re.search(r"\b[A-Z]\w*\(\w+=", s)]
    assert not reprs, reprs  # no Python repr of a record (Finding(source=...)) anywhere


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
    assert result.output.count("(reverted)") == len(DEMO_PATCHES)  # the workspace is left as it was found
    assert "6. revert" in result.output


def test_demo_dir_refuses_a_folder_it_did_not_write_and_never_writes_through_a_link(tmp_path):
    """An existing folder's train.sh and profile.toml were overwritten, and a planted train.sh link's target
    replaced and made executable: now a folder with anything in it is one line, exit 2, nothing touched."""
    target = tmp_path / "precious.txt"
    target.write_text("mine\n")
    target.chmod(0o600)
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "train.sh").symlink_to(target)
    (folder / "profile.toml").write_text("# my profile\n")
    result = CliRunner().invoke(cli.main, ["demo", "--dir", str(folder)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: demo --dir {folder}: holds files (profile.toml, train.sh): ")
    assert target.read_text() == "mine\n" and target.stat().st_mode & 0o777 == 0o600
    assert (folder / "profile.toml").read_text() == "# my profile\n" and sorted(os.listdir(folder)) == [
        "profile.toml",
        "train.sh",
    ]
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    result = CliRunner().invoke(cli.main, ["demo", "--dir", str(link)])
    assert result.exit_code == 2 and "a symbolic link" in result.stderr
    assert not (tmp_path / "elsewhere").exists()
    with pytest.raises(FileExistsError):  # the writer itself never writes over a file or through a link
        demo.build(folder)
    assert target.read_text() == "mine\n"


def test_demo_dir_a_second_time_says_what_is_true(tmp_path, ascendfix_cli):
    """A second ``demo --dir DIR`` said the folder "holds files the demo did not write": the demo wrote them.
    A folder in a missing one names the missing parent; nothing is created either way."""
    folder = tmp_path / "demo"
    demo.build(folder)  # what the first run leaves
    before = sorted(os.listdir(folder))
    again = ascendfix_cli("demo", "--dir", folder)
    assert (again.returncode, again.stdout) == (2, "")
    shown = ", ".join(before[:3]) + f" and {len(before) - 3} more"
    said = f"holds files ({shown}): give a new or empty folder; the demo never writes over files"
    assert again.stderr.splitlines() == [f"error: demo --dir {folder}: {said}"]
    assert sorted(os.listdir(folder)) == before
    deep = tmp_path / "absent" / "deep" / "x"
    missing = ascendfix_cli("demo", "--dir", deep)
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr.splitlines() == [
        f"error: demo --dir {deep}: its parent folder {deep.parent} is missing; create it first"
    ]
    assert not (tmp_path / "absent").exists()


def test_every_bundled_patch_file_has_a_demo_stand_in():
    """Each file a bundled patch edits has its stand-in (patches/standins/<package>/<path>), so the demo
    and the tests built on it apply every patch; a new patch names the one file to add."""
    bundled = sorted(resources.data_dir("patches").glob("*.toml"))
    assert bundled
    for path in bundled:
        patch = manifest.load_patch(path)
        for f in patch.files:
            standin = demo.standins(patch.package) / f.path
            assert standin.is_file(), (
                f"{path.name} edits {patch.package}'s {f.path}: add its demo stand-in, patches/standins/"
                f"{patch.package}/{f.path} (a small file shaped like upstream's, where the patch finds its sites)"
            )
