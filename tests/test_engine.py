"""The engine on a small fake stack: all-or-nothing apply, status, byte-exact revert, recovery."""

from __future__ import annotations

import os
import random
import shutil
import signal
import time

import pytest
from ascendfix.errors import RefusedError, UsageError
from ascendfix.patching import engine, tree
from ascendfix.profile import manifest
from ascendfix.site import Site

from tests.stack import DEMO_PROFILE, PATCHED, make_stack, select

PROFILE = DEMO_PROFILE
IDS = list(PROFILE.patches)
# the README's same-code team profile: the H100 side takes every patch of the A2 side but the NPU-only one
SAME_CODE = PROFILE._replace(
    devices={
        **PROFILE.devices,
        "cuda": PROFILE.devices["cuda"]._replace(
            patches=tuple(p for p in PROFILE.devices["npu"].patches if p != "verl-cuda-probe-off")
        ),
    }
)


def states(statuses):
    return {s.id: s.state for s in statuses}


def test_apply_status_reapply_revert_roundtrip(stack):
    before = stack.snapshot()
    result = engine.apply(select(stack))
    assert {s.id: s.action for s in result} == dict.fromkeys(IDS, "applied")
    assert all("not a known original" in s.warnings[0] for s in result)  # our fixtures are not upstream
    dapo = next(s for s in result if s.id == "verl-dapo-no-interleave")
    assert "filter_groups.enable=True" in dapo.warnings[1]
    after = stack.snapshot()
    assert all(after[k] != before[k] for k in before)
    assert states(engine.status(select(stack))) == dict.fromkeys(IDS, "applied")

    again = engine.apply(select(stack))
    assert {s.action for s in again} == {"unchanged"}
    assert stack.snapshot() == after

    reverted = engine.revert(select(stack, device=None))
    assert {s.action for s in reverted} == {"reverted"}
    assert stack.snapshot() == before
    assert not (stack.verl / ".ascendfix").exists() and not (stack.torch / ".ascendfix").exists()


def test_status_json_contract(stack):
    data = engine.status(select(stack))[0].to_json()
    assert set(data) == {"id", "state", "reason", "variant", "files"}
    assert set(data["files"][0]) == {"path", "sha256", "state"}


def test_strict_refuses_unknown_originals_and_writes_nothing(stack):
    before = stack.snapshot()
    with pytest.raises(RefusedError, match="not a known original"):
        engine.apply(select(stack), strict=True)
    assert stack.snapshot() == before


def test_a_missing_file_refuses_the_whole_run(stack):
    stack.file("torch", "torch/distributed/checkpoint/default_planner.py").unlink()
    before = stack.snapshot()
    with pytest.raises(RefusedError, match="torch-global-plan-check: drifted: .*default_planner.py is missing"):
        engine.apply(select(stack))
    assert stack.snapshot() == before
    assert not (stack.verl / ".ascendfix").exists()


def test_an_unparsable_file_refuses(stack):
    stack.file("verl", "verl/utils/device.py").write_bytes(b"def broken(:\n")
    before = stack.snapshot()
    with pytest.raises(RefusedError, match="device.py: not valid Python"):
        engine.apply(select(stack))
    assert stack.snapshot() == before


def test_a_wrong_site_count_refuses_like_verl_0_4(stack):
    path = stack.file("verl", "verl/trainer/ppo/ray_trainer.py")
    text = path.read_bytes().replace(b"        gen_batch = gen_batch.repeat", b"        gen_batch = gen_batch.other")
    path.write_bytes(text)
    with pytest.raises(RefusedError, match="expected 3 site.*found 2"):
        engine.apply(select(stack, only=["verl-grpo-no-interleave"]))


def test_dapo_is_not_applicable_without_a_checkout(tmp_path):
    stack = make_stack(tmp_path, checkout=False)
    result = {s.id: s for s in engine.apply(select(stack))}
    assert result["verl-dapo-no-interleave"].state == "not-applicable"
    assert "ships only in a verl source checkout" in result["verl-dapo-no-interleave"].reason
    assert result["verl-grpo-no-interleave"].state == "applied"


