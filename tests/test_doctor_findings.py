"""doctor's findings as a team meets them: post releases, --root site-packages, short messages, other tools' edits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ascendfix.profile import manifest
from ascendfix.cli.doctor import _render_report
from ascendfix.doctor import pyenv, runner
from ascendfix.doctor.context import Context
from ascendfix.doctor.model import Report, Result, Status
from ascendfix.errors import UsageError

from tests import machine
from tests.machine import doctor


@pytest.fixture(scope="module")
def profile():
    return manifest.load_profile("verl-796871d")


def install_into(folder: Path, *wheels: Path) -> Path:
    """``pip install --target``: a site-packages folder of its own, as --root names one."""
    machine.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder), *map(str, wheels)])
    return folder


def check(profile, check_id, **kw):
    (result,) = runner.run(Context(profile, "npu", "test", **kw), [check_id]).checks
    return result


# --- packages: post releases and --root site-packages ----------------------------------------------


def test_a_post_release_of_the_pin_is_not_a_downgrade():
    assert pyenv._post_release_of("2.7.1.post2", "2.7.1") and pyenv._post_release_of("2.7.1.post11", "2.7.1")
    assert not pyenv._post_release_of("2.7.1", "2.7.1")  # the pin itself matches plainly
    assert not pyenv._post_release_of("2.7.1.post2.dev1", "2.7.1")
    assert not pyenv._post_release_of("2.7.2.post1", "2.7.1") and not pyenv._post_release_of("x", "2.7.1")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A site-packages folder holding torch 2.7.1 and torch-npu 2.7.1.post2 (PyPI has post2 … post11)."""
    root = tmp_path_factory.mktemp("site")
    torch = {"torch/__init__.py": b"", "torch/utils.py": b"A = 1\n"}
    wheels = [
        machine.make_wheel(root / "wheels", "torch", "2.7.1", torch),
        machine.make_wheel(root / "wheels", "torch-npu", "2.7.1.post2", {"torch_npu/__init__.py": b""}, ("torch",)),
    ]
    return install_into(root / "site-packages", *wheels)


def test_packages_reads_the_dist_info_of_a_root_and_accepts_the_post_release(profile, site):
    result = check(profile, "packages", roots={"torch": site, "torch_npu": site})
    assert f"torch 2.7.1 (from --root torch={site})" in result.messages
    assert (
        f"torch-npu 2.7.1.post2 (from --root torch_npu={site}): a post release of the pinned 2.7.1, accepted"
        in result.messages
    )
    assert not [m for m in result.messages if m.startswith(("torch ", "torch-npu")) and "is installed;" in m]
    assert "torch-npu==" not in result.fix and "torch==" not in result.fix  # no downgrade offered
    assert not any("built for torch" in m for m in result.messages)  # 2.7.1.post2 is paired with torch 2.7.1


def test_a_root_only_speaks_for_the_package_it_names(profile, site, tmp_path):
    torch_only = check(profile, "packages", roots={"torch": site})
    assert f"torch 2.7.1 (from --root torch={site})" in torch_only.messages
    assert not any(m.startswith("torch-npu 2.7.1.post2 (from") for m in torch_only.messages)


# --- short messages ----------------------------------------------------------------------------------


def test_thousands_of_changed_files_are_a_count_with_the_list_in_the_details(profile, tmp_path):
    names = [f"torch/distributed/checkpoint/generated_module_{i:04d}.py" for i in range(3000)]
    wheel = machine.make_wheel(tmp_path / "wheels", "torch", "2.7.1", {name: b"A = 1\n" for name in names})
    site = install_into(tmp_path / "site", wheel)
    for name in names:
        (site / name).write_text("A = 2\n")
    result = check(profile, "integrity", roots={"torch": site})
    assert result.status == "fail"
    assert result.messages[0] == "torch 2.7.1: 3000 file(s) differ from the wheel's RECORD (-v lists them)"
    assert max(map(len, result.messages)) < 200 and sorted(result.details) == names
    report = Report("verl-796871d", "npu", [result])
    assert json.loads(json.dumps(report.to_json()))["checks"][0]["details"] == list(result.details)


def render(result: Result, verbose: bool, capsys) -> str:
    _render_report(Report("verl-796871d", "npu", [result]), verbose)
    return capsys.readouterr().out


def test_details_are_shown_with_v_only(capsys):
    result = Result("env", "Runtime environment", Status.FAIL, ["1 problem", "X is unset"], "export X=1", ("X: why",))
    short = render(result, False, capsys)
    assert "X: why" not in short and "(-v shows 1 more line(s))" in short
    assert "        X: why" in render(result, True, capsys)


def test_env_and_python_whys_are_details(profile):
    env = check(profile, "env", environ={"PATH": "/usr/bin:/bin"})
    why = " ".join(profile.devices["npu"].env[0].why.split())
    assert "RAY_DEDUP_LOGS is unset; the profile sets '0'" in env.messages
    assert f"RAY_DEDUP_LOGS: {why}" in env.details
    assert all("\n" not in m and len(m) < 200 for m in env.messages)


@pytest.mark.parametrize("kind", ["hostname", "text-file"])
def test_python_that_is_no_interpreter_is_one_line(tmp_path, kind):
    if kind == "hostname":
        target = Path("/etc/hostname")
        if not target.is_file():
            pytest.skip("no /etc/hostname here")
    else:
        target = machine.write_executable(tmp_path / "notes.txt", "just some words\n")
    result = doctor("--python", str(target))
    assert result.returncode == 2, result.stdout
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"error: --python {target}: ")
    assert "crashed" not in result.stderr and "Traceback" not in result.stderr
    as_json = json.loads(doctor("--python", str(target), "--json").stdout)
    assert as_json["exit_code"] == 2 and as_json["error"].startswith(f"--python {target}: ")


def test_the_runner_raises_one_usage_error_for_an_unusable_interpreter(profile, tmp_path):
    target = machine.write_executable(tmp_path / "notes.txt", "just some words\n")
    with pytest.raises(UsageError, match="not a Python interpreter"):
        runner.run(Context(profile, "npu", "test", str(target)), ["python", "packages", "hazards"])
