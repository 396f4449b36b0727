"""The profile's and the patches' reasons say what the pinned upstream sources do, each with its source."""

from __future__ import annotations

import zipfile

import pytest
from ascendfix.profile import manifest, records, rl_plugin

from tests import upstream

PROFILE = manifest.load_profile("verl-796871d")


def flat(text: str) -> str:
    return " ".join(text.split())


def env(device: str, name: str) -> records.EnvVar:
    return next(v for v in PROFILE.devices[device].env if v.name == name)


def test_the_hdk_keeps_the_guides_value_and_names_cann_8_3s_own_hdk():
    hdk = PROFILE.component("hdk")
    assert hdk.version == "25.2.0" and hdk.guide_value is None
    why = flat(hdk.why)
    assert "released with HDK 25.3.RC1" in why and "verl_docker.md:11-12" in why
    assert "CANN_8.2.RC1.json" in why  # 25.2.0 is 8.2.RC1's HDK, not 8.3.RC1's
    assert "released against" not in why


def test_the_dapo_revert_is_cited_for_what_it_says_and_the_reason_for_its_review():
    rule = next(r for r in PROFILE.rules if r.id == "dapo-no-interleave-filter-groups")
    assert "gives no reason" in rule.why and "review of #3760" in rule.why
    assert "for this reason" not in rule.why
    patch = PROFILE.patches["verl-dapo-no-interleave"]
    assert any("its review" in r for r in patch.references)
    assert not any("reverted a day later for" in r for r in patch.references)


def test_tensordict_says_the_rl_plugin_patches_sync_all_too():
    assert "verl_npu/plugin.py:38-59" in flat(PROFILE.component("tensordict").why)
    assert "tensordict's _sync_all (verl_npu/plugin.py:38-59)" in flat(PROFILE.component("mindspeed_rl").why)


@pytest.mark.parametrize("device", ["npu", "cuda"])
def test_cuda_device_max_connections_says_verl_sets_it_for_its_workers(device):
    var = env(device, "CUDA_DEVICE_MAX_CONNECTIONS")
    assert "constants_ppo.py:23" in flat(var.why) + flat(var.source or "")
    assert var.value == "1"


def test_the_cuda_probe_patch_is_the_converters_fix_not_main_ppos():
    why = flat(PROFILE.patches["verl-cuda-probe-off"].why)
    assert "converter_hf_to_mcore.py" in why and "5.1" in why
    assert "already False there" in why  # main_ppo evaluates it before MindSpeed is imported


def test_the_platform_lever_is_huawei_not_npu():
    patch = PROFILE.patches["verl-cuda-probe-off"]
    assert patch.superseded.fix == "export VERL_PLATFORM=huawei"
    assert "VERL_PLATFORM=huawei" in patch.superseded.why and "VERL_PLATFORM=npu" not in flat(patch.drop_when)


@pytest.mark.upstream
def test_verl_0_9_registers_the_ascend_platform_as_huawei():
    with zipfile.ZipFile(upstream.verl_wheel("0.9.0")) as zf:
        text = zf.read("verl/plugin/platform/platform_npu.py").decode()
    assert text.splitlines()[36] == '@PlatformRegistry.register(platform="huawei")'  # line 37


@pytest.mark.parametrize("pid", ["torch-shard-overlap-check", "torch-global-plan-check"])
def test_ckpt_acceleration_is_named_absent_at_the_pinned_mindspeed(pid):
    assert "absent at 1cdd0abd" in flat(PROFILE.patches[pid].drop_when)


def test_vllms_rl_plugin_edits_are_not_expected_with_an_editable_vllm():
    vllm = PROFILE.component("vllm")
    assert vllm.editable and "makes none of its vllm edits and doctor expects none" in flat(vllm.why)
    assert "never with the profile's editable vllm" in flat(PROFILE.component("mindspeed_rl").why)
    assert rl_plugin.FP8_UTILS not in rl_plugin.REQUIRED and rl_plugin.FUSED_MOE not in rl_plugin.REQUIRED
