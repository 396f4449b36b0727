"""ascendfix ray smoke: the node checks, the ranks' collectives on CPU, the driver with a stand-in Ray, and
real local clusters.

The clusters are started as tests/cluster.py does (`ascendfix ray start --block` per node, in a private
network namespace of the test's own with only loopback, each cluster in its own RAY_TMPDIR): head, w0
and w1 with GLOO_SOCKET_IFNAME=lo. The second cluster test adds w2, whose GLOO_SOCKET_IFNAME names
veth0: one end of a veth pair made inside that namespace, down and without an address, so nothing can
bind to it. w2 also finds a hccn_tool on its PATH that reports NPU 3's port down.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from ascendfix.cluster.smoke import driver as raysmoke
from ascendfix.cluster.smoke import links as smoke_links
from ascendfix.cluster.smoke import node as smoke_node
from ascendfix.cluster.smoke import rank as smoke_rank
from ascendfix.cluster.smoke.report import BusbwFloor, Check, Collective, Node, SmokeReport, busbw_gbps
from ascendfix.doctor.nic import Interface
from ascendfix.job.preflight import Seams, run_preflight
from ascendfix.profile import manifest
from ascendfix.site import Site

from tests import cli
from tests.cluster import (
    NEEDS_RAY,
    LocalCluster,
    fake_npu_smi,
    free_ports,
    local_cluster,
    private_netns,
    ray_of_this_interpreter,
    team_profile,
)
from tests.machine import write_executable

# --- bus bandwidth, hccn_tool, interfaces ----------------------------------------------------


def test_busbw_is_nccl_tests_formula():
    # nccl-tests: algbw = bytes / time; all_reduce busbw = algbw * 2(n-1)/n; all_gather, reduce_scatter and
    # all_to_all busbw = algbw * (n-1)/n
    assert busbw_gbps("all_reduce", 8 * 10**9, 2.0, 8) == pytest.approx(4.0 * 2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert busbw_gbps(op, 8 * 10**9, 2.0, 8) == pytest.approx(4.0 * 7 / 8)
    assert busbw_gbps("send_recv", 10**9, 1.0, 2) == pytest.approx(1.0)
    assert busbw_gbps("all_reduce", 10**9, 1.0, 1) == 0.0  # one rank moves nothing over the bus
    assert busbw_gbps("all_reduce", 10**9, 0.0, 4) == 0.0


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
    assert smoke_node.parse_hccn_link(text) == state


def test_hccn_ip_and_tls_output():
    assert smoke_node.parse_hccn_ip("ipaddr:192.168.100.101\nnetmask:255.255.255.0\n") == {
        "ipaddr": "192.168.100.101",
        "netmask": "255.255.255.0",
    }
    assert smoke_node.parse_hccn_ip("ipaddr:\nnetmask:\n") == {}
    assert smoke_node.parse_hccn_ip("get ip failed, ret:-2\n") == {}
    tls = "dev_id:4, tls switch[1](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset)\n"
    assert smoke_node.parse_hccn_tls(tls) == "1"
    assert smoke_node.parse_hccn_tls("dev_id[0] is invalid.\n") == ""
    # Ascend/mind-cluster component/ascend-common/devmanager/hccn/hccn_tool.go, GetNPULinkSpeed: "Speed: 100000 Mb/s"
    assert smoke_node.parse_hccn_speed("Speed: 100000 Mb/s\n") == 100000
    assert smoke_node.parse_hccn_speed("speed:200000 Mbps") == 200000
    assert smoke_node.parse_hccn_speed("Speed: unknown\n") is None


def _fake_hccn_tool(
    folder: Path, down: int | None = None, no_ip: int | None = None, tls: int = 0, slow: int | None = None
) -> Path:
    """A hccn_tool answering `-i N -link -g`, `-ip -g`, `-tls -g` and `-speed -g` in the real tool's format (200G
    ports, ``slow`` at 100G, a down one ``unknown``); it logs each -i."""
    script = f"""\
        #!/bin/sh
        # hccn_tool -i N -link -g | -ip -g | -tls -g | -speed -g
        echo "$2" >> "{folder}/ids.log"
        case "$3" in
          -link) if [ "$2" = "{down}" ]; then echo "link status: DOWN"; else echo "link status: UP"; fi ;;
          -ip) if [ "$2" != "{no_ip}" ]; then echo "ipaddr:192.168.100.10$2"; echo "netmask:255.255.255.0"; fi ;;
          -tls) echo "dev_id:$2, tls switch[{tls}](0:disable, 1:enable), tls preconfigured[1]" ;;
          -speed) case "$2" in {down}) echo "Speed: unknown" ;; {slow}) echo "Speed: 100000 Mb/s" ;;
                  *) echo "Speed: 200000 Mb/s" ;; esac ;;
        esac
        """
    return write_executable(folder / "hccn_tool", textwrap.dedent(script))


def test_hccn_checks_name_the_port_that_is_down_and_the_one_without_ip(tmp_path):
    tool = str(_fake_hccn_tool(tmp_path, down=5, no_ip=6, tls=1, slow=6))
    checks, tls, speed = smoke_node.hccn_checks([4, 5, 6], tool)
    assert [(c.item, c.value, c.status) for c in checks] == [
        ("npu ports", "1 of 3 UP", "ok"),
        ("npu 5 port", "DOWN", "fail"),
        ("npu 6 port", "no ip", "fail"),
    ]
    assert checks[0].message == "4=192.168.100.104"
    assert checks[1].message == "hccn_tool -i 5 -link -g: DOWN (the port must be UP)"
    assert tls == {"4": "1", "5": "1", "6": "1"}
    assert speed == {"4": 200000, "6": 100000}  # the down port's speed is unknown
    missing, none, no_speed = smoke_node.hccn_checks(range(8), str(tmp_path / "absent"))
    assert [c.status for c in missing] == ["fail"] * 8 and "absent" in missing[0].message
    assert none == {} and no_speed == {}


def test_hccn_tool_gets_the_physical_device_ids(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("davinci4", "davinci5", "davinci6", "davinci7", "davinci_manager", "devmm_svm"):
        (dev / name).touch()
    assert smoke_node.physical_ids(8, {}, dev) == [4, 5, 6, 7]  # a container that sees davinci4-7
    assert smoke_node.physical_ids(8, {"ASCEND_RT_VISIBLE_DEVICES": "2,3"}, dev) == [2, 3]
    assert smoke_node.physical_ids(2, {}, tmp_path / "none") == [0, 1]


def test_a_tls_switch_that_differs_across_nodes_is_named():
    by_id = _nodes("a", "b", "c")
    raysmoke._compare_tls({"a": {"0": "1", "1": "1"}, "b": {"0": "1"}, "c": {"0": "0", "1": "0"}}, by_id)
    assert [(c.item, c.value, c.status) for c in by_id["c"].checks] == [("npu tls", "0", "fail")]
    assert "TLS switch 0 here, 1 on the other nodes" in by_id["c"].checks[0].message
    assert by_id["a"].ok and by_id["b"].ok


def test_a_port_slower_than_the_clusters_usual_speed_is_named_and_the_usual_speed_sets_the_floor():
    by_id = _nodes("a", "b")
    usual = raysmoke._compare_speed({"a": {"0": 200000, "1": 200000}, "b": {"0": 200000, "3": 100000}}, by_id)
    assert usual == 200000
    assert [(c.item, c.value, c.status) for c in by_id["b"].checks] == [("npu 3 speed", "100000 Mb/s", "warn")]
    assert "100000 Mb/s here, 200000 on most NPU ports" in by_id["b"].checks[0].message
    assert not by_id["a"].checks
    assert raysmoke._compare_speed({"a": {}, "b": {}}, by_id) == 0  # no hccn_tool: no speed, no floor

    job = raysmoke._Job.__new__(raysmoke._Job)
    job.device, job.port_mbps = "npu", usual
    assert job._floor(None) == BusbwFloor(12.5, "half the 200 Gb/s NPU port speed (hccn_tool -speed -g)")
    assert job._floor(3.0) == BusbwFloor(3.0, "--min-busbw")  # the option wins
    job.port_mbps = 0
    assert job._floor(None) is None
    job.device, job.port_mbps = "cuda", usual
    assert job._floor(None) is None


def test_the_placement_waits_only_for_the_groups_the_nodes_totals_can_hold():
    class _Ray:
        @staticmethod
        def nodes():
            big, one, small = {"CPU": 16.0, "NPU": 16.0}, {"CPU": 8.0, "NPU": 8.0}, {"CPU": 2.0, "NPU": 8.0}
            alive = [{"Alive": True, "Resources": r} for r in (big, one, small)]  # big holds two groups of 8
            return [*alive, {"Alive": False, "Resources": big}]

    assert raysmoke._groups_held(_Ray(), 8, {"CPU": 1, "NPU": 1}) == 3  # the small node and the dead one hold none
    assert raysmoke._groups_held(_Ray(), 8, {"CPU": 1, "GPU": 1}) == 0  # no GPU anywhere: nothing to wait for


ETH0 = Interface("eth0", 2, True, "up", ("10.0.0.5",), 1500)


def test_the_node_check_names_the_interface_the_grammar_selects_and_warns_on_the_route():
    nics = [Interface("lo", 1, True, "unknown", ("127.0.0.1",), 65536), ETH0]
    good = smoke_node.interface_check("HCCL_SOCKET_IFNAME", {"HCCL_SOCKET_IFNAME": "^docker0,lo"}, "eth0", nics)
    assert [(c.status, c.message) for c in good] == [("ok", "HCCL_SOCKET_IFNAME=^docker0,lo selects eth0 10.0.0.5, up")]
    elsewhere = smoke_node.interface_check("GLOO_SOCKET_IFNAME", {"GLOO_SOCKET_IFNAME": "lo"}, "eth0", nics)
    assert [(c.item, c.value, c.status) for c in elsewhere] == [
        ("GLOO_SOCKET_IFNAME", "lo", "ok"),
        ("GLOO_SOCKET_IFNAME route", "eth0", "warn"),
    ]
    unset = smoke_node.interface_check("HCCL_SOCKET_IFNAME", {}, "lo", nics)
    assert unset[0].status == "fail" and unset[0].value == "(unset)"
    by_ip = smoke_node.interface_check("HCCL_SOCKET_IFNAME", {"HCCL_IF_IP": "10.0.0.9"}, "", nics)
    assert [(c.item, c.value, c.status) for c in by_ip] == [("HCCL_IF_IP", "10.0.0.9", "fail")]


def test_the_route_to_the_head_names_its_device_and_none_on_the_head_itself():
    assert smoke_node.route_device("10.0.0.1 via 10.0.0.254 dev eth0 src 10.0.0.5 uid 0 \n    cache \n") == "eth0"
    assert smoke_node.route_device("local 10.0.0.1 dev lo table local src 10.0.0.1 uid 0 \n    cache <local> \n") == ""
    assert smoke_node.route_device("RTNETLINK answers: Network is unreachable\n") == ""


def test_hccl_ports_in_the_ephemeral_range_warn_unless_reserved(tmp_path):
    (tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    (tmp_path / "ip_local_reserved_ports").write_text("\n")
    (warning,) = smoke_node.ports_check({}, tmp_path)
    assert (warning.item, warning.value, warning.status) == ("hccl ports", "60000-60031", "warn")
    assert warning.message.endswith("fix: sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031")
    assert smoke_node.ports_check({"HCCL_IF_BASE_PORT": "20000"}, tmp_path) == []  # below the ephemeral range
    (tmp_path / "ip_local_reserved_ports").write_text("8080,60000-60031\n")
    assert smoke_node.ports_check({}, tmp_path) == []


# --- one rank, in this process's own subprocess ------------------------------------------------


def _one_rank(code: str) -> dict:
    result = cli.run(code=code, timeout=None)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_rank_checks_and_times_each_op_of_the_sweep_with_real_torch():
    pytest.importorskip("torch", reason="torch (CPU) is needed for a rank's collectives: pip install torch")
    spec = {"backend": "gloo", "rank": 0, "world": 1, "addr": "127.0.0.1", "port": free_ports(1)[0]}
    ops = [[op, size] for op in raysmoke.DEVICE_OPS for size in raysmoke.sizes(1 << 20)]
    spec.update(ops=ops, timeout=60)
    code = f"import json\nfrom ascendfix.cluster.smoke.rank import Rank\nprint(json.dumps(Rank().run({spec!r})))"
    answer = _one_rank(code)
    assert [(r["op"], r["bytes"]) for r in answer["results"]] == [(op, size) for op, size in ops]
    assert raysmoke.sizes(1 << 20) == [16384, 131072, 1 << 20]
    for result in answer["results"]:
        assert result["ok"] and result["seconds"] > 0


def test_a_pair_exchanges_a_message_larger_than_the_mtu_with_real_torch():
    pytest.importorskip("torch", reason="torch (CPU) is needed for a rank's collectives: pip install torch")
    spec = {"backend": "gloo", "addr": "127.0.0.1", "port": free_ports(1)[0], "bytes": 1 << 16, "timeout": 60}
    sides = [
        cli.start(
            code="import json, sys\nfrom ascendfix.cluster.smoke.rank import Rank\n"
            f"print(json.dumps(Rank().pair({spec | {'rank': rank}!r})))",
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    answers = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in sides]
    assert all(a["ok"] and a["bytes"] == 1 << 16 and a["seconds"] > 0 for a in answers), answers


def test_a_rank_without_torch_or_torch_npu_says_the_job_needs_them():
    spec = {"backend": "hccl", "rank": 0, "world": 1, "addr": "127.0.0.1", "port": 1, "ops": []}
    for hidden, says in (("torch", "torch is not importable"), ("torch_npu", "torch_npu is not importable")):
        if hidden == "torch_npu":
            pytest.importorskip("torch", reason="torch (CPU) is needed to reach the torch_npu import")
        code = (
            f"import json, sys\nsys.modules[{hidden!r}] = None\nfrom ascendfix.cluster.smoke.rank import Rank\n"
            f"print(json.dumps(Rank().run({spec | {'timeout': 5}!r})))"
        )
        error = _one_rank(code)["error"]
        assert error.startswith(says) and error.endswith("the job needs it")


EI0006 = (
    "The Inner Error is reported as above. The process exits for this inner error, and the current working "
    "operator name is HcclAllreduce.\nSince the operator is called asynchronously...\n"
    "[ERROR] 2026-12-01-10:00:00 (PID:1234, Device:0, RankID:1) ERR02200 DIST call hccl api failed.\n"
    "EI0006: [PID: 1234] 2026-12-01-10:00:00 Getting socket times out. Reason: Remote Rank did not send the data"
    " in time. srcRank[1], dstRank[3]\n"
)


def test_the_failing_ranks_problem_carries_hcclS_first_error_code_line():
    assert smoke_rank.hccl_error_line(EI0006).startswith("EI0006: [PID: 1234] ")
    assert smoke_rank.hccl_error_line("RuntimeError: plain\n") == ""
    code = (
        "import json\nfrom ascendfix.cluster.smoke.rank import Rank\n"
        "class Failing(Rank):\n"
        f"    def _setup(self, backend):\n        self.phase = 'all_reduce'\n        raise RuntimeError({EI0006!r})\n"
        "print(json.dumps(Failing().run({'backend': 'hccl'})))"
    )
    error = _one_rank(code)["error"]
    assert error.startswith("all_reduce: RuntimeError: The Inner Error is reported as above.")
    assert error.endswith("[EI0006: [PID: 1234] 2026-12-01-10:00:00 Getting socket times out. Reason: Remote Rank"
                          " did not send the data in time. srcRank[1], dstRank[3]]")  # fmt: skip


def test_a_rank_picks_its_device_as_verl_does():
    assert smoke_rank.device_index({"RAY_LOCAL_RANK": "5"}) == 0  # Ray narrowed ASCEND_RT_VISIBLE_DEVICES to one
    noset = {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1", "RAY_LOCAL_RANK": "5"}
    assert smoke_rank.device_index(noset) == 5  # verl 0.5.0 worker.py: set_device(int(RAY_LOCAL_RANK))


def test_the_report_names_each_bad_node_in_its_json():
    bad = Node("b" * 56, "10.0.0.2", "node-b", [Check("GLOO_SOCKET_IFNAME", "eth1", "fail", "eth1 is down")])
    good = Node("a" * 56, "10.0.0.1", "node-a", [Check("GLOO_SOCKET_IFNAME", "eth0", "ok", "eth0 up")])
    report = SmokeReport("10.0.0.1:6166", [good, bad], [Collective("gloo", "all_reduce", 4, False)], ["1 of 3 nodes"])
    data = json.loads(json.dumps(report.to_json()))
    assert list(data) == [
        "address",
        "nodes",
        "collectives",
        "busbw_floor",
        "untried_links",
        "suspects",
        "timeout_needed_s",
        "problems",
    ]
    assert data["untried_links"] == [] and data["suspects"] == [] and data["timeout_needed_s"] is None
    assert data["busbw_floor"] is None  # no device phase ran
    report.busbw_floor = BusbwFloor(12.5, "half the 200 Gb/s NPU port speed (hccn_tool -speed -g)")
    assert report.to_json()["busbw_floor"] == {"busbw_gbps": 12.5, "source": report.busbw_floor.source}
    assert [n["ok"] for n in data["nodes"]] == [True, False]
    assert list(data["nodes"][0]) == ["node", "node_id", "address", "hostname", "checks", "ok"]
    assert data["nodes"][1]["checks"][0]["status"] == "fail"
    assert data["collectives"] == [
        {"backend": "gloo", "op": "all_reduce", "bytes": 4, "ok": False, "busbw_gbps": None, "slowest": ""}
    ]
    assert data["problems"] == [
        {
            "node": "",
            "node_id": "",
            "address": "",
            "hostname": "",
            "item": "cluster",
            "value": "",
            "message": "1 of 3 nodes",
        },
        {
            "node": f"10.0.0.2 {'b' * 8}",
            "node_id": "b" * 56,
            "address": "10.0.0.2",
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
        pytest.param(
            ["--nodes", "2", "--address", "127.0.0.1:1"],
            "error: --address 127.0.0.1:1: no Ray head answers there",
            marks=NEEDS_RAY,
        ),
    ],
)
def test_bad_ray_smoke_options_are_one_line_and_exit_2(tmp_path, args, message):
    result = cli.run("ray", "smoke", "--device", "npu", *args, cwd=tmp_path, timeout=None)
    assert result.returncode == 2 and result.stderr.startswith(message), result.stderr


def test_the_smoke_tables_fit_100_columns(capsys):
    from ascendfix.cli.ray import _render_ray_smoke

    long = "HCCL_SOCKET_IFNAME=^docker0,lo matches no interface (this node has: " + "; ".join(
        f"veth{i} (no address), down (operstate down)" for i in range(6)
    )
    node = Node(
        "c" * 56,
        "10.0.0.3",
        "a-rather-long-hostname.example.internal",
        [Check("HCCL_SOCKET_IFNAME", "^docker0,lo", "fail", long)],
    )
    node.checks.append(Check("gloo all_reduce busbw", "1.23 GB/s", "ok"))
    report = SmokeReport(
        "10.0.0.1:6166", [node], [Collective("hccl", "reduce_scatter", 67108864, True, 12.5, node.label)]
    )
    report.busbw_floor = BusbwFloor(12.5, "half the 200 Gb/s NPU port speed (hccn_tool -speed -g)")
    _render_ray_smoke(report)
    shown = capsys.readouterr().out
    assert "busbw floor: 12.5 GB/s (half the 200 Gb/s NPU port speed (hccn_tool -speed -g))" in shown
    tables = shown[: shown.index("problem")]
    assert "veth5" in tables  # folded, not cut
    assert max(len(line) for line in tables.splitlines()) <= 100, tables
    assert f"problem 10.0.0.3 cccccccc (a-rather-long-hostname.example.internal) HCCL_SOCKET_IFNAME: {long}" in shown


class _Ref:
    def __init__(self, value, hangs: bool = False):
        self.value, self.hangs = value, hangs


class _Method:
    def __init__(self, answer, hangs: bool = False):
        self.answer, self.hangs = answer, hangs

    def remote(self, *args):
        answer = self.answer(*args) if callable(self.answer) else self.answer
        return _Ref(answer, self.hangs)


class _FakeRank:
    """An actor's handle whose methods answer at once: it took ``seconds`` per op."""

    def __init__(
        self, seconds: float, result_ok: bool = True, error: str = "", hangs: bool = False, where: str = "all_reduce"
    ):
        def run(spec):
            if error:
                return {"error": error}
            return {"results": [{"op": op, "bytes": n, "ok": result_ok, "seconds": seconds} for op, n in spec["ops"]]}

        self.rendezvous = _Method(("10.0.0.1", 29500))
        self.run = _Method(run, hangs)
        self.where = _Method(where)


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


