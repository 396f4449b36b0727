"""The command line as a user meets it: exit codes, one-line errors, JSON, nothing half-written."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import command
from tests.stack import DEMO_PATCHES, make_stack


def test_apply_status_revert_through_the_cli(stack, ascendfix_cli):
    before = stack.snapshot()
    applied = ascendfix_cli("apply", "--device", "npu", *stack.root_args(), "--json")
    assert applied.returncode == 0, applied.stderr
    data = json.loads(applied.stdout)
    assert data["profile"] == "verl-796871d-demo" and data["device"] == "npu"
    assert [p["state"] for p in data["patches"]] == ["applied"] * len(DEMO_PATCHES)
    status = ascendfix_cli("status", "--device", "npu", *stack.root_args(), "--json")
    assert status.returncode == 0
    assert {p["id"]: p["state"] for p in json.loads(status.stdout)["patches"]}["verl-grpo-no-interleave"] == "applied"
    reverted = ascendfix_cli("revert", *stack.root_args())
    assert reverted.returncode == 0 and "reverted" in reverted.stdout
    assert stack.snapshot() == before
    assert ascendfix_cli("status", "--device", "npu", *stack.root_args()).returncode == 1  # not in the asked state


def test_diff_is_plain_when_piped(stack, ascendfix_cli):
    result = ascendfix_cli("diff", "--device", "npu", *stack.root_args())
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
def test_bad_input_is_one_line_exit_2(args, message, ascendfix_cli):
    result = ascendfix_cli(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_refusal_is_exit_1_and_writes_nothing(stack, ascendfix_cli):
    stack.file("verl", "verl/utils/device.py").write_bytes(b"def broken(:\n")
    before = stack.snapshot()
    result = ascendfix_cli("apply", "--device", "npu", *stack.root_args())
    assert result.returncode == 1
    assert "refused, nothing was changed" in result.stderr and "Traceback" not in result.stderr
    assert stack.snapshot() == before


def test_no_device_found_asks_for_one(stack, monkeypatch, ascendfix_cli):
    env_path = os.environ.get("PATH", "")
    if any((Path(p) / name).exists() for p in env_path.split(":") for name in ("npu-smi", "nvidia-smi")):
        pytest.skip("this machine has an accelerator tool on PATH")
    if Path("/usr/local/Ascend/driver").exists():
        pytest.skip("this machine has an Ascend driver")
    result = ascendfix_cli("apply", *stack.root_args())
    assert result.returncode == 2 and "pass --device npu or --device cuda" in result.stderr


def test_profiles_and_show_json(ascendfix_cli):
    listed = json.loads(ascendfix_cli("profiles", "--json").stdout)["profiles"]
    assert listed[0]["name"] == "verl-796871d"
    shown = json.loads(ascendfix_cli("show", "verl-796871d", "--json").stdout)
    assert shown["name"] == "verl-796871d" and "verl-grpo-no-interleave" in shown["patches"]


def test_python_target_interpreter_without_the_package(stack, ascendfix_cli, python310):
    result = ascendfix_cli("status", "--device", "npu", "--python", str(python310), "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 1
    assert all("not installed in" in p["reason"] for p in data["patches"] if p["state"] == "drifted")


def test_demo_runs_the_whole_job_and_leaves_the_workspace_as_it_found_it(tmp_path, ascendfix_cli):
    result = ascendfix_cli("demo", "--dir", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr
    assert "interleave=False  # ascendfix: verl-grpo-no-interleave" in result.stdout
    assert result.stdout.count("(reverted)") == len(DEMO_PATCHES)
    assert (
        "e2e 8.035 tokens/s per device" in result.stdout and "(world 128, update 26.830, vllm 14.841)" in result.stdout
    )
    assert (tmp_path / "demo" / "run" / "train.log").read_text().count(" - training/global_step:") == 6
    assert json.loads((tmp_path / "demo" / "run" / "run.json").read_text())["exit_status"] == 0
    pristine = make_stack(tmp_path / "compare")
    demo_stack = type(pristine)(tmp_path / "demo" / "verl-checkout", tmp_path / "demo" / "site-packages", None)
    assert demo_stack.snapshot() == pristine.snapshot()


def test_with_json_an_error_is_a_json_object_on_stdout_too(stack, ascendfix_cli):
    for args, code in (
        (["apply", "--profile", "nope", "--device", "npu", "--json"], 2),
        (["status", "--device", "npu", "--root", "verl=/nonexistent", "--json"], 2),
        (["env", "--profile", "nope", "--shell", "json"], 2),
    ):
        result = ascendfix_cli(*args)
        assert result.returncode == code
        answer = json.loads(result.stdout)
        assert answer["exit_code"] == code and answer["error"] in result.stderr
        assert answer["schema"] == 1 and answer["ok"] is False
    stack.file("verl", "verl/utils/device.py").write_bytes(b"def broken(:\n")
    refused = ascendfix_cli("apply", "--device", "npu", *stack.root_args(), "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"].startswith("refused, nothing was changed")


# Any unexpected exception: the profile loader made to raise one, as a bug would.
CRASH = """import sys
from ascendfix.profile import manifest
def bug(*args, **kwargs):
    raise KeyError("a bug, with the secret hunter2 in its frame")
