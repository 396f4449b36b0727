"""ascendfix ray smoke: the node checks on fixtures, one rank's collectives on CPU, and a real local cluster.

The cluster is the one tests/test_ray_start.py starts (`ascendfix ray start --block` per node, in a network
namespace of the test's own with only loopback): head, w0 and w1 with GLOO_SOCKET_IFNAME=lo. The second
cluster test adds w2, whose GLOO_SOCKET_IFNAME names veth0: one end of a veth pair made inside that
namespace, down and without an address, so it exists (doctor's check passes) but nothing can bind to it.
w2 also finds a hccn_tool on its PATH that reports NPU 3's port down.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ascendfix.cluster import smoke as raysmoke
from ascendfix.cluster.smoke import Check, Collective, Node, SmokeReport
from ascendfix.job.preflight import Seams, run_preflight
from ascendfix.profile import manifest

from tests import test_ray_start
from tests.machine import write_executable
from tests.test_ray_start import NETNS, LocalCluster, _fake_npu_smi, _free_ports, _team_profile, ascendfix

REPO = Path(__file__).resolve().parent.parent
loopback_netns = test_ray_start.loopback_netns  # the fixture: a network namespace with only lo

# --- bus bandwidth, hccn_tool, interfaces ----------------------------------------------------


def test_busbw_is_nccl_tests_formula():
    # nccl-tests: algbw = bytes / time; all_reduce busbw = algbw * 2(n-1)/n, all_gather busbw = algbw * (n-1)/n
    assert raysmoke.busbw_gbps("all_reduce", 8 * 10**9, 2.0, 8) == pytest.approx(4.0 * 2 * 7 / 8)
    assert raysmoke.busbw_gbps("all_gather", 8 * 10**9, 2.0, 8) == pytest.approx(4.0 * 7 / 8)
    assert raysmoke.busbw_gbps("all_reduce", 10**9, 1.0, 1) == 0.0  # one rank moves nothing over the bus
    assert raysmoke.busbw_gbps("all_reduce", 10**9, 0.0, 4) == 0.0


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("link status: UP\n", "UP"),
        ("link status: DOWN\n", "DOWN"),
        ("Link Status:up", "UP"),
        ("dev_id[0] is invalid.\nhccn_tool failed\n", ""),
        ("", ""),
    ],
)
def test_hccn_link_output(text, state):
    assert raysmoke.parse_hccn_link(text) == state


def test_hccn_ip_output():
    assert raysmoke.parse_hccn_ip("ipaddr:192.168.100.101\nnetmask:255.255.255.0\n") == {
        "ipaddr": "192.168.100.101",
        "netmask": "255.255.255.0",
    }
    assert raysmoke.parse_hccn_ip("ipaddr:\nnetmask:\n") == {}
    assert raysmoke.parse_hccn_ip("get ip failed, ret:-2\n") == {}


def _fake_hccn_tool(folder: Path, down: int | None = None, no_ip: int | None = None) -> Path:
    """A hccn_tool answering `-i N -link -g` and `-i N -ip -g` in the real tool's format."""
    script = f"""\
        #!/bin/sh
        # hccn_tool -i N -link -g | hccn_tool -i N -ip -g
        case "$3" in
          -link) if [ "$2" = "{down}" ]; then echo "link status: DOWN"; else echo "link status: UP"; fi ;;
          -ip) if [ "$2" != "{no_ip}" ]; then echo "ipaddr:192.168.100.10$2"; echo "netmask:255.255.255.0"; fi ;;
        esac
        """
    return write_executable(folder / "hccn_tool", textwrap.dedent(script))


def test_hccn_checks_name_the_port_that_is_down_and_the_one_without_ip(tmp_path):
    tool = str(_fake_hccn_tool(tmp_path, down=1, no_ip=2))
    checks = raysmoke.hccn_checks(3, tool)
    assert [(c.item, c.value, c.status) for c in checks] == [
        ("npu ports", "1 of 3 UP", "ok"),
        ("npu 1 port", "DOWN", "fail"),
        ("npu 2 port", "no ip", "fail"),
    ]
    assert checks[0].message == "0=192.168.100.100"
    assert checks[1].message == "hccn_tool -i 1 -link -g: DOWN (the port must be UP)"
    missing = raysmoke.hccn_checks(8, str(tmp_path / "absent"))
    assert [c.status for c in missing] == ["fail"] * 8 and "absent" in missing[0].message


