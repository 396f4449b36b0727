"""Hostile or absurd input ends in one line and an exit status, never a traceback; text read from a file
reaches the terminal without its control characters."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from ascendfix.cli import base, doctor, fanout, patches
from ascendfix.cluster import fanout as cluster
from ascendfix.doctor.model import DoctorReport, Result
from ascendfix.patching.engine import PatchStatus
from ascendfix.resources import data_dir
from ascendfix.states import Action, State, Status

from tests.verl_lines import run_steps, step_line

ROOT = Path(__file__).resolve().parent.parent
LONG = "a" * 5000
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m\r\x9b1m\u202e"


@pytest.fixture
def cli(ascendfix_cli):
    """``ascendfix ARGS`` in ``cwd``, in a bare environment (PATH only), as a fresh login shell runs it."""
    return lambda cwd, *args: ascendfix_cli(*args, cwd=cwd, clean_env=True, env={"PATH": "/usr/bin:/bin"}, timeout=120)


def one_line_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    return proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--profile", LONG, "--device", "npu"],
        ["status", "--profile", LONG + ".toml", "--device", "npu"],
        ["status", "--device", "npu", "--root", f"verl={LONG}"],
        ["report", LONG],
        ["compare", LONG, LONG],
    ],
    ids=["profile", "profile.toml", "root", "report", "compare"],
)
def test_a_5000_character_option_value_is_one_line(tmp_path, args, cli):
    line = one_line_error(cli(tmp_path, *args))
    assert "File name too long" in line and " characters)" in line and len(line) < 300


def test_a_5000_character_value_under_json_is_a_json_error_too(tmp_path, cli):
    proc = cli(tmp_path, "status", "--profile", LONG, "--device", "npu", "--json")
    one_line_error(proc)
    assert json.loads(proc.stdout)["exit_code"] == 2


def write_team(tmp_path: Path, patch: str) -> Path:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "team-probe.toml").write_text(patch)
    profile = tmp_path / "team.toml"
    profile.write_text('extends = "verl-796871d"\nname = "team"\n[devices.npu]\nadd_patches = ["team-probe"]\n')
    return profile


def test_a_nul_byte_in_a_patch_path_is_one_line(tmp_path, cli):
    own = (data_dir("patches") / "verl-cuda-probe-off.toml").read_text()
    own = own.replace('id = "verl-cuda-probe-off"', 'id = "team-probe"')
    own = own.replace('path = "verl/utils/device.py"', 'path = "verl/utils/dev\\u0000ice.py"')
    profile = write_team(tmp_path, own)
    line = one_line_error(cli(tmp_path, "status", "--profile", str(profile), "--device", "npu"))
    assert "team-probe.toml: files[0].path: path 'verl/utils/dev\\x00ice.py' holds a control character" in line


def test_an_extends_chain_1200_deep_is_one_line_naming_the_file(tmp_path, cli):
    for i in range(1200):
        parent = f"p{i + 1}.toml" if i < 1199 else "verl-796871d"
        (tmp_path / f"p{i}.toml").write_text(f'extends = "{parent}"\nname = "p{i}"\n')
    line = one_line_error(cli(tmp_path, "status", "--profile", "p0.toml", "--device", "npu"))
    assert "p15.toml: extends: more than 16 profiles deep" in line


@pytest.mark.parametrize("depth", [40, 5000])
def test_a_deeply_nested_toml_array_is_one_line_naming_the_file(tmp_path, depth, cli):
    (tmp_path / "deep.toml").write_text("a = " + "[" * depth + "]" * depth + "\n")
    line = one_line_error(cli(tmp_path, "status", "--profile", "deep.toml", "--device", "npu"))
    assert "deep.toml: arrays or tables nested deeper than 32 levels" in line


def test_markup_and_escapes_in_a_nodes_answer_are_shown_as_text(monkeypatch):
    console = io.StringIO()
    from rich.console import Console

    monkeypatch.setattr(fanout, "out", lambda: Console(file=console, width=300, highlight=False))
    monkeypatch.setattr(fanout, "wide", lambda: Console(file=console, width=300, highlight=False))

    def answer(node: str, state: str) -> cluster.NodeAnswer:
        data = {"patches": [{"id": "[/]x" + ESCAPES, "state": state, "files": [{"path": "[/]", "sha256": None}]}]}
        return cluster.NodeAnswer(node * 32, "10.0.0.1", "[/]host", 1, data)

    report = cluster.table(["status", "--root", "verl=[/]", "--json"], [answer("a", "[/]"), answer("b", "[bold]")])
    fanout._render_cluster(report)
    text = console.getvalue()
    assert "[/]x" in text and "[/]host" in text and "[bold]" in text and "nodes disagree on: [/]x" in text
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text


def test_names_from_a_state_folder_reach_the_terminal_without_control_characters(capsys):
    status = PatchStatus(
        "evil" + ESCAPES,
        State.NOT_APPLIED,
        f"applied by profile team{ESCAPES}, not a patch of verl-796871d",
        (),
        warnings=(f"verl/x{ESCAPES}.py: changed",),
        action=Action.REVERTED,
        hint=f"git checkout {ESCAPES}",
    )
    patches.render_statuses([status])
    shown = capsys.readouterr()
    for text in (shown.out, shown.err):
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\u202e" not in text
    assert "evilred" in shown.out and "applied by profile teamred" in shown.out


def test_doctor_messages_reach_the_terminal_without_control_characters(capsys, monkeypatch):
    from ascendfix.doctor import registry

    check = next(iter(registry.CHECKS))
    result = Result(check, "a check", Status.FAIL, [f"found {ESCAPES}", f"detail {ESCAPES}"], fix=f"run {ESCAPES}")
    doctor._render_report(DoctorReport("verl-796871d", "npu", [result], "given"), verbose=True)
    out = capsys.readouterr().out
    assert "found red" in out and "detail red" in out and "run red" in out
    assert "\x07" not in out and "\r" not in out and "owned" not in out and "\x1b[2J" not in out


def test_a_log_file_name_reaches_the_terminal_without_control_characters(tmp_path, cli):
    log = tmp_path / f"run{ESCAPES}.log"
    log.write_text("".join(step_line(n, v) + "\n" for n, v in enumerate(run_steps(4), 1)))
    proc = cli(tmp_path, "report", str(log))
    assert proc.returncode == 0, proc.stderr
    assert "runred.log" in proc.stdout and "\x1b" not in proc.stdout and "\x07" not in proc.stdout


def test_clean_strips_sequences_and_control_characters_but_keeps_lines():
    assert base.clean(f"a{ESCAPES}b\n\tc\x00\x7f") == "aredb\n\tc"
    assert base.escape("[/]\x1b[1m") == "\\[/]"


def timeout_options() -> list[tuple[str, ...]]:
    """Every command's every option whose name says timeout, as (command words..., option)."""
    import click
    from ascendfix.cli import main

    found: list[tuple[str, ...]] = []

    def walk(command: click.Command, words: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), (*words, name))
        for param in command.params:
            found.extend((*words, opt) for opt in param.opts if "timeout" in opt)

    walk(main, ())
    return found