manifest.load_profile = bug
sys.argv[0] = "ascendfix"
from ascendfix.cli import entry
entry()
"""


def test_an_unexpected_exception_is_one_line_exit_3_and_a_crash_log(ascendfix_cli, own_cache):
    for as_json in (False, True):
        args = ["show", "https://ops:hunter2@example.invalid/p.toml", *(["--json"] if as_json else [])]
        result = ascendfix_cli(*args, code=CRASH)
        assert result.returncode == 3, result.stderr
        line = result.stderr.strip()
        assert "\n" not in line and "Traceback" not in result.stderr
        assert line.startswith("error: internal error: a bug in ascendfix (KeyError); the traceback is in ")
        log = Path(line.rsplit(" ", 1)[1])
        assert log.parent == own_cache / "crashes" and oct(log.stat().st_mode & 0o777) == "0o600"
        text = log.read_text()
        assert "Traceback" in text and "KeyError" in text and "def bug" not in result.stderr
        assert "ascendfix show https://" in text and "hunter2" not in text.splitlines()[0]  # redacted
        if as_json:
            answer = json.loads(result.stdout)
            assert answer == {"schema": 1, "ok": False, "error": line.removeprefix("error: "), "exit_code": 3}
        log.unlink()
    (own_cache / "crashes").rmdir()
    elsewhere = own_cache.parent / "elsewhere"
    elsewhere.mkdir()
    (own_cache / "crashes").symlink_to(elsewhere)  # a planted link: followed, the log would land there
    result = ascendfix_cli("show", "x", code=CRASH)
    assert result.returncode == 3 and "no crash log could be written" in result.stderr
    assert list(elsewhere.iterdir()) == []


def test_env_without_a_device_makes_eval_fail_under_set_e(tmp_path, ascendfix_cli):
    if any(Path(p, n).exists() for p in os.environ["PATH"].split(":") for n in ("npu-smi", "nvidia-smi")):
        pytest.skip("this machine has an accelerator tool on PATH")
    if Path("/usr/local/Ascend/driver").exists():
        pytest.skip("this machine has an Ascend driver")
    script = tmp_path / "ray_start.sh"
    argv, env = command("env")
    script.write_text(f'set -e\neval "$({shlex.join(argv)})"\necho started ray\n')
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0 and "started ray" not in result.stdout
    assert "pass --device npu or --device cuda" in result.stderr
    direct = ascendfix_cli("env")
    assert direct.returncode == 2 and direct.stdout.startswith("false")


def test_diff_json_and_a_refused_diff_does_not_claim_a_change(stack, ascendfix_cli):
    data = json.loads(ascendfix_cli("diff", "--device", "npu", *stack.root_args(), "--json").stdout)
    assert data["dry_run"] is True and "+is_cuda_available = False" in data["diff"]
    assert {p["action"] for p in data["patches"]} == {"would-apply"}
    stack.file("verl", "verl/utils/device.py").write_bytes(b"x = 1\n")
    refused = ascendfix_cli("diff", "--device", "npu", *stack.root_args())
    assert refused.returncode == 1 and "nothing was changed" not in refused.stderr
    assert refused.stderr.startswith("error: refused: verl-cuda-probe-off: drifted")


def test_revert_that_finds_no_package_fails_loudly(tmp_path, ascendfix_cli):
    bare = tmp_path / "bare"  # an interpreter with neither verl nor torch (the tests' own may have torch)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    result = ascendfix_cli("revert", "--json", "--python", str(bare / "bin" / "python"), cwd=tmp_path)
    assert result.returncode == 1
    assert "none of the profile's packages was found" in json.loads(result.stdout)["error"]


def test_drifted_has_a_reason_code_and_a_fitting_fix(stack, tmp_path, ascendfix_cli):
    subprocess.run(["git", "init", "-q", str(stack.verl)], check=True)
    assert ascendfix_cli("apply", "--device", "npu", *stack.root_args()).returncode == 0
    device = stack.file("verl", "verl/utils/device.py")
    device.write_bytes(device.read_bytes() + b"# a hand edit\n")
    missing = stack.file("torch", "torch/distributed/checkpoint/default_planner.py")
    missing.unlink()
    data = json.loads(ascendfix_cli("status", "--device", "npu", *stack.root_args(), "--json").stdout)
    by_id = {p["id"]: p for p in data["patches"]}
    probe = by_id["verl-cuda-probe-off"]
    assert probe["reason_code"] == "changed-since-applied"
    assert probe["hint"].startswith(f"git -C {stack.verl} diff -- verl/utils/device.py")
    planner = by_id["torch-global-plan-check"]
    assert planner["reason_code"] == "wrong-root" and "should hold" in planner["hint"]
    assert "reason_code" not in by_id["verl-grpo-no-interleave"]  # applied: nothing to fix
    nothing = json.loads(
        ascendfix_cli("status", "--device", "npu", "--python", sys.executable, "--json", cwd=tmp_path).stdout
    )
    codes = {p["reason_code"] for p in nothing["patches"] if p["state"] == "drifted"}
    assert codes == {"package-not-found"}


def test_show_in_a_pipe_keeps_every_pin_whole(ascendfix_cli):
    shown = ascendfix_cli("show", "verl-796871d").stdout
    assert "…" not in shown
    for component in json.loads(ascendfix_cli("show", "verl-796871d", "--json").stdout)["components"]:
        pin = component.get("commit") or component.get("tag") or component.get("version")
        assert pin is None or pin in shown


def shown_at_80_columns(text: str, profile) -> None:
    """Every component named at the start of its own line with its whole pin, every why complete,
    and no line wider than 80 columns but a component's pin line or one word that is longer."""
    lines = text.splitlines()
    for c in profile.components:
        pin = c.commit or c.tag or c.version
        assert any(line.startswith(f"  {c.name}  ") and (pin is None or pin in line) for line in lines), c.name
        assert " ".join(c.why.split()) in " ".join(text.split()), c.name
    for line in lines:
        if len(line) > 80:
            assert line.startswith("  ") and (" @ " in line or len(line.split()) == 1), line