def _sysfs(root: Path, name: str, operstate: str, flags: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "operstate").write_text(operstate + "\n")
    (root / name / "flags").write_text(flags + "\n")


IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fe800000000000000000000000000001 02 40 20 80     eth0
20010db8000000000000000000000005 02 40 00 80     eth0
"""


def test_interface_state_and_addresses_from_sysfs_and_proc(tmp_path):
    net, inet6 = tmp_path / "net", tmp_path / "if_inet6"
    inet6.write_text(IF_INET6)
    _sysfs(net, "lo", "unknown", "0x9")
    _sysfs(net, "veth0", "down", "0x1002")  # IFF_UP cleared
    _sysfs(net, "veth1", "lowerlayerdown", "0x1003")  # set up, but its peer is down
    assert raysmoke.ipv6_addresses(IF_INET6, "eth0") == ["2001:db8::5"]  # link-local left out
    lo = raysmoke.interface("lo", net, inet6)
    assert lo.up and lo.operstate == "unknown" and lo.addresses == ("127.0.0.1", "::1")
    veth0, veth1 = raysmoke.interface("veth0", net, inet6), raysmoke.interface("veth1", net, inet6)
    assert veth0.exists and not veth0.up and veth0.operstate == "down"
    assert veth1.exists and not veth1.up and veth1.operstate == "lowerlayerdown"
    assert not raysmoke.interface("eth9", net, inet6).exists


def test_interface_checks_fail_down_addressless_and_missing_nics_and_warn_on_the_route(tmp_path):
    net = tmp_path / "net"
    _sysfs(net, "lo", "unknown", "0x9")
    _sysfs(net, "veth0", "down", "0x1002")
    good = raysmoke.interface_check("GLOO_SOCKET_IFNAME", "lo", "lo", net)
    assert [c.status for c in good] == ["ok"] and good[0].message.startswith("lo 127.0.0.1")  # and ::1 if IPv6 is on
    down = raysmoke.interface_check("GLOO_SOCKET_IFNAME", "veth0", "lo", net)
    assert [(c.item, c.value, c.status) for c in down] == [("GLOO_SOCKET_IFNAME", "veth0", "fail")]
    assert down[0].message == "GLOO_SOCKET_IFNAME=veth0: veth0 is down (operstate down) and has no address"
    missing = raysmoke.interface_check("HCCL_SOCKET_IFNAME", "eth0", "lo", net)
    assert missing[0].message == "HCCL_SOCKET_IFNAME=eth0: eth0 does not exist (this node has: lo, veth0)"
    unset = raysmoke.interface_check("HCCL_SOCKET_IFNAME", None, "lo", net)
    assert unset[0].status == "fail" and unset[0].value == "(unset)"
    prefix = raysmoke.interface_check("HCCL_SOCKET_IFNAME", "l", "lo", net)  # HCCL takes prefixes, gloo does not
    assert prefix[0].status == "ok"
    assert raysmoke.interface_check("GLOO_SOCKET_IFNAME", "l", "lo", net)[0].status == "fail"
    elsewhere = raysmoke.interface_check("GLOO_SOCKET_IFNAME", "lo", "eth1", net)
    assert [(c.item, c.value, c.status) for c in elsewhere] == [
        ("GLOO_SOCKET_IFNAME", "lo", "ok"),
        ("GLOO_SOCKET_IFNAME route", "eth1", "warn"),
    ]


def test_the_route_to_the_head_names_its_device():
    assert raysmoke.route_device("10.0.0.1 via 10.0.0.254 dev eth0 src 10.0.0.5 uid 0 \n    cache \n") == "eth0"
    assert raysmoke.route_device("local 127.0.0.1 dev lo src 127.0.0.1 uid 0 \n    cache <local> \n") == "lo"
    assert raysmoke.route_device("RTNETLINK answers: Network is unreachable\n") == ""


# --- one rank, in this process's own subprocess ------------------------------------------------


def _one_rank(code: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_rank_checks_and_times_all_reduce_and_all_gather_with_real_torch():
    pytest.importorskip("torch", reason="torch (CPU) is needed for a rank's collectives: pip install torch")
    spec = {"backend": "gloo", "rank": 0, "world": 1, "addr": "127.0.0.1", "port": _free_ports(1)[0]}
    spec.update(ops=["all_reduce", "all_gather"], bytes=1 << 20, timeout=60)
    code = f"import json\nfrom ascendfix.cluster.smoke import Rank\nprint(json.dumps(Rank().run({spec!r})))"
    answer = _one_rank(code)
    assert set(answer["ops"]) == {"all_reduce", "all_gather"}
    for op in answer["ops"].values():
        assert op["ok"] and op["bytes"] == 1 << 20 and op["seconds"] > 0


def test_a_rank_without_torch_or_torch_npu_says_the_job_needs_them():
    spec = {"backend": "hccl", "rank": 0, "world": 1, "addr": "127.0.0.1", "port": 1, "ops": [], "bytes": 4}
    for hidden, says in (("torch", "torch is not importable"), ("torch_npu", "torch_npu is not importable")):
        if hidden == "torch_npu":
            pytest.importorskip("torch", reason="torch (CPU) is needed to reach the torch_npu import")
        code = (
            f"import json, sys\nsys.modules[{hidden!r}] = None\nfrom ascendfix.cluster.smoke import Rank\n"
            f"print(json.dumps(Rank().run({spec | {'timeout': 5}!r})))"
        )
        error = _one_rank(code)["error"]
        assert error.startswith(says) and error.endswith("the job needs it")


def test_the_report_names_each_bad_node_in_its_json():
    bad = Node("b" * 56, "10.0.0.2", "node-b", [Check("GLOO_SOCKET_IFNAME", "eth1", "fail", "eth1 is down")])
    good = Node("a" * 56, "10.0.0.1", "node-a", [Check("GLOO_SOCKET_IFNAME", "eth0", "ok", "eth0 up")])
    report = SmokeReport("10.0.0.1:6166", [good, bad], [Collective("gloo", "all_reduce", 4, False)], ["1 of 3 nodes"])
    data = report.to_json()
    assert list(data) == ["address", "nodes", "collectives", "problems"]
    assert [n["ok"] for n in data["nodes"]] == [True, False]
    assert list(data["nodes"][0]) == ["node_id", "ip", "hostname", "checks", "ok"]
    assert data["collectives"] == [
        {"backend": "gloo", "op": "all_reduce", "bytes": 4, "ok": False, "busbw_gbps": None, "slowest": ""}
    ]
    assert data["problems"] == [
        {"node_id": "", "ip": "", "hostname": "", "item": "cluster", "value": "", "message": "1 of 3 nodes"},
        {
            "node_id": "b" * 56,
            "ip": "10.0.0.2",
            "hostname": "node-b",
            "item": "GLOO_SOCKET_IFNAME",
            "value": "eth1",
            "message": "eth1 is down",
        },
    ]
    assert not report.ok
    assert Check("npu 0 port", "\x1b[2Jdown\n", "fail").value == "?[2Jdown?"  # nothing a terminal would obey


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: ray smoke: give --nodes N, or --for SCRIPT"),
        (["--nodes", "2", "--for", "x.sh"], "error: ray smoke: give --nodes N, or --for SCRIPT"),
        (["--for", "missing.sh"], "error: --for missing.sh: no such file"),
        (["--nodes", "2", "--address", "127.0.0.1:1"], "error: --address 127.0.0.1:1: no Ray head answers there"),
    ],
)
def test_bad_ray_smoke_options_are_one_line_and_exit_2(tmp_path, args, message):
    pytest.importorskip("ray")
    result = subprocess.run(
        [sys.executable, "-m", "ascendfix", "ray", "smoke", "--device", "npu", *args],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr.startswith(message), result.stderr


class _Ref:
    def __init__(self, value, hangs: bool = False):
        self.value, self.hangs = value, hangs


class _Method:
    def __init__(self, answer, hangs: bool = False):
        self.answer, self.hangs = answer, hangs

    def remote(self, *args):
        return _Ref(self.answer, self.hangs)


class _FakeRank:
    """An actor's handle whose methods answer at once: rank ``i`` took ``seconds[i]`` per op."""

    def __init__(self, seconds: float, result_ok: bool = True, error: str = "", hangs: bool = False):
        ops = {op: {"ok": result_ok, "seconds": seconds, "bytes": 1 << 30} for op in ("all_reduce", "all_gather")}
        self.rendezvous = _Method(("10.0.0.1", 29500))
        self.run = _Method({"error": error} if error else {"ops": ops}, hangs)
        self.where = _Method("all_reduce")


