"""Preflight: overrides read from the script, hints, refusals, and the manifest's [[hints]]."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from ascendfix import cli
from ascendfix.errors import UsageError
from ascendfix.job import preflight
from ascendfix.job.preflight import run_preflight, scan_overrides
from ascendfix.profile import manifest, records
from ascendfix.site import Site
from click.testing import CliRunner

from tests.stack import fake_preflight

PROFILE = manifest.load_profile("verl-796871d")


def preflight_of(argv, environ=None, profile=PROFILE, device="npu", **facts):
    """run's preflight of ``argv`` with the stack's facts as given (every patch applied, doctor passing)."""
    with pytest.MonkeyPatch.context() as mp:
        fake_preflight(mp, **facts)
        return run_preflight(Site(profile, device, environ=environ or {}), argv)


def write_script(tmp_path, body: str):
    path = tmp_path / "train.sh"
    path.write_text(textwrap.dedent(body))
    return path


def test_scan_reads_continuations_variables_defaults_and_quotes(tmp_path):
    script = write_script(
        tmp_path,
        """\
        #!/bin/bash
        set -x
        export NNODES=16
        train_prompt_bsz=128  # prompts per step
        n_resp_per_prompt=16
        # algorithm.filter_groups.enable=True  (commented out: must not count)
        python3 -m verl.trainer.main_ppo \\
            data.train_batch_size=${train_prompt_bsz} \\
            actor_rollout_ref.rollout.n=$n_resp_per_prompt \\
            trainer.nnodes="$NNODES" \\
            trainer.val_before_train=${VAL:-False} \\
            'trainer.logger=["console","tensorboard"]' \\
            +actor_rollout_ref.actor.megatron.override_transformer_config.moe_router_dtype=fp32 \\
            trainer.total_training_steps=${STEPS} \\
            "$@"
        """,
    )
    overrides = scan_overrides(["bash", str(script), "trainer.n_gpus_per_node=8"], {"STEPS": "300"})
    assert overrides == {
        "data.train_batch_size": "128",
        "actor_rollout_ref.rollout.n": "16",
        "trainer.nnodes": "16",
        "trainer.val_before_train": "False",
        "trainer.logger": '["console","tensorboard"]',
        "actor_rollout_ref.actor.megatron.override_transformer_config.moe_router_dtype": "fp32",
        "trainer.total_training_steps": "300",
        "trainer.n_gpus_per_node": "8",
    }
    assert preflight.total_steps(overrides) == 300


def test_a_command_without_a_script_is_scanned_from_its_arguments():
    argv = ["python3", "-m", "verl.trainer.main_ppo", "algorithm.filter_groups.enable=True", "FOO=bar"]
    assert scan_overrides(argv, {}) == {"algorithm.filter_groups.enable": "True"}


def test_hints_name_missing_or_different_overrides_and_never_refuse(tmp_path):
    script = write_script(
        tmp_path,
        "python3 -m verl.trainer.main_ppo trainer.device=npu trainer.val_before_train=True data.train_batch_size=100\n",
    )
    result = preflight_of(["bash", str(script)])
    assert result.problems == []
    messages = [h.message for h in result.hints]
    assert "consider trainer.val_before_train=False (guide 6.3)" in messages
    assert "consider actor_rollout_ref.rollout.n=16 (guide 3.3.2)" in messages
    assert "consider data.train_batch_size=128 (guide 3.3.2)" in messages  # set, but not to 128
    assert not any("nccl_timeout" in m for m in messages)  # an H100 (3.4) hint is not the NPU's
    why = next(h.detail for h in result.hints if h.message.startswith("consider trainer.val_before_train"))
    assert why.startswith("Validating Qwen3-235B-A22B before step 1 is a full rollout")


def test_hints_are_the_guides_pasteable_overrides_with_its_plus(tmp_path):
    script = write_script(tmp_path, "python3 -m verl.trainer.main_ppo trainer.device=npu\n")
    result = preflight_of(["bash", str(script)])
    hints = {h.message: h.detail for h in result.hints if h.source == "overrides"}
    assert "consider +actor_rollout_ref.rollout.enable_expert_parallel=True (guide 3.3.2)" in hints
    dp = hints["consider +actor_rollout_ref.rollout.dp_model_parallel_size=8 (guide 3.3.2)"]
    assert "2 DP groups of 8" in dp and "vllm_rollout_spmd.py" in dp
    tp = hints["consider actor_rollout_ref.rollout.tensor_model_parallel_size=8 (guide 3.3.2)"]
    assert "2 DP groups of 8 engines" in tp
    assert all("\n" not in m and len(m) < 100 for m in hints)  # one short line each; the why is -v's
    given = write_script(
        tmp_path, "python3 -m verl.trainer.main_ppo +actor_rollout_ref.rollout.enable_expert_parallel=True\n"
    )
    again = preflight_of(["bash", str(given)])
    assert not any("enable_expert_parallel" in h.message for h in again.hints)  # the + form counts as set


def test_batch_size_hints():
    overrides = {
        "data.train_batch_size": "100",
        "actor_rollout_ref.rollout.n": "3",
        "actor_rollout_ref.actor.ppo_mini_batch_size": "32",
        "trainer.nnodes": "16",
        "trainer.n_gpus_per_node": "8",
    }
    hints = preflight.batch_size_hints(overrides)
    assert len(hints) == 2
    assert "300 samples do not split evenly over megatron_dp 128 = 128" in hints[1]
    good = dict(overrides, **{"data.train_batch_size": "128", "actor_rollout_ref.rollout.n": "16"})
    assert preflight.batch_size_hints(good) == []


@pytest.mark.parametrize("value", ["True", "true", "'True'", "1"])
def test_dapo_patch_with_filter_groups_is_refused_naming_both(value):
    argv = ["python3", "-m", "recipe.dapo.main_dapo", "trainer.device=npu", f"algorithm.filter_groups.enable={value}"]
    [problem] = preflight_of(argv).problems
    assert problem.source == "rules" and problem.message.startswith("dapo-no-interleave-filter-groups: ")
    assert "verl-dapo-no-interleave is applied" in problem.message and "PR #3770" in problem.message
    assert f"algorithm.filter_groups.enable={value}" in problem.message


def test_filter_groups_without_the_dapo_patch_is_fine():
    states = {pid: ("applied", "") for pid in PROFILE.devices["npu"].patches}
    states["verl-dapo-no-interleave"] = ("not-applicable", "recipe/ ships only in a checkout")
    argv = ["python3", "-m", "recipe.dapo.main_dapo", "trainer.device=npu", "algorithm.filter_groups.enable=True"]
    assert preflight_of(argv, states=states).problems == []


def test_doctor_failures_and_bad_patch_states_are_problems():
    states = {pid: ("applied", "") for pid in PROFILE.devices["npu"].patches}
    states.update({"verl-cuda-probe-off": ("not-applied", ""), "torch-shard-overlap-check": ("drifted", "x.py gone")})
    problems = preflight_of(["true"], doctor=["CANN 8.1.RC1 found, profile pins 8.3.RC1"], states=states).problems
    assert [p.source for p in problems] == ["doctor", "patches", "patches"]
    assert "verl-cuda-probe-off is not applied" in problems[1].message
    assert "torch-shard-overlap-check is drifted (x.py gone)" in problems[2].message


def test_unknown_seams_are_hints_not_problems():
    result = preflight_of(["true"], doctor=None, states=None)
    assert result.problems == []
    assert {h.source for h in result.hints} >= {"doctor", "patches"}


def test_cli_run_refuses_with_the_reasons_and_exit_1(tmp_path, monkeypatch):
    fake_preflight(monkeypatch)
    script = write_script(
        tmp_path,
        "echo should-not-run\n"
        "python3 -m recipe.dapo.main_dapo trainer.device=npu algorithm.filter_groups.enable=True\n",
    )
    result = CliRunner().invoke(cli.main, ["run", "--device", "npu", "--log-dir", str(tmp_path / "logs"), str(script)])
    assert result.exit_code == 1
    assert "verl-dapo-no-interleave" in result.output and "algorithm.filter_groups.enable=True" in result.output
    assert "preflight found 1 problem(s)" in result.output and "should-not-run" not in result.output
    assert not (tmp_path / "logs").exists()


def write_manifest(tmp_path, hints: str):
    base = PROFILE.source.read_text().split("# Hydra overrides of the guide")[0]
    path = tmp_path / "m.toml"
    path.write_text(base + hints)
    return path


def test_manifest_hints_are_validated_strictly(tmp_path):
    ok = write_manifest(tmp_path, '[[hints]]\noverride = "trainer.nnodes"\nwhy = "x"\n')
    assert manifest.load_profile(str(ok)).hints == (records.Hint("trainer.nnodes", "x"),)
    bad_key = write_manifest(tmp_path, '[[hints]]\noverride = "trainer.nnodes=2"\nwhy = "x"\nreason = "y"\n')
    with pytest.raises(UsageError, match=r"m\.toml: hints\[0\]\.reason: unknown key"):
        manifest.load_profile(str(bad_key))
    bad_override = write_manifest(tmp_path, '[[hints]]\noverride = "nnodes 2"\nwhy = "x"\n')
    with pytest.raises(UsageError, match=r"hints\[0\]\.override: 'nnodes 2' is not a Hydra override"):
        manifest.load_profile(str(bad_override))
    no_why = write_manifest(tmp_path, '[[hints]]\noverride = "a.b=1"\n')
    with pytest.raises(UsageError, match=r"hints\[0\]\.why: missing required field"):
        manifest.load_profile(str(no_why))


def test_bundled_profile_carries_the_guides_hints():
    assert "trainer.val_before_train=False" in [h.override for h in PROFILE.hints]


def test_cli_run_reads_the_real_patch_status_from_the_engine(tmp_path, monkeypatch):
    from ascendfix.patching import engine

    from tests.stack import DEMO_PROFILE, make_stack

    stack = make_stack(tmp_path / "stack")
    select = engine.select
    monkeypatch.setattr(
        engine, "select", lambda site, only=(): select(Site(site.profile, site.device, roots=stack.roots()), only)
    )
    engine.apply(engine.select(Site(DEMO_PROFILE, "npu")))
    script = write_script(
        tmp_path,
        "echo launched\n"
        "echo python3 -m recipe.dapo.main_dapo trainer.device=npu algorithm.filter_groups.enable=${FILTER}\n",
    )
    args = ["run", "--device", "npu", "--log-dir", str(tmp_path / "logs"), str(script)]
    refused = CliRunner().invoke(cli.main, args, env={"FILTER": "True"})
    assert refused.exit_code == 1 and "verl-dapo-no-interleave is applied" in refused.output
    engine.revert(select(Site(DEMO_PROFILE, "npu", roots=stack.roots()), ("verl-dapo-no-interleave",)))
    # the real engine; doctor passing
    monkeypatch.setattr(preflight, "doctor_failures", lambda site, overrides=None: [])
    result = run_preflight(Site(DEMO_PROFILE, "npu", environ={"FILTER": "True"}), ["bash", str(script)])
    assert result.problems == []  # the DAPO patch reverted, as filter_groups needs: nothing to refuse
    assert "verl-dapo-no-interleave is not applied, as rule dapo-no-interleave-filter-groups requires" in str(
        result.hints
    )
    result = run_preflight(Site(DEMO_PROFILE, "npu", environ={"FILTER": "False"}), ["bash", str(script)])
    [(message, fix)] = [(p.message, p.fix) for p in result.problems]  # the fix is data, apart from the message
    assert message == "patch verl-dapo-no-interleave is not applied"
    assert fix.startswith("ascendfix apply --profile ") and fix.endswith(" --device npu")
    launched = CliRunner().invoke(cli.main, ["run", "--no-preflight", *args[1:]], env={"FILTER": "False"})
    assert launched.exit_code == 0, launched.output
    assert (tmp_path / "logs" / "train.log").read_text().startswith("launched")


def test_default_preflight_asks_the_real_doctor(tmp_path):
    if Path("/usr/local/Ascend").exists():
        pytest.skip("this machine has an Ascend stack")
    script = write_script(tmp_path, "echo python3 x.py trainer.val_before_train=False\n")
    result = run_preflight(Site(PROFILE, "npu", environ={}), ["bash", str(script)])
    doctor = [p.message for p in result.problems if p.source == "doctor"]
    assert any(m.startswith("CANN toolkit: no Ascend stack found") for m in doctor)
    assert not any(m.startswith(("Runtime environment", "Patches")) for m in doctor)  # run handles those itself


def test_cli_run_hints_are_one_line_and_minus_v_adds_the_why(tmp_path, monkeypatch):
    fake_preflight(monkeypatch)
    script = write_script(tmp_path, "echo python3 -m verl.trainer.main_ppo trainer.device=npu\n")
    args = ["run", "--device", "npu", "--log-dir", str(tmp_path / "logs"), str(script)]
    plain = CliRunner().invoke(cli.main, args, terminal_width=200)
    lines = plain.output.splitlines()
    at = lines.index("hint (overrides): consider trainer.val_before_train=False (guide 6.3)")
    assert lines[at + 1].startswith("hint")
    verbose = CliRunner().invoke(cli.main, ["run", "-v", *args[1:]], terminal_width=200).output.splitlines()
    at = verbose.index("hint (overrides): consider trainer.val_before_train=False (guide 6.3)")
    assert verbose[at + 1].strip().startswith("Validating Qwen3-235B-A22B before step 1 is a full rollout")


DAPO_FILTER = "trainer.device=npu algorithm.filter_groups.enable=True"


def test_an_unapplied_patch_is_blamed_only_on_a_rule_that_refuses_because_of_it(tmp_path):
    """The rl-plugin rule refuses with or without the torch patch: the patch is a problem of its own, not a
    choice that rule made; the DAPO rule refuses only once its patch is applied: that one is the reason."""
    states = {pid: ("applied", "") for pid in PROFILE.devices["npu"].patches}
    states["torch-shard-overlap-check"] = ("not-applied", "")
    script = write_script(
        tmp_path,
        "python3 -m verl.trainer.main_ppo trainer.device=npu +actor_rollout_ref.rollout.dp_model_parallel_size=2\n",
    )
    result = preflight_of(["bash", str(script)], states=states, importable=False)
    problems = [p.message for p in result.problems]
    assert "patch torch-shard-overlap-check is not applied" in problems
    assert next(p for p in result.problems if p.message == "patch torch-shard-overlap-check is not applied").fix
    assert any(m.startswith("rl-plugin-overrides-need-verl-npu: ") for m in problems)  # refused either way
    assert not any("as rule" in h.message for h in result.hints)

    states["verl-dapo-no-interleave"] = ("not-applied", "")
    dapo = write_script(tmp_path, f"python3 -m recipe.dapo.main_dapo {DAPO_FILTER}\n")
    hints = [h.message for h in preflight_of(["bash", str(dapo)], states=states).hints]
    assert "verl-dapo-no-interleave is not applied, as rule dapo-no-interleave-filter-groups requires" in hints


def test_a_hand_edited_patch_is_in_effect_for_the_rules_and_a_hint_to_adopt(tmp_path):
    states = {pid: ("applied", "") for pid in PROFILE.devices["npu"].patches}
    states["verl-dapo-no-interleave"] = ("hand-edited", "hand-edited (the guide's 7.2): recipe/dapo/...")
    dapo = write_script(tmp_path, f"python3 -m recipe.dapo.main_dapo {DAPO_FILTER}\n")
    result = preflight_of(["bash", str(dapo)], states=states)
    assert any("verl-dapo-no-interleave is hand-edited" in p.message for p in result.problems)  # the DAPO rule
    dapo.write_text(dapo.read_text().replace("enable=True", "enable=False"))
    result = preflight_of(["bash", str(dapo)], states=states)
    assert result.problems == []
    adopt = next(h for h in result.hints if h.source == "patches")
    assert adopt.message == "patch verl-dapo-no-interleave: hand-edited (the guide's 7.2): recipe/dapo/..."
    assert adopt.fix.startswith("ascendfix apply ")
