"""The state folder is untrusted input: each attack on it is refused in one line, and nothing outside moves."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from ascendfix.errors import RefusedError
from ascendfix.patching import engine, journal
from ascendfix.patching.journal import WriteError

from tests.cli import command
from tests.stack import select

DEVICE = "verl/utils/device.py"


@pytest.fixture
def cli(ascendfix_cli):
    """``ascendfix ARGS`` over the stack's roots."""
    return lambda stack, *args: ascendfix_cli(*args, *stack.root_args(), timeout=120)


@pytest.fixture
def outside(tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "x").write_bytes(b"precious\n")
    return folder


def refused_in_one_line(result, *words):
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("error: "), line
    for word in words:
        assert word in line, line
    return line


def _plant_journal(root, entries, undo=None, **extra):
    state = root / ".ascendfix"
    state.mkdir(exist_ok=True)
    data = {"schema": journal.SCHEMA, "op": "apply", "txid": "ab" * 8, "roots": [str(root)], "files": entries}
    data.update(extra)
    (state / "journal.json").write_text(json.dumps(data))
    for rel, content in (undo or {}).items():
        path = state / "undo" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _entry(rel, before=b"x", after=b"y"):
    return {"rel": rel, "before": journal.digest(before), "after": journal.digest(after)}


@pytest.mark.parametrize("rel", ["../outside/x", "/ABS/x", "link/x"])
def test_a_journal_entry_that_leaves_the_root_is_refused_and_nothing_outside_moves(stack, outside, rel, cli):
    (stack.verl / "link").symlink_to(outside)  # a symlinked folder inside the root
    rel = rel.replace("/ABS", str(outside))
    _plant_journal(stack.verl, [_entry(rel, b"evil\n", b"precious\n")], undo={"evil": b"evil\n"})
    before = stack.snapshot()
    line = refused_in_one_line(cli(stack, "status", "--device", "npu"), "journal.json")
    assert "move" in line and "aside" in line or "symbolic link" in line
    assert (outside / "x").read_bytes() == b"precious\n"
    assert stack.snapshot() == before
    assert (stack.verl / ".ascendfix" / "journal.json").exists()  # nothing deleted either


def test_a_journal_whose_previous_is_a_list_is_one_line(stack, cli):
    _plant_journal(stack.verl, [], previous=[1, 2])
    refused_in_one_line(cli(stack, "status", "--device", "npu"), "journal.json", "previous")


@pytest.mark.parametrize("key", ["../outside/x", "/ABS/x"])
def test_a_tampered_state_record_is_refused_by_revert(stack, outside, key, cli):
    engine.apply(select(stack))
    state = stack.verl / ".ascendfix" / "state.json"
    data = json.loads(state.read_text())
    record = dict(next(iter(data["files"].values())), patch="team-probe", profile="team")
    data["files"][key.replace("/ABS", str(outside))] = record
    state.write_text(json.dumps(data))
    before = stack.snapshot()
    refused_in_one_line(cli(stack, "revert"), "state.json", "unsafe path")
    assert (outside / "x").read_bytes() == b"precious\n"
    assert stack.snapshot() == before


def test_a_tampered_backup_is_never_written_back(stack):
    original = stack.file("verl", DEVICE).read_bytes()
    engine.apply(select(stack))
    evil = b"import os; os.system('echo pwned')\n"
    backup = stack.verl / ".ascendfix" / "backup" / DEVICE
    backup.write_bytes(evil)
    state = stack.verl / ".ascendfix" / "state.json"
    data = json.loads(state.read_text())
    data["files"][DEVICE]["original_sha256"] = journal.digest(evil)
    state.write_text(json.dumps(data))
    engine.revert(select(stack, device=None))
    assert stack.file("verl", DEVICE).read_bytes() == original  # undone through the markers instead


