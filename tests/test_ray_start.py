"""ascendfix ray start / ray wait, and run's cluster gate, on a real local cluster started by `ascendfix ray start`.

Three raylets on this machine (head, w0, w1), each its own `ascendfix ray start --block` process with its
own ports, a fake npu-smi listing 8 NPUs on PATH, and a shared RAY_TMPDIR of their own. w1 is started
from a shell that exported TASK_QUEUE_ENABLE=1 (the profile says 2). Teardown is SIGTERM to each
`ray start --block` (ascendfix exec'd it), then a check that no process carrying this cluster's
RAY_TMPDIR is left; the checks kill by pid only, never by name (`ray stop` would stop every Ray here).

The nodes and every command that talks to them run in a network namespace of the test's own with
only a loopback interface: Ray replaces 127.0.0.1 with the host's address when it has one, and
there it has none, so every node binds 127.0.0.1 and no traffic leaves loopback.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from ascendfix.cluster import start as raystart
from ascendfix.cluster import wait as raywait
from ascendfix.cluster.wait import Arrival, NodeView
from ascendfix.errors import UsageError
from ascendfix.profile import manifest

from tests import cli
from tests.cluster import (
    NEEDS_RAY,
    NOFILE,
    LocalCluster,
    ascendfix,
    fake_npu_smi,
    free_ports,
    private_netns,
    team_profile,
)

REPO = Path(__file__).resolve().parent.parent
PROFILE = manifest.load_profile("verl-796871d")
NODES = ("head", "w0", "w1")
ODD = "w1"


@pytest.fixture(scope="module")
def netns():
    """A private network namespace with only `lo`, up."""
    with private_netns() as ns:
        yield ns


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory, netns):
    """head, w0 and w1 (w1 exported TASK_QUEUE_ENABLE=1), each with 8 fake NPUs."""
    pytest.importorskip("ray", reason="ray is not installed: pip install 'ascendfix[ray]'")
    base = tmp_path_factory.mktemp("ray-start")
    c = LocalCluster(base, team_profile(base), fake_npu_smi(base), netns)
    try:
        c.start("head")
        c.wait_for_head()
        for name in NODES[1:]:  # one after the other: raylets starting together can pick the same free port
            c.start(name, {"TASK_QUEUE_ENABLE": "1"} if name == ODD else None)
            c.wait_started(name)
        yield c
    finally:
        left = c.stop()
        assert not left, f"Ray processes still running after SIGTERM to ray start --block: {left}"


def _node(report: dict, name: str) -> dict:
    return next(n for n in report["nodes"] if f"node_{name}" in n["resources"])


@pytest.mark.slow
def test_wait_names_the_node_started_with_another_value(local_cluster):
    c = local_cluster
    args = ["ray", "wait", "--profile", str(c.profile), "--device", "npu", "--nodes", "3", "--per-node", "8"]
    result = c.ascendfix(*args, "--timeout", "240", "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["ready"] and report["arrival"]["line"] == "3 of 3 nodes, 24 of 24 NPU"
    assert len(report["nodes"]) == 3
    for name in NODES:
        node = _node(report, name)
        assert node["resources"]["NPU"] == 8  # npu-smi's count, merged into the node's own --resources
        assert node["resources"][f"node_{name}"] == 1
        assert node["ulimit_nofile"] == str(NOFILE)  # raised from the 1024 the node was started with
        assert node["env"]["HCCL_CONNECT_TIMEOUT"] == "3600" and node["env"]["HCCL_SOCKET_IFNAME"] == "lo"
        assert node["env"]["TASK_QUEUE_ENABLE"] == ("1" if name == ODD else "2")
        assert node["patches"]["verl-cuda-probe-off"]["state"] == "drifted"  # no verl here, on any node
    odd = _node(report, ODD)["node"]
    assert report["differences"] == [
        {"node": odd, "item": "TASK_QUEUE_ENABLE", "value": "1", "others": "2", "why": "differs"}
    ]
    assert not report["ok"]

    shown = c.ascendfix(*args, "--timeout", "60")
    assert shown.returncode == 1
    row = next(line for line in shown.stdout.splitlines() if "TASK_QUEUE_ENABLE" in line)
    assert row.split() == [*odd.split(), "TASK_QUEUE_ENABLE", "1", "2", "differs"]
    assert "not ready: 3 of 3 nodes, 24 of 24 NPU, 1 difference(s)" in shown.stdout


@pytest.mark.slow
def test_wait_is_ready_when_every_node_sees_what_the_profile_sets(local_cluster, tmp_path):
    c = local_cluster  # a profile without TASK_QUEUE_ENABLE: the one variable w1 differs on
    bundled = (REPO / "manifests" / "verl-796871d.toml").read_text()
    start = bundled.index("[devices.npu.env.TASK_QUEUE_ENABLE]")
    bundled = bundled[:start] + bundled[bundled.index("[devices.npu.env.", start + 1) :]
    profile = tmp_path / "agreeing.toml"
    profile.write_text(bundled.replace("ulimit_nofile = 32768", f"ulimit_nofile = {NOFILE}", 1))
    args = ["ray", "wait", "--profile", str(profile), "--device", "npu", "--nodes", "3", "--timeout", "120"]
    result = c.ascendfix(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ready: 3 of 3 nodes, 24 of 24 NPU, every node sees the same")


@pytest.mark.slow
def test_wait_for_a_script_reads_its_size_and_times_out_saying_what_arrived(local_cluster, tmp_path):
    c = local_cluster
    script = tmp_path / "train.sh"
    script.write_text(
        "NNODES=4\npython3 -m verl.trainer.main_ppo \\\n"
        '    trainer.n_gpus_per_node=8 \\\n    trainer.nnodes="${NNODES}"\n'
    )
    args = ["ray", "wait", "--profile", str(c.profile), "--device", "npu", "--for", str(script), "--timeout", "2"]
    result = c.ascendfix(*args)
    assert result.returncode == 1
    assert result.stdout.strip() == "not ready after 2 s: 3 of 4 nodes, 24 of 32 NPU"
    as_json = json.loads(c.ascendfix(*args, "--json").stdout)
    assert not as_json["ready"] and as_json["arrival"]["nodes_wanted"] == 4 and as_json["nodes"] == []

    script.write_text(script.read_text().replace("NNODES=4", "NNODES=3"))
    ready = json.loads(c.ascendfix(*args[:-2], "--timeout", "120", "--json").stdout)
    assert ready["ready"] and [d["item"] for d in ready["differences"]] == ["TASK_QUEUE_ENABLE"]


@pytest.mark.slow
def test_run_refuses_a_job_bigger_than_the_cluster_or_on_disagreeing_nodes(local_cluster, tmp_path):
    c = local_cluster
    script = tmp_path / "train.sh"
    script.write_text(f"echo started > {tmp_path}/started.txt\n: trainer.nnodes=4 trainer.n_gpus_per_node=8\n")
    env = {**c.env, "RAY_ADDRESS": c.address}
    args = ["run", "--profile", str(c.profile), "--device", "npu", "--log-dir", str(tmp_path / "log"), str(script)]
    result = c.ascendfix(*args, env=env)
    assert result.returncode == 1
    ray_problems = [line for line in result.stderr.splitlines() if line.startswith("problem (ray)")]
    odd = next(n for n in json.loads(_wait_json(c)) if f"node_{ODD}" in n["resources"])["node"]
    assert ray_problems == [
        "problem (ray): the job needs trainer.nnodes × trainer.n_gpus_per_node = 4 × 8 = 32 NPU, "
        f"the Ray cluster at {c.address} has 24 registered (ascendfix ray wait --nodes 4)",
        f"problem (ray): Ray nodes disagree on TASK_QUEUE_ENABLE: 1 on {odd}, 2 on the others "
        "(restart those nodes with ascendfix ray start)",
    ]
    assert not (tmp_path / "started.txt").exists()

    local = {**c.env}  # no RAY_ADDRESS: the local cluster, found through RAY_TMPDIR/ray/ray_current_cluster
    result = c.ascendfix(*args, env=local)
    assert sum(line.startswith("problem (ray)") for line in result.stderr.splitlines()) == 2


def _wait_json(c: LocalCluster) -> str:
    args = ["ray", "wait", "--profile", str(c.profile), "--device", "npu", "--nodes", "3", "--json"]
    return json.dumps(json.loads(c.ascendfix(*args, "--timeout", "120").stdout)["nodes"])


# --- without a cluster ---------------------------------------------------------------------------


def test_head_gets_the_guides_port_and_dashboard_unless_given():
    def plan(*args):
        return raystart.plan(PROFILE, "npu", args, {}, npu_counter=lambda env: (8, ""))

    head = plan("--head", "--block")
    assert head.argv == (
        "ray", "start", "--head", "--block",
        "--port=6166", "--dashboard-host=0.0.0.0", "--dashboard-port=8260", '--resources={"NPU": 8}',
    )  # fmt: skip
    mine = plan("--head", "--port=7000", "--dashboard-host", "127.0.0.1")
    assert mine.argv == (
        "ray", "start", "--head", "--port=7000", "--dashboard-host", "127.0.0.1",
        "--dashboard-port=8260", '--resources={"NPU": 8}',
    )  # fmt: skip
    worker = plan("--address=10.0.0.1:6166", "--num-cpus", "4")
    assert worker.argv == ("ray", "start", "--address=10.0.0.1:6166", "--num-cpus", "4", '--resources={"NPU": 8}')
    assert not worker.head and worker.npus == 8 and worker.npu_source == "npu-smi"


def test_resources_are_merged_and_the_users_npu_wins():
    counted = []

    def counter(env):
        counted.append(1)
        return 16, ""

    merged = raystart.plan(PROFILE, "npu", ["--address", "h:6166", "--resources", '{"disk": 2}', "-v"], {}, counter)
    assert merged.argv == ("ray", "start", "--address", "h:6166", '--resources={"disk": 2, "NPU": 16}', "-v")
    counted.clear()
    mine = raystart.plan(PROFILE, "npu", ["--address", "h:6166", '--resources={"NPU": 4}'], {}, counter)
    assert mine.argv == ("ray", "start", "--address", "h:6166", '--resources={"NPU": 4}')
    assert mine.npu_source == "yours" and not counted
    cuda = raystart.plan(PROFILE, "cuda", ["--address", "h:6166"], {}, counter)
    assert cuda.argv == ("ray", "start", "--address", "h:6166")


def test_without_npu_smi_the_profiles_count_is_registered_with_a_warning(tmp_path):
    plan = raystart.plan(PROFILE, "npu", ["--address", "h:6166"], {"PATH": str(tmp_path)})
    assert plan.argv[-1] == '--resources={"NPU": 8}' and plan.npu_source == "profile"
    assert plan.warnings == ("npu-smi is not on PATH: registering the profile's 8 NPU(s) per node",)
    bare = tmp_path / "bare.toml"
    bare.write_text((REPO / "manifests" / "verl-796871d.toml").read_text().replace("accelerators_per_node = 8\n", ""))
    with pytest.raises(UsageError, match=r"""has no accelerators_per_node: pass --resources '\{"NPU": N\}'"""):
        raystart.plan(manifest.load_profile(str(bare)), "npu", ["--head"], {"PATH": str(tmp_path)})


def test_npu_smi_is_counted_as_doctor_parses_it(tmp_path):
    bin_dir = fake_npu_smi(tmp_path, npus=4)
    assert raystart.count_npus({"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}) == (4, "")
    assert raystart.count_npus({"PATH": str(tmp_path)}) == (None, "npu-smi is not on PATH")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "ray start: give --head (the first node) or --address HEAD_IP:PORT (every other node)"),
        (["--head", "--address", "h:1"], "ray start: give --head"),
        (["--address"], "ray start --address: expected HEAD_IP:PORT"),
        (["--head", "--resources", "NPU=8"], "--resources NPU=8: expected a JSON object"),
    ],
)
def test_bad_ray_start_options_are_one_line_and_exit_2(tmp_path, args, message):
    env = {**os.environ, "PATH": f"{fake_npu_smi(tmp_path)}{os.pathsep}{os.environ['PATH']}"}
    result = ascendfix("ray", "start", "--device", "npu", "--no-preflight", *args, env=env)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {message}") and len(result.stderr.strip().splitlines()) == 1


@NEEDS_RAY
def test_ray_start_refuses_when_doctor_fails_here_and_starts_nothing(tmp_path):
    env = {**os.environ, "PATH": f"{fake_npu_smi(tmp_path)}{os.pathsep}{os.environ['PATH']}"}
    env["RAY_TMPDIR"] = str(tmp_path)  # npu-smi but no CANN: doctor's cann check fails
    result = ascendfix("ray", "start", "--device", "npu", "--head", "--block", env=env, timeout=120)
    assert result.returncode == 1
    assert "problem (doctor): CANN" in result.stderr
    assert re.search(r"doctor found \d+ problem\(s\) on this node; fix them or pass --no-preflight$", result.stderr)
    assert not (tmp_path / "ray").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "2", "--for", "x.sh"], "error: ray wait: give --nodes N [--per-node K], or --for SCRIPT"),
        ([], "error: ray wait: give --nodes N [--per-node K], or --for SCRIPT"),
        (["--for", "missing.sh"], "error: --for missing.sh: no such file"),
        pytest.param(
            ["--nodes", "2", "--address", "127.0.0.1:1"],
            "error: --address 127.0.0.1:1: no Ray head answers there",
            marks=NEEDS_RAY,
        ),
        (["--for", "empty.sh"], "error: --for empty.sh: sets no integer trainer.nnodes= (pass --nodes N --per-node K"),
    ],
)
def test_bad_ray_wait_options_are_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "empty.sh").write_text("python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=8\n")
    result = cli.run("ray", "wait", "--device", "npu", *args, cwd=tmp_path, timeout=None)
    assert result.returncode == 2 and result.stderr.startswith(message)


def test_without_ray_installed_ray_start_and_wait_say_how_and_exit_2():
    for argv in (["ray", "start", "--head", "--device", "npu"], ["ray", "wait", "--nodes", "1", "--device", "npu"]):
        code = f"import sys; sys.modules['ray'] = None\nimport ascendfix.cli\nsys.argv = {['ascendfix', *argv]!r}\n"
        result = cli.run(code=code + "ascendfix.cli.main()\n", timeout=None)
        assert result.returncode == 2
        assert result.stderr.strip() == "error: ray is not installed: pip install 'ascendfix[ray]'"


def test_no_reachable_cluster_skips_the_gate_without_importing_ray(tmp_path):
    stale = tmp_path / "stale"
    (stale / "ray").mkdir(parents=True)
    (stale / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_ports(1)[0]}\n")  # nothing listens
    code = (
        "import sys\nfrom ascendfix.cluster import wait as raywait\nfrom ascendfix.profile import manifest\n"
        "p = manifest.load_profile('verl-796871d')\n"
        f"for env in ({{'RAY_TMPDIR': {str(tmp_path / 'none')!r}}}, {{'RAY_TMPDIR': {str(stale)!r}}},"
        f" {{'RAY_ADDRESS': '127.0.0.1:{free_ports(1)[0]}'}}):\n"
        "    assert raywait.job_problems(p, 'npu', {'trainer.nnodes': '99'}, env) is None\n"
        "print('ray' in sys.modules)\n"
    )
    result = cli.run(code=code, timeout=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def _view(name: str, npu: float = 8, ulimit: str = "32768", patch=("applied", "a.py=1"), **env) -> NodeView:
    values = {v.name: v.value for v in PROFILE.devices["npu"].env}
    values.update(HCCL_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="eth0")
    values.update(env)
    return NodeView(name * 8, "10.0.0.1", name, {"NPU": npu}, values, ulimit, {"p": patch})


def test_differences_name_each_node_that_lacks_or_differs():
    assert raywait.differences([_view("a"), _view("b"), _view("c")], PROFILE, "npu", 8) == []
    views = [
        _view("a"),
        _view("b", TASK_QUEUE_ENABLE="1", GLOO_SOCKET_IFNAME=None),
        _view("c", npu=4, ulimit="1024", HCCL_SOCKET_IFNAME="ib0", patch=("applied", "a.py=2")),
        _view("d", HCCL_EXEC_TIMEOUT=None),
    ]
    found = {(d.node[-8:], d.item): (d.value, d.others, d.why) for d in raywait.differences(views, PROFILE, "npu", 8)}
    assert found == {
        ("bbbbbbbb", "TASK_QUEUE_ENABLE"): ("1", "2", "differs"),
        ("bbbbbbbb", "GLOO_SOCKET_IFNAME"): ("(unset)", "set per site", "unset"),
        ("dddddddd", "HCCL_EXEC_TIMEOUT"): ("(unset)", "3600", "unset"),
        ("cccccccc", "ulimit -n"): ("1024", "32768", "below 32768"),
        ("cccccccc", "NPU"): ("4", "8", "below 8"),
        ("cccccccc", "patch p"): ("applied a.py=2", "applied a.py=1", "differs"),
    }  # a NIC name may differ between nodes; it must only be set


def test_the_arrival_line():
    nodes = [{"Alive": True, "Resources": {"NPU": 8.0}}] * 3 + [{"Alive": False, "Resources": {"NPU": 8.0}}]
    now = raywait.arrival(nodes, 4, 8, "NPU")
    assert now == Arrival(3, 4, 24.0, 32, "NPU", False) and now.line() == "3 of 4 nodes, 24 of 32 NPU"
    assert raywait.arrival([*nodes[:3], {"Alive": True, "Resources": {"NPU": 4.0}}], 4, 8, "NPU").ready is False
    assert raywait.arrival(nodes[:3], 3, 8, "NPU").ready


def test_a_limit_every_node_has_too_low_is_a_shortfall_not_a_difference(capsys):
    from ascendfix.cli.ray import _render_ray_wait

    views = [_view(name, ulimit="1024") for name in "abcd"]
    found = raywait.differences(views, PROFILE, "npu", 8)
    assert {(d.item, d.value, d.others, d.why) for d in found} == {("ulimit -n", "1024", "32768", "below 32768")}
    assert len(found) == 4
    arrived = raywait.arrival([{"Alive": True, "Resources": {"NPU": 8.0}}] * 4, 4, 8, "NPU")
    _render_ray_wait(raywait.WaitReport("auto", arrived, tuple(views), tuple(found)))
    assert "not ready: 4 of 4 nodes, 32 of 32 NPU, 4 shortfall(s)" in capsys.readouterr().out
