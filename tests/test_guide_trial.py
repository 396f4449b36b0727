"""What a team that followed the guide by hand meets on the way: doctor's checks agree on one fix for one
file, the fixes name real versions and the site's own values, and ``--help`` says whole clauses."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import sys

import pytest
from ascendfix import cli
from ascendfix import site as sites
from ascendfix.cli import base
from ascendfix.doctor import host, nic, patches, pyenv
from ascendfix.doctor.context import Context
from ascendfix.patching import engine
from ascendfix.profile import manifest
from ascendfix.site import Distribution, Site
from click.testing import CliRunner

from tests import upstream
from tests.upstream import PLANNER_DEF, SHARDS_DOC_END

PROFILE = manifest.load_profile("verl-796871d")
TORCH_IDS = ("torch-shard-overlap-check", "torch-global-plan-check")


def record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def torch_site(tmp_path, monkeypatch):
    """torch 2.7.1's two files installed in a site-packages folder with its dist-info's RECORD, then hand-edited
    as the guide's 6.1 and 6.2 say; doctor's context sees that folder as torch's."""
    site = tmp_path / "site-packages"
    shutil.copytree(upstream.torch_tree("2.7.1"), site, ignore=shutil.ignore_patterns(".complete"))
    dist_info = site / "torch-2.7.1.dist-info"
    dist_info.mkdir()
    rows = [
        f"{rel},sha256={record_digest((site / rel).read_bytes())},1"
        for rel in (upstream.SHARD_INTERNALS, upstream.DEFAULT_PLANNER)
    ]
    (dist_info / "RECORD").write_text("\n".join(rows) + "\n")
    os.utime(dist_info / "RECORD", ns=(1, 1))  # installed before the edits
    shards, planner = site / upstream.SHARD_INTERNALS, site / upstream.DEFAULT_PLANNER
    shards.write_text(shards.read_text().replace(SHARDS_DOC_END, SHARDS_DOC_END + "    return\n", 1))
    planner.write_text(planner.read_text().replace(PLANNER_DEF, PLANNER_DEF + "    return True\n", 1))
    info = Distribution("2.7.1", None, str(dist_info))
    monkeypatch.setattr(Context, "installed", lambda self, d: info if d == "torch" else None)
    return site


def contexts(site):
    profile = PROFILE._replace(patches={pid: PROFILE.patches[pid] for pid in TORCH_IDS})
    profile = profile._replace(devices={"npu": profile.devices["npu"]._replace(patches=TORCH_IDS)})
    return Context(Site(profile, "npu", roots={"torch": site}, environ={}), "test")


@pytest.mark.upstream
def test_doctor_gives_one_fix_for_a_hand_edited_file_and_apply_takes_it(torch_site):
    ctx = contexts(torch_site)
    apply = ctx.site.command("apply")
    found = patches.check_patches(ctx)
    integrity = pyenv.check_integrity(ctx)
    assert found.status == "fail" and found.fix == apply
    assert "torch-shard-overlap-check: hand-edited as the guide's 6.1 says (_internals.py); apply adopts it" in (
        found.messages
    )
    assert all(len(line) <= 100 and line.count("hand-edited") <= 1 for line in found.messages[1:])
    assert integrity.status == "warn" and integrity.fix == apply + "  # adopts the hand edits"
    assert "pip install" not in integrity.fix
    text = "\n".join(integrity.messages)
    assert (
        f"torch 2.7.1: hand-edited as the guide says, over the wheel's own bytes: {upstream.SHARD_INTERNALS} " in text
    )
    # the fix works: apply adopts both files, and both checks pass
    selection = engine.select(ctx.site)
    assert [s.action for s in engine.apply(selection)] == ["adopted", "adopted"]
    assert patches.check_patches(ctx).status == "ok"
    assert pyenv.check_integrity(ctx).status == "ok"


@pytest.mark.upstream
def test_a_file_apply_refuses_gets_the_same_reinstall_from_both_checks(torch_site):
    shards = torch_site / upstream.SHARD_INTERNALS
    shards.write_text(shards.read_text() + "# and a local change\n")
    ctx = contexts(torch_site)
    reinstall = "pip install --force-reinstall --no-deps torch==2.7.1"
    found = patches.check_patches(ctx)
    assert f"torch-shard-overlap-check: {reinstall}; then ascendfix apply" in found.fix.splitlines()
    assert "<its version>" not in found.fix
    integrity = pyenv.check_integrity(ctx)
    assert integrity.status == "fail" and f"{reinstall}" in integrity.fix