class _FakeRay:
    """What the collectives' driver asks of ray: wait, get, kill."""

    def __init__(self):
        self.killed = 0

    def wait(self, refs, num_returns, timeout):
        return [r for r in refs if not r.hangs], [r for r in refs if r.hangs]

    def get(self, ref):
        return ref.value

    def kill(self, actor):
        self.killed += 1


def _nodes(*names: str) -> dict[str, Node]:
    return {name: Node(name * 8, f"10.0.0.{i + 1}", name) for i, name in enumerate(names)}


def test_device_collectives_name_the_slowest_node_and_give_each_nodes_busbw():
    by_id, ray = _nodes("a", "b"), _FakeRay()
    ranks = [("a", _FakeRank(0.10)), ("a", _FakeRank(0.12)), ("b", _FakeRank(0.20)), ("b", _FakeRank(0.15))]
    ops = ["all_reduce", "all_gather"]
    reduce, gather = raysmoke._collective(ray, ranks, "hccl", ops, 1 << 30, 60.0, by_id)
    assert ray.killed == 4
    assert reduce.ok and reduce.slowest == "10.0.0.2 bbbbbbbb" and reduce.bytes == 1 << 30
    assert reduce.busbw_gbps == pytest.approx(round((1 << 30) / 0.20 / 1e9 * 2 * 3 / 4, 3))
    assert gather.busbw_gbps == pytest.approx(round((1 << 30) / 0.20 / 1e9 * 3 / 4, 3))
    a_checks = {c.item: c.value for c in by_id["a"].checks}
    assert a_checks["hccl all_reduce busbw"] == f"{(1 << 30) / 0.12 / 1e9 * 1.5:.2f} GB/s"  # a node's slowest rank
    assert all(n.ok for n in by_id.values())


