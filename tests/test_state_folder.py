"""The smaller holes of the state folder and the profile, as a user meets them at the command line: a status that
reads while an apply writes, the owner of a replaced file, a state folder on a mount point, state.json as a folder,
a patch id that is a path, a pin with a line break."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import time

import pytest
from ascendfix.patching import engine, journal

from tests.stack import select

DEVICE = "verl/utils/device.py"


@pytest.fixture
def cli(ascendfix_cli):
    """``ascendfix ARGS``."""
    return lambda *args: ascendfix_cli(*args, timeout=120)


def one_line(result, code, *words):
    assert result.returncode == code, (result.stdout, result.stderr)
    line = result.stderr.strip()
    assert "Traceback" not in result.stderr and "\n" not in line and line.startswith("error: "), line
    for word in words:
        assert word in line, line
    return line


def test_status_waits_for_an_apply_in_progress_instead_of_reading_half_of_it(stack, ascendfix_popen):
    fd = os.open(stack.torch, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # an apply holds the root while it writes
    try:
        child = ascendfix_popen(
            "status",
            "--device",
            "npu",
            *stack.root_args(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = child.stderr.readline()
        assert line.startswith(f"waiting: {stack.torch} is locked by pid {os.getpid()}")
        time.sleep(0.3)
        assert child.poll() is None  # nothing reported while the lock is held
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    out, _ = child.communicate(timeout=60)
    assert "not-applied" in out


def test_a_replaced_file_keeps_its_owner_and_group(stack):
    target = stack.file("verl", DEVICE)
    os.chown(target, 4242, 4343)
    engine.apply(select(stack))
    assert b"# ascendfix:" in target.read_bytes()
    assert (target.stat().st_uid, target.stat().st_gid) == (4242, 4343)
    engine.revert(select(stack, device=None))
    assert (target.stat().st_uid, target.stat().st_gid) == (4242, 4343)


def test_a_state_folder_on_a_mount_point_is_emptied_once_not_failed_on_every_command(stack, monkeypatch):
    (stack.verl / ".ascendfix").mkdir()
    state = os.stat(stack.verl / ".ascendfix")
    real = os.rmdir

    def busy(path, *, dir_fd=None):
        if dir_fd is not None and os.stat(path, dir_fd=dir_fd).st_ino == state.st_ino:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        return real(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "rmdir", busy)
    for _ in range(2):
        engine.apply(select(stack))
        engine.revert(select(stack, device=None))
    assert os.listdir(stack.verl / ".ascendfix") == []
    assert not journal.Store(stack.verl).needs_recovery()


def test_state_json_that_is_a_folder_is_one_line_naming_it(stack, cli):
    engine.apply(select(stack))
    state = stack.verl / ".ascendfix" / "state.json"
    state.unlink()
    state.mkdir()
    line = one_line(cli("status", "--device", "npu", *stack.root_args()), 1, str(state), "is a folder")
    assert "Is a directory" not in line


def test_a_patch_id_that_is_a_path_is_refused_before_anything_is_read(tmp_path, cli):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "evil.toml").write_text('id = "evil"\n')
    team = tmp_path / "team" / "team.toml"
    (team.parent / "patches").mkdir(parents=True)
    team.write_text('extends = "verl-796871d"\nname = "team"\n[devices.npu]\nadd_patches = ["../../elsewhere/evil"]\n')
    one_line(cli("show", str(team)), 2, str(team), "devices.npu.patches", "is not a patch id")


def test_a_version_with_a_line_break_never_reaches_the_constraints(tmp_path, cli):
    from ascendfix.resources import data_dir

    text = (data_dir("manifests") / "verl-796871d.toml").read_text()
    pinned = next(line for line in text.splitlines() if line.startswith('version = "') and "." in line)
    evil = pinned.replace('version = "', 'version = "1.0\\n--index-url https://evil.example/simple\\n#')
    profile = tmp_path / "evil.toml"
    profile.write_text(text.replace(pinned, evil, 1))
    result = cli("export", "constraints", "--profile", str(profile))
    one_line(result, 2, "version", "one line")
    assert "evil.example" not in result.stdout