def test_a_package_that_is_not_there_is_not_found_not_drifted(tmp_path):
    ctx = Context(Site(PROFILE, "npu", sys.executable, roots={"torch": tmp_path}, environ={}), "test")
    if ctx.targets()["verl"].root is not None:
        pytest.skip("verl is installed in this interpreter")
    messages = "\n".join(patches.check_patches(ctx).messages)
    assert "verl-cuda-probe-off: not found (" in messages and "verl-cuda-probe-off: drifted" not in messages


def test_the_reinstall_names_the_version_the_dist_info_records(tmp_path):
    (tmp_path / "verl-0.5.0.dist-info").mkdir()
    assert sites.reinstall_spec("verl", tmp_path) == "verl==0.5.0"
    assert sites.reinstall_spec("torch", tmp_path) == "torch"  # none recorded: no made-up version


def test_a_per_site_nic_is_asked_for_not_guessed(monkeypatch):
    up = [nic.Interface(name, i, True, "up", (f"10.0.0.{i}",)) for i, name in enumerate(("lo", "eth0", "ib0"), 1)]
    monkeypatch.setattr(nic, "interfaces", lambda: up)
    env = {var.name: var.value for var in PROFILE.devices["npu"].env if var.value is not None}
    result = host.check_env(Context(Site(PROFILE, "npu", environ=env), "test"))
    nic_lines = [line for line in result.fix.splitlines() if "SOCKET_IFNAME" in line]
    assert nic_lines and all("=SITE_NIC  # the NIC this site's nodes reach each other on" in line for line in nic_lines)
    assert "(this host has: eth0, ib0)" in nic_lines[0]
    assert "IFNAME=eth0" not in result.fix


def test_help_summaries_are_whole_clauses():
    shown = CliRunner().invoke(cli.main, ["--help"], env={"COLUMNS": "100"}).output
    listed = " ".join(shown.split("Commands:")[1].split())
    assert (
        "Compare CANDIDATE with BASELINE (e.g. NPU against H100) as the guide's 4.2 table: higher is better." in listed
    )
    assert "..." not in listed.replace("[ARGS...]", "")
    for name in cli.COMMANDS:
        said = base.summary(cli.main.get_command(None, name))
        assert said in listed and said.count("(") == said.count(")"), said
    for family in ("ray", "ckpt", "export"):  # the command families list their commands' whole clauses too
        group = cli.main.get_command(None, family)
        shown = CliRunner().invoke(cli.main, [family, "--help"], env={"COLUMNS": "100"}).output
        listed = " ".join(shown.split("Commands:")[1].split())
        assert "..." not in listed, family
        for name in group.list_commands(None):
            said = base.summary(group.get_command(None, name))
            assert said in listed and said.count("(") == said.count(")"), said


@pytest.mark.upstream
def test_a_hand_edited_checkout_gets_one_fix_from_commits_and_patches(tmp_path, monkeypatch):
    """The commits check does not tell to check out (discarding the edit) what the patches check adopts."""
    from tests import rl_plugin_files

    rel = "verl/utils/device.py"
    device = (upstream.verl_checkout("0.5.0") / rel).read_text()
    verl, profile = rl_plugin_files.checkout_profile(tmp_path, {rel: device})
    probe = "is_cuda_available = torch.cuda.is_available()\n"
    (verl / rel).write_text(device.replace(probe, "# " + probe + "is_cuda_available = False\n"))
    found = rl_plugin_files.commits(profile, verl, monkeypatch, plugin_installed=False)
    assert "checkout --" not in found.fix
    assert f"verl: hand-edited as the guide says (see patches): {rel} (the guide's 5.1)" in found.messages
    ctx = Context(Site(profile, "npu", roots={"verl": verl}, environ={}), "test")
    statuses = {line.split(":")[0]: line for line in patches.check_patches(ctx).messages[1:]}
    assert statuses["verl-cuda-probe-off"] == (
        "verl-cuda-probe-off: hand-edited as the guide's 5.1 says (device.py); apply adopts it"
    )