@pytest.mark.parametrize(
    "consequence",
    [
        "init_process_group(nccl): DistStoreError: wait timeout after 60000ms",
        "all_reduce: DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote"
        " server shutdown or crash?",
    ],
)
def test_a_rank_that_fails_is_named_and_the_ranks_that_waited_for_it_are_warnings(consequence):
    by_id = _nodes("a", "b", "c")
    ranks = [
        ("a", _FakeRank(0.1, error=consequence)),
        ("b", _FakeRank(0.1, error="torch sees no CUDA device on this node (torch.cuda.is_available() is False)")),
        ("c", _FakeRank(0.1, result_ok=False)),
    ]
    (reduce,) = raysmoke._collective(_FakeRay(), ranks, "nccl", ["all_reduce"], 4096, 60.0, by_id)
    assert not reduce.ok and reduce.busbw_gbps is None
    assert [(c.item, c.value, c.status) for c in by_id["a"].checks] == [("nccl rank", "waited", "warn")]
    assert by_id["a"].checks[0].message.startswith("waited for rank(s) 1, which failed: rank 0: ")
    assert [(c.item, c.value, c.status) for c in by_id["b"].checks] == [("nccl rank", "failed", "fail")]
    assert by_id["b"].checks[0].message == f"rank 1: {ranks[1][1].run.answer['error']}"
    assert by_id["a"].ok and not by_id["b"].ok and by_id["c"].ok  # c answered right; the collective as a whole failed


def test_a_rank_that_hangs_is_named_with_the_step_it_hangs_in():
    by_id = _nodes("a", "b")
    ranks = [("a", _FakeRank(0.1)), ("b", _FakeRank(0.1, hangs=True))]
    (reduce,) = raysmoke._collective(_FakeRay(), ranks, "hccl", ["all_reduce"], 4096, 30.0, by_id)
    assert not reduce.ok
    (hung,) = by_id["b"].checks
    assert hung.status == "fail" and hung.message == "rank 1: no answer within 90 s (stuck in all_reduce)"
    assert by_id["a"].ok  # it answered


def test_wrong_results_fail_the_node_that_got_them():
    by_id = _nodes("a", "b")
    ranks = [("a", _FakeRank(0.1)), ("b", _FakeRank(0.1, result_ok=False))]
    (gather,) = raysmoke._collective(_FakeRay(), ranks, "hccl", ["all_gather"], 4096, 60.0, by_id)
    assert not gather.ok
    assert [(c.item, c.status) for c in by_id["b"].checks if c.status == "fail"] == [("hccl all_gather", "fail")]
    assert by_id["a"].ok


