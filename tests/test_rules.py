"""The profile's rules for settings that break each other: each refused and accepted, over verl's real defaults.

verl 796871d's rollout default (``free_cache_engine: True``, rollout.yaml line 38) is read from
the verl 0.5.0 wheel on PyPI: its ``verl/trainer/config/rollout/rollout.yaml`` has the same
line 38 (the two files differ only in ``name``, one comment and a later ``agent`` key).
"""

from __future__ import annotations

import zipfile

import pytest
from ascendfix import cli
from ascendfix.errors import UsageError
from ascendfix.job.preflight import run_preflight
from ascendfix.profile import manifest, rules
from ascendfix.site import Site
from click.testing import CliRunner

from tests import upstream
from tests.stack import fake_preflight

PROFILE = manifest.load_profile("verl-796871d")
RULES = {r.id: r for r in PROFILE.rules}
ALLOC = "expandable-segments-sleep-mode"
PLUGIN = "rl-plugin-overrides-need-verl-npu"
DAPO = "dapo-no-interleave-filter-groups"
DEVICE_NPU, DEVICE_CUDA = "trainer-device-npu", "trainer-device-cuda"
INACTIVE = "rl-plugin-inactive"
CONVERTER = "converter-needs-cuda-probe-off"
MAIN_PPO = ["python3", "-m", "verl.trainer.main_ppo", "trainer.device=npu"]
MAIN_DAPO = ["python3", "-m", "recipe.dapo.main_dapo", "trainer.device=npu"]


def facts(mp, verl_npu: bool = True, dapo: str = "applied", block: bool | None = True, probe: str = "applied"):
    """Preflight sees verl_npu importable (or not), the rl-plugin block present (or not, or unknown) and the
    patches applied but for the DAPO and cuda-probe patches' given states; doctor passes."""
    states = {pid: ("applied", "") for pid in PROFILE.devices["npu"].patches}
    states["verl-dapo-no-interleave"] = (dapo, "")
    states["verl-cuda-probe-off"] = (probe, "")
    fake_preflight(mp, states=states, importable=verl_npu, markers=block)


def preflight_of(argv, environ=None, profile=PROFILE, device="npu", **kw):
    """run's preflight of ``argv`` on ``device`` with the stack's :func:`facts`."""
    with pytest.MonkeyPatch.context() as mp:
        facts(mp, **kw)
        return run_preflight(Site(profile, device, environ=environ or {}), argv)


def refusals(argv, environ, **kw) -> list[str]:
    """Each problem as run shows it: its message, and its fix on a line of its own."""
    return [p.message + (f"\nfix: {p.fix}" if p.fix else "") for p in preflight_of(argv, environ, **kw).problems]


@pytest.fixture(scope="module")
def rollout_defaults() -> dict[str, tuple[int, str]]:
    """``key: (line, value)`` of the top-level scalars of verl's rollout.yaml, as the 0.5.0 wheel ships it."""
    with zipfile.ZipFile(upstream.verl_wheel("0.5.0")) as zf:
        text = zf.read("verl/trainer/config/rollout/rollout.yaml").decode()
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        key, sep, value = line.partition(":")
        if sep and line[:1].isalpha() and value.strip():
            found[key] = (number, value.split("#")[0].strip())
    return found


@pytest.mark.upstream
def test_the_sleep_mode_rule_takes_verls_own_default(rollout_defaults):
    line, value = rollout_defaults["free_cache_engine"]
    assert (line, value) == (38, "True")  # the line the rule's source cites
    [cond] = [c for c in RULES[ALLOC].when if c.overrides]
    assert cond.overrides == ("actor_rollout_ref.rollout.free_cache_engine",)
    assert cond.default == value
    assert "rollout.yaml:38" in RULES[ALLOC].source and "camem.py:148" in RULES[ALLOC].source


@pytest.mark.upstream
def test_expandable_segments_with_sleep_mode_is_refused(rollout_defaults):
    argv = MAIN_PPO  # free_cache_engine left to verl
    env = {"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"}  # the user's export
    [problem] = refusals(argv, env)
    assert problem.startswith(f"{ALLOC}: PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True; ")
    assert f"free_cache_engine unset (default {rollout_defaults['free_cache_engine'][1]})" in problem
    assert "fix: drop expandable_segments:True" in problem
    explicit = refusals([*argv, "actor_rollout_ref.rollout.free_cache_engine=true"], env)
    assert len(explicit) == 1 and "free_cache_engine=true" in explicit[0]