GiB = 1 << 30


def test_device_collectives_name_the_slowest_node_and_give_each_nodes_busbw():
    by_id = _nodes("a", "b")
    ranks = [("a", _FakeRank(0.10)), ("a", _FakeRank(0.12)), ("b", _FakeRank(0.20)), ("b", _FakeRank(0.15))]
    ops = [("all_reduce", GiB // 8), ("all_reduce", GiB), ("all_to_all", GiB)]
    (small, reduce, a2a), stuck = raysmoke._collective(_FakeRay(), ranks, "hccl", ops, 60.0, by_id)
    assert stuck == set() and small.bytes == GiB // 8
    assert reduce.ok and reduce.slowest == "10.0.0.2 bbbbbbbb" and reduce.bytes == GiB
    assert reduce.busbw_gbps == pytest.approx(round(GiB / 0.20 / 1e9 * 2 * 3 / 4, 3))
    assert a2a.busbw_gbps == pytest.approx(round(GiB / 0.20 / 1e9 * 3 / 4, 3))
    a_checks = {c.item: c.value for c in by_id["a"].checks}  # one row per op, at its largest size
    assert a_checks == {
        "hccl all_reduce busbw": f"{GiB / 0.12 / 1e9 * 1.5:.2f} GB/s",  # a node's slowest rank
        "hccl all_to_all busbw": f"{GiB / 0.12 / 1e9 * 0.75:.2f} GB/s",
    }
    assert all(n.ok for n in by_id.values())
    assert raysmoke._below_floor(by_id, "hccl", BusbwFloor(10.0, "--min-busbw"))  # b: 8.05 GB/s
    assert not by_id["b"].ok and by_id["a"].ok
    (floor,) = [c for c in by_id["b"].checks if c.status == "fail"]
    assert floor.message == "hccl all_reduce busbw 8.05 GB/s is below the floor of 10 GB/s (--min-busbw)"


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
    (reduce,), _ = raysmoke._collective(_FakeRay(), ranks, "nccl", [("all_reduce", 4096)], 60.0, by_id)
    assert not reduce.ok and reduce.busbw_gbps is None
    assert [(c.item, c.value, c.status) for c in by_id["a"].checks] == [("nccl rank", "waited", "warn")]
    assert by_id["a"].checks[0].message.startswith("waited for rank(s) 1, which failed: rank 0: ")
    assert [(c.item, c.value, c.status) for c in by_id["b"].checks] == [("nccl rank", "failed", "fail")]
    assert (
        by_id["b"].checks[0].message
        == "rank 1: torch sees no CUDA device on this node (torch.cuda.is_available() is False)"
    )
    assert by_id["a"].ok and not by_id["b"].ok and by_id["c"].ok  # c answered right; the collective as a whole failed


def test_a_rank_that_hangs_is_named_with_the_step_it_hangs_in():
    by_id = _nodes("a", "b")
    ranks = [("a", _FakeRank(0.1)), ("b", _FakeRank(0.1, hangs=True))]
    (reduce,), stuck = raysmoke._collective(_FakeRay(), ranks, "hccl", [("all_reduce", 4096)], 30.0, by_id)
    assert not reduce.ok and stuck == {1}
    (hung,) = by_id["b"].checks
    assert hung.status == "fail" and hung.message.startswith("rank 1: no answer within ")
    assert hung.message.endswith(" s (stuck in all_reduce)")
    assert by_id["a"].ok  # it answered


def test_wrong_results_fail_the_node_that_got_them():
    by_id = _nodes("a", "b")
    ranks = [("a", _FakeRank(0.1)), ("b", _FakeRank(0.1, result_ok=False))]
    (gather,), _ = raysmoke._collective(_FakeRay(), ranks, "hccl", [("all_gather", 4096)], 60.0, by_id)
    assert not gather.ok
    assert [(c.item, c.status) for c in by_id["b"].checks if c.status == "fail"] == [("hccl all_gather", "fail")]
    assert by_id["a"].ok


class _Options:
    """An actor class whose ``options(...).remote()`` records the options each actor was made with."""

    def __init__(self):
        self.made = []

    def options(self, **kw):
        self.made.append(kw)
        return self

    def remote(self):
        return f"actor{len(self.made)}"


def test_device_ranks_run_with_hccls_timeouts_below_the_bound_and_their_local_rank():
    env = raysmoke.device_env(150.0)
    assert env == {"HCCL_CONNECT_TIMEOUT": "120", "HCCL_EXEC_TIMEOUT": "130"}  # the job's 3600 s replaced
    assert raysmoke.device_env(20.0)["HCCL_EXEC_TIMEOUT"] == "16"
    job = raysmoke._Job.__new__(raysmoke._Job)
    job.unit, job.actor = "NPU", _Options()
    job.on = lambda nid: f"on {nid}"
    ranks = job._ranks([("a", 0), ("a", 1), ("b", 0)], env)
    assert [nid for nid, _ in ranks] == ["a", "a", "b"]
    made = job.actor.made
    assert [m["runtime_env"]["env_vars"]["RAY_LOCAL_RANK"] for m in made] == ["0", "1", "0"]
    assert all(m["runtime_env"]["env_vars"]["HCCL_CONNECT_TIMEOUT"] == "120" for m in made)
    assert all(m["resources"] == {"NPU": 1} and m["scheduling_strategy"].startswith("on ") for m in made)


def test_without_min_busbw_a_node_below_half_the_npu_port_speed_fails_and_its_links_are_tried():
    job = raysmoke._Job.__new__(raysmoke._Job)
    job.by_id, job.accelerators = _nodes("a", "b"), {"a": 2, "b": 2}
    job.device, job.unit, job.port_mbps, job.mtu = "npu", "NPU", 200000, 1500
    job.ray, job.nbytes = _FakeRay(), 64 << 20
    took = {"a": 0.001, "b": 0.05}  # 64 MiB all_reduce over 4 ranks: a ~100 GB/s, b ~2 GB/s
    job._ranks = lambda nodes, env: [(nid, _FakeRank(took[nid])) for nid, _ in nodes]
    tried = []
    job._links = lambda backend, pool, env, bound: tried.append((backend, sorted(pool)))
    report = SmokeReport("10.0.0.1:6166", list(job.by_id.values()))
    job._device(200.0, 2, None, report)
    assert report.busbw_floor == BusbwFloor(12.5, "half the 200 Gb/s NPU port speed (hccn_tool -speed -g)")
    (floor,) = [c for c in job.by_id["b"].checks if c.status == "fail"]
    assert floor.item == "hccl busbw" and "below the floor of 12.5 GB/s (half the 200 Gb/s" in floor.message
    assert job.by_id["a"].ok and tried == [("hccl", ["a", "b"])]


# --- naming the link ---------------------------------------------------------------------------


def test_rounds_pair_every_node_once_in_disjoint_pairs():
    for n in range(2, 18):  # up to the guide's 16 nodes, and one more
        plan = smoke_links.rounds([f"n{i}" for i in range(n)])
        assert len(plan) == (n - 1 if n % 2 == 0 else n)
        pairs = [frozenset(p) for r in plan for p in r]
        assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
        for r in plan:
            nodes = [x for p in r for x in p]
            assert len(nodes) == len(set(nodes))  # disjoint


def _pairs(by_id, slow=(), failing=(), speed=1.0):
    results = {}
    for pair in (p for r in smoke_links.rounds(sorted(by_id)) for p in r):
        if set(pair) & set(failing):
            results[pair] = {"error": "send/recv 65536 bytes: DistError: Timed out"}
        else:
            factor = 5 if set(pair) & set(slow) else 1
            results[pair] = {"ok": True, "seconds": factor * 1e-3 / speed, "bytes": 10**6}
    return results


def test_the_node_in_every_failing_pair_is_the_one_named():
    by_id = _nodes("a", "b", "c", "d")
    smoke_links.blame(_pairs(by_id, failing="c"), by_id, "gloo")
    assert [n.hostname for n in by_id.values() if not n.ok] == ["c"]

    (link,) = [c for c in by_id["c"].checks if c.status == "fail"]
    assert link.message.startswith("its gloo link fails with 10.0.0.1 aaaaaaaa, 10.0.0.2 bbbbbbbb, 10.0.0.4 dddddddd")


def test_a_phase_cut_short_names_the_end_of_the_failing_pair_whose_other_links_carry():
    """The bound left c's other pairs untried: of the one failing pair (b, c), b carries traffic with a and d."""
    by_id = _nodes("a", "b", "c", "d")
    results = {p: ({"untried": True} if "c" in p and p != ("b", "c") else r) for p, r in _pairs(by_id, "", "c").items()}
    assert [p for p, r in results.items() if "error" in r] == [("b", "c")]
    smoke_links.blame(results, by_id, "gloo")
    assert [n.hostname for n in by_id.values() if not n.ok] == ["c"]


def test_a_throttled_node_is_named_and_a_single_bad_link_names_both_ends():
    for n in ("abcd", "abc"):
        by_id = _nodes(*n)
        smoke_links.blame(_pairs(by_id, slow="c"), by_id, "gloo")
        assert [x.hostname for x in by_id.values() if not x.ok] == ["c"], n
        assert "below half the nodes' median" in [c for c in by_id["c"].checks if c.status == "fail"][0].message
    by_id = _nodes("a", "b")
    smoke_links.blame({("a", "b"): {"error": "Timed out"}}, by_id, "gloo")
    assert not by_id["a"].ok and not by_id["b"].ok


def test_when_the_pairs_name_a_node_the_other_nodes_ranks_only_waited(monkeypatch):
    by_id = _nodes("a", "b", "c")
    for node in by_id.values():  # every rank of the collective timed out
        node.checks.append(Check("gloo rank", "failed", "fail", "rank 0: all_reduce: Timed out waiting for recv"))
    job = raysmoke._Job.__new__(raysmoke._Job)
    job.by_id, job.mtu, job.nbytes, job.ray = by_id, 1500, 1 << 20, _FakeRay()
    monkeypatch.setattr(smoke_links, "run_pairs", lambda *args: _pairs(by_id, failing="c"))
    job._links("gloo", {}, {}, 10.0)
    assert [n.hostname for n in by_id.values() if not n.ok] == ["c"]
    (rank,) = [c for c in by_id["a"].checks if c.item == "gloo rank"]
    assert rank.status == "warn" and rank.message.endswith("(the link phase names 10.0.0.3 cccccccc)")


# recorded outcomes: the silent drop on node d at --timeout 60, the last round left 2 s
NEVER_MET = (
    "init_process_group(gloo) at 10.0.0.1:41000: DistStoreError: Timed out after 2 seconds waiting for clients. "
    "1/2 clients joined."
)
DROPPED = "init_process_group(gloo) at 10.0.0.1:41001: DistNetworkError: Connect timeout [10.20.0.4]:3001"


def test_a_pair_whose_store_never_gathered_both_ends_is_untried_not_a_bad_link():
    by_id = _nodes("a", "b", "c", "d")
    results = _pairs(by_id, failing="d")
    results[("b", "c")] = {"untried": f"10.0.0.1 aaaaaaaa: {NEVER_MET}"}
    assert smoke_links.untried({"error": NEVER_MET}) == NEVER_MET and not smoke_links.untried({"error": DROPPED})
    verdict = smoke_links.blame(results, by_id, "gloo")
    assert [n.hostname for n in by_id.values() if not n.ok] == ["d"]  # before: all four
    assert list(verdict.untried) == [("b", "c")] and verdict.suspects == []


def test_a_pairs_two_sides_make_one_outcome():
    a, b = _nodes("a", "b").values()
    ok = {"ok": True, "seconds": 0.01, "bytes": 10**6}
    assert smoke_links._outcome([{**ok, "connect_s": 2.0}, {**ok, "connect_s": 0.5}], (a, b))["connect_s"] == 0.5
    never = smoke_links._outcome([{"error": NEVER_MET}, {"error": "no answer within 9 s", "stuck": True}], (a, b))
    assert never == {"untried": f"10.0.0.1 aaaaaaaa: {NEVER_MET}"}
    assert smoke_links._outcome([ok, {"error": DROPPED}], (a, b)) == {"error": f"10.0.0.2 bbbbbbbb: {DROPPED}"}
    hung = {"error": "no answer within 7 s", "stuck": True}  # the side that said why is shown, not the hung one
    assert smoke_links._outcome([hung, {"error": DROPPED}], (a, b)) == {"error": f"10.0.0.2 bbbbbbbb: {DROPPED}"}


def test_when_the_bound_ran_out_before_the_culprit_is_isolated_the_failing_pairs_ends_are_suspects_only():
    """Only the first round ran: (a, d) failed, (b, c) carried; which end of (a, d) is bad is not known."""
    by_id = _nodes("a", "b", "c", "d")
    first = smoke_links.rounds(sorted(by_id))[0]
    assert sorted(first) == [("a", "d"), ("b", "c")]
    results = {p: {"untried": "not started: 3 s left, a pair needs 7 s here"} for p in _pairs(by_id)}
    results[("a", "d")] = {"error": f"10.0.0.4 dddddddd: {DROPPED}"}
    results[("b", "c")] = {"ok": True, "seconds": 1e-3, "bytes": 10**6, "connect_s": 0.2}
    verdict = smoke_links.blame(results, by_id, "gloo")
    assert all(n.ok for n in by_id.values())  # nobody failed on this evidence
    assert verdict.suspects == ["a", "d"] and len(verdict.untried) == 4
    (suspect,) = [c for c in by_id["d"].checks if c.item == "gloo link"]
    assert suspect.status == "warn" and suspect.value == "suspect"
    assert suspect.message.startswith("suspect: its gloo link fails with 10.0.0.1 aaaaaaaa; untried with 10.0.0.2")
    nothing = _nodes("a", "b", "c")  # nothing failed, some untried: no suspect
    results = {p: {"untried": "the rank on 10.0.0.1 aaaaaaaa was not up in time"} for p in _pairs(nothing)}
    assert smoke_links.blame(results, nothing, "gloo").suspects == [] and all(n.ok for n in nothing.values())


def test_the_report_names_the_untried_links_the_suspects_and_the_timeout_that_would_finish(monkeypatch):
    by_id = _nodes("a", "b", "c", "d")
    for node in by_id.values():  # every rank of the collective hung
        node.checks.append(Check("gloo rank", "failed", "fail", "rank 0: no answer within 18 s (stuck in all_reduce)"))
    results = {p: {"untried": "not started: 3 s left, a pair needs 7 s here"} for p in _pairs(by_id)}
    results[("a", "d")] = {"error": f"10.0.0.4 dddddddd: {DROPPED}"}
    results[("b", "c")] = {"ok": True, "seconds": 1e-3, "bytes": 10**6, "connect_s": 0.2}

    def run_pairs(ray, pool, make, by_id, backend, nbytes, clock, gather):
        clock.round_s = 12.0  # the one round that ran took 12 s
        return results

    job = raysmoke._Job.__new__(raysmoke._Job)
    job.by_id, job.mtu, job.nbytes, job.ray, job.budget = by_id, 1500, 1 << 20, _FakeRay(), raysmoke.Budget(60)
    job.report = SmokeReport("10.0.0.1:6166", list(by_id.values()))
    monkeypatch.setattr(smoke_links, "run_pairs", run_pairs)
    job._links("gloo", {}, {}, 30.0)
    data = json.loads(json.dumps(job.report.to_json()))
    assert data["suspects"] == ["10.0.0.1 aaaaaaaa", "10.0.0.4 dddddddd"]
    assert {frozenset(u["nodes"]) for u in data["untried_links"]} == {
        frozenset({f"10.0.0.{x} {name * 8}", f"10.0.0.{y} {other * 8}"})
        for (x, name), (y, other) in [
            ((1, "a"), (3, "c")),
            ((2, "b"), (4, "d")),
            ((1, "a"), (2, "b")),
            ((3, "c"), (4, "d")),
        ]
    }
    assert data["timeout_needed_s"] == 90.0  # 60 s, and two more rounds of 12 s, rounded up
    assert [p["node_id"] for p in data["problems"]] == [""]  # no node failed: the ranks only waited
    (why,) = [p["message"] for p in data["problems"]]
    assert why.startswith("the gloo link phase ran out of time (--timeout 60) before it isolated a node: 4 of 6")
    assert why.endswith(
        "the failing links point at 10.0.0.1 aaaaaaaa, 10.0.0.4 dddddddd; --timeout 90 would try them all"
    )
    (rank,) = [c for c in by_id["b"].checks if c.item == "gloo rank"]
    assert rank.status == "warn" and rank.message.endswith(
        "(the link phase points at 10.0.0.1 aaaaaaaa, 10.0.0.4 dddddddd, not isolated)"
    )


class _PairRank:
    """A link-phase actor: ``up`` whether it answers ready; its pair answers ``answer``."""

    def __init__(self, up: bool = True, answer: dict | None = None):
        self.ready = _Method(True, hangs=not up)
        self.rendezvous = _Method(("10.0.0.1", 29500))
        self.specs = []

        def pair(spec):
            self.specs.append(spec)
            return answer or {"ok": True, "seconds": 1e-3, "bytes": 10**6, "connect_s": 1.5}

        self.pair = _Method(pair)


def test_a_pair_starts_only_with_both_ranks_up_and_the_time_a_connection_takes():
    by_id = _nodes("a", "b", "c", "d")
    pool = {"a": _PairRank(), "b": _PairRank(), "c": _PairRank(up=False), "d": _PairRank()}
    clock = smoke_links.Clock(60.0)
    results = smoke_links.run_pairs(_FakeRay(), pool, None, by_id, "gloo", 1 << 20, clock, raysmoke._gather)
    assert {p for p, r in results.items() if "untried" in r} == {p for p in results if "c" in p}
    assert all(
        "the rank on 10.0.0.3 cccccccc was not up in time" == r["untried"] for p, r in results.items() if "c" in p
    )
    assert clock.connect_s == 1.5 and clock.pair_s() == 4.5  # measured: three connections
    assert all(spec["timeout"] >= 4.5 for spec in pool["a"].specs)
    late = smoke_links.Clock(5.0, connect_s=3.0)  # a pair needs 9 s here: none is started
    results = smoke_links.run_pairs(_FakeRay(), pool, None, by_id, "gloo", 1 << 20, late, raysmoke._gather)
    assert all(r["untried"].startswith("not started: 5 s left, a pair needs 15 s here") for r in results.values())


def test_a_hung_collective_leaves_the_link_phase_the_time_its_pairs_need(monkeypatch):
    job = raysmoke._Job.__new__(raysmoke._Job)
    job.by_id, job.ray, job.nbytes = _nodes("a", "b", "c", "d"), _FakeRay(), 1 << 20
    job._ranks = lambda nodes, env: [(nid, _FakeRank(0.1)) for nid, _ in nodes]
    bounds = {}

    def collective(ray, ranks, backend, ops, bound, by_id):
        bounds["collective"] = bound
        return [], set(range(len(ranks)))  # every rank hung for all of it

    monkeypatch.setattr(raysmoke, "_collective", collective)
    job._links = lambda backend, pool, env, bound: bounds.setdefault("links", bound)
    job._gloo(30.0)
    assert bounds["collective"] == pytest.approx(30.0 - smoke_links.Clock(0).needed(3))  # less than half of 30 s
    assert bounds["links"] >= smoke_links.Clock(0).needed(3) - 1  # three rounds of four nodes, each its least time


def test_a_rank_still_importing_when_the_others_gave_up_is_untried_and_left_running():
    by_id = _nodes("a", "b")
    ranks = [("a", _FakeRank(0.1, hangs=True, where="init_process_group(gloo) at 10.0.0.1:1")),
             ("b", _FakeRank(0.1, hangs=True, where="import torch"))]  # fmt: skip
    (reduce,), stuck = raysmoke._collective(_FakeRay(), ranks, "gloo", [("all_reduce", 4096)], 30.0, by_id)
    assert not reduce.ok and stuck == {0}  # b is not killed: its run returns once torch is imported
    assert [(c.value, c.status) for c in by_id["b"].checks] == [("untried", "warn")]
    assert by_id["b"].checks[0].message.startswith("untried, not up in time on this busy node: rank 1: no answer")
    assert [(c.value, c.status) for c in by_id["a"].checks] == [("waited", "warn")]
    assert by_id["a"].checks[0].message.startswith("waited for rank(s) 1, which were not up in time: rank 0:")


def test_healthy_links_name_nobody():
    by_id = _nodes("a", "b", "c", "d")
    smoke_links.blame(_pairs(by_id), by_id, "gloo")
    assert all(n.ok for n in by_id.values()) and all(c.item == "gloo link" for n in by_id.values() for c in n.checks)


# --- run --smoke -------------------------------------------------------------------------------


def test_run_smoke_findings_are_problems_with_no_preflight_too():
    asked = []

    def smoke(profile, device, overrides, environ):
        asked.append((device, dict(overrides)))
        return ["127.0.0.1 abcdef12 (vm) GLOO_SOCKET_IFNAME: GLOO_SOCKET_IFNAME=eth1: eth1 is down"]

    profile = manifest.load_profile("verl-796871d")
    result = run_preflight(
        Site(profile, "npu", environ={}), ["true", "trainer.nnodes=2"], Seams(smoke=smoke), full=False
    )
    assert [(f.source, f.message.split(": ")[-1]) for f in result.problems] == [("smoke", "eth1 is down")]
    assert asked == [("npu", {"trainer.nnodes": "2"})]


def test_run_smoke_without_a_reachable_cluster_refuses_and_starts_nothing(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(f"echo started > {tmp_path}/started.txt\n")
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path)}
    env.pop("RAY_ADDRESS", None)
    args = ["run", "--smoke", "--no-preflight", "--device", "npu", "--log-dir", str(tmp_path / "log"), str(script)]
    result = cli.run(*args, env=env, clean_env=True, timeout=None)
    assert result.returncode == 1
    smoke = [line for line in result.stderr.splitlines() if line.startswith("problem (smoke)")]
    reason = "no Ray cluster is reachable" if importlib.util.find_spec("ray") else "ray is not installed"
    assert len(smoke) == 1 and reason in smoke[0]
    assert not (tmp_path / "started.txt").exists()


# --- a real local cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def netns():
    """A private network namespace with only `lo`, up."""
    with private_netns() as ns:
        yield ns


@pytest.fixture(scope="module")
def smoke_cluster(tmp_path_factory, netns):
    """head, w0 and w1, each with 8 fake NPUs and GLOO_SOCKET_IFNAME=lo, torch on CPU."""
    pytest.importorskip("ray", reason="ray is not installed: pip install 'ascendfix[ray]'")
    pytest.importorskip("torch", reason="ray smoke runs real torch.distributed collectives: pip install torch")
    base = tmp_path_factory.mktemp("ray-smoke")
    with local_cluster(base, netns, ("head", "w0", "w1"), bin_dir=ray_of_this_interpreter(base)) as c:
        yield c


def _beyond_speed(problems: list[dict]) -> list[dict]:
    """The problems but a link's speed verdict ("below half the nodes' median"): these clusters' nodes share one
    loopback on a busy 2-core machine, where what a link carries is what the cores leave it (a healthy node's links
    once timed at 0.44 of the median while the other worker's jobs ran). Speed is judged on shaped links, in
    tests/test_ray_faults.py."""
    return [p for p in problems if not (p["item"] == "gloo link" and p["value"].endswith(" GB/s"))]


def _smoke(c: LocalCluster, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    cmd = ["ray", "smoke", "--profile", str(c.profile), "--device", "npu", "--backend", "gloo", "--size", "1"]
    result = c.ascendfix(*cmd, *args)
    return result, time.monotonic() - start


@pytest.mark.slow
def test_smoke_gloo_passes_across_three_nodes(smoke_cluster):
    result, _ = _smoke(smoke_cluster, "--nodes", "3", "--timeout", "120", "--json")
    report = json.loads(result.stdout)
    assert len(report["nodes"]) == 3 and _beyond_speed(report["problems"]) == [], result.stdout + result.stderr
    assert result.returncode == (1 if report["problems"] else 0)
    for node in report["nodes"]:
        checks = {c["item"]: c for c in node["checks"]}
        assert node["address"] == "127.0.0.1"
        assert checks["GLOO_SOCKET_IFNAME"]["status"] == "ok" and checks["HCCL_SOCKET_IFNAME"]["value"] == "lo"
        assert checks["HCCL_SOCKET_IFNAME"]["message"].startswith("HCCL_SOCKET_IFNAME=lo selects lo 127.0.0.1")
        assert "GLOO_SOCKET_IFNAME route" not in checks  # the route to the head (127.0.0.1) is local
        assert checks["hccn_tool"]["value"] == "not found"
        assert checks["gloo all_reduce busbw"]["value"].endswith(" GB/s")
        # every pair of nodes exchanged a message (its speed is a verdict this busy loopback cannot make)
        assert checks["gloo link"]["value"].endswith(" GB/s")
    (gloo,) = report["collectives"]
    assert gloo["backend"] == "gloo" and gloo["op"] == "all_reduce" and gloo["ok"] and gloo["bytes"] == 1 << 20
    assert gloo["busbw_gbps"] > 0
    assert gloo["slowest"] in {n["node"] for n in report["nodes"]}

    shown, _ = _smoke(smoke_cluster, "--nodes", "4", "--timeout", "120")
    assert shown.returncode == 1
    assert "problem: 3 of 4 nodes are alive (ascendfix ray wait)" in shown.stdout
    tables = shown.stdout[: shown.stdout.index("problem")]
    assert max(len(line) for line in tables.splitlines()) <= 100, tables


@pytest.mark.slow
def test_run_smoke_refuses_a_job_the_cluster_cannot_run(smoke_cluster, tmp_path):
    c = smoke_cluster  # as a cuda job: no node registers a GPU, and none exports NCCL_SOCKET_IFNAME
    script = tmp_path / "train.sh"
    script.write_text(f"echo started > {tmp_path}/started.txt\n: trainer.nnodes=3 trainer.n_gpus_per_node=8\n")
    args = ["run", "--profile", str(c.profile), "--device", "cuda", "--no-preflight", "--smoke"]
    result = c.ascendfix(
        *args, "--log-dir", str(tmp_path / "log"), str(script), env={**c.env, "RAY_ADDRESS": c.address}
    )
    assert result.returncode == 1, result.stderr
    smoke = [line for line in result.stderr.splitlines() if line.startswith("problem (smoke)")]
    unset = [line for line in smoke if "NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME is unset on this node" in line]
    assert len(unset) == 3
    assert "problem (smoke): no node has a GPU registered: the nccl channel cannot run" in smoke
    placement = [line for line in smoke if " placement: " in line]  # 1 CPU and no GPU: 8 × {CPU, GPU} fits nowhere
    assert len(placement) == 3 and all("free here CPU" in line for line in placement)
    assert not any("GLOO" in line for line in smoke)  # the gloo channel passed
    assert not (tmp_path / "started.txt").exists()


@pytest.mark.slow
def test_a_node_whose_gloo_nic_is_down_is_named_and_smoke_ends_within_its_timeout(smoke_cluster, tmp_path):
    c = smoke_cluster
    c.netns.ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth1")  # both ends down, no address
    doctor = c.ascendfix("doctor", "--profile", str(c.profile), "--device", "npu", "--only", "env", "--json",
                         env={**c.env, "GLOO_SOCKET_IFNAME": "veth0"})  # fmt: skip
    messages = json.loads(doctor.stdout)["checks"][0]["messages"]
    assert "GLOO_SOCKET_IFNAME=veth0: veth0 (no address), down (operstate down) (this node has: " in "".join(messages)
    bin_dir = _fake_hccn_tool(tmp_path, down=3).parent
    c.start("w2", {"GLOO_SOCKET_IFNAME": "veth0", "PATH": f"{bin_dir}{os.pathsep}{c.env['PATH']}"})
    c.wait_started("w2")

    result, took = _smoke(c, "--nodes", "4", "--timeout", "60", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert took < 60 + 30, took  # --timeout bounds the smoke; the rest is the command's own start
    report = json.loads(result.stdout)
    bad = [n for n in report["nodes"] if not n["ok"] and any(c["value"] == "veth0" for c in n["checks"])]
    assert len(bad) == 1
    (w2,) = bad
    problems = {(p["item"], p["value"]): p for p in report["problems"] if p["node_id"] == w2["node_id"]}
    nic = problems[("GLOO_SOCKET_IFNAME", "veth0")]
    assert nic["message"].startswith("GLOO_SOCKET_IFNAME=veth0: veth0 (no address), down (operstate down)")
    assert nic["address"] == "127.0.0.1" and nic["hostname"]
    assert problems[("npu 3 port", "DOWN")]["message"] == "hccn_tool -i 3 -link -g: DOWN (the port must be UP)"
    assert {c["item"]: c["value"] for c in w2["checks"]}["npu ports"] == "7 of 8 UP"
    assert "Unable to find address for: veth0" in problems[("gloo rank", "failed")]["message"]  # gloo cannot bind
    assert {p["node_id"] for p in report["problems"]} == {w2["node_id"]}, report["problems"]  # the others waited
    assert problems[("gloo link", "failed")]["message"].startswith("its gloo link fails with ")
    waited = [c for n in report["nodes"] if n is not w2 for c in n["checks"] if c["item"] == "gloo rank"]
    assert len(waited) == 3 and {c["status"] for c in waited} == {"warn"}
    (gloo,) = report["collectives"]
    assert not gloo["ok"] and gloo["busbw_gbps"] is None

    shown, _ = _smoke(c, "--nodes", "4", "--timeout", "60")
    assert shown.returncode == 1
    line = next(x for x in shown.stdout.splitlines() if x.startswith("problem") and "GLOO_SOCKET_IFNAME" in x)
    assert w2["node_id"][:8] in line and "veth0 (no address), down" in line


@pytest.mark.slow
def test_smoke_for_a_script_names_the_node_whose_cpus_cannot_hold_the_jobs_placement(tmp_path_factory):
    pytest.importorskip("ray", reason="ray is not installed: pip install 'ascendfix[ray]'")
    pytest.importorskip("torch", reason="ray smoke runs real torch.distributed collectives: pip install torch")
    base = tmp_path_factory.mktemp("ray-place")
    with private_netns() as own:
        c = LocalCluster(base, team_profile(base), ray_of_this_interpreter(base), own)
        try:
            for name in ("head", "w0", "w1", "small"):
                c.start(name, cpus=2 if name == "small" else 8)  # npu-smi registers {"NPU": 8} on each
                c.wait_for_head() if name == "head" else c.wait_started(name)
            script = tmp_path_factory.mktemp("job") / "train.sh"
            script.write_text("python3 -m verl.trainer.main_ppo trainer.nnodes=4 trainer.n_gpus_per_node=8\n")
            result, _ = _smoke(c, "--for", str(script), "--timeout", "120", "--json")
            report = json.loads(result.stdout)
            starved = [p for p in report["problems"] if p["item"] == "placement"]
            assert result.returncode == 1 and len(starved) == 1, report["problems"]
            (small,) = [n for n in report["nodes"] if n["node_id"] == starved[0]["node_id"]]
            assert starved[0]["value"] == "free CPU 2, NPU 8"
            assert "STRICT_PACK group of 8 × {CPU: 1, NPU: 1}" in starved[0]["message"]
            others = [n for n in report["nodes"] if n is not small]
            assert all({c["item"]: c["status"] for c in n["checks"]}["placement"] == "ok" for n in others)
            assert {p["node_id"] for p in _beyond_speed(report["problems"])} == {small["node_id"]}  # gloo passed
        finally:
            left = c.stop()
            assert not left, f"Ray processes still running after SIGTERM to ray start --block: {left}"


@pytest.mark.slow
@pytest.mark.beside_jobs  # each command refuses at once (no bound in seconds); its own namespace and head
def test_a_cluster_that_wants_a_token_refuses_in_one_line_with_the_fix(tmp_path):
    """The head started where ~/.ray/auth_token exists (Ray turns token authentication on by itself); ray smoke,
    ray wait and a --ray command from a home without the token each say so in one line, with the fix."""
    ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'ascendfix[ray]'")
    if not hasattr(ray.exceptions, "AuthenticationError"):
        pytest.skip(f"ray {ray.__version__} has no token authentication (Ray >= 2.5x)")
    token_home, plain_home = tmp_path / "token-home", tmp_path / "plain-home"
    (token_home / ".ray").mkdir(parents=True)
    plain_home.mkdir()
    (token_home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    with private_netns() as netns:  # its own: the module's cluster may run beside it
        c = LocalCluster(tmp_path, team_profile(tmp_path), fake_npu_smi(tmp_path), netns)
        del c.env["RAY_AUTH_MODE"]
        try:
            c.start("head", extra_env={"HOME": str(token_home)})
            c.wait_for_head()
            env, profile = {**c.env, "HOME": str(plain_home)}, ("--profile", str(c.profile), "--device", "npu")
            for args in (
                ("ray", "smoke", *profile, "--address", c.address, "--nodes", "1", "--backend", "gloo"),
                ("ray", "wait", *profile, "--address", c.address, "--nodes", "1", "--timeout", "5"),
                ("doctor", *profile, "--ray", c.address),
            ):
                result = c.ascendfix(*args, env=env)
                lines = result.stderr.strip().splitlines()
                assert result.returncode == 2 and len(lines) == 1, result.stdout + result.stderr
                assert f"{c.address}: the Ray cluster refused this connection's authentication" in lines[0]
                assert "export RAY_AUTH_MODE=token" in lines[0] and "RAY_AUTH_MODE=disabled" in lines[0]
        finally:
            left = c.stop()
            assert not left, f"Ray processes still running after SIGTERM to ray start --block: {left}"


def test_a_node_whose_checks_got_no_time_is_untried_not_failed():
    answers = {"a": _Ref({"checks": [], "tls": {}, "speed": {}, "mtu": 1500}), "b": _Ref(None, hangs=True)}

    class _Task:
        def options(self, scheduling_strategy):
            self.nid = scheduling_strategy
            return self

        def remote(self, *args):
            return answers[self.nid]

    class _Ray(_FakeRay):
        def remote(self, **kw):
            return lambda fn: _Task()

        def get_runtime_context(self):
            return type("Context", (), {"gcs_address": "10.0.0.1:6166"})()

    job = raysmoke._Job.__new__(raysmoke._Job)
    job.ray, job.by_id, job.accelerators = _Ray(), _nodes("a", "b"), {"a": 0, "b": 0}
    job.profile, job.device, job.budget = manifest.load_profile("verl-796871d"), "npu", raysmoke.Budget(60)
    job.on = lambda nid: nid
    assert job._node_checks("gloo") == 1500
    (check,) = job.by_id["b"].checks
    assert (check.item, check.value, check.status) == ("checks", "untried", "warn") and job.by_id["b"].ok
    assert check.message.startswith("untried: no answer within ")