# --- run --smoke -------------------------------------------------------------------------------


def test_run_smoke_findings_are_problems_with_no_preflight_too():
    asked = []

    def smoke(profile, device, overrides, environ):
        asked.append((device, dict(overrides)))
        return ["127.0.0.1 abcdef12 (vm) GLOO_SOCKET_IFNAME: GLOO_SOCKET_IFNAME=eth1: eth1 is down"]

    seams = Seams(lambda p, d, o: [], lambda p, d: {}, smoke=smoke)
    profile = manifest.load_profile("verl-796871d")
    result = run_preflight(profile, "npu", ["true", "trainer.nnodes=2"], {}, seams, full=False)
    assert [(f.source, f.message.split(": ")[-1]) for f in result.problems] == [("smoke", "eth1 is down")]
    assert asked == [("npu", {"trainer.nnodes": "2"})]


def test_run_smoke_without_a_reachable_cluster_refuses_and_starts_nothing(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(f"echo started > {tmp_path}/started.txt\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": str(tmp_path)}
    env.pop("RAY_ADDRESS", None)
    args = ["run", "--smoke", "--no-preflight", "--device", "npu", "--log-dir", str(tmp_path / "log"), str(script)]
    result = subprocess.run([sys.executable, "-m", "ascendfix", *args], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    smoke = [line for line in result.stderr.splitlines() if line.startswith("problem (smoke)")]
    reason = "no Ray cluster is reachable" if importlib.util.find_spec("ray") else "ray is not installed"
    assert len(smoke) == 1 and reason in smoke[0]
    assert not (tmp_path / "started.txt").exists()


# --- a real local cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_cluster(tmp_path_factory, loopback_netns):
    """head, w0 and w1, each with 8 fake NPUs and GLOO_SOCKET_IFNAME=lo, torch on CPU."""
    pytest.importorskip("ray")
    pytest.importorskip("torch", reason="ray smoke runs real torch.distributed collectives: pip install torch")
    base = tmp_path_factory.mktemp("ray-smoke")
    bin_dir = _fake_npu_smi(base)
    # `ray start` of this interpreter: its workers then import the torch this interpreter has
    write_executable(bin_dir / "ray", f'#!/bin/sh\nexec {sys.executable} -m ray.scripts.scripts "$@"\n')
    c = LocalCluster(base, _team_profile(base), bin_dir, loopback_netns)
    try:
        for name in ("head", "w0", "w1"):  # one after the other: raylets starting together can pick the same port
            c.start(name)
            if name == "head":
                c.wait_for_head()
            else:
                c.wait_started(name)
        yield c
    finally:
        left = c.stop()
        assert not left, f"Ray processes still running after SIGTERM to ray start --block: {left}"


def _smoke(c: LocalCluster, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    cmd = ["ray", "smoke", "--profile", str(c.profile), "--device", "npu", "--backend", "gloo", "--size", "1"]
    result = ascendfix(*cmd, *args, env=c.env)
    return result, time.monotonic() - start


@pytest.mark.slow
def test_smoke_gloo_passes_across_three_nodes(smoke_cluster):
    result, _ = _smoke(smoke_cluster, "--nodes", "3", "--timeout", "90", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert len(report["nodes"]) == 3 and report["problems"] == []
    for node in report["nodes"]:
        checks = {c["item"]: c for c in node["checks"]}
        assert node["ok"] and node["ip"] == "127.0.0.1"
        assert checks["GLOO_SOCKET_IFNAME"]["status"] == "ok" and checks["HCCL_SOCKET_IFNAME"]["value"] == "lo"
        assert "GLOO_SOCKET_IFNAME route" not in checks  # the route to the head (127.0.0.1) leaves by lo
        assert checks["hccn_tool"]["value"] == "not found"
        assert checks["gloo all_reduce busbw"]["value"].endswith(" GB/s")
    (gloo,) = report["collectives"]
    assert gloo["backend"] == "gloo" and gloo["op"] == "all_reduce" and gloo["ok"] and gloo["bytes"] == 1 << 20
    assert gloo["busbw_gbps"] > 0
    assert gloo["slowest"] in {f"{n['ip']} {n['node_id'][:8]}" for n in report["nodes"]}

    shown, _ = _smoke(smoke_cluster, "--nodes", "4", "--timeout", "90")
    assert shown.returncode == 1
    assert "problem: 3 of 4 nodes are alive (ascendfix ray wait)" in shown.stdout


@pytest.mark.slow
def test_run_smoke_refuses_a_job_the_cluster_cannot_run(smoke_cluster, tmp_path):
    c = smoke_cluster  # as a cuda job: no node registers a GPU, and none exports NCCL_SOCKET_IFNAME
    script = tmp_path / "train.sh"
    script.write_text(f"echo started > {tmp_path}/started.txt\n: trainer.nnodes=3 trainer.n_gpus_per_node=8\n")
    args = ["run", "--profile", str(c.profile), "--device", "cuda", "--no-preflight", "--smoke"]
    result = ascendfix(*args, "--log-dir", str(tmp_path / "log"), str(script), env={**c.env, "RAY_ADDRESS": c.address})
    assert result.returncode == 1, result.stderr
    smoke = [line for line in result.stderr.splitlines() if line.startswith("problem (smoke)")]
    unset = [line for line in smoke if "NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME is unset on this node" in line]
    assert len(unset) == 3
    assert "problem (smoke): no node has a GPU registered: the nccl channel cannot run" in smoke
    assert not any("GLOO" in line for line in smoke)  # the gloo channel passed
    assert not (tmp_path / "started.txt").exists()


@pytest.mark.slow
def test_a_node_whose_gloo_nic_is_down_is_named_and_smoke_ends_within_its_timeout(smoke_cluster, tmp_path):
    c = smoke_cluster
    netns = NETNS[3]  # ip netns exec NAME
    veth = ["ip", "link", "add", "veth0", "type", "veth", "peer", "veth1"]  # both ends down, no address
    subprocess.run(["ip", "netns", "exec", netns, *veth], check=True)
    doctor = ascendfix("doctor", "--profile", str(c.profile), "--device", "npu", "--only", "env", "--json",
                       env={**c.env, "GLOO_SOCKET_IFNAME": "veth0"})  # fmt: skip
    messages = json.loads(doctor.stdout)["checks"][0]["messages"]
    assert "GLOO_SOCKET_IFNAME=veth0" in messages  # doctor: the NIC exists, so it passes
    bin_dir = _fake_hccn_tool(tmp_path, down=3).parent
    c.start("w2", {"GLOO_SOCKET_IFNAME": "veth0", "PATH": f"{bin_dir}{os.pathsep}{c.env['PATH']}"})
    c.wait_started("w2")

    result, took = _smoke(c, "--nodes", "4", "--timeout", "15", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert took < 15 * 2 + raysmoke.GRACE_S + 60, took  # two phases of 15 s, the actors' start, the connect
    report = json.loads(result.stdout)
    bad = [n for n in report["nodes"] if not n["ok"] and any(c["value"] == "veth0" for c in n["checks"])]
    assert len(bad) == 1
    (w2,) = bad
    problems = {(p["item"], p["value"]): p for p in report["problems"] if p["node_id"] == w2["node_id"]}
    nic = problems[("GLOO_SOCKET_IFNAME", "veth0")]
    assert nic["message"] == "GLOO_SOCKET_IFNAME=veth0: veth0 is down (operstate down) and has no address"
    assert nic["ip"] == "127.0.0.1" and nic["hostname"]
    assert problems[("npu 3 port", "DOWN")]["message"] == "hccn_tool -i 3 -link -g: DOWN (the port must be UP)"
    assert {c["item"]: c["value"] for c in w2["checks"]}["npu ports"] == "7 of 8 UP"
    assert "Unable to find address for: veth0" in problems[("gloo rank", "failed")]["message"]  # gloo cannot bind
    named = [p["node_id"] for p in report["problems"]]
    assert named == [w2["node_id"]] * 3, report["problems"]  # the others only waited for it
    waited = [c for n in report["nodes"] if n is not w2 for c in n["checks"] if c["item"] == "gloo rank"]
    assert len(waited) == 3 and {c["status"] for c in waited} == {"warn"}
    (gloo,) = report["collectives"]
    assert not gloo["ok"] and gloo["busbw_gbps"] is None

    shown, _ = _smoke(c, "--nodes", "4", "--timeout", "15")
    assert shown.returncode == 1
    line = next(x for x in shown.stdout.splitlines() if x.startswith("problem") and "GLOO_SOCKET_IFNAME" in x)
    assert w2["node_id"][:8] in line and "veth0 is down" in line
