"""upgrade-check on real releases: verl wheels and a source distribution, torch and torch-npu wheels.

The command fetches with ``pip download`` into ``$XDG_CACHE_HOME/ascendfix``; here that is a folder
of the test cache (outside the repo), so each release is downloaded once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ascendfix import demo
from ascendfix.errors import UsageError
from ascendfix.patching import drop_probes, scan_probe
from ascendfix.profile import manifest

from tests import cli, upstream

REPO = Path(__file__).resolve().parent.parent
DAPO = "recipe/dapo/dapo_ray_trainer.py"
KEYS = ["schema", "ok", "profile", "device", "with", "patches", "conflicts", "accepted", "notes"]


def check(*args: str) -> subprocess.CompletedProcess:
    return cli.run("upgrade-check", "--device", "npu", *args, cache=upstream.cache_dir() / "xdg", timeout=1800)


def report(*args: str) -> tuple[int, dict]:
    result = check(*args, "--json")
    if "cannot fetch" in result.stderr:
        pytest.skip(f"the package index cannot be reached: {result.stderr.strip()}")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def verdicts(data: dict) -> dict[str, tuple]:
    return {p["id"]: (p["verdict"], p["variant"], p["sites"]) for p in data["patches"]}


@pytest.mark.upstream
def test_verl_0_7_0_keeps_every_patch_and_drops_the_accepted_tensordict_conflict():
    code, data = report("--with", "verl==0.7.0")
    assert code == 0
    assert list(data) == KEYS and data["with"] == {"verl": "0.7.0"}
    assert (data["profile"], data["device"]) == ("verl-796871d", "npu")
    assert all(list(p) == ["id", "verdict", "reason", "variant", "sites"] for p in data["patches"])
    assert verdicts(data) == {
        "verl-cuda-probe-off": ("applies", "default", 1),
        "torch-shard-overlap-check": ("unchanged", None, None),
        "torch-global-plan-check": ("unchanged", None, None),
        "verl-grpo-no-interleave": ("applies", "default", 3),
        "verl-dapo-no-interleave": ("not-applicable", None, None),  # recipe/ is never in the wheel
    }
    dapo = next(p for p in data["patches"] if p["id"] == "verl-dapo-no-interleave")
    assert "only in a verl source checkout" in dapo["reason"] and "--with verl=CHECKOUT" in dapo["reason"]
    assert data["conflicts"] == [] and data["notes"] == []
    # verl 0.7.0 allows tensordict up to 0.10.0: the profile's accepted conflict is no longer needed
    assert data["accepted"] == [
        {
            "requirer": "verl==0.7.0",
            "requirement": "tensordict!=0.9.0,<=0.10.0,>=0.8.0",
            "pinned": "tensordict==0.10.0",
            "needed": False,
        }
    ]
    text = check("--with", "verl==0.7.0")
    assert text.returncode == 0 and "no longer needed" in text.stdout
    assert "the upgrade keeps every patch and pin" in text.stdout


@pytest.mark.upstream
def test_verl_0_4_1_refuses_the_grpo_patch_with_the_engines_reason():
    code, data = report("--with", "verl==0.4.1")
    assert code == 1
    grpo = next(p for p in data["patches"] if p["id"] == "verl-grpo-no-interleave")
    assert grpo["verdict"] == "refused"
    assert grpo["reason"] == "verl/trainer/ppo/ray_trainer.py: expected 3 site(s) for verl-grpo-no-interleave, found 2"
    assert data["accepted"][0]["needed"] is True and data["accepted"][0]["requirement"] == "tensordict<=0.6.2"


@pytest.mark.upstream
@pytest.mark.slow
def test_torch_2_10_alone_conflicts_with_torch_npu_and_together_they_pass():
    code, data = report("--with", "torch==2.10.0")
    assert code == 1
    assert verdicts(data)["torch-shard-overlap-check"] == ("applies", "fast-validate", 1)
    assert verdicts(data)["torch-global-plan-check"] == ("applies", "fast-validate", 1)
    plan = next(p for p in data["patches"] if p["id"] == "torch-global-plan-check")
    assert "torch 2.10.0 on the expert layout: _validate_global_plan() is still quadratic" in plan["reason"]
    assert data["conflicts"] == [
        {"requirer": "torch-npu==2.7.1", "requirement": "torch==2.7.1", "pinned": "torch==2.10.0"}
    ]
    code, data = report("--with", "torch==2.10.0", "--with", "torch_npu==2.10.0")
    assert code == 0, data
    assert data["with"] == {"torch": "2.10.0", "torch-npu": "2.10.0"} and data["conflicts"] == []


@pytest.mark.upstream
def test_a_release_that_does_not_exist_is_named_in_one_line():
    result = check("--with", "verl==0.0.99")
    if "cannot fetch" in result.stderr:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 2 and result.stdout == ""
    fetching, line = result.stderr.strip().splitlines()  # what it fetches, then the one error line
    assert fetching.startswith("fetching verl==0.0.99 (manylinux_2_28_aarch64 or manylinux2014_aarch64")
    assert "verl==0.0.99" in line and "no such release" in line and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "name at least one release"),
        (("--with", "verl"), "expected DIST==VERSION"),
        (("--with", "numpy==2.0"), "numpy is not a component of verl-796871d on npu"),
        (("--with", "verl==not-a-version"), "is not a version"),
        (("--with", "verl==0.7.0", "--with", "verl==0.6.0"), "verl is named twice"),
        (("--with", "verl=/nonexistent/checkout"), "is not a folder"),
        (("--with", "torch-npu==2.7.1", "--device", "cuda"), "torch-npu is not a component of verl-796871d on cuda"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = check(*args)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert message in line


@pytest.fixture
def checkout(tmp_path):
    """verl 0.5.0's source distribution, copied: a checkout without recipe/ (the git repository has it)."""
    dest = tmp_path / "verl"
    shutil.copytree(upstream.verl_checkout("0.5.0"), dest)
    return dest


