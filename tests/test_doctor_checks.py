"""doctor's checks one by one: a venv with the wrong stack, fake Ascend roots, fake smi tools, the runner, the CLI."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path

import click
import pytest
from ascendfix.cli.doctor import _render_report
from ascendfix.doctor import ascend, host, pyenv, runner
from ascendfix.doctor.context import Context
from ascendfix.doctor.model import DoctorReport, Finding, Result
from ascendfix.doctor.registry import CHECKS
from ascendfix.errors import UsageError
from ascendfix.profile import manifest
from ascendfix.site import Site
from ascendfix.states import Status
from click.testing import CliRunner

from tests import machine
from tests.machine import doctor

IDS = list(CHECKS)  # in report order
# Ids are a contract (--only, --json, run's preflight, the image): none of these is ever renamed or removed.
STABLE = {"python", "packages", "commits", "integrity", "patches", "conflicts", "cann", "driver", "npu", "cuda", "os"}
STABLE |= {"env", "disk", "hazards"}


def test_check_ids_are_stable():
    assert STABLE <= set(IDS), f"check ids renamed or removed: {sorted(STABLE - set(IDS))}"


@pytest.fixture(scope="module")
def profile():
    return manifest.load_profile("verl-796871d")


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    """A venv with the wrong stack: old torch, unpaired torch_npu, old tensordict, verl 0.9 from a wheel."""
    root = tmp_path_factory.mktemp("wrong")
    wheels = root / "wheels"
    built = [
        machine.make_wheel(wheels, "torch", "2.5.0", {"torch/__init__.py": b"", "torch/utils.py": b"A = 1\n"}),
        machine.make_wheel(wheels, "torch-npu", "2.7.1", {"torch_npu/__init__.py": b""}, ("torch==2.7.1",)),
        machine.make_wheel(wheels, "tensordict", "0.9.1", {"tensordict/__init__.py": b""}),
        machine.make_wheel(wheels, "verl", "0.9.0", {"verl/__init__.py": b""}, ("tensordict>=0.8.0",)),
        machine.make_wheel(wheels, "vllm", "0.9.2.dev1+g38217877a", {"vllm/__init__.py": b""}),
        machine.make_wheel(
            wheels,
            "mindspeed",
            "0.12.1",
            {"mindspeed/__init__.py": b"", "mindspeed/features_manager/ckpt_acceleration/__init__.py": b""},
        ),
        machine.make_wheel(
            wheels,
            "needs-missing",
            "1.0",
            {"needs_missing/__init__.py": b""},
            (
                "not-installed-dep>=1",
                "windows-only-dep; sys_platform == 'win32'",
                "extra-only-dep; extra == 'gpu'",
            ),
        ),
    ]
    python = machine.make_venv(root / "venv")
    machine.pip_install(python, *map(str, built))
    site = machine.site_packages(python)
    (site / "torch" / "utils.py").write_text("A = 2  # edited after install\n")
    (site / "torch" / "__init__.py").unlink()
    return python


def run_checks(profile, python, *only, device="npu", **site):
    ctx = Context(Site(profile, device, str(python) if python else None, **site), "test")
    return {r.id: r for r in runner.run(ctx, only).checks}


def test_wrong_versions_and_unpaired_torch_npu_fail_packages(profile, wrong):
    result = run_checks(profile, wrong, "packages")["packages"]
    assert result.status == "fail"
    assert "torch 2.5.0 is installed; the profile pins 2.7.1" in result.messages
    assert "tensordict 0.9.1 is installed; the profile pins 0.10.0" in result.messages
    assert "torch-npu 2.7.1 is built for torch 2.7.1, but torch 2.5.0 is installed" in result.messages
    assert "vllm-ascend is not installed (the profile pins 1de16ead8eecfec8903ec1b330b27a4fa2593c35)" in result.messages
    assert "ray: not installed (not pinned)" in result.messages
    assert result.fix.splitlines()[-1] == f"{wrong} -m pip install torch==2.7.1 tensordict==0.10.0"
    assert "git clone https://github.com/volcengine/verl.git verl" not in result.fix  # installed, wrong way: commits


def test_version_pins_are_compared_as_versions():
    assert pyenv._matches("2.7.1+cpu", "2.7.1")
    assert pyenv._matches("3.10.13", "3.10")
    assert not pyenv._matches("3.1.0", "3.10")
    assert not pyenv._matches("2.7.10", "2.7.1")
    assert not pyenv._matches("not-a-version", "2.7.1")


def test_pip_check_conflicts_and_missing_requirements_fail(profile, wrong):
    result = run_checks(profile, wrong, "conflicts")["conflicts"]
    assert result.status == "fail"
    assert result.messages == [
        "needs-missing 1.0 requires not-installed-dep>=1, which is not installed",
        "torch-npu 2.7.1 requires torch==2.7.1, but 2.5.0 is installed",
    ]
    assert result.fix == f"{wrong} -m pip install 'not-installed-dep>=1'\n{wrong} -m pip install torch==2.7.1"


def test_changed_and_missing_files_fail_integrity(profile, wrong):
    result = run_checks(profile, wrong, "integrity")["integrity"]
    assert result.status == "fail"
    expected = "torch 2.5.0: 2 file(s) differ from the wheel's RECORD: torch/__init__.py (missing), torch/utils.py"
    assert result.messages == [expected]
    assert f"{wrong} -m pip install --force-reinstall --no-deps torch==2.5.0" in result.fix


def test_commits_from_version_and_unknown_origin(profile, wrong):
    result = run_checks(profile, wrong, "commits")["commits"]
    assert result.status == "warn"
    assert "verl 0.9.0: installed without a record of its commit" in result.messages
    assert "mindspeed 0.12.1: installed without a record of its commit" in result.messages
    assert "vllm: 38217877a (from its version 0.9.2.dev1+g38217877a)" in result.messages
    assert "git clone https://github.com/volcengine/verl.git verl" in result.fix


def test_a_checkout_given_by_root_that_is_not_a_git_tree(profile, wrong, tmp_path):
    (tmp_path / "verl").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'verl'\n")
    result = run_checks(profile, wrong, "commits", roots={"verl": tmp_path})["commits"]
    assert result.status == "warn"
    assert f"verl: {tmp_path} is not a readable git checkout (InvalidGitRepositoryError)" in result.messages


def test_hazards_verl_platform_and_mindspeed_ckpt_acceleration(profile, wrong):
    result = run_checks(profile, wrong, "hazards")["hazards"]
    assert result.status == "warn"
    assert result.messages[0].startswith("verl 0.9.0 selects the device through verl.plugin.platform")
    assert "has ckpt_acceleration" in result.messages[1]
    assert "torch-shard-overlap-check, torch-global-plan-check are redundant" in result.messages[1]
    assert result.fix == "export VERL_PLATFORM=huawei"
    on_cuda = run_checks(profile, wrong, "hazards", device="cuda")["hazards"]
    # the H100 side patches nothing (the guide's 3.4): no torch validator to make redundant, no cuda probe
    assert on_cuda.status == "ok" and on_cuda.messages[0] == "none of the known hazards applies"


def test_strict_makes_warnings_fatal(wrong):
    assert doctor("--python", str(wrong), "--only", "hazards").returncode == 0
    strict = doctor("--python", str(wrong), "--only", "hazards", "--strict")
    assert strict.returncode == 1 and "  ! Known hazards — verl 0.9.0 selects" in strict.stdout


def test_an_interpreter_that_cannot_run_the_probe_fails_the_checks_that_need_it(profile):
    python2 = Path(sys.base_prefix).parent / "2.7.18" / "bin" / "python2.7"
    if not python2.exists():
        pytest.skip("no Python 2.7 here")
    with pytest.raises(UsageError, match=f"--python {python2}: the interpreter failed to run the probe"):
        run_checks(profile, python2, "python", "packages")  # one error, not one per check


def test_python_version_of_the_target(profile, wrong):
    result = run_checks(profile, wrong, "python")["python"]
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] == (3, 10):
        assert result.status == "ok"
    else:
        assert result.status == "fail"
        assert result.messages[0] == f"{wrong} is Python {version}; the profile needs 3.10"
        why = manifest.load_profile("verl-796871d").component("python").why
        assert result.details == (" ".join(why.split()),)


def test_python_310_interpreter_passes_python_check(profile, python310):
    result = run_checks(profile, python310, "python")["python"]
    assert result.status == "ok" and result.messages[0].startswith("Python 3.10.")


def test_an_interrupted_ascendfix_run_fails_patches(profile, tmp_path):
    (tmp_path / ".ascendfix").mkdir()
    (tmp_path / ".ascendfix" / "journal.json").write_text("{}")
    result = run_checks(profile, None, "patches", roots={"torch": tmp_path, "verl": tmp_path})["patches"]
    assert result.status == "fail" and result.messages == [f"an ascendfix run was interrupted in {tmp_path}"]
    assert result.fix.startswith("ascendfix status --profile verl-796871d --device npu --root")


# --- Ascend stack ----------------------------------------------------------------------------------


def ascend_ctx(profile, home: Path, env: dict[str, str]) -> Context:
    return Context(Site(profile, "npu", environ=env), "test", ascend_home=home)


def test_ascend_a2_that_matches(profile, tmp_path):
    env = machine.fake_ascend(tmp_path)
    ctx = ascend_ctx(profile, tmp_path, env)
    cann, driver, npu = ascend.check_cann(ctx), ascend.check_driver(ctx), ascend.check_npu(ctx)
    assert cann.status == driver.status == npu.status == "ok"
    assert (
        cann.messages[0]
        == f"CANN 8.3.RC1 at {tmp_path / 'ascend-toolkit' / 'latest'} (from ascend_toolkit_install.info)"
    )
    assert npu.messages[1] == "NPU 0 910B4-1: OK, HBM 3200/65536 MB used"


def test_wrong_cann_and_driver_fail(profile, tmp_path):
    env = machine.fake_ascend(tmp_path, cann="8.1.RC1", driver="24.1.0")
    ctx = ascend_ctx(profile, tmp_path, env)
    cann, driver = ascend.check_cann(ctx), ascend.check_driver(ctx)
    assert cann.status == "fail" and cann.messages[0].endswith("; the profile needs 8.3.RC1")
    assert cann.fix == "install the CANN 8.3.RC1 toolkit"
    assert driver.status == "fail" and driver.messages[0].startswith("driver 24.1.0")
    assert driver.fix == "install the Ascend HDK 25.2.0 driver"


def test_cann_from_version_cfg_and_the_85_layout(profile, tmp_path):
    env = machine.fake_ascend(tmp_path, cann="8.5.0", layout="cann")
    del env["ASCEND_TOOLKIT_HOME"], env["ASCEND_HOME_PATH"]  # found through --ascend-home alone
    toolkit = tmp_path / "cann-8.5.0"
    found = ascend.find_toolkit(ascend_ctx(profile, tmp_path, env))
    assert (found.home, found.version) == (toolkit, "8.5.0")
    (toolkit / "aarch64-linux" / "ascend_toolkit_install.info").unlink()
    (toolkit / "version.cfg").write_text("runtime_running_version=[7.7.T20.0.B210:8.3.RC1]\n")
    result = ascend.check_cann(ascend_ctx(profile, tmp_path, env))
    assert result.status == "ok" and result.messages[0] == f"CANN 8.3.RC1 at {toolkit} (from version.cfg)"


def test_toolkit_environment_variables_win_over_the_install_root(profile, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    env = machine.fake_ascend(elsewhere, cann="8.1.RC1")
    machine.fake_ascend(tmp_path / "root")
    ctx = ascend_ctx(profile, tmp_path / "root", env)
    assert ascend.find_toolkit(ctx).version == "8.1.RC1"


def test_unhealthy_npu_fails_and_busy_hbm_warns(profile, tmp_path):
    npus = [("910B4-1", "OK", 3200, 65536), ("910B4-1", "Alarm", 3200, 65536)]
    ctx = ascend_ctx(profile, tmp_path, machine.fake_ascend(tmp_path, npus=npus))
    result = ascend.check_npu(ctx)
    assert result.status == "fail" and result.messages[0] == "2 NPU(s): 910B4-1; NPU 1 is Alarm"
    busy = [("910B4-1", "OK", 61825, 65536)]
    ctx = ascend_ctx(profile, tmp_path, machine.fake_ascend(tmp_path, npus=busy))
    result = ascend.check_npu(ctx)
    assert result.status == "warn" and "HBM already in use on NPU 0" in result.messages[0]


def test_npu_smi_missing_while_the_driver_is_there(profile, tmp_path):
    env = machine.fake_ascend(tmp_path)
    env["PATH"] = "/usr/bin:/bin"
    result = ascend.check_npu(ascend_ctx(profile, tmp_path, env))
    assert result.status == "fail" and result.messages == ("npu-smi is not on PATH",)
    assert result.fix == f"export PATH={tmp_path}/driver/tools:$PATH"


def test_no_ascend_stack_is_a_report_not_a_crash(profile, tmp_path):
    ctx = ascend_ctx(profile, tmp_path / "none", {"PATH": "/usr/bin:/bin"})
    cann, driver, npu = ascend.check_cann(ctx), ascend.check_driver(ctx), ascend.check_npu(ctx)
    assert cann.status == "fail" and cann.messages[0].startswith("no Ascend stack found")
    assert driver.status == npu.status == "skip"
    assert driver.messages[0].startswith("no Ascend stack found") and npu.messages == driver.messages


def test_parse_npu_smi_reads_the_real_table_format():
    table = machine.npu_smi_table([("910B4-1", "OK", 0, 65536), ("910B4-1", "Warning", 61825, 65536)])
    npus = ascend.parse_npu_smi(table)
    assert [(n.index, n.name, n.health, n.hbm_used_mb, n.hbm_total_mb) for n in npus] == [
        (0, "910B4-1", "OK", 0, 65536),
        (1, "910B4-1", "Warning", 61825, 65536),
    ]


# --- CUDA, environment ---------------------------------------------------------------------------


def test_cuda_stack_from_nvidia_smi(profile, tmp_path):
    rows = "0, NVIDIA H100 80GB HBM3, 550.54.15, 81559, 1\n1, NVIDIA H100 80GB HBM3, 550.54.15, 81559, 1\n"
    machine.write_executable(tmp_path / "bin" / "nvidia-smi", f"#!/bin/sh\nprintf '{rows}'\n")
    ctx = Context(Site(profile, "cuda", environ={"PATH": str(tmp_path / "bin")}), "test")
    result = host.check_cuda(ctx)
    assert result.status == "ok" and result.messages[0] == "2 GPU(s): NVIDIA H100 80GB HBM3, driver 550.54.15"
    missing = host.check_cuda(Context(Site(profile, "cuda", environ={"PATH": str(tmp_path)}), "test"))
    assert missing.status == "fail" and missing.messages[0].startswith("nvidia-smi is not on PATH")
    assert host.check_cuda(Context(Site(profile, "npu"), "test")).status == "skip"


def test_the_env_checks_head_counts_every_line_it_shows(profile, ascendfix_cli):
    """``Runtime environment — 11 problem(s)`` above 12 bullets: a warning (HCCL's ports, on a host that leaves
    them in its ephemeral range) and the variables set as needed were shown but not counted."""
    env = {var.name: var.value for var in profile.devices["npu"].env if var.value is not None}
    del env["HCCL_EXEC_TIMEOUT"]
    env.update(TASK_QUEUE_ENABLE="0", HCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo")
    result = ascendfix_cli("doctor", "--device", "npu", "--only", "env", env=env)
    lines = result.stdout.splitlines()
    [at] = [i for i, line in enumerate(lines) if "Runtime environment — " in line]
    head = lines[at].split(" — ", 1)[1]
    bullets = list(itertools.takewhile(lambda line: line.startswith("      • "), lines[at + 1 :]))
    assert result.returncode == 1 and head.endswith(" in the environment the job inherits")
    counted = [int(part.split()[0]) for part in head.removesuffix(" in the environment the job inherits").split(", ")]
    assert counted[0] >= 2 and sum(counted) == len(bullets) and len(bullets) >= len(env)


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_an_ascend_home_that_is_no_folder_is_bad_input(kind, tmp_path, ascendfix_cli):
    home = tmp_path / "Ascend"
    if kind == "file":
        home.write_text("")
    result = ascendfix_cli("doctor", "--device", "npu", "--ascend-home", home)
    what = "not a folder" if kind == "file" else "no such folder"
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: --ascend-home {home}: {what}; give the Ascend install root (/usr/local/Ascend)"
    ]


def test_env_wrong_missing_and_unknown_interface(profile):
    env = {var.name: var.value for var in profile.devices["npu"].env if var.value is not None}
    env.update(TASK_QUEUE_ENABLE="0", HCCL_SOCKET_IFNAME="nosuchnic9", GLOO_SOCKET_IFNAME="lo")
    del env["HCCL_EXEC_TIMEOUT"]
    result = host.check_env(Context(Site(profile, "npu", environ=env), "test"))
    assert result.status == "fail"
    assert result.messages[0].startswith(("3 problem(s), ", "4 problem(s), "))  # 4 if ulimit is low
    assert result.messages[0].endswith(" as needed in the environment the job inherits")
    why = {v.name: " ".join(v.why.split()) for v in profile.devices["npu"].env}
    assert "HCCL_EXEC_TIMEOUT is unset; the profile sets '3600'" in result.messages
    assert "TASK_QUEUE_ENABLE is '0'; the profile sets '2'" in result.messages
    assert "HCCL_EXEC_TIMEOUT: " + why["HCCL_EXEC_TIMEOUT"] in result.details
    [nic] = [m for m in result.messages if m.startswith("HCCL_SOCKET_IFNAME=")]
    assert nic.startswith("HCCL_SOCKET_IFNAME=nosuchnic9 matches no interface (this node has: lo 127.0.0.1")
    assert "LD_LIBRARY_PATH has /usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver" in result.messages
    assert any(m.startswith("GLOO_SOCKET_IFNAME=lo selects lo 127.0.0.1") for m in result.messages)
    assert "export HCCL_EXEC_TIMEOUT=3600" in result.fix and "export TASK_QUEUE_ENABLE=2" in result.fix
    env["LD_LIBRARY_PATH"] = "/usr/local/Ascend/driver/lib64:/opt/cann/lib64"  # one driver entry lost
    lost = host.check_env(Context(Site(profile, "npu", environ=env), "test"))
    assert any(m.startswith("LD_LIBRARY_PATH lacks /usr/local/Ascend/driver/lib64/driver; ") for m in lost.messages)
    assert (
        "export LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver"
        '"${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"' in lost.fix
    )


@pytest.mark.parametrize("value", ["²", "9" * 5000, "0", "65535", "60000x", "-1", " "])
def test_a_base_port_that_is_no_port_is_that_variables_problem_not_the_checks_crash(profile, value):
    """``HCCL_IF_BASE_PORT=²`` (a Unicode digit) or a 5,000-digit port crashed the check and lost every verdict."""
    env = {var.name: var.value for var in profile.devices["npu"].env if var.value is not None}
    env["HCCL_IF_BASE_PORT"] = value
    result = host.check_env(Context(Site(profile, "npu", environ=env), "test"))
    said = [m for m in result.messages if m.startswith("HCCL_IF_BASE_PORT=")]
    if value.strip():
        assert result.status == "fail" and len(said) == 1 and len(said[0]) < 200
        # the profile's CANN 8.3.RC1 (no CANN on this machine): 32 ports, so the base is at most 65504
        assert said[0].endswith("is not a port HCCL can listen from: ASCII digits, 1 to 65504")
        assert "unset HCCL_IF_BASE_PORT" in result.fix
    else:
        assert said == []
    assert any(m.startswith("TASK_QUEUE_ENABLE") for m in result.messages)  # the other verdicts are all there


def test_a_port_is_ascii_digits_within_1_to_65535():
    from ascendfix.doctor import nic

    assert [nic.port(v) for v in ("60000", " 1 ", "65535")] == [60000, 1, 65535]
    assert {nic.port(v) for v in ("²", "٣", "0", "65536", "9" * 5000, "", "+1", "1_0", "0x10")} == {None}
    assert nic.hccl_ports({"HCCL_IF_BASE_PORT": "²"}) == (60000, 60031)
    assert nic.hccl_ports({"HCCL_IF_BASE_PORT": "65504"}) == (65504, 65535)
    assert nic.hccl_ports({"HCCL_IF_BASE_PORT": "65520"}) == (60000, 60031)  # 32 ports do not fit above it
    assert nic.hccl_ports({"HCCL_IF_BASE_PORT": "65520"}, cann="8.1.RC1") == (65520, 65535)  # 16 do
    assert nic.base_port_problem({"HCCL_IF_BASE_PORT": "65520"}, cann="8.1.RC1") is None


# --- runner and CLI -------------------------------------------------------------------------------


def test_a_crashing_check_becomes_a_failed_result(profile, monkeypatch):
    def crash(ctx):
        raise RuntimeError("boom")

    monkeypatch.setitem(CHECKS, "env", CHECKS["env"].__class__("env", "Runtime environment", "Host", crash))
    (result,) = runner.run(Context(Site(profile, "npu"), "test"), ["env"]).checks
    assert (result.status, result.messages) == ("fail", ["the check crashed: RuntimeError: boom"])


def test_a_hanging_check_times_out_without_holding_the_others(profile, monkeypatch):
    def hang(ctx):
        time.sleep(30)
        return Finding("ok")

    monkeypatch.setitem(CHECKS, "driver", CHECKS["driver"].__class__("driver", "Ascend driver", "Ascend", hang))
    ctx = Context(Site(profile, "cuda"), "test", timeout=0.5)
    report = runner.run(ctx, ["driver", "cann"])
    assert [(r.id, r.status) for r in report.checks] == [("cann", "skip"), ("driver", "fail")]
    assert report.checks[1].messages == ["the check did not finish within 0.5 s"]


def test_list_and_bad_input():
    listed = doctor("--list", "--json")
    assert listed.returncode == 0 and [c["id"] for c in json.loads(listed.stdout)["checks"]] == IDS
    bad = doctor("--only", "gpu")
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"error: --only gpu: unknown check (valid ids: {', '.join(IDS)})"
    missing = doctor("--python", "/nonexistent/python3")
    assert missing.returncode == 2 and "--python /nonexistent/python3: no such executable" in missing.stderr
    assert doctor("--device", "tpu").returncode == 2


REPORT = DoctorReport(
    "verl-796871d",
    "npu",
    [
        Result("python", "Python", Status.OK, ["3.10.18 [venv]", "detail shown with -v"]),
        Result(
            "packages",
            "Packages",
            Status.FAIL,
            ["2 problem(s) with [torch]", "torch is not installed [pinned 2.7.1]", "[bold]not markup[/]"],
            "pip install 'torch==2.7.1'\npip install 'verl[gpu]'",
        ),
        Result("cann", "CANN toolkit", Status.SKIP, ["no Ascend stack [none]"]),
        Result("os", "Operating system", Status.WARN, ["Ubuntu [22.04]", "why it matters"], "use the image"),
        Result("hazards", "Known hazards", Status.OK, [], "never shown: the check passed"),
    ],
    device_reason="--device npu given [test]",
)

HUMAN = """\
ascendfix doctor — profile verl-796871d, device npu (--device npu given [test])

