"""The bundled profile is the deployment guide: every item of tests/guide_items.toml, and nothing unverified.

Each guide item is in the profile with the guide's value, or the profile names the guide's value
and says why it differs. Every env setting names the guide's section or its source; a section a
setting claims must be one the guide list has for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ascendfix.profile import manifest, records

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROFILE = manifest.load_profile("verl-796871d")
ITEMS = tomllib.loads((Path(__file__).parent / "guide_items.toml").read_text())["item"]


def _id(item: dict) -> str:
    what = item.get("name") or item.get("override") or item.get("id") or item.get("role") or item["kind"]
    return f"{item['section']}-{item['kind']}-{what}"


def _differs_on_purpose(guide_value: str | None, why: str, value: str) -> bool:
    return guide_value == value and "guide" in why.lower()


def _pin(c: records.Component) -> str:
    return c.commit or c.tag or c.version or ""


def check_component(item: dict) -> None:
    c = PROFILE.component(item["name"])
    assert c is not None, f"the profile has no component {item['name']}"
    assert c.guide == item["section"]
    same = _pin(c) == item["value"] or (c.commit is not None and c.commit.startswith(item["value"]))
    assert same or _differs_on_purpose(c.guide_value, c.why, item["value"]), (_pin(c), c.guide_value)
    if same:
        assert c.guide_value is None  # no claimed difference where there is none


def check_env(item: dict) -> None:
    var = next((v for v in PROFILE.devices[item["device"]].env if v.name == item["name"]), None)
    assert var is not None, f"{item['name']} is not in devices.{item['device']}.env"
    assert var.guide == item["section"]
    effective = f"{var.value}:${var.name}" if var.prepend else var.value
    assert effective == item["value"] or _differs_on_purpose(var.guide_value, var.why, item["value"])


def check_ulimit(item: dict) -> None:
    device = PROFILE.devices[item["device"]]
    assert (device.ulimit_nofile, device.ulimit_guide) == (item["value"], item["section"])


def check_ray(item: dict) -> None:
    device = PROFILE.devices[item["device"]]
    assert getattr(device, f"ray_{item['role']}") == item["value"] and device.ray_guide == item["section"]


def check_hint(item: dict) -> None:
    hints = [h for h in PROFILE.hints if h.override == item["override"] and item["device"] in h.devices]
    assert hints, f"no hint {item['override']} for {item['device']}"
    assert hints[0].guide == item["section"]


def check_patch(item: dict) -> None:
    assert item["id"] in PROFILE.devices[item["device"]].patches
    if "variant" in item:
        chosen = PROFILE.variant(item["id"])
        assert chosen.name == item["variant"] or (f"guide ({item['section']})" in " ".join(chosen.why.split())), (
            f"{item['id']} takes {chosen.name}, and its why does not say how it differs from the guide"
        )


def check_plugin_overrides(item: dict) -> None:
    for key in item["keys"]:
        assert any(
            key in c.overrides and any(d.module == "verl_npu" and d.importable is False for d in r.when)
            for r in PROFILE.rules
            if item["device"] in r.devices and r.action == "refuse"
            for c in r.when
        ), f"no rule refuses {key} without verl_npu"
        assert any(
            key in c.overrides and any(d.marker == "rl-plugin-import" and d.present is False for d in r.when)
            for r in PROFILE.rules
            if item["device"] in r.devices and r.action == "refuse"
            for c in r.when
        ), f"no rule refuses {key} with verl_npu installed but inactive (no import block in verl)"


def _refusals(device: str):
    return [r for r in PROFILE.rules if device in r.devices and r.action == "refuse"]


def check_device_override(item: dict) -> None:
    key, _, value = item["override"].partition("=")
    assert any(c.overrides == (key,) and c.not_equals == value for r in _refusals(item["device"]) for c in r.when), (
        f"no rule refuses a job whose {key} is not {value}"
    )


def check_command_patch(item: dict) -> None:
    assert any(
        any(item["command"] in c.command for c in r.when)
        and any(c.patch == item["id"] and c.applied is False for c in r.when)
        for r in _refusals(item["device"])
    ), f"no rule refuses {item['command']} while {item['id']} is not applied"


CHECKS = {
    "component": check_component,
    "env": check_env,
    "ulimit": check_ulimit,
    "ray": check_ray,
    "hint": check_hint,
    "patch": check_patch,
    "plugin_overrides": check_plugin_overrides,
    "device_override": check_device_override,
    "command_patch": check_command_patch,
}


@pytest.mark.parametrize("item", ITEMS, ids=[_id(i) for i in ITEMS])
def test_the_profile_has_the_guides_item(item):
    CHECKS[item["kind"]](item)


def test_every_env_setting_is_the_guides_or_names_its_source():
    claimed = {(i["device"], i["name"]): i["section"] for i in ITEMS if i["kind"] == "env"}
    for device in PROFILE.devices.values():
        for var in device.env:
            where = f"devices.{device.name}.env.{var.name}"
            if var.guide is None:
                assert var.source and var.guide is None, f"{where}: beyond the guide without a source"
            else:
                assert claimed.get((device.name, var.name)) == var.guide, f"{where}: the guide has no such item"
                assert var.source is None, f"{where}: a guide setting cites the guide"


def test_every_hint_and_component_names_a_guide_section_the_list_has():
    sections = {(i.get("override") or i.get("name"), i["section"]) for i in ITEMS}
    for hint in PROFILE.hints:
        assert (hint.override, hint.guide) in sections, hint.override
    for c in PROFILE.components:
        assert (c.name, c.guide) in sections, c.name


def test_every_rule_cites_a_source():
    for rule in PROFILE.rules:
        assert rule.source.strip() and rule.why.strip() and rule.action in ("refuse", "warn")


def test_the_guides_h100_run_patches_nothing_and_neither_does_cuda():
    assert PROFILE.devices["cuda"].patches == ()  # 3.4 is stock verl and torch; 4.2 compares against it
    assert not any(v.guide for v in PROFILE.devices["cuda"].env)  # 3.4 exports nothing
    assert PROFILE.devices["cuda"].ulimit_nofile is None


def test_show_marks_what_is_beyond_the_guide_and_what_cuda_patches():
    from ascendfix import cli
    from click.testing import CliRunner

    result = CliRunner().invoke(cli.main, ["show", "verl-796871d"], env={"COLUMNS": "400"})  # one line each
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.strip().startswith("HCCL_CONNECT_TIMEOUT=3600  (guide 3.3.1)") for line in lines)
    assert any(
        line.strip().startswith("HCCL_SOCKET_IFNAME=<set per site>  (guide 3.3.1, the guide has eth0)")
        for line in lines
    )
    cuda = lines[next(i for i, line in enumerate(lines) if line.startswith("cuda:")) :]
    assert any(
        "NCCL_SOCKET_IFNAME=<set per site>  (beyond the guide, source: NCCL documentation" in line for line in cuda
    )
    assert any("actor_rollout_ref.nccl_timeout=1200  (guide 3.4)" in line for line in cuda)
    hint = next(
        i for i, line in enumerate(lines) if "hint: +actor_rollout_ref.rollout.dp_model_parallel_size=8" in line
    )
    assert "2 DP groups of 8 engines each" in lines[hint + 1]  # show has the why the run hint leaves to -v
    assert "  patches: -" in cuda
    assert "  as the guide's H100 run (3.4), which patches nothing: stock verl and torch" in cuda
    assert not any("differs from the guide's stock H100 run" in line for line in cuda)
    assert "ray head:   ray start --head --port 6166 --dashboard-host=0.0.0.0 --dashboard-port=8260 --block" in (
        result.output
    )
    assert "rule expandable-segments-sleep-mode (refuse; npu)" in result.output
