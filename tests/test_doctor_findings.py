"""doctor's findings as a team meets them: post releases, --root site-packages, short messages, other tools' edits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ascendfix import resources
from ascendfix.cli.doctor import _render_report
from ascendfix.doctor import pyenv, runner
from ascendfix.doctor.context import Context
from ascendfix.doctor.model import DoctorReport, Result
from ascendfix.errors import UsageError
from ascendfix.patching import engine
from ascendfix.profile import manifest, records, rl_plugin
from ascendfix.site import Site
from ascendfix.states import Status

from tests import machine
from tests.machine import doctor
from tests.rl_plugin_files import LINEAR_CE, VERL_INIT, checkout_profile, commits, installer


@pytest.fixture(scope="module")
def profile():
    return manifest.load_profile("verl-796871d")


def install_into(folder: Path, *wheels: Path) -> Path:
    """``pip install --target``: a site-packages folder of its own, as --root names one."""
    machine.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder), *map(str, wheels)])
    return folder


def check(profile, check_id, **site):
    (result,) = runner.run(Context(Site(profile, "npu", **site), "test"), [check_id]).checks
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
    report = DoctorReport("verl-796871d", "npu", [result])
    assert json.loads(json.dumps(report.to_json()))["checks"][0]["details"] == list(result.details)


def render(result: Result, verbose: bool, capsys) -> str:
    _render_report(DoctorReport("verl-796871d", "npu", [result]), verbose)
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
        runner.run(Context(Site(profile, "npu", str(target)), "test"), ["python", "packages", "hazards"])


# --- other tools' edits: the rl-plugin's import block in any spelling, another profile's patches ---------

INIT = rl_plugin.VERL_INIT
SPELLINGS = {
    "the installer's": installer(VERL_INIT, INIT)[len(VERL_INIT) :],
    "quotes, comments, spaces": (
        "\n\n# added by our image build\nfrom verl.utils.device import is_npu_available  # NPU?\n"
        "if is_npu_available :\n    import verl_npu   # the plugin\n    print('NPU acceleration enabled for verl')\n"
    ),
    "module attribute": "\nimport verl.utils.device\n\nif verl.utils.device.is_npu_available:\n    import verl_npu\n",
    "from verl.utils import device": "from verl.utils import device\nif device.is_npu_available:\n    import verl_npu",
    "an alias": "from verl.utils.device import is_npu_available as on_npu\nif on_npu:\n    import verl_npu  # noqa\n",
}
NOT_THE_BLOCK = {
    "unguarded": "import verl_npu\n",
    "a guard that does more": "from verl.utils.device import is_npu_available\nif is_npu_available:\n"
    "    import verl_npu\n    verl_npu.MODE = 2\n",
    "the block and another change": SPELLINGS["an alias"] + "__version__ = '0.5.1'\n",
    "not under is_npu_available": "import os\nif os.environ.get('NPU'):\n    import verl_npu\n",
}


@pytest.mark.parametrize("block", SPELLINGS.values(), ids=SPELLINGS)
def test_the_plugins_import_block_is_recognised_in_any_spelling(block):
    current = (VERL_INIT + block).encode()
    assert rl_plugin.is_installer_edit(INIT, VERL_INIT.encode(), current) and rl_plugin.has_import_block(current)
    docstring, rest = VERL_INIT.split("\n", 1)
    at_the_top = f"{docstring}\n{block.strip()}\n{rest}".encode()  # written elsewhere in the file
    assert rl_plugin.is_installer_edit(INIT, VERL_INIT.encode(), at_the_top)
    assert rl_plugin.installer_edit(INIT, current) == current  # the installer would not add a second one


@pytest.mark.parametrize("block", NOT_THE_BLOCK.values(), ids=NOT_THE_BLOCK)
def test_other_edits_near_verl_npu_are_not_the_block(block):
    assert not rl_plugin.is_installer_edit(INIT, VERL_INIT.encode(), (VERL_INIT + block).encode())


@pytest.mark.parametrize("block", list(SPELLINGS.values())[1:], ids=list(SPELLINGS)[1:])
def test_doctor_keeps_the_import_block_of_a_checkout_in_any_spelling(tmp_path, monkeypatch, block):
    verl, profile = checkout_profile(tmp_path, {INIT: VERL_INIT, rl_plugin.LINEAR_CROSS_ENTROPY: LINEAR_CE})
    (verl / INIT).write_text(VERL_INIT + block)
    (verl / rl_plugin.LINEAR_CROSS_ENTROPY).write_text(installer(LINEAR_CE, rl_plugin.LINEAR_CROSS_ENTROPY))
    result = commits(profile, verl, monkeypatch, plugin_installed=True)
    assert result.status == "ok", result
    assert any("rl-plugin installer" in m and INIT in m and "(keep them)" in m for m in result.messages)
    assert "checkout --" not in result.fix


def test_integrity_keeps_the_import_block_of_a_wheel_install_and_reinstalls_the_plugin_after(profile, tmp_path):
    files = {INIT: VERL_INIT.encode(), "verl/protocol.py": b"class DataProto:\n    pass\n"}
    site = install_into(tmp_path / "site", machine.make_wheel(tmp_path / "wheels", "verl", "0.5.0", files))
    (site / INIT).write_text(VERL_INIT + SPELLINGS["module attribute"])
    result = check(profile, "integrity", roots={"verl": site})
    assert result.status == "ok", result
    assert f"verl 0.5.0: changed by the {rl_plugin.INSTALLER} exactly as it edits them: {INIT}" in result.messages
    (site / "verl/protocol.py").write_text("class DataProto:\n    edited = True\n")
    broken = check(profile, "integrity", roots={"verl": site})
    assert broken.status == "fail" and "verl 0.5.0: 1 file(s) differ from the wheel's RECORD: verl/protocol.py" in (
        broken.messages
    )
    reinstall, plugin = broken.fix.splitlines()[:2]
    assert reinstall.endswith("--force-reinstall --no-deps verl==0.5.0")
    assert "rl-plugin" in plugin and "pip install" in plugin  # the reinstall dropped the block: put it back


def team_profile(tmp_path: Path) -> records.Profile:
    """A team profile with its own patch of verl/utils/device.py (the probe patch under another id)."""
    (tmp_path / "patches").mkdir(parents=True)
    text = (resources.data_dir("patches") / "verl-cuda-probe-off.toml").read_text()
    (tmp_path / "patches" / "team-probe.toml").write_text(text.replace('"verl-cuda-probe-off"', '"team-probe"'))
    (tmp_path / "team.toml").write_text(
        'extends = "verl-796871d"\nname = "team"\n[devices.npu]\nadd_patches = ["team-probe"]\n'
        'drop_patches = ["verl-cuda-probe-off"]\n'
    )
    return manifest.load_profile(str(tmp_path / "team.toml"))


DEVICE = "verl/utils/device.py"
DEVICE_PY = "import torch\n\nis_cuda_available = torch.cuda.is_available()\n"


def test_a_file_another_profile_patched_in_a_checkout_is_named_as_its_never_checked_out(tmp_path, monkeypatch):
    verl, profile = checkout_profile(tmp_path, {INIT: VERL_INIT, DEVICE: DEVICE_PY})
    team = team_profile(tmp_path / "team")
    (applied,) = engine.apply(engine.select(Site(team, "npu", roots={"verl": verl}), ("team-probe",)))
    assert applied.action == "applied"
    result = commits(profile, verl, monkeypatch, plugin_installed=False)
    assert result.status == "warn", result
    assert f"verl: {verl} holds another profile's patches: {DEVICE} (profile team's patch team-probe)" in (
        result.messages
    )
    assert "checkout --" not in result.fix and "git" not in result.fix
    assert (
        result.fix == f"ascendfix revert --profile team --root verl={verl}  # only if this job runs without team-probe"
    )
    (verl / DEVICE).write_text((verl / DEVICE).read_text() + "# and edited by hand\n")
    edited = commits(profile, verl, monkeypatch, plugin_installed=False)
    assert any(f"{DEVICE} (profile team's patch team-probe, changed since)" in m for m in edited.messages)
    assert "checkout --" not in edited.fix


def test_a_file_another_profile_patched_in_site_packages_is_named_as_its_not_reinstalled(profile, tmp_path):
    wheel = machine.make_wheel(tmp_path / "wheels", "verl", "0.5.0", {INIT: b"", DEVICE: DEVICE_PY.encode()})
    site = install_into(tmp_path / "site", wheel)
    team = team_profile(tmp_path / "team")
    engine.apply(engine.select(Site(team, "npu", roots={"verl": site}), ("team-probe",)))
    result = check(profile, "integrity", roots={"verl": site})
    assert result.status == "warn", result
    assert result.messages[0] == f"verl 0.5.0: another profile's patches: {DEVICE} (profile team's patch team-probe)"
    assert "--force-reinstall" not in result.fix and "--profile team" in result.fix