@pytest.mark.upstream
def test_a_checkout_is_read_in_place_and_needs_its_recipe(checkout):
    code, data = report("--with", f"verl={checkout}")
    assert code == 1 and data["with"] == {"verl": str(checkout)}
    dapo = next(p for p in data["patches"] if p["id"] == "verl-dapo-no-interleave")
    assert dapo["verdict"] == "refused" and f"{DAPO} is missing in verl checkout" in dapo["reason"]
    # version (verl/version/version) and requirements (setup.py) read from the checkout itself
    assert data["accepted"][0]["requirer"] == "verl==0.5.0" and data["accepted"][0]["needed"] is True
    (checkout / DAPO).parent.mkdir(parents=True)
    (checkout / DAPO).write_bytes((demo.standins("verl") / DAPO).read_bytes())  # the demo's stand-in: two DAPO sites
    code, data = report("--with", f"verl={checkout}")
    assert code == 0 and verdicts(data)["verl-dapo-no-interleave"] == ("applies", "default", 2)
    (checkout / "setup.py").unlink()  # nothing says what it requires: said, not guessed
    (checkout / "pyproject.toml").unlink()
    code, data = report("--with", f"verl={checkout}")
    assert code == 0
    # the accepted conflict is then judged on the requirement the profile accepted
    assert data["accepted"] == [
        {
            "requirer": f"verl checkout {checkout}",  # no version stated either
            "requirement": "tensordict>=0.8.0,<=0.9.1,!=0.9.0",
            "pinned": "tensordict==0.10.0",
            "needed": True,
        }
    ]
    assert data["notes"] == [f"verl checkout {checkout}: its requirements are not stated statically; not checked"]
    assert "requirement check(s) could not run" in check("--with", f"verl={checkout}").stdout