Python environment
  ✓ Python — 3.10.18 [venv]
  ✗ Packages — 2 problem(s) with [torch]
      • torch is not installed [pinned 2.7.1]
      • [bold]not markup[/]
      fix: pip install 'torch==2.7.1'
           pip install 'verl[gpu]'

Ascend stack
  - CANN toolkit — no Ascend stack [none]

Host
  ! Operating system — Ubuntu [22.04]
      • why it matters
      fix: use the image
  ✓ Known hazards

not ready: 1 ✗ problem(s), 1 ! warning(s), 2 ✓ ok, 1 not checkable here
"""


def test_human_report_text_is_printed_as_written(capsys):
    _render_report(REPORT, verbose=False)
    assert capsys.readouterr().out == HUMAN  # not a terminal: no colour, [brackets] literal
    _render_report(REPORT, verbose=True)
    assert capsys.readouterr().out == HUMAN.replace("[venv]\n", "[venv]\n      • detail shown with -v\n")


def test_human_report_is_coloured_only_on_a_terminal():
    @click.command()
    def show():
        _render_report(REPORT, verbose=False)

    coloured = CliRunner().invoke(show, color=True).output
    for styled in (
        click.style("✓", fg="green"),
        click.style("!", fg="yellow"),
        click.style("✗", fg="red"),
        click.style("-", dim=True),
        f"{click.style('fix:', bold=True)} {click.style('use the image', fg='cyan')}",
        "     " + click.style("pip install 'verl[gpu]'", fg="cyan"),
        click.style("Python environment", bold=True),
        click.style("not ready", fg="red") + ": 1 ✗ problem(s)",
    ):
        assert styled in coloured
    assert click.unstyle(coloured) == HUMAN
    assert CliRunner().invoke(show, color=False).output == HUMAN


@pytest.mark.parametrize(
    ("args", "printed"),
    [
        (["--ascend-home", "{tmp}"], "ascendfix doctor — profile"),
        (["--list"], "hazards    Known hazards"),
        (["--only", "gpu"], "error: --only gpu: unknown check"),  # bad input: the error line, on stderr
    ],
    ids=["report", "list", "bad-input"],
)
def test_doctor_does_not_import_rich(tmp_path, args, printed, ascendfix_cli):
    """doctor is the first command run on a fresh machine: it prints with click alone."""
    wrapper = (
        "import sys\n"
        "from ascendfix.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'rich'), file=sys.stderr)\n"
    )
    (tmp_path / "none").mkdir()  # an Ascend root with nothing installed
    argv = ["doctor", *(a.format(tmp=tmp_path / "none") for a in args)]
    result = ascendfix_cli(*argv, code=wrapper, cwd=tmp_path, timeout=120)
    assert result.stderr.splitlines()[-1] == "[]", result.stderr
    assert printed in result.stdout + result.stderr


def test_bare_machine_reports_what_cannot_be_checked_and_exits_1(tmp_path):
    bare = machine.make_venv(tmp_path / "bare")
    (tmp_path / "none").mkdir()  # an Ascend root with nothing installed
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = doctor("--python", str(bare), "--ascend-home", str(tmp_path / "none"), "--json", env=env, cwd=tmp_path)
    data = json.loads(result.stdout)
    assert result.returncode == 1
    assert (data["profile"], data["device"]) == ("verl-796871d", "npu")
    assert list(data) == ["schema", "ok", "profile", "device", "checks", "summary"] and data["ok"] is False
    checks = {c["id"]: c for c in data["checks"]}
    assert list(checks) == IDS
    assert all(set(c) == {"id", "title", "status", "messages", "fix", "details"} for c in checks.values())
    assert {cid: c["status"] for cid, c in checks.items() if c["status"] == "skip"} == {
        "commits": "skip",
        "integrity": "skip",
        "driver": "skip",
        "npu": "skip",
        "cuda": "skip",
    }
    assert "no accelerator detected; checking for npu" in checks["cann"]["messages"][0]
    assert checks["packages"]["status"] == "fail" and checks["env"]["status"] == "fail"
    assert data["summary"] == {
        s: sum(c["status"] == s for c in checks.values()) for s in ("ok", "warn", "fail", "skip")
    }
    human = doctor("--python", str(bare), "--ascend-home", str(tmp_path / "none"), env=env, cwd=tmp_path)
    assert human.returncode == 1 and human.stdout.splitlines()[-1].startswith("not ready: ")
    assert "fix: " in human.stdout and "Traceback" not in human.stdout + human.stderr


def test_doctor_in_this_interpreter_never_crashes(tmp_path):
    result = doctor("--json", "--ascend-home", str(tmp_path), env={**os.environ, "PATH": "/usr/bin:/bin"})
    checks = json.loads(result.stdout)["checks"]
    assert result.returncode == 1  # at least the Ascend stack is missing here
    assert not [c for c in checks if any("crashed" in m or "did not finish" in m for m in c["messages"])]


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ('NAME="AlmaLinux"\nID="almalinux"\nVERSION_ID="8.10"\nPRETTY_NAME="AlmaLinux 8.10"\n', "ok"),
        ('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="20.04"\nPRETTY_NAME="Ubuntu 20.04.6 LTS"\n', "warn"),
        ('NAME="AlmaLinux"\nID="almalinux"\nVERSION_ID="9.4"\n', "warn"),
    ],
)
def test_os_release_against_the_pin(profile, tmp_path, text, status):
    (tmp_path / "os-release").write_text(text)
    result = host.check_os(Context(Site(profile, "npu"), "test", os_release=tmp_path / "os-release"))
    assert result.status == status
    assert "the profile pins AlmaLinux 8; the guide's container is Ubuntu 20.04.6" in result.messages[0] or (
        status == "ok" and "as the profile pins (AlmaLinux 8)" in result.messages[0]
    )
    assert host.check_os(Context(Site(profile, "npu"), "test", os_release=tmp_path / "none")).status == "skip"
    assert host.check_os(Context(Site(profile, "cuda"), "test", os_release=tmp_path / "os-release")).status == "skip"


def test_the_disk_check_sizes_a_save_where_the_job_writes_it(tmp_path, monkeypatch):
    profile = manifest.load_profile("verl-796871d")
    assert profile.model is not None and profile.model.parameters == 235_000_000_000
    measured = []

    def disk(free_tb: float):
        def usage(path):
            measured.append(Path(path))
            return shutil._ntuple_diskusage(10**15, 0, int(free_tb * 1e12))

        monkeypatch.setattr(host.shutil, "disk_usage", usage)

    job = {"trainer.default_local_dir": "ckpts/qwen3"}  # not there yet: the first save makes it
    disk(2.0)  # less than one save (235B x 14 B = 3.3 TB) on the disk the job writes to: a problem
    short = host.check_disk(Context(Site(profile, "npu"), "test", cwd=tmp_path, overrides=job))
    assert short.status == "fail" and measured[-1] == tmp_path
    [line] = short.messages
    assert line == (
        f"only 2,000 GB free in {tmp_path / 'ckpts/qwen3'} (trainer.default_local_dir); one save of Qwen3-235B-A22B"
        " (model, optimizer, extra: 14 B/param) is ~3.3 TB: the first save would fail"
    )
    disk(5.0)  # one save, not two: verl's max_actor_ckpt_to_keep=1 deletes the older one first
    one = host.check_disk(Context(Site(profile, "npu"), "test", cwd=tmp_path, overrides=job))
    assert one.status == "warn" and "trainer.max_actor_ckpt_to_keep=1" in one.fix
    assert any("room for one save, not two" in m for m in one.messages)
    disk(7.0)
    two = host.check_disk(Context(Site(profile, "npu"), "test", cwd=tmp_path, overrides=job))
    assert two.status == "ok"
    assert any(
        m.endswith("2 saves (one save of Qwen3-235B-A22B (model, optimizer, extra: 14 B/param) is ~3.3 TB)")
        for m in two.messages
    )
    weights = {**job, "actor_rollout_ref.actor.checkpoint.save_contents": "['model']"}
    disk(2.0)
    small = host.check_disk(Context(Site(profile, "npu"), "test", cwd=tmp_path, overrides=weights))
    assert any("2 B/param) is ~0.5 TB" in m and "4 saves" in m for m in small.messages)
    disk(2.0)  # no override: the working directory, a guess, so a warning only
    guess = host.check_disk(Context(Site(profile, "npu"), "test", cwd=tmp_path))
    assert guess.status == "warn" and guess.messages[0].startswith(f"only 2,000 GB free in {tmp_path} (verl writes")


def test_run_preflight_hands_the_jobs_overrides_to_doctor(monkeypatch):
    from types import SimpleNamespace

    from ascendfix.job import preflight

    seen = []
    monkeypatch.setattr(runner, "run", lambda ctx, checks: seen.append(ctx.overrides) or SimpleNamespace(checks=[]))
    profile = manifest.load_profile("verl-796871d")
    job = {"trainer.default_local_dir": "/data/ckpts"}
    assert preflight.doctor_failures(Site(profile, "npu"), job) == []
    assert seen == [job]