def test_every_timeout_option_is_found():
    words = {" ".join(found) for found in timeout_options()}
    assert {"ckpt check --ray-timeout", "ray wait --timeout", "ray smoke --timeout", "doctor --ray-timeout"} <= words


@pytest.mark.parametrize("value", ["-1", "0"])
@pytest.mark.parametrize("where", timeout_options(), ids=" ".join)
def test_every_timeout_option_refuses_no_time_the_same_way(where, value, tmp_path, cli):
    """``ckpt check --ray-timeout -1`` was accepted while ``ray wait --timeout -1`` was refused."""
    *words, option = where
    proc = cli(tmp_path, *words, option, value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"Invalid value for '{option}': {float(value)}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", [("status",), ("doctor", "--only", "packages")])
def test_a_package_given_two_roots_is_one_line_naming_it(command, tmp_path, cli):
    """``--root torch=A --root torch=B`` used B and said nothing; the same folder twice is harmless."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    twice = ["--root", f"torch={tmp_path / 'a'}", "--root", f"verl={tmp_path}", "--root", f"torch={tmp_path / 'b'}"]
    line = one_line_error(cli(tmp_path, *command, "--device", "npu", *twice))
    assert line.startswith(f"error: --root torch= given twice ({tmp_path / 'a'} and {tmp_path / 'b'}): "), line
    same = cli(tmp_path, *command, "--device", "npu", "--root", f"torch={tmp_path / 'a'}", "--root", "torch=a")
    assert "given twice" not in same.stderr and same.returncode in (0, 1), same.stderr