@pytest.mark.upstream
def test_a_patch_whose_sites_are_gone_is_obsolete(checkout):
    device_py = checkout / "verl/utils/device.py"
    text = device_py.read_text()
    assert "is_cuda_available = torch.cuda.is_available()" in text
    device_py.write_text(text.replace("is_cuda_available = torch.cuda.is_available()", "is_cuda_available = False"))
    trainer = checkout / "verl/trainer/ppo/ray_trainer.py"
    trainer.write_text(trainer.read_text().replace("interleave=True", "interleave=False"))
    code, data = report("--with", f"verl={checkout}")
    obsolete = {p["id"]: p["reason"] for p in data["patches"] if p["verdict"] == "obsolete"}
    assert set(obsolete) == {"verl-cuda-probe-off", "verl-grpo-no-interleave"}
    assert "no site of verl-cuda-probe-off is left" in obsolete["verl-cuda-probe-off"]
    assert code == 1  # the DAPO file is still missing from this checkout


@pytest.mark.upstream
def test_a_torch_fast_validate_does_not_know_is_refused_and_skip_is_offered(tmp_path):
    root = tmp_path / "torch"
    shutil.copytree(upstream.torch_tree("2.7.1"), root, ignore=shutil.ignore_patterns(".complete"))
    planner = root / upstream.DEFAULT_PLANNER
    planner.write_text(planner.read_text().replace("box0.offsets[i] >= box1", "box0.offsets[i] > box1"))
    code, data = report("--with", f"torch={root}")
    assert code == 1
    plan = next(p for p in data["patches"] if p["id"] == "torch-global-plan-check")
    assert plan["verdict"] == "refused" and plan["variant"] == "fast-validate"
    assert "templates/fast_overlap.py knows" in plan["reason"]
    assert plan["reason"].endswith("(variant skip applies: --variant torch-global-plan-check=skip)")
    assert verdicts(data)["torch-shard-overlap-check"] == ("applies", "fast-validate", 1)


def test_an_unknown_drop_probe_is_refused(tmp_path):
    source = (REPO / "patches" / "verl-cuda-probe-off.toml").read_text()
    bad = tmp_path / "verl-cuda-probe-off.toml"
    bad.write_text(source.replace('drop_probe = "no-site"', 'drop_probe = "benchmark"'))
    known = r"\(known: no-site, sub-quadratic-scan\)"
    with pytest.raises(UsageError, match=f"drop_probe: unknown probe 'benchmark' {known}"):
        manifest.load_patch(bad)


def test_every_drop_probe_a_patch_may_name_is_one_upgrade_check_runs():
    assert set(manifest.DROP_PROBES) == set(drop_probes.PROBES)


def test_show_says_which_drop_when_is_checked():
    result = cli.run("show", "verl-796871d", timeout=None)
    assert result.returncode == 0
    assert result.stdout.count("checked by upgrade-check (no-site)") == 3
    assert result.stdout.count("checked by upgrade-check (sub-quadratic-scan)") == 2


# A stand-in for a torch whose own checks are linear: what the torch patches' drop_when waits for.
LINEAR = {
    upstream.SHARD_INTERNALS: b"""
def validate_non_overlapping_shards_metadata(shards):
    seen = set()
    for s in shards:
        box = (tuple(s.shard_offsets), tuple(s.shard_sizes))
        if box in seen:
            raise ValueError("overlap")
        seen.add(box)
""",
    upstream.DEFAULT_PLANNER: b"""
def _validate_global_plan(global_plan, metadata) -> bool:
    for value in metadata.state_dict_metadata.values():
        boxes = [(tuple(c.offsets), tuple(c.sizes)) for c in value.chunks]
        if len(set(boxes)) != len(boxes):
            return False
    return True
""",
}