def test_cuda_probe_patch_is_not_applicable_on_cuda(stack):
    result = {s.id: s for s in engine.apply(select(stack, device="cuda", profile=SAME_CODE))}
    assert result["verl-cuda-probe-off"].state == "not-applicable"
    assert "not used on cuda" in result["verl-cuda-probe-off"].reason
    assert stack.file("verl", "verl/utils/device.py").read_bytes().count(b"ascendfix") == 0
    assert result["verl-grpo-no-interleave"].state == "applied"


def test_an_npu_only_patch_left_in_place_on_cuda_is_drifted(stack):
    engine.apply(select(stack, device="npu"))
    on_cuda = {s.id: s for s in engine.status(select(stack, device="cuda", profile=SAME_CODE))}
    assert on_cuda["verl-cuda-probe-off"].state == "drifted"
    assert "ascendfix revert --only verl-cuda-probe-off" in on_cuda["verl-cuda-probe-off"].reason
    assert on_cuda["verl-grpo-no-interleave"].state == "applied"
    with pytest.raises(RefusedError, match="verl-cuda-probe-off: drifted"):
        engine.apply(select(stack, device="cuda", profile=SAME_CODE))
    engine.revert(select(stack, device=None, only=["verl-cuda-probe-off"]))
    assert engine.status(select(stack, device="cuda", profile=SAME_CODE))[0].state == "not-applicable"


def test_foreign_edit_after_apply_is_drifted_and_revert_leaves_it(stack):
    engine.apply(select(stack))
    path = stack.file("verl", "verl/trainer/ppo/ray_trainer.py")
    path.write_bytes(path.read_bytes() + b"# local edit\n")
    assert states(engine.status(select(stack)))["verl-grpo-no-interleave"] == "drifted"
    edited = path.read_bytes()
    result = {s.id: s for s in engine.revert(select(stack, device=None))}
    assert result["verl-grpo-no-interleave"].action == "refused"
    assert "changed since ascendfix wrote it" in result["verl-grpo-no-interleave"].reason
    assert path.read_bytes() == edited
    assert result["verl-cuda-probe-off"].action == "reverted"


def test_reinstalled_file_is_not_applied_again(stack):
    before = stack.snapshot()
    engine.apply(select(stack))
    path = stack.file("verl", "verl/utils/device.py")
    path.write_bytes(before[("verl", "verl/utils/device.py")])  # pip reinstalled verl
    assert states(engine.status(select(stack)))["verl-cuda-probe-off"] == "not-applied"
    engine.apply(select(stack))
    assert states(engine.status(select(stack)))["verl-cuda-probe-off"] == "applied"
    engine.revert(select(stack, device=None))
    assert stack.snapshot() == before


def test_revert_without_state_dir_uses_the_markers(stack):
    before = stack.snapshot()
    engine.apply(select(stack))
    shutil.rmtree(stack.verl / ".ascendfix")
    shutil.rmtree(stack.torch / ".ascendfix")
    assert states(engine.status(select(stack))) == dict.fromkeys(IDS, "applied")
    assert {s.action for s in engine.revert(select(stack, device=None))} == {"reverted"}
    assert stack.snapshot() == before


def test_a_half_reverted_file_is_partial_and_apply_refuses(stack):
    engine.apply(select(stack))
    path = stack.file("verl", "verl/trainer/ppo/ray_trainer.py")
    lines = path.read_bytes().split(b"\n")
    i = next(i for i, line in enumerate(lines) if b"batch = batch.repeat" in line)
    lines[i] = lines[i].replace(b"interleave=False)  # ascendfix: verl-grpo-no-interleave", b"interleave=True)")
    path.write_bytes(b"\n".join(lines))
    shutil.rmtree(stack.verl / ".ascendfix")
    assert states(engine.status(select(stack)))["verl-grpo-no-interleave"] == "partial"
    with pytest.raises(RefusedError, match="partial"):
        engine.apply(select(stack))
    engine.revert(select(stack, device=None, only=["verl-grpo-no-interleave"]))
    assert b"interleave=False" not in path.read_bytes()


