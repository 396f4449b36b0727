"""The bundled patches against real upstream code, downloaded from PyPI at test time (never committed).

Every verl wheel 0.4.0 - 0.9.1 and the two checkpoint-validation files of the torch 2.7.1
aarch64 wheel (the A2's) and of torch 2.14.1 (the list[str] form of _validate_global_plan).
"""

from __future__ import annotations

import pytest
from ascendfix.errors import RefusedError
from ascendfix.patching import engine, evaluate
from ascendfix.profile import manifest
from ascendfix.site import Site

from tests import upstream

pytestmark = pytest.mark.upstream
PROFILE = manifest.load_profile("verl-796871d")
VERL_IDS = [pid for pid, patch in PROFILE.patches.items() if patch.package == "verl"]
TORCH_IDS = [pid for pid, patch in PROFILE.patches.items() if patch.package == "torch"]


def tree_bytes(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*.py"))}


@pytest.mark.parametrize("version", [v for v in upstream.VERL_VERSIONS if not v.startswith("0.4")])
def test_every_verl_release_from_0_5_patches_all_sites_and_roundtrips(version, copy_tree):
    root = copy_tree(upstream.verl_tree(version))
    before = tree_bytes(root)
    selection = engine.select(Site(PROFILE, "npu", roots={"verl": root}), tuple(VERL_IDS))
    result = {s.id: s for s in engine.apply(selection)}
    assert result["verl-cuda-probe-off"].state == "applied"
    assert result["verl-grpo-no-interleave"].state == "applied"
    assert result["verl-dapo-no-interleave"].state == "not-applicable"  # recipe/ is never in the wheel
    trainer = (root / "verl/trainer/ppo/ray_trainer.py").read_text()
    assert (
        trainer.count("interleave=False  # ascendfix: verl-grpo-no-interleave")
        + trainer.count("interleave=False)  # ascendfix: verl-grpo-no-interleave")
        == 3
    )
    assert "interleave=True" not in "".join(
        line for line in trainer.splitlines() if "rollout" in line and ".repeat(" in line
    )
    device = (root / "verl/utils/device.py").read_text()
    assert "is_cuda_available = False  # ascendfix: verl-cuda-probe-off" in device
    assert {s.state for s in engine.status(selection)} == {"applied", "not-applicable"}
    assert {s.action for s in engine.apply(selection)} == {"unchanged", "skipped"}
    engine.revert(engine.select(Site(PROFILE, None, roots={"verl": root}), tuple(VERL_IDS)))
    assert tree_bytes(root) == before


@pytest.mark.parametrize("version", ["0.4.0", "0.4.1"])
def test_verl_0_4_refuses_grpo_cleanly(version, copy_tree):
    root = copy_tree(upstream.verl_tree(version))
    before = tree_bytes(root)
    selection = engine.select(Site(PROFILE, "npu", roots={"verl": root}), tuple(VERL_IDS))
    with pytest.raises(RefusedError, match=r"verl-grpo-no-interleave: drifted: .*expected 3 site\(s\).*found 2"):
        engine.apply(selection)
    assert tree_bytes(root) == before
    grpo_only = engine.select(Site(PROFILE, "npu", roots={"verl": root}), ("verl-cuda-probe-off",))
    assert engine.apply(grpo_only)[0].state == "applied"  # the rest of the profile still applies on its own


def test_verl_0_5_device_py_is_a_known_original():
    root = upstream.verl_tree("0.5.0")
    selection = engine.select(Site(PROFILE, "npu", roots={"verl": root}), ("verl-cuda-probe-off",))
    (status,) = evaluate.statuses(selection)
    assert status.files[0].preimage == "verl 796871d (identical to the 0.5.0 wheel)"


SKIP = {"torch-shard-overlap-check": "skip", "torch-global-plan-check": "skip"}


def test_torch_2_7_1_keeps_validating_by_default_and_skip_is_one_switch_away(copy_tree):
    root = copy_tree(upstream.torch_tree("2.7.1"))
    before = tree_bytes(root)
    selection = engine.select(Site(PROFILE, "npu", roots={"torch": root}), tuple(TORCH_IDS))
    result = engine.apply(selection, strict=True)  # known originals: no warnings, nothing refused
    assert [(s.state, s.variant, s.warnings) for s in result] == [("applied", "fast-validate", ())] * 2
    shards = (root / upstream.SHARD_INTERNALS).read_text()
    planner = (root / upstream.DEFAULT_PLANNER).read_text()
    assert "def _ascendfix_" in shards and "def _ascendfix_" in planner
    assert 'shards.\n    """\n    return  # ascendfix:' not in shards  # the check still runs
    assert "-> bool:\n    return True  # ascendfix:" not in planner

    skip = engine.select(Site(PROFILE, "npu", roots={"torch": root}, variants=SKIP), tuple(TORCH_IDS))
    assert [s.action for s in engine.apply(skip, strict=True)] == ["switched", "switched"]
    shards = (root / upstream.SHARD_INTERNALS).read_text()
    planner = (root / upstream.DEFAULT_PLANNER).read_text()
    assert '        ``ValueError`` if there\'s overlap in any two shards.\n    """\n    return  # ascendfix:' in shards
    assert "-> bool:\n    return True  # ascendfix: torch-global-plan-check\n" in planner
    assert "_ascendfix_" not in shards.replace("# ascendfix:", "")
    assert [s.variant for s in engine.status(skip)] == ["skip", "skip"]
    engine.revert(engine.select(Site(PROFILE, None, roots={"torch": root}), tuple(TORCH_IDS)))
    assert tree_bytes(root) == before


@pytest.mark.parametrize("version", upstream.TORCH_RELEASES)
def test_every_torch_release_is_a_known_original(version):
    """Each release's two files are a preimage labelled with that release (apply --strict takes them)."""
    selection = engine.select(Site(PROFILE, "npu", roots={"torch": upstream.torch_tree(version)}), tuple(TORCH_IDS))
    labels = [s.files[0].preimage for s in evaluate.statuses(selection)]
    assert all(label and version in label.removeprefix("torch ").split(", ") for label in labels), labels


def test_torch_2_14_returns_an_empty_error_list(copy_tree):
    root = copy_tree(upstream.torch_tree("2.14.1"))
    before = tree_bytes(root)
    selection = engine.select(Site(PROFILE, "npu", roots={"torch": root}, variants=SKIP), tuple(TORCH_IDS))
    result = engine.apply(selection, strict=True)  # a known original since the preimages list every release
    assert all(s.state == "applied" and not s.warnings for s in result)
    planner = (root / upstream.DEFAULT_PLANNER).read_text()
    assert "-> list[str]:\n" in planner and "    return []  # ascendfix: torch-global-plan-check\n" in planner
    namespace: dict = {}
    source = planner[planner.index("def _validate_global_plan") :]
    exec(compile(source.split("\n\n\n")[0], "planner", "exec"), namespace)
    assert namespace["_validate_global_plan"](None, None) == []
    engine.revert(engine.select(Site(PROFILE, None, roots={"torch": root}), tuple(TORCH_IDS)))
    assert tree_bytes(root) == before