@pytest.mark.upstream
def test_the_scan_probe_tells_torchs_quadratic_checks_from_a_linear_one():
    root = upstream.torch_tree("2.7.1")
    for path, linear in LINEAR.items():
        stock = scan_probe.measure(path, (root / path).read_bytes())
        assert not stock.sub_quadratic, stock  # about 10x the work for 4x the chunks
        assert scan_probe.measure(path, linear).sub_quadratic  # about 4x
    with pytest.raises(ValueError, match="no function _validate_global_plan"):
        scan_probe.measure(upstream.DEFAULT_PLANNER, b"def other():\n    pass\n")
    with pytest.raises(ValueError, match="fails on the expert layout"):
        scan_probe.measure(upstream.SHARD_INTERNALS, b"def validate_non_overlapping_shards_metadata(s):\n    1 / 0\n")


HOSTILE = {
    "default-argument": "def _validate_global_plan(global_plan, metadata, _=open({marker!r}, 'w').write('x')):\n"
    "    return True\n",
    "import-os": "import os\n\n\ndef _validate_global_plan(global_plan, metadata, _=os.system('touch {marker}')):\n"
    "    return True\n",
    "in-the-call": "import subprocess\n\n\ndef _validate_global_plan(global_plan, metadata):\n"
    "    subprocess.run(['touch', {marker!r}])\n    return True\n",
    "escape": "def _validate_global_plan(global_plan, metadata):\n"  # out of the builtins, as Python lets one
    "    wrap = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]\n"
    "    g = wrap.__init__.__globals__\n"
    "    fd = g['open']({marker!r}, g['O_WRONLY'] | g['O_CREAT'], 0o644)\n"
    "    g['write'](fd, b'x')\n    g['system']('touch {marker}.2')\n    return True\n",
}


@pytest.mark.parametrize("way", sorted(HOSTILE))
def test_a_candidate_releases_code_never_runs_in_ascendfixs_process_nor_writes_a_file(tmp_path, way):
    """The drop probe exec'd the release's imports, its defs (default arguments run at once) and the check in
    ascendfix's process, as the caller (root): a stand-in hostile release that writes a file writes nothing."""
    marker = tmp_path / "ran"
    source = HOSTILE[way].format(marker=str(marker)).encode()
    try:
        found = scan_probe.measure(upstream.DEFAULT_PLANNER, source)
    except ValueError as e:
        assert "\n" not in str(e)
    else:
        assert found.function == "_validate_global_plan"
    assert not marker.with_name("ran.2").exists()
    assert not marker.exists() or marker.stat().st_size == 0  # not even created, where the probe could drop root


def test_the_scan_probe_still_tells_a_quadratic_check_from_a_linear_one_in_its_child():
    quadratic = (
        b"import sys\nfrom dataclasses import dataclass\n\n\n"
        b"def _validate_global_plan(global_plan, metadata) -> bool:\n"
        b"    for value in metadata.state_dict_metadata.values():\n"
        b"        for i, a in enumerate(value.chunks):\n"
        b"            for b in value.chunks[i + 1 :]:\n"
        b"                pairs = zip(a.offsets, a.sizes, b.offsets, b.sizes)\n"
        b"                if all(x < y + n and y < x + m for x, m, y, n in pairs):\n"
        b"                    return False\n"
        b"    return sys.maxsize > 0\n"
    )
    assert not scan_probe.measure(upstream.DEFAULT_PLANNER, quadratic).sub_quadratic
    assert scan_probe.measure(upstream.DEFAULT_PLANNER, LINEAR[upstream.DEFAULT_PLANNER]).sub_quadratic


@pytest.mark.upstream
def test_a_torch_whose_own_checks_are_sub_quadratic_makes_both_patches_obsolete(tmp_path):
    root = tmp_path / "torch"
    for path, code in LINEAR.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(code)
    code, data = report("--with", f"torch={root}")
    assert code == 0
    for pid in ("torch-shard-overlap-check", "torch-global-plan-check"):
        patch = next(p for p in data["patches"] if p["id"] == pid)
        assert patch["verdict"] == "obsolete" and "is sub-quadratic" in patch["reason"], patch