def test_mode_kept_and_bytecode_dropped(tmp_path):
    stack = make_stack(tmp_path)
    device = stack.verl / "verl" / "utils" / "device.py"
    device.chmod(0o444)
    pyc = device.parent / "__pycache__" / "device.cpython-310.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"stale")
    engine.apply(select(stack, only=["verl-cuda-probe-off"]))
    assert b"is_cuda_available = False  # ascendfix: verl-cuda-probe-off" in device.read_bytes()
    assert device.stat().st_mode & 0o777 == 0o444
    assert not pyc.exists()


def test_a_symlinked_package_folder_is_refused_naming_where_it_points(tmp_path):
    stack = make_stack(tmp_path)
    real = tmp_path / "real-verl"
    shutil.move(stack.verl / "verl", real)
    (stack.verl / "verl").symlink_to(real)
    before = (real / "utils" / "device.py").read_bytes()
    with pytest.raises(RefusedError, match=f"verl is a symbolic link \\(to {real}\\); refusing to follow it"):
        engine.apply(select(stack, only=["verl-cuda-probe-off"]))
    assert (real / "utils" / "device.py").read_bytes() == before


def test_unknown_only_and_device_are_usage_errors(stack):
    with pytest.raises(UsageError, match="--only nope: not a patch of profile verl-796871d-demo"):
        select(stack, only=["nope"])


def test_dry_run_plans_without_writing(stack):
    before = stack.snapshot()
    planned = engine.plan(select(stack))
    assert {s.action for s in engine.dry_run(planned)} == {"would-apply"}
    assert "+is_cuda_available = False  # ascendfix: verl-cuda-probe-off" in engine.diff(planned)
    assert set(planned.writes) == {stack.root("verl"), stack.root("torch")}  # by package root
    assert stack.snapshot() == before


def _apply_in_child(stack):
    pid = os.fork()
    if pid == 0:
        try:
            engine.apply(select(stack))
            os._exit(0)
        except BaseException:
            os._exit(1)
    return pid


def test_sixteen_concurrent_applies_write_once(stack):
    children = [_apply_in_child(stack) for _ in range(16)]
    codes = [os.waitpid(pid, 0)[1] for pid in children]
    assert codes == [0] * 16
    assert states(engine.status(select(stack))) == dict.fromkeys(IDS, "applied")
    assert all(f.read_bytes().count(b"# ascendfix:") >= 1 for f in (stack.file(p, r) for p, r in PATCHED))


@pytest.mark.slow
def test_killed_at_random_points_every_file_is_whole_and_the_next_command_recovers(tmp_path):
    rng = random.Random(1234)
    template = make_stack(tmp_path / "template")
    original = template.snapshot()
    engine.apply(select(template))
    patched = template.snapshot()
    engine.revert(select(template, device=None))
    start = time.perf_counter()  # the span of what is killed: a forked child's whole apply
    os.waitpid(_apply_in_child(template), 0)
    span = time.perf_counter() - start
    outcomes = set()
    for trial in range(10):
        stack = make_stack(tmp_path / f"t{trial}")
        pid = _apply_in_child(stack)
        time.sleep(2 * span * (trial + rng.random()) / 10)  # sweeps from the start to well past the end
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        now = stack.snapshot()
        for key, data in now.items():
            assert data in (original[key], patched[key]), f"trial {trial}: {key} is torn"
        after = engine.status(select(stack))
        assert {s.state for s in after} <= {"applied", "not-applied"}, f"trial {trial}: {states(after)}"
        outcomes.add(tuple(sorted(states(after).values())))
        engine.apply(select(stack))
        assert states(engine.status(select(stack))) == dict.fromkeys(IDS, "applied")
        engine.revert(select(stack, device=None))
        assert stack.snapshot() == original, f"trial {trial}: revert after recovery is not exact"
        shutil.rmtree(tmp_path / f"t{trial}")
    assert len(outcomes) > 1  # the kills landed at different points