def test_expandable_segments_is_accepted_without_sleep_mode_or_without_the_setting():
    argv = MAIN_PPO
    env = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert refusals([*argv, "actor_rollout_ref.rollout.free_cache_engine=False"], env) == []
    assert refusals(argv, {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False"}) == []
    assert refusals(argv, {}) == []  # the bundled profile no longer sets it


def test_the_profile_no_longer_exports_expandable_segments():
    assert all(v.name != "PYTORCH_NPU_ALLOC_CONF" for d in PROFILE.devices.values() for v in d.env)


@pytest.mark.parametrize(
    "override",
    ["+actor_rollout_ref.rollout.dp_model_parallel_size=8", "+actor_rollout_ref.rollout.enable_expert_parallel=True"],
)
def test_rl_plugin_overrides_without_verl_npu_are_refused_naming_the_install(override):
    [problem] = refusals([*MAIN_PPO, override], {}, verl_npu=False)
    assert problem.startswith(f"{PLUGIN}: ") and "verl_npu not importable" in problem
    assert "MindSpeed-RL.git && git -C MindSpeed-RL checkout a6ce810b5d8f1f8aac10a67647cca99ae30090ec && " in problem
    assert "-b 2.2.0" not in problem  # a branch moves: the pin is its commit
    assert 'find_spec("verl").origin)))\') pip install -v .' in problem and "import os, verl" not in problem


def test_rl_plugin_overrides_with_verl_npu_or_without_the_overrides_are_accepted():
    argv = [*MAIN_PPO, "+actor_rollout_ref.rollout.dp_model_parallel_size=8"]
    assert refusals(argv, {}, verl_npu=True) == []
    assert refusals(MAIN_PPO, {}, verl_npu=False) == []
    assert refusals(MAIN_PPO, {}, verl_npu=True, block=False) == []  # no plugin override: nothing needs it


def test_an_installed_but_inactive_rl_plugin_is_refused_naming_verl_path():
    argv = [*MAIN_PPO, "+actor_rollout_ref.rollout.enable_expert_parallel=True"]
    [problem] = refusals(argv, {}, verl_npu=True, block=False)
    assert problem.startswith(
        f"{INACTIVE}: actor_rollout_ref.rollout.enable_expert_parallel=True; verl_npu importable; "
    )
    assert "verl's __init__.py lacks the rl-plugin's import verl_npu block" in problem
    assert "fix: cd MindSpeed-RL/rl-plugin && VERL_PATH=$(python -c 'import importlib.util, os;" in problem
    assert "setup.py:16-17" in problem  # VERL_PATH is the folder that holds verl/
    assert "A source-installed verl is found" in problem and "an editable verl is in neither" not in problem
    [unknown] = [h.message for h in preflight_of(argv, block=None).hints if INACTIVE in h.message]
    assert unknown.startswith(f"rule {INACTIVE} not checked")


def test_the_trainer_device_must_be_the_devices_own():
    bare = ["python3", "-m", "verl.trainer.main_ppo"]
    [problem] = refusals(bare, {})
    assert problem.startswith(
        f"{DEVICE_NPU}: trainer.device unset (default cuda): verl's default trainer.device is cuda"
    )
    assert "ppo_megatron_trainer.yaml:119" in problem and "fix: pass trainer.device=npu" in problem
    assert refusals([*bare, "trainer.device=cuda"], {})[0].startswith(f"{DEVICE_NPU}: trainer.device=cuda")
    assert refusals([*bare, "trainer.device=npu"], {}) == []
    on_cuda = preflight_of(bare, device="cuda").problems
    assert on_cuda == []  # the guide's H100 script leaves it to verl's default
    [wrong] = preflight_of([*bare, "trainer.device=npu"], device="cuda").problems
    assert wrong.message.startswith(f"{DEVICE_CUDA}: trainer.device=npu")


def test_verls_override_rules_do_not_apply_to_a_command_that_runs_no_verl_trainer(tmp_path):
    other = ["python3", "tools/eval.py", "algorithm.filter_groups.enable=True"]  # no trainer.device either
    result = preflight_of(other)
    assert result.problems == [] and result.trainer is False
    assert [h.message for h in result.hints if h.source == "overrides"] == [
        "the command runs none of verl.trainer.main_ppo, recipe.dapo.main_dapo: "
        "the rules and hints about its overrides are skipped"
    ]
    script = tmp_path / "train.sh"
    script.write_text(
        "cd /src/verl\npython3 /src/verl/recipe/dapo/main_dapo.py \\\n  algorithm.filter_groups.enable=True\n"
    )
    dapo = preflight_of(["bash", str(script)])
    assert dapo.trainer is True
    assert sorted(p.message.split(":")[0] for p in dapo.problems) == [DAPO, DEVICE_NPU]


def test_the_converter_needs_the_cuda_probe_patch_as_the_guides_5_1_says():
    argv = ["python", "scripts/converter_hf_to_mcore.py", "--hf_model_path", "/w/Qwen3-235B-A22B"]
    [problem] = refusals(argv, {}, probe="not-applied")
    assert problem.startswith(
        f"{CONVERTER}: the command runs scripts/converter_hf_to_mcore.py; verl-cuda-probe-off is not-applied: "
    )
    assert "5.1" in problem and "fix: ascendfix apply --only verl-cuda-probe-off" in problem
    assert refusals(argv, {}) == []  # applied: nothing else is asked of the converter (no trainer.device)
    assert refusals(["python", "/src/verl/scripts/converter_hf_to_mcore.py"], {}, probe="drifted")
    assert preflight_of(argv, device="cuda", probe="not-applied").problems == []  # the NPU's fix


def test_dapo_rule_accepts_filter_groups_off_and_the_patch_reverted():
    argv = MAIN_DAPO
    assert refusals([*argv, "algorithm.filter_groups.enable=False"], {}) == []
    assert refusals(argv, {}) == []  # dapo_trainer.yaml:23 enable: False
    assert refusals([*argv, "algorithm.filter_groups.enable=True"], {}, dapo="not-applied") == []
    assert refusals([*argv, "algorithm.filter_groups.enable=True"], {})[0].startswith(f"{DAPO}: ")


def test_evaluator_is_plain_data_and_leaves_unknown_facts_undecided():
    facts = rules.Facts(env={}, overrides={"algorithm.filter_groups.enable": "True"}, importable=None)
    outcome = rules.evaluate(PROFILE.rules, facts, "npu")
    # patch states, the command and modules unknown: doctor's view
    assert outcome.hits == [] and outcome.undecided == [DEVICE_NPU, CONVERTER, DAPO]
    facts = rules.Facts(env={}, overrides={"actor_rollout_ref.rollout.enable_expert_parallel": "True"})
    assert rules.evaluate(PROFILE.rules, facts, "npu").undecided == [DEVICE_NPU, PLUGIN, INACTIVE, CONVERTER]
    assert rules.evaluate(PROFILE.rules, facts, "cuda").undecided == [DEVICE_CUDA]  # the others are NPU-only
    assert rules.modules(PROFILE.rules) == ["verl", "verl_npu"]
    assert rules.markers(PROFILE.rules) == [("verl", "rl-plugin-import")]
    assert rules.commands(PROFILE.rules) == ["scripts/converter_hf_to_mcore.py"]


def test_a_warn_rule_is_a_hint_not_a_problem(tmp_path):
    text = PROFILE.source.read_text().replace(
        'action = "refuse"\ndevices = ["npu"]\nwhy = "vllm', 'action = "warn"\ndevices = ["npu"]\nwhy = "vllm'
    )
    path = tmp_path / "warn.toml"
    path.write_text(text)
    prof = manifest.load_profile(str(path))
    result = preflight_of(MAIN_PPO, {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}, profile=prof)
    assert result.problems == []
    assert any(h.source == "rules" and h.message.startswith(ALLOC) for h in result.hints)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'action = "refuse"\ndevices = ["npu"]\nwhy = "vllm',
            'action = "deny"\ndevices = ["npu"]\nwhy = "vllm',
            r"rules\[0\]\.action: unknown action 'deny'",
        ),
        (
            'contains = "expandable_segments:True"',
            'contains = "expandable_segments:True"\nmatches = "x"',
            r"rules\[0\]\.when\[0\]\.matches: unknown key for a env condition",
        ),
        (
            'module = "verl_npu"\nimportable = false',
            'module = "verl_npu"\nstate = "applied"',
            r"rules\[3\]\.when\[1\]\.state: unknown key for a module condition",
        ),
        (
            'patch = "verl-dapo-no-interleave"',
            'patch = "verl-no-such-patch"',
            r"rules\[6\]\.when\[0\]\.patch: 'verl-no-such-patch' is not a patch of this profile",
        ),
        (
            'marker = "rl-plugin-import"',
            'marker = "rl-plugin-imports"',
            r"rules\[4\]\.when\[2\]\.marker: unknown marker 'rl-plugin-imports' \(known: rl-plugin-import\)",
        ),
        (
            'command = "scripts/converter_hf_to_mcore.py"',
            'command = "scripts/converter_hf_to_mcore.py"\ndefault = "x"',
            r"rules\[5\]\.when\[0\]\.default: unknown key for a command condition \(allowed: none\)",
        ),
        (
            'id = "dapo-no-interleave-filter-groups"',
            'id = "expandable-segments-sleep-mode"',
            r"rules: two rules have the same id",
        ),
        ('source = "verl PR #3760', 'sauce = "verl PR #3760', r"rules\[6\]\.source: missing required field"),
        ('state = "applied"', 'state = "aplied"', r"rules\[6\]\.when\[0\]\.state: unknown state 'aplied'"),
    ],
)
def test_bad_rules_name_file_and_field_and_exit_2(tmp_path, old, new, message):
    text = PROFILE.source.read_text()
    assert text.count(old) == 1
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(old, new))
    with pytest.raises(UsageError, match=r"bad\.toml: " + message):
        manifest.load_profile(str(path))
    result = CliRunner().invoke(cli.main, ["show", str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_doctor_hazards_enforces_the_rules_over_the_effective_environment():
    from ascendfix.doctor import host
    from ascendfix.doctor.context import Context

    bad = Context(Site(PROFILE, "npu", environ={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}), "test")
    result = host.check_hazards(bad)
    assert result.status == "fail" and result.messages[0].startswith(f"{ALLOC}: PYTORCH_NPU_ALLOC_CONF=")
    assert "camem.py:148" in result.details[1] and result.fix.startswith("drop expandable_segments:True")
    fine = host.check_hazards(Context(Site(PROFILE, "npu", environ={}), "test"))
    assert fine.status == "ok" and "7 rule(s) of the profile hold" in fine.messages[-1]
    # doctor sees no command: trainer.device, which only the job's command sets, is not judged on verl's default
    assert not any(DEVICE_NPU in m for m in fine.messages)


def test_a_team_profile_that_drops_a_patch_drops_the_inherited_rule_about_it(tmp_path):
    path = tmp_path / "team.toml"
    path.write_text(
        'extends = "verl-796871d"\nname = "team"\n[devices.npu]\ndrop_patches = ["verl-dapo-no-interleave"]\n'
    )
    team = manifest.load_profile(str(path))
    assert [r.id for r in team.rules] == [ALLOC, DEVICE_NPU, DEVICE_CUDA, PLUGIN, INACTIVE, CONVERTER]


def test_the_site_locates_modules_without_importing_them():
    found = Site(PROFILE, "npu").importable(["json", "no_such_module_xyz"])
    assert found == {"json": True, "no_such_module_xyz": False}


def test_cli_run_refuses_the_users_expandable_segments_export(tmp_path, monkeypatch):

    facts(monkeypatch)
    script = tmp_path / "train.sh"
    script.write_text("echo should-not-run\necho python3 -m verl.trainer.main_ppo trainer.device=npu\n")
    args = ["run", "--device", "npu", "--log-dir", str(tmp_path / "logs"), str(script)]
    result = CliRunner().invoke(cli.main, args, env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert result.exit_code == 1
    assert "problem (rules): expandable-segments-sleep-mode: PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in (
        " ".join(result.output.split())
    )
    assert "should-not-run" not in result.output
    fine = CliRunner().invoke(cli.main, ["run", "--no-preflight", *args[1:]], env={"PYTORCH_NPU_ALLOC_CONF": ""})
    assert fine.exit_code == 0 and "should-not-run" in (tmp_path / "logs" / "train.log").read_text()
