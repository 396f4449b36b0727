"""cuda is the guide's stock H100 run; run.json records what each run ran, and compare says it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from ascendfix import cli
from ascendfix.job import launch
from ascendfix.profile import manifest
from ascendfix.site import Site
from click.testing import CliRunner

from tests.stack import fake_preflight
from tests.verl_lines import RAY_PREFIX, run_steps, step_line

PROFILE = manifest.load_profile("verl-796871d")
README = Path(__file__).resolve().parent.parent / "docs" / "explanation" / "profile.md"


def applied(profile, device):
    return {pid: ("applied", "") for pid in profile.devices[device].patches}


def test_the_h100_side_patches_nothing_by_default():
    assert PROFILE.devices["cuda"].patches == ()  # the guide's 3.4 run: stock verl and torch


def test_the_docs_same_code_profile_adds_the_four_patches_on_cuda(tmp_path):
    text = README.read_text()
    section = text[text.index("## Comparing with the H100 run") :]
    block = re.search(r"```toml\n(.*?)```", section, re.DOTALL).group(1)
    path = tmp_path / "same-code.toml"
    path.write_text(block)
    team = manifest.load_profile(str(path))
    assert team.devices["cuda"].patches == (
        "torch-shard-overlap-check",
        "torch-global-plan-check",
        "verl-grpo-no-interleave",
        "verl-dapo-no-interleave",
    )
    assert team.devices["npu"].patches == PROFILE.devices["npu"].patches
    assert team.variant("torch-shard-overlap-check").name == "fast-validate"


def write_run(folder: Path, device: str, states, variants=None) -> Path:
    argv = ["python3", "-m", "verl.trainer.main_ppo", f"trainer.device={device}"]
    with pytest.MonkeyPatch.context() as mp:
        fake_preflight(mp, states=states(PROFILE, device))
        prepared = launch.prepare(Site(PROFILE, device, variants=variants, environ={}), argv)
    launch.begin(prepared, folder)
    log = folder / "train.log"
    log.write_text("".join(f"{RAY_PREFIX}{step_line(n, v)}\n" for n, v in enumerate(run_steps(4), 1)))
    return log


def test_run_json_records_each_patch_its_variant_and_state(tmp_path):
    write_run(tmp_path / "npu", "npu", applied, {"torch-global-plan-check": "skip"})
    record = json.loads((tmp_path / "npu" / "run.json").read_text())
    assert record["patches"][:3] == [
        {"id": "verl-cuda-probe-off", "variant": "default", "state": "applied"},
        {"id": "torch-shard-overlap-check", "variant": "fast-validate", "state": "applied"},
        {"id": "torch-global-plan-check", "variant": "skip", "state": "applied"},
    ]
    write_run(tmp_path / "unknown", "npu", lambda p, d: None)
    unknown = json.loads((tmp_path / "unknown" / "run.json").read_text())["patches"]
    assert {p["state"] for p in unknown} == {None}


def test_compare_says_what_each_side_ran(tmp_path):
    h100 = write_run(tmp_path / "h100", "cuda", applied)
    npu = write_run(tmp_path / "npu", "npu", applied)
    result = CliRunner().invoke(cli.main, ["compare", str(h100), str(npu), "--json"])
    assert result.exit_code == 0, result.output
    ran = json.loads(result.output)["ran"]
    assert ran["baseline"]["device"] == "cuda" and ran["baseline"]["patches"] == []
    assert ran["candidate"]["patches"][:2] == ["verl-cuda-probe-off", "torch-shard-overlap-check (fast-validate)"]
    assert ran["candidate"]["command"] == "python3 -m verl.trainer.main_ppo trainer.device=npu"
    lines = CliRunner().invoke(cli.main, ["compare", str(h100), str(npu)], terminal_width=400).output.splitlines()
    assert "baseline ran: profile verl-796871d on cuda, no patches (its run.json)" in lines
    [candidate] = [line for line in lines if line.startswith("candidate ran:")]
    assert candidate.startswith("candidate ran: profile verl-796871d on npu, patches verl-cuda-probe-off, ")


def test_a_log_without_a_readable_run_json_says_it_is_not_recorded(tmp_path):
    plain = tmp_path / "plain" / "train.log"
    plain.parent.mkdir()
    plain.write_text("".join(f"{RAY_PREFIX}{step_line(n, v)}\n" for n, v in enumerate(run_steps(4), 1)))
    assert launch.what_ran(plain) is None
    deep = b'{"profile": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # nested past any limit: no RecursionError
    for bad in (b"{not json", b"[1, 2]", b'{"profile": 3, "patches": "x", "command": "rm\\u001b[2J"}', deep):
        (plain.parent / "run.json").write_bytes(bad)
        ran = launch.what_ran(plain)
        assert ran is None or (ran["profile"] is None and ran["patches"] is None and ran["command"] is None)
    (plain.parent / "run.json").unlink()
    os.symlink("/etc/hostname", plain.parent / "run.json")
    assert launch.what_ran(plain) is None
    text = CliRunner().invoke(cli.main, ["compare", str(plain), str(plain)]).output
    assert "baseline: no run.json beside its log, so what it ran is not recorded" in text