def _two_variant_profile(tmp_path):
    """A team profile whose probe patch has two variants (False, or None) to switch between."""
    (tmp_path / "patches").mkdir()
    text = (manifest.resources.data_dir("patches") / "verl-cuda-probe-off.toml").read_text()
    head, transform = text.split("[transform]")
    body = transform.replace('name = "set-assignment"', "").strip()
    body_none = body.replace('value = "False"', 'value = "None"')
    variants = (
        f'[variants.off]\nwhy = "False"\n[variants.off.transform]\nname = "set-assignment"\n{body}\n'
        f'[variants.none]\nwhy = "None"\n[variants.none.transform]\nname = "set-assignment"\n'
        f"{body_none}\n"
    )
    (tmp_path / "patches" / "team-probe.toml").write_text(head.replace("verl-cuda-probe-off", "team-probe") + variants)
    npu = ", ".join(f'"{p}"' for p in manifest.load_profile("verl-796871d").devices["npu"].patches)
    (tmp_path / "team.toml").write_text(
        'extends = "verl-796871d"\nname = "team"\n[devices.npu]\nadd_patches = ["team-probe"]\n'
        f"drop_patches = [{npu}]\n"
        '[variants]\nteam-probe = "off"\n'
    )
    return manifest.load_profile(str(tmp_path / "team.toml"))


@pytest.mark.parametrize("lose_state", [False, True])
def test_switching_variant_is_one_write_and_revert_stays_exact(tmp_path, lose_state):
    profile = _two_variant_profile(tmp_path)
    stack = make_stack(tmp_path / "stack")
    device = stack.file("verl", "verl/utils/device.py")
    original = device.read_bytes()

    def sel(variants=None):
        return engine.select(Site(profile, "npu", roots={"verl": stack.verl}, variants=variants))

    (first,) = engine.apply(sel())
    assert (first.action, first.variant) == ("applied", "off")
    assert b"is_cuda_available = False  # ascendfix: team-probe" in device.read_bytes()
    if lose_state:
        shutil.rmtree(stack.verl / ".ascendfix")
    (seen,) = engine.status(sel({"team-probe": "none"}))
    assert (seen.state, seen.variant) == ("applied", "off") and "none is asked for" in seen.reason
    (switched,) = engine.apply(sel({"team-probe": "none"}))
    assert (switched.action, switched.variant) == ("switched", "none")
    assert b"is_cuda_available = None  # ascendfix: team-probe" in device.read_bytes()
    assert engine.status(sel({"team-probe": "none"}))[0].variant == "none"
    engine.revert(engine.select(Site(profile, None, roots={"verl": stack.verl})))
    assert device.read_bytes() == original


def test_unknown_variant_is_a_usage_error(tmp_path):
    profile = _two_variant_profile(tmp_path)
    with pytest.raises(UsageError, match="team-probe has the variants off, none"):
        manifest.parse_variants(profile, ["team-probe=fast"])


@pytest.mark.parametrize("crash_after_write", [False, True])
def test_an_interrupted_variant_switch_rolls_back_to_the_old_variant(tmp_path, monkeypatch, crash_after_write):
    profile = _two_variant_profile(tmp_path)
    stack = make_stack(tmp_path / "stack")
    device = stack.file("verl", "verl/utils/device.py")
    original = device.read_bytes()

    def sel(variants=None):
        return engine.select(Site(profile, "npu", roots={"verl": stack.verl}, variants=variants))

    engine.apply(sel())
    held = device.read_bytes()
    real_write = tree.Tree.write

    def crash(self, rel, data, mode=None, check=None):
        if self.root / rel == device:
            if crash_after_write:
                real_write(self, rel, data, mode, check)
            raise KeyboardInterrupt  # killed around the write of the switched file
        real_write(self, rel, data, mode, check)

    monkeypatch.setattr(tree.Tree, "write", crash)
    with pytest.raises(KeyboardInterrupt):
        engine.apply(sel({"team-probe": "none"}))
    monkeypatch.setattr(tree.Tree, "write", real_write)
    (status,) = engine.status(sel())
    assert (status.state, status.variant, status.reason) == ("applied", "off", "")
    assert device.read_bytes() == held
    engine.revert(engine.select(Site(profile, None, roots={"verl": stack.verl})))
    assert device.read_bytes() == original


