"""Profiles and patch files: strict validation with file and field named, extends, team patches."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ascendfix.errors import UsageError
from ascendfix.profile import manifest, records
from ascendfix.resources import data_dir


def test_bundled_profile_pins_the_guide_stack():
    profile = manifest.load_profile("verl-796871d")
    pins = {c.name: c.commit or c.tag or c.version for c in profile.components}
    assert pins["verl"] == "796871d7d092f7cbc6a64e7f4a3796f7a2217f5e"
    assert pins["torch"] == pins["torch_npu"] == "2.7.1"
    assert (pins["cann"], pins["hdk"], pins["python"], pins["tensordict"]) == ("8.3.RC1", "25.2.0", "3.10", "0.10.0")
    assert profile.accepted_conflicts[0].requirement == "tensordict>=0.8.0,<=0.9.1,!=0.9.0"
    guide_edits = {  # the guide's 5.1, 6.1, 6.2 and 7.2 (a patch added later leaves them)
        "verl-cuda-probe-off",
        "torch-shard-overlap-check",
        "torch-global-plan-check",
        "verl-grpo-no-interleave",
        "verl-dapo-no-interleave",
    }
    assert guide_edits <= set(profile.devices["npu"].patches)
    assert "verl-cuda-probe-off" not in profile.devices["cuda"].patches
    env = {v.name: v.value for v in profile.devices["npu"].env}
    assert env["TASK_QUEUE_ENABLE"] == "2" and env["RAY_DEDUP_LOGS"] == "0" and env["HCCL_SOCKET_IFNAME"] is None
    assert profile.devices["npu"].ulimit_nofile == 32768


def write_profile(tmp_path, text: str, patches: dict[str, str] | None = None):
    path = tmp_path / "team.toml"
    path.write_text(text)
    for pid, body in (patches or {}).items():
        (tmp_path / "patches").mkdir(exist_ok=True)
        (tmp_path / "patches" / f"{pid}.toml").write_text(body)
    return str(path)


def bundled_patch(pid: str) -> str:
    return (data_dir("patches") / f"{pid}.toml").read_text()


def test_a_team_profile_extends_and_adds_its_own_patch(tmp_path):
    own = bundled_patch("verl-cuda-probe-off").replace('id = "verl-cuda-probe-off"', 'id = "team-probe"')
    parent = ", ".join(f'"{p}"' for p in manifest.load_profile("verl-796871d").devices["npu"].patches)
    path = write_profile(
        tmp_path,
        'extends = "verl-796871d"\nname = "team"\n[devices.npu]\nadd_patches = ["team-probe"]\n'
        f"drop_patches = [{parent}]\n",
        {"team-probe": own},
    )
    profile = manifest.load_profile(path)
    assert profile.name == "team" and profile.devices["npu"].patches == ("team-probe",)
    assert profile.component("verl").commit.startswith("796871d")
    assert profile.patches["team-probe"].source == tmp_path / "patches" / "team-probe.toml"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("versoin = 1\n", r"team.toml: versoin: unknown key"),
        ("[components.torch]\nversion = 2.7\n", r"team.toml: components.torch.version: expected a string, got"),
        ("[components.newpkg]\nkind = 'pypi'\n", r"components.newpkg.why: missing required field"),
        ("[devices.tpu]\ndescription = 'x'\n", r"devices.tpu: unknown device"),
        ("[devices.cuda]\nadd_patches = ['verl-cuda-probe-off']\n", r"'verl-cuda-probe-off' must not be applied"),
        ("[devices.npu]\nadd_patches = ['no-such-patch']\n", r"no patch file for 'no-such-patch'"),
        ("[devices.npu]\npatches = ['verl-cuda-probe-off']\n", r"devices.npu.patches: leaves out torch-shard-overlap"),
        ("[devices.npu]\ndrop_patches = ['no-such-patch']\n", r"drop_patches: 'no-such-patch' is not a patch of"),
        ("[devices.npu]\nadd_patches = 'x'\n", r"devices.npu.add_patches: expected an array of patch ids"),
        ("[components.verl]\ncommit = 'main'\n", r"components.verl.commit: 'main' is not a git commit"),
        ("schema = 'one'\n", r"schema: expected an integer"),
        ("extends = 'nope'\n", r"unknown profile 'nope'"),
        ("[[accepted_conflicts]]\nrequirer = 'verl'\n", r"accepted_conflicts\[0\]\.requirement: missing"),
    ],
)
def test_bad_manifests_name_file_and_field(tmp_path, body, message):
    head = 'name = "team"\n' + ("" if body.startswith("extends") else 'extends = "verl-796871d"\n')
    path = write_profile(tmp_path, head + body)
    with pytest.raises(UsageError, match=message):
        manifest.load_profile(path)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'path = "verl/utils/device.py"',
            'path = "../etc/passwd"',
            r"files\[0\]\.path: path '../etc/passwd' must stay",
        ),
        (
            'path = "verl/utils/device.py"',
            'path = "/etc/passwd"',
            r"files\[0\]\.path: path '/etc/passwd' must stay inside",
        ),
        ('name = "set-assignment"', 'name = "exec-python"', r"transform.name: unknown transform 'exec-python'"),
        ('value = "False"', "value = false", r"transform.value: expected str"),
        ('value = "False"', 'value = "False"\nextra = 1', r"transform.extra: unknown parameter"),
        ('drop_when = """', 'dropwhen = """', r"drop_when: missing required field"),
        ('devices = ["npu"]', 'devices = ["tpu"]', r"devices\[0\]: unknown value 'tpu'"),
        ('since = "0.9.0"', 'since = "0.9.0rc1"', r"superseded.since: '0.9.0rc1' is not a release number"),
        ('since = "0.9.0"', 'since = "soon"', r"superseded.since: 'soon' is not a release number"),
    ],
)
def test_bad_patch_files_name_file_and_field(tmp_path, old, new, message):
    text = bundled_patch("verl-cuda-probe-off").replace(old, new, 1)
    path = write_profile(
        tmp_path,
        'extends = "verl-796871d"\nname = "team"\n',
        {"verl-cuda-probe-off": text},
    )
    with pytest.raises(UsageError, match=r"verl-cuda-probe-off.toml: " + message):
        manifest.load_profile(path)


def test_invalid_toml_is_one_line(tmp_path):
    path = write_profile(tmp_path, "name = \n")
    with pytest.raises(UsageError, match=r"team.toml: not valid TOML"):
        manifest.load_profile(path)


def test_extends_cycle_is_refused(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    with pytest.raises(UsageError, match="leads back to itself"):
        manifest.load_profile(str(tmp_path / "a.toml"))


def test_an_extending_profile_adds_and_drops_parent_patches_explicitly(tmp_path):
    path = write_profile(
        tmp_path,
        'extends = "verl-796871d"\nname = "team"\n[devices.npu]\ndrop_patches = ["verl-dapo-no-interleave"]\n'
        '[devices.cuda]\npatches = ["torch-shard-overlap-check", "torch-global-plan-check", '
        '"verl-grpo-no-interleave", "verl-dapo-no-interleave"]\n',
    )
    profile = manifest.load_profile(path)
    parent = manifest.load_profile("verl-796871d")
    assert profile.devices["npu"].patches == tuple(p for p in parent.devices["npu"].patches if "dapo" not in p)
    cuda = ("torch-shard-overlap-check", "torch-global-plan-check", "verl-grpo-no-interleave")
    assert profile.devices["cuda"].patches == (*cuda, "verl-dapo-no-interleave")  # the whole list it gave
    assert profile.devices["npu"].env == parent.devices["npu"].env  # the rest of the device table is inherited


# --- a team patch's template: beside its patch file, inside that folder, a small regular file -------


def team_overlap_profile(tmp_path, template: str) -> str:
    """A team profile whose own patch is the bundled shard-overlap one, naming ``template``."""
    own = bundled_patch("torch-shard-overlap-check").replace('id = "torch-shard-overlap-check"', 'id = "team-scan"')
    own = own.replace('template = "templates/fast_overlap.py"', f"template = {json.dumps(template)}")
    return write_profile(
        tmp_path,
        'extends = "verl-796871d"\nname = "team"\n[devices.npu]\nadd_patches = ["team-scan"]\n'
        'drop_patches = ["torch-shard-overlap-check"]\n',
        {"team-scan": own},
    )


def template_of(profile: records.Profile, pid: str) -> str:
    return dict(profile.patches[pid].variants[1].params)["template"]


def test_a_template_resolves_beside_the_patch_file_that_names_it(tmp_path):
    (tmp_path / "patches" / "templates").mkdir(parents=True)
    ours = tmp_path / "patches" / "templates" / "scan.py"
    ours.write_text((data_dir("patches") / "templates" / "fast_overlap.py").read_text())
    profile = manifest.load_profile(team_overlap_profile(tmp_path, "templates/scan.py"))
    assert template_of(profile, "team-scan") == str(ours.resolve())
    bundled = data_dir("patches").resolve() / "templates" / "fast_overlap.py"
    assert template_of(profile, "torch-global-plan-check") == str(bundled)  # the bundled patches keep theirs


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("/dev/zero", r"path '/dev/zero' must stay inside the patch folder"),
        ("/etc/shadow", r"must stay inside the patch folder"),
        ("../x.py", r"must stay inside the patch folder"),
        ("templates/fast_overlap.py", r"No such file or directory"),  # the bundled one is not beside the team's
        ("out.py", r"leads to .*, outside the patch folder"),
        ("fifo", r"is not a regular file"),
        ("big.py", r"is 262145 bytes, over the 262144-byte limit"),
        ("a\0b.py", r"holds a control character"),
    ],
)
def test_a_template_that_is_not_a_small_file_in_the_patch_folder_is_a_profile_error(tmp_path, template, message):
    path = team_overlap_profile(tmp_path, template)
    (tmp_path / "patches" / "out.py").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "patches" / "fifo")
    (tmp_path / "patches" / "big.py").write_bytes(b"#" * (256 * 1024 + 1))
    with pytest.raises(UsageError, match=r"team-scan.toml: variants.fast-validate.transform.template: .*" + message):
        manifest.load_profile(path)


def test_a_template_error_is_one_line_and_exit_2(tmp_path, ascendfix_cli):
    path = team_overlap_profile(tmp_path, "/dev/zero")
    proc = ascendfix_cli("status", "--profile", path, "--device", "npu", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "transform.template" in proc.stderr and "Traceback" not in proc.stderr


def test_the_transform_reads_no_template_that_is_not_a_small_regular_file(tmp_path):
    from ascendfix.transforms.fast_overlap import read_template

    (tmp_path / "link.py").symlink_to(data_dir("patches") / "templates" / "fast_overlap.py")
    for path, message in ((Path("/dev/zero"), "not a regular file"), (tmp_path / "link.py", "Too many levels")):
        with pytest.raises(OSError, match=message):
            read_template(path, 1024)
    (tmp_path / "big.py").write_bytes(b"#" * 1025)
    with pytest.raises(OSError, match="over 1024 bytes"):
        read_template(tmp_path / "big.py", 1024)