def test_a_planted_undo_copy_is_not_written_back_by_recovery(stack, cli):
    engine.apply(select(stack))
    patched = stack.file("verl", DEVICE).read_bytes()
    evil = b"import os; os.system('echo pwned')\n"
    _plant_journal(stack.verl, [_entry(DEVICE, evil, patched)], undo={DEVICE: evil})
    line = refused_in_one_line(cli(stack, "status", "--device", "npu"), "cannot be proven")
    assert DEVICE in line
    assert stack.file("verl", DEVICE).read_bytes() == patched


def test_a_symlinked_state_folder_is_refused_and_its_target_untouched(stack, outside, cli):
    engine.apply(select(stack))
    (stack.verl / ".ascendfix").rename(outside / "state")
    (stack.verl / ".ascendfix").symlink_to(outside / "state")
    listed = sorted(p.name for p in (outside / "state").rglob("*"))
    refused_in_one_line(cli(stack, "revert"), ".ascendfix is a symbolic link", "remove the link")
    assert sorted(p.name for p in (outside / "state").rglob("*")) == listed


def test_a_target_file_that_is_a_symlink_is_refused_naming_where_it_points(stack, outside, cli):
    target = stack.file("verl", DEVICE)
    (outside / "device.py").write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside / "device.py")
    result = cli(stack, "apply", "--device", "npu")
    refused_in_one_line(result, "is a symbolic link", str(outside / "device.py"))
    assert b"ascendfix" not in (outside / "device.py").read_bytes()


def test_an_edit_between_plan_and_write_rolls_everything_back_and_names_the_file(stack, monkeypatch):
    before = stack.snapshot()
    real = engine.plan

    def plan_then_edit(selection, strict=False):
        planned = real(selection, strict)
        torch_file = stack.file("torch", "torch/distributed/checkpoint/default_planner.py")
        torch_file.write_bytes(torch_file.read_bytes() + b"# someone's edit\n")
        return planned

    monkeypatch.setattr(engine, "plan", plan_then_edit)
    with pytest.raises(WriteError, match="default_planner.py changed while ascendfix was planning"):
        engine.apply(select(stack))
    monkeypatch.setattr(engine, "plan", real)
    now = stack.snapshot()
    edited = ("torch", "torch/distributed/checkpoint/default_planner.py")
    assert now[edited] == before[edited] + b"# someone's edit\n"  # the edit is kept
    assert {k: v for k, v in now.items() if k != edited} == {k: v for k, v in before.items() if k != edited}
    assert "applied" not in {s.state for s in engine.status(select(stack))}


def test_a_huge_target_file_is_refused_with_its_size_in_bounded_memory(stack):
    planner = stack.file("torch", "torch/distributed/checkpoint/default_planner.py")
    with planner.open("ab") as f:
        f.write(b"#" * (20 * 1024 * 1024) + b"\n")
    argv, env = command("apply", "--device", "npu", *stack.root_args())
    script = (
        "import resource, subprocess, sys; "
        f"r = subprocess.run({argv!r}, capture_output=True, text=True); "
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, repr(r.stderr))"
    )
    code, rss_kib, stderr = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    ).stdout.split(" ", 2)
    assert code == "1" and "bytes, over the" in stderr and "is 20,9" in stderr
    assert int(rss_kib) < 300 * 1024  # the file is never read whole


def test_a_held_lock_is_named_at_once_and_ctrl_c_stops_the_wait(stack, ascendfix_popen):
    fd = os.open(stack.verl, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        child = ascendfix_popen(
            "apply",
            "--device",
            "npu",
            *stack.root_args(),
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C as at a terminal: a suite started in the background (`pytest &` in a script) hands
            # its children SIGINT ignored, and Python then keeps ignoring it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        line = child.stderr.readline()
        assert line.startswith(f"waiting: {stack.verl} is locked by pid {os.getpid()}")
        time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        rest = child.communicate(timeout=30)[1]
        assert child.returncode != 0 and "Traceback" not in rest
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert {s.state for s in engine.status(select(stack))} == {"not-applied"}


def test_escape_is_a_refusal_that_reaches_the_user_as_one_line():
    from ascendfix.fsutil import Escape

    assert issubclass(Escape, RefusedError)