def test_revert_clears_a_stale_record_and_survives_a_lost_backup(stack):
    before = stack.snapshot()
    engine.apply(select(stack))
    device = stack.file("verl", "verl/utils/device.py")
    device.write_bytes(before[("verl", "verl/utils/device.py")] + b"# upgraded\n")  # pip upgraded verl since
    shutil.rmtree(stack.torch / ".ascendfix" / "backup")  # and the torch backups were lost
    result = {s.id: s for s in engine.revert(select(stack, device=None))}
    assert result["verl-cuda-probe-off"].state == "not-applied"
    assert result["torch-global-plan-check"].action == "reverted"
    assert device.read_bytes().endswith(b"# upgraded\n")
    after = stack.snapshot()
    assert {k: v for k, v in after.items() if k[1] != "verl/utils/device.py"} == {
        k: v for k, v in before.items() if k[1] != "verl/utils/device.py"
    }
    assert not (stack.verl / ".ascendfix").exists() and not (stack.torch / ".ascendfix").exists()


@pytest.mark.parametrize("lose_state", [False, True])
def test_the_variant_a_file_holds_sticks_until_another_is_asked_for(tmp_path, lose_state):
    profile = _two_variant_profile(tmp_path)  # the profile's choice is "off"
    stack = make_stack(tmp_path / "stack")
    device = stack.file("verl", "verl/utils/device.py")

    def sel(variants=None):
        return engine.select(Site(profile, "npu", roots={"verl": stack.verl}, variants=variants))

    (chosen,) = engine.apply(sel({"team-probe": "none"}))
    assert (chosen.action, chosen.variant) == ("applied", "none")
    if lose_state:
        shutil.rmtree(stack.verl / ".ascendfix")
    held = device.read_bytes()
    (seen,) = engine.status(sel())
    assert (seen.state, seen.variant, seen.reason_code) == ("applied", "none", None)
    assert "asked for" not in seen.reason
    (again,) = engine.apply(sel())
    assert (again.action, again.variant) == ("unchanged", "none") and device.read_bytes() == held
    (switched,) = engine.apply(sel({"team-probe": "off"}))
    assert (switched.action, switched.variant) == ("switched", "off")


def test_revert_refuses_what_another_profile_recorded_unless_it_can_prove_the_backup(tmp_path):
    team = _two_variant_profile(tmp_path)
    stack = make_stack(tmp_path / "stack")
    before = stack.snapshot()
    engine.apply(engine.select(Site(team, "npu", roots={"verl": stack.verl})))
    patched = stack.snapshot()
    assert patched != before
    results = {s.id: s for s in engine.revert(select(stack, device=None))}  # the bundled profile, not the team's
    refused = results["team-probe"]
    assert refused.action == "refused" and refused.reason.startswith("applied by profile team, not a patch of")
    assert "(revert it with ascendfix revert --profile team)" in refused.reason
    assert stack.snapshot() == patched  # the demo's device.py is no known original: its backup proves nothing
    (own,) = engine.revert(engine.select(Site(team, None, roots={"verl": stack.verl})))  # the team's profile can
    assert own.action == "reverted"
    assert stack.snapshot() == before
    assert not (stack.verl / ".ascendfix").exists()


def test_a_symlinked_file_is_refused_saying_where_it_points_and_what_to_do(stack):
    rel = "verl/utils/device.py"
    path = stack.verl / rel
    real = path.parent / "device_real.py"
    path.rename(real)
    path.symlink_to("device_real.py")  # relative, as a hand-made link often is
    (status,) = [s for s in engine.status(select(stack)) if s.id == "verl-cuda-probe-off"]
    assert (status.state, status.reason_code) == ("drifted", "unreadable")
    assert status.reason == f"{path} is a symbolic link (to device_real.py); refusing to follow it"
    assert status.hint == f"cp --remove-destination {real} {path}  # the file itself in place of the link"
