"""doctor against real fake machines: virtualenvs with real pip installs, git checkouts, an Ascend root.

The A2 machine matches the profile (exit 0); each other test breaks one thing and asserts
that the right check fails for the right reason, then puts the machine back.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from ascendfix.doctor import nic
from ascendfix.profile import manifest, rl_plugin

from tests import cli, machine, upstream
from tests.machine import GIT, doctor, run, succeeded

pytestmark = pytest.mark.slow

DAPO_TRAINER = '''"""A DAPO trainer shaped like verl 796871d's recipe/dapo/dapo_ray_trainer.py (test fixture)."""


class RayDAPOTrainer:
    def fit(self):
        for batch_dict in self.train_dataloader:
            new_batch = DataProto.from_single_dict(batch_dict)
            gen_batch = new_batch.pop(batch_keys=["input_ids"])
            gen_batch = gen_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
            gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)
            new_batch = new_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
            new_batch = new_batch.union(gen_batch_output)
'''
VERL_TENSORDICT = "tensordict>=0.8.0,<=0.9.1,!=0.9.0"  # what verl 796871d declares


@dataclass
class Machine:
    root: Path
    python: Path
    site: Path
    profile: Path
    ascend_home: Path
    verl: Path
    env: dict[str, str]
    commits: dict[str, str]

    def doctor(self, *args: str, profile: Path | None = None) -> subprocess.CompletedProcess:
        base = ["--profile", str(profile or self.profile), "--python", str(self.python)]
        return doctor(*base, "--ascend-home", str(self.ascend_home), *args, env=self.env, cwd=self.root)

    def report(self, *args: str, profile: Path | None = None) -> tuple[int, dict]:
        result = self.doctor("--json", *args, profile=profile)
        assert result.stdout, result.stderr
        data = json.loads(result.stdout)
        return result.returncode, {c["id"]: c for c in data["checks"]}

    def ascendfix(self, *args: str) -> subprocess.CompletedProcess:
        more = ["--profile", self.profile, "--python", self.python]
        return succeeded(cli.run(*args, *more, env=self.env, clean_env=True, timeout=None))


def _interface() -> str:
    """An interface the job's NICs can use here: up, with an address (lo when it is the only one)."""
    usable = [n.name for n in nic.interfaces() if n.up and n.addresses]
    return next((n for n in usable if n != "lo"), "lo")


def write_profile(path: Path, commits: dict[str, str], nofile: int) -> Path:
    """A manifest extending the bundled profile, pinned to this machine's fixture commits."""
    lines = ['extends = "verl-796871d"', f'name = "{path.stem}"', ""]
    for component, commit in commits.items():
        lines += [f"[components.{component}]", f'commit = "{commit}"', ""]
    # this host's hard limit may be below the profile's 32768; the fake machine pins what it can have
    lines += ["[devices.npu]", f"ulimit_nofile = {nofile}", ""]
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="session")
def a2(tmp_path_factory, python310) -> Machine:
    """An Ascend A2 node that matches verl-796871d: Python 3.10 venv, the pinned stack, patches applied."""
    root = tmp_path_factory.mktemp("a2")
    torch_tree, verl_tree = upstream.torch_tree("2.7.1"), upstream.verl_tree("0.5.0")
    wheels = root / "wheels"
    torch_files = {
        "torch/__init__.py": b"__version__ = '2.7.1'\n",
        upstream.SHARD_INTERNALS: (torch_tree / upstream.SHARD_INTERNALS).read_bytes(),
        upstream.DEFAULT_PLANNER: (torch_tree / upstream.DEFAULT_PLANNER).read_bytes(),
    }
    built = [
        machine.make_wheel(wheels, "torch", "2.7.1", torch_files),
        machine.make_wheel(wheels, "torch-npu", "2.7.1", {"torch_npu/__init__.py": b""}, ("torch==2.7.1",)),
        machine.make_wheel(wheels, "tensordict", "0.10.0", {"tensordict/__init__.py": b""}),
        machine.make_wheel(wheels, "megatron-core", "0.12.1", {"megatron/core/__init__.py": b""}),
    ]
    commits, sources = {}, []
    for component, dist in [
        ("vllm", "vllm"),
        ("vllm_ascend", "vllm-ascend"),
        ("transformers", "transformers"),
        ("mindspeed", "mindspeed"),
        ("mindspeed_rl", "verl_npu"),
    ]:
        commits[component] = machine.git_project(root / "src" / dist, dist, {})
        sources.append(f"git+file://{root / 'src' / dist}")
    verl = root / "src" / "verl"
    verl_files = {
        rel: (verl_tree / rel).read_text() for rel in ("verl/utils/device.py", "verl/trainer/ppo/ray_trainer.py")
    }
    verl_files["recipe/dapo/dapo_ray_trainer.py"] = DAPO_TRAINER
    verl_files[".gitignore"] = "build/\n*.egg-info/\n"
    commits["verl"] = machine.git_project(verl, "verl", verl_files, (VERL_TENSORDICT,), version="0.5.0.dev0")
    python = machine.make_venv(root / "venv", python310)
    try:
        machine.pip_install(python, "flit_core")  # the build backend of the git fixtures: from the index
    except AssertionError as e:
        pytest.skip(f"cannot install flit_core from the package index: {str(e)[-300:]}")
    machine.pip_install(python, "--no-build-isolation", *map(str, built), *sources, "-e", str(verl))
    init = verl / "verl" / "__init__.py"  # the rl-plugin's install step edits the verl checkout (rl_plugin.py)
    init.write_bytes(rl_plugin.installer_edit("verl/__init__.py", init.read_bytes()))
    (verl / "build" / "lib").mkdir(parents=True)  # untracked build leftovers are not "dirty"
    (verl / "verl.egg-info").mkdir()
    nofile = min(32768, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    profile = write_profile(root / "a2-profile.toml", commits, nofile)
    home = root / "Ascend"
    iface = _interface()
    env = {"HOME": os.environ.get("HOME", str(root)), **machine.fake_ascend(home)}
    env.update(  # the guide's exports (3.3.1, 3.3.2)
        RAY_DEDUP_LOGS="0",
        HYDRA_FULL_ERROR="1",
        TASK_QUEUE_ENABLE="2",
        HCCL_ASYNC_ERROR_HANDLING="0",
        HCCL_EXEC_TIMEOUT="3600",
        HCCL_CONNECT_TIMEOUT="3600",
        LD_LIBRARY_PATH=f"/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver:{env['LD_LIBRARY_PATH']}",
        HCCL_SOCKET_IFNAME=iface,
        GLOO_SOCKET_IFNAME=iface,
        CUDA_DEVICE_MAX_CONNECTIONS="1",
    )
    a2 = Machine(root, python, machine.site_packages(python), profile, home, verl, env, commits)
    a2.ascendfix("apply", "--device", "npu")
    return a2


def test_a2_that_matches_the_profile_is_ready(a2):
    code, checks = a2.report()
    statuses = {cid: c["status"] for cid, c in checks.items()}
    assert code == 0, checks
    assert statuses == {
        "python": "ok",
        "packages": "ok",
        "commits": "ok",
        "integrity": "ok",
        "patches": "ok",
        "conflicts": "ok",
        "cann": "ok",
        "driver": "ok",
        "npu": "ok",
        "cuda": "skip",
        "os": statuses["os"],  # warn unless this host is AlmaLinux 8, as the image
        "env": statuses["env"],  # ok, or warn where HCCL's ports are not reserved on this host
        "disk": statuses["disk"],  # ok, or warn when this disk holds fewer than two saves
        "hazards": "ok",
    }
    assert statuses["disk"] in ("ok", "warn")
    if statuses["env"] != "ok":  # this host leaves HCCL's ports in its ephemeral range: a warning, nothing else
        assert (
            statuses["env"] == "warn"
            and checks["env"]["fix"] == "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031"
        )
    assert checks["python"]["messages"][0].startswith("Python 3.10.")
    commits = "\n".join(checks["commits"]["messages"])
    assert "verl: checkout" in commits and "changed only by ascendfix's patches" in commits
    assert "verl/utils/device.py (verl-cuda-probe-off)" in commits
    assert "recipe/dapo/dapo_ray_trainer.py (verl-dapo-no-interleave)" in commits
    assert "changed by the MindSpeed-RL rl-plugin installer" in commits and "verl/__init__.py" in commits
    assert "build" not in commits and "egg-info" not in commits
    assert f"vllm: {a2.commits['vllm'][:12]} (from direct_url.json)" in commits
    integrity = "\n".join(checks["integrity"]["messages"])
    assert "torch 2.7.1: changed by ascendfix's patches, as expected" in integrity
    assert f"{upstream.SHARD_INTERNALS} (torch-shard-overlap-check)" in integrity
    accepted = checks["conflicts"]["messages"]
    assert any(
        m.startswith(f"accepted: verl 0.5.0.dev0 requires tensordict{VERL_TENSORDICT}") for m in accepted
    ) or any("accepted: verl" in m and "tensordict" in m and "0.10.0 is installed" in m for m in accepted)
    assert checks["npu"]["messages"][0] == "8 NPU(s): 910B4-1, all healthy"
    assert "CANN 8.3.RC1" in checks["cann"]["messages"][0]
    assert checks["driver"]["messages"][0].startswith("driver 25.2.0")


def test_human_report_groups_marks_and_summarises(a2):
    result = a2.doctor("-v")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for heading in ("Python environment", "Ascend stack", "CUDA stack", "Host"):
        assert f"\n{heading}\n" in out
    assert "  ✓ Packages — 10 pinned distributions match" in out
    assert "  - CUDA stack — device is npu" in out
    assert "ready" in out.splitlines()[-1] and "0 ✗ problem(s)" in out.splitlines()[-1]


def test_foreign_edit_in_the_checkout_fails_commits(a2):
    device = a2.verl / "verl" / "utils" / "device.py"
    init = a2.verl / "verl" / "__init__.py"
    before = device.read_bytes(), init.read_bytes()
    try:
        device.write_bytes(before[0] + b"\nHACK = 1\n")  # on top of ascendfix's own patch
        init.write_bytes(b"import os\n")
        code, checks = a2.report("--only", "commits")
    finally:
        device.write_bytes(before[0])
        init.write_bytes(before[1])
    assert code == 1
    assert checks["commits"]["status"] == "fail"
    foreign = next(m for m in checks["commits"]["messages"] if "changes ascendfix did not make" in m)
    assert foreign.endswith("verl/__init__.py, verl/utils/device.py")
    assert f"git -C {a2.verl} checkout -- verl/__init__.py verl/utils/device.py" in checks["commits"]["fix"]
    assert "recipe/dapo/dapo_ray_trainer.py (verl-dapo-no-interleave)" in "\n".join(checks["commits"]["messages"])


def test_checkout_at_another_commit_fails_commits(a2):
    run([*GIT, "-C", str(a2.verl), "commit", "-q", "--allow-empty", "-m", "local work"])
    try:
        code, checks = a2.report("--only", "commits")
    finally:
        run([*GIT, "-C", str(a2.verl), "reset", "-q", "--soft", "HEAD~1"])
    assert code == 1
    message = checks["commits"]["messages"][0]
    assert message.startswith(f"verl: checkout {a2.verl} at ") and message.endswith(f"pins {a2.commits['verl'][:12]}")
    assert checks["commits"]["fix"].startswith(f"git -C {a2.verl} checkout {a2.commits['verl']}")


def test_vcs_install_from_another_commit_fails_commits(a2, tmp_path):
    other = {**a2.commits, "vllm": "0123456789abcdef0123456789abcdef01234567"}
    profile = write_profile(tmp_path / "other.toml", other, 1024)
    code, checks = a2.report("--only", "commits", profile=profile)
    assert code == 1
    assert checks["commits"]["messages"][0] == (
        f"vllm: installed from {a2.commits['vllm'][:12]} (from direct_url.json); the profile pins 0123456789ab"
    )
    assert (  # an editable checkout, as the rl-plugin README installs vllm
        "git clone https://github.com/vllm-project/vllm.git vllm && git -C vllm checkout 0123456789abcdef"
        in checks["commits"]["fix"]
    )
    assert "&& VLLM_TARGET_DEVICE=empty " in checks["commits"]["fix"]


def test_installed_file_that_no_longer_matches_its_record_fails_integrity(a2):
    init = a2.site / "torch" / "__init__.py"
    before = init.read_bytes()
    try:
        init.write_bytes(before.replace(b"2.7.1", b"2.7.2"))  # same size: only the hash tells
        code, checks = a2.report("--only", "integrity")
    finally:
        init.write_bytes(before)
    assert code == 1
    result = checks["integrity"]
    assert result["messages"][0] == "torch 2.7.1: 1 file(s) differ from the wheel's RECORD: torch/__init__.py"
    assert any("changed by ascendfix's patches, as expected" in m for m in result["messages"])
    assert "pip install --force-reinstall --no-deps torch==2.7.1" in result["fix"]
    assert "ascendfix apply --profile" in result["fix"]


def test_reverted_patches_fail_patches_with_apply_as_the_fix(a2):
    a2.ascendfix("revert")
    try:
        code, checks = a2.report("--only", "patches", "--only", "commits", "--only", "integrity")
    finally:
        a2.ascendfix("apply", "--device", "npu")
    assert code == 1
    patches = checks["patches"]
    n = len(manifest.load_profile(str(a2.profile)).devices["npu"].patches)
    assert patches["status"] == "fail" and patches["messages"][0] == f"{n} of {n} patches not applied"
    assert "verl-cuda-probe-off: not-applied" in patches["messages"]
    assert patches["fix"] == f"ascendfix apply --profile {a2.profile} --device npu --python {a2.python}"
    commits = checks["commits"]["messages"]
    assert checks["commits"]["status"] == "ok"  # ascendfix's edits gone, the rl-plugin's kept
    assert any("changed by the MindSpeed-RL rl-plugin installer" in m and "verl/__init__.py" in m for m in commits)
    assert checks["integrity"]["messages"][0].startswith("9 installed distribution(s) match their RECORD (")


def test_wrong_interpreter_and_unsourced_cann(a2):
    env = {k: v for k, v in a2.env.items() if k != "LD_LIBRARY_PATH"}
    env["TASK_QUEUE_ENABLE"] = "1"
    result = doctor(
        "--profile", str(a2.profile), "--ascend-home", str(a2.ascend_home), "--json",
        "--only", "python", "--only", "cann", "--only", "env", env=env,
    )  # fmt: skip
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    assert result.returncode == 1
    if sys.version_info[:2] != (3, 10):
        assert checks["python"]["status"] == "fail" and "the profile needs 3.10" in checks["python"]["messages"][0]
    assert checks["cann"]["messages"][0].endswith("but its libraries are not on LD_LIBRARY_PATH")
    assert checks["cann"]["fix"] == f"source {a2.ascend_home / 'ascend-toolkit' / 'set_env.sh'}"
    assert checks["env"]["messages"][0].startswith("2 problem(s), ")  # and a warning where HCCL's ports are exposed
    assert checks["env"]["messages"][0].endswith(" as needed in the environment the job inherits")
    assert checks["env"]["messages"][1] == "TASK_QUEUE_ENABLE is '1'; the profile sets '2'"
    assert checks["env"]["messages"][2].startswith("LD_LIBRARY_PATH lacks /usr/local/Ascend/driver/lib64:")
    assert "export TASK_QUEUE_ENABLE=2" in checks["env"]["fix"]