def test_show_names_every_component_at_80_columns_on_a_terminal_and_in_a_pipe(ascendfix_cli):
    from ascendfix.cli.profiles import _render_profile
    from ascendfix.profile import manifest
    from rich.console import Console

    profile = manifest.load_profile("verl-796871d")
    piped = ascendfix_cli("show", "verl-796871d", env={"COLUMNS": "80"}, timeout=None)
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout
    shown_at_80_columns(piped.stdout, profile)
    assert max(map(len, piped.stdout.splitlines())) <= 120  # was 579: the mindspeed_rl row of a 400-column table
    terminal = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None, highlight=False)
    _render_profile(profile, terminal)
    shown_at_80_columns(terminal.file.getvalue(), profile)
    whole = json.loads(ascendfix_cli("show", "verl-796871d", "--json").stdout)
    assert [c["why"] for c in whole["components"]] == [c.why for c in profile.components]  # --json keeps every why


def test_demo_cleans_up_its_temporary_folder_and_its_last_command_works(tmp_path, ascendfix_cli):
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = ascendfix_cli("demo", env={"TMPDIR": str(temp)}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert list(temp.iterdir()) == []
    assert result.stdout.rstrip().endswith("ascendfix demo --dir ascendfix-demo")
    kept = ascendfix_cli("demo", "--dir", "ascendfix-demo", cwd=tmp_path)
    last = kept.stdout.rstrip().splitlines()[-1].split()
    assert last[:2] == ["ascendfix", "apply"]
    again = ascendfix_cli(*last[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    n = len(DEMO_PATCHES)
    assert again.stdout.count("(applied)") == n and f"{n} patch(es) applied" in again.stdout


def test_the_tests_keep_their_own_cache_not_the_users(ascendfix_cli, own_cache):
    home = Path.home() / ".cache" / "ascendfix"
    assert not own_cache.is_relative_to(home.parent)  # this test's own folder, not the user's ~/.cache
    assert ascendfix_cli("show", "verl-796871d", "--json", clean_env=True).returncode == 0
    assert list((own_cache / "toml").glob("*.json"))  # the CLI it started parsed into the test's folder


@pytest.mark.parametrize(
    "args",
    [("env", "--device", "npu"), ("show", "verl-796871d", "--json"), ("profiles",), ("ckpt", "check", ".", "--json")],
)
def test_a_reader_that_went_away_ends_the_command_quietly_with_its_results_code(args, tmp_path, ascendfix_popen):
    """``ascendfix ... | head -3``: stdout's reader gone, no "error: Broken pipe" and no "Exception ignored"
    on the terminal, and the exit code is the one the result has when it is read (1 for a finding)."""
    read, write = os.pipe()
    os.close(read)  # a real pipe whose reader is gone before the first write: every write fails with EPIPE
    try:
        proc = ascendfix_popen(*args, stdout=write, stderr=subprocess.PIPE, cwd=tmp_path)
    finally:
        os.close(write)
    _, err = proc.communicate(timeout=120)
    read_whole = ascendfix_popen(*args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    assert read_whole.wait(timeout=120) == (1 if args[0] == "ckpt" else 0)  # an empty folder: no checkpoint
    assert (proc.returncode, err) == (read_whole.returncode, b"")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device every write to fails on")
@pytest.mark.parametrize(
    "args", [("show", "verl-796871d", "--json"), ("show", "verl-796871d"), ("ckpt", "check", ".", "--json")]
)
def test_an_answer_a_full_disk_refuses_is_one_line_exit_2(args, tmp_path, ascendfix_popen):
    """``ascendfix report RUN --json > out.json`` on a full disk: the line says the answer could not be
    written, no traceback, exit 2 (the environment); and if stderr is full too, it ends quietly."""
    with open("/dev/full", "wb") as full:
        proc = ascendfix_popen(*args, stdout=full, stderr=subprocess.PIPE, cwd=tmp_path, text=True)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2
        assert err.splitlines() == ["error: cannot write the answer to standard output: No space left on device"]
        both = ascendfix_popen(*args, stdout=full, stderr=full, cwd=tmp_path)
        assert both.wait(timeout=120) == 2


def test_env_names_the_profile_as_given_so_its_header_runs_again(ascendfix_cli):
    """``env --profile ./profile.toml`` printed the profile's name in its header, a line that then failed."""
    manifests = Path(__file__).resolve().parent.parent / "manifests"
    first = ascendfix_cli("env", "--profile", "./verl-796871d.toml", "--device", "npu", cwd=manifests)
    header = first.stdout.splitlines()[0]
    assert (first.returncode, header) == (0, "# ascendfix env --profile ./verl-796871d.toml --device npu")
    again = ascendfix_cli(*shlex.split(header.removeprefix("# ascendfix ")), cwd=manifests)
    assert (again.returncode, again.stdout) == (0, first.stdout)


HELP_COMMANDS = [
    *[(name,) for name in ("profiles", "show", "apply", "revert", "status", "diff", "doctor", "run", "env")],
    *[(name,) for name in ("report", "compare", "demo", "upgrade-check", "triage", "watch")],
    ("ray", "start"), ("ray", "wait"), ("ray", "smoke"), ("ckpt", "check"), ("ckpt", "verify"),
    ("export", "dockerfile"), ("export", "constraints"),
]  # fmt: skip


@pytest.mark.parametrize("words", HELP_COMMANDS, ids=" ".join)
def test_help_reads_plainly_without_docstring_markup(words, ascendfix_cli):
    """``env --help`` showed RST's ````false```` as it is written; help is read by a person, not Sphinx."""
    result = ascendfix_cli(*words, "--help")
    assert result.returncode == 0, result.stderr
    for markup in ("``", ":func:", ":class:", ":data:", ":mod:"):
        assert markup not in result.stdout, (words, markup)
