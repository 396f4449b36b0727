"""The ``--json`` contract of every command: each answer is one JSON object (watch: one a line) that starts
with ``"schema": 1`` and ``"ok"`` (a bool), and the exit status agrees with ``ok`` (0 when ok; 1, 2 or 3
when not, an error object's ``exit_code`` being the process's own).

The commands are listed from the click group, so a new command fails :func:`test_every_command_is_covered`
until it has a case here (or, with no ``--json``, a reason in :data:`NO_JSON`). Every case is cheap: a
finding or a success where one costs a temp folder, bad input otherwise, and the Ray commands against an
address nothing listens on.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from ascendfix import demo
from ascendfix.cli import main
from ascendfix.errors import EXIT_CODES, is_error_object

from tests.verl_lines import GUIDE_STEP1, RAY_PREFIX, step_line

# commands with no --json, and why
NO_JSON = {
    "run": "its exit status is the job's own; what it saw goes to run.json",
    "demo": "a walk-through for a person, each step's output shown as it runs",
    "ray start": "replaces itself with `ray start`, whose output and exit status are ray's",
}


def leaves(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group`` with its full name (``ray wait``)."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from leaves(command, ctx, (*path, name))
        else:
            yield " ".join((*path, name)), command


COMMANDS = dict(leaves(main, click.Context(main)))


# the runs one case makes, in order: (the words after the command, the exit status expected); words that
# start with another command's name (``apply`` before ``revert``) run that command instead
Runs = list[tuple[list[str], int]]


def dead_address() -> str:
    """HOST:PORT where nothing listens (a port the kernel just handed out and took back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def workspace(tmp: Path) -> list[str]:
    """The demo's verl and torch trees and profile: the options the patch commands take (but revert: no --device)."""
    ws = demo.build(tmp / "demo")
    return ["--profile", str(ws.profile), "--root", f"verl={ws.verl}", "--root", f"torch={ws.torch}"]


def revert_runs(tmp: Path) -> Runs:
    """Apply (an ok result), then revert it."""
    where = workspace(tmp)
    return [(["apply", "--device", "npu", *where], 0), (where, 0)]


def status_runs(tmp: Path) -> Runs:
    """Nothing applied yet (a finding), then every patch applied; then --ray against a dead head (bad input)."""
    where = ["--device", "npu", *workspace(tmp)]
    return [(where, 1), (["apply", *where], 0), (where, 0), (["--device", "npu", "--ray", dead_address()], 2)]


def step_log(tmp: Path) -> Path:
    log = tmp / "train.log"
    log.write_text(f"{RAY_PREFIX}{step_line(1, GUIDE_STEP1)}\n")
    return log


def triage_runs(tmp: Path) -> Runs:
    """A log where nothing failed; another holding a Python traceback (a finding); an empty folder (bad input)."""
    for name, text in [("clean", "step:1 - done\n"), ("failed", "Traceback (most recent call last):\nKeyError: 3\n")]:
        (tmp / name).mkdir()
        (tmp / name / "train.log").write_text(text)
    (tmp / "empty").mkdir()
    return [([str(tmp / "clean")], 0), ([str(tmp / "failed")], 1), ([str(tmp / "empty")], 2)]


# command -> the runs to make, in order (see Runs)
CASES: dict[str, Callable[[Path], Runs]] = {
    "profiles": lambda tmp: [([], 0), (["--no-such-option"], 2)],  # click's own usage error answers too
    "show": lambda tmp: [(["verl-796871d"], 0), (["no-such-profile"], 2)],
    "apply": lambda tmp: [(["--dry-run", "--device", "npu", *workspace(tmp)], 0), (["--profile", "no-such"], 2)],
    "revert": revert_runs,
    "status": status_runs,
    "diff": lambda tmp: [(["--device", "npu", *workspace(tmp)], 0)],
    "doctor": lambda tmp: [(["--list"], 0), (["--only", "no-such-check"], 2)],
    "env": lambda tmp: [(["--device", "npu"], 0), (["--device", "npu", "--shell", "json"], 0)],
    "report": lambda tmp: [([str(step_log(tmp))], 0), ([str(tmp / "absent.log")], 2)],
    "compare": lambda tmp: [([str(step_log(tmp)), str(tmp / "train.log")], 0)],
    "export dockerfile": lambda tmp: [([], 0)],
    "export constraints": lambda tmp: [([], 0)],
    "upgrade-check": lambda tmp: [(["--with", "verl"], 2)],
    "triage": triage_runs,
    "ckpt check": lambda tmp: [([str(tmp)], 1), ([str(tmp / "absent")], 2)],
    "ckpt verify": lambda tmp: [([str(tmp / "absent"), str(tmp / "absent2")], 2)],
    "ray wait": lambda tmp: [
        (["--nodes", "x"], 2),
        (["--device", "npu", "--nodes", "1", "--address", dead_address(), "--timeout", "1"], 2),
    ],
    "ray smoke": lambda tmp: [(["--device", "npu", "--nodes", "1", "--address", dead_address(), "--timeout", "1"], 2)],
    "watch": lambda tmp: [(["--address", dead_address()], 2)],
}


def test_every_command_is_covered():
    assert set(COMMANDS) == set(CASES) | set(NO_JSON)
    assert not set(CASES) & set(NO_JSON)
    for name, command in COMMANDS.items():
        has_json = any("--json" in p.opts for p in command.params)
        assert has_json == (name not in NO_JSON), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_answer_carries_schema_and_ok_and_the_exit_code_agrees(name, tmp_path, ascendfix_cli):
    for args, expected in CASES[name](tmp_path):
        command = [args.pop(0)] if args and args[0] in COMMANDS else name.split()
        result = ascendfix_cli(*command, *args, "--json", timeout=120)
        assert result.returncode == expected, (name, args, result.stdout, result.stderr)
        lines = result.stdout.splitlines() if name == "watch" else [result.stdout]
        answers = [json.loads(line) for line in lines if line.strip()]
        assert answers, (name, args, result.stderr)
        for data in answers:
            assert isinstance(data, dict) and list(data)[:2] == ["schema", "ok"], (name, args, data)
            assert data["schema"] == 1 and isinstance(data["ok"], bool)
        last = answers[-1]
        assert last["ok"] is (result.returncode == 0), (name, args, last)
        assert result.returncode in EXIT_CODES
        if is_error_object(last):
            assert last["exit_code"] == result.returncode and "error: " in result.stderr.lower()
        assert "Traceback" not in result.stderr


def test_a_result_without_ok_is_a_bug_and_ok_decides_the_exit_code():
    from ascendfix.cli.base import answer, render

    shown: list[object] = []
    assert render({"ok": False, "n": 1}, False, shown.append) == 1 and shown == [{"ok": False, "n": 1}]
    assert answer({"n": 1, "ok": True}) == {"schema": 1, "ok": True, "n": 1}
    with pytest.raises(TypeError, match="carries no ok"):
        render({"n": 1}, True, shown.append)  # the group turns it into an internal error: exit 3, a crash log
    with pytest.raises(TypeError, match="not a JSON object"):
        answer(type("Rows", (list,), {"ok": True})())
