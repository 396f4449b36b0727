"""ray smoke on a fabric like a site's: four nodes, each in a private network namespace of its own, with a
management bridge for Ray and a separate data bridge for gloo (``GLOO_SOCKET_IFNAME=data``), both in a
"switch" namespace. One fault at a time on node3's data port, made at the switch:

- its port silently dropping (the bridge port disabled: node3's link stays up, its frames go nowhere), under
  a tight ``--timeout``, three times: node3 alone, or the links left untried, with no healthy node failed;
- an MTU blackhole (every data interface at 9000, node3's switch port at 1500, and the nodes' GSO off: a
  bridge forwards a GSO super-packet whole past a port's MTU, where a real NIC puts MTU-sized frames on the
  wire, so with GSO on some of node3's transfers would pass);
- its link throttled 5× (tbf: 50 Mbit/s, the others 250 Mbit/s).

The others must name exactly node3, within ``--timeout``. Needs ip (iproute2), tc, unshare and nsenter; a
missing one skips, saying which.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator

import pytest

from tests.cluster import LocalCluster, Netns, ray_of_this_interpreter, team_profile

NODES = ("head", "w1", "w2", "w3")
FAULTY = 3  # node3: w3
TIMEOUT = 150
TIGHT = 60  # the issue's --timeout, at which a slow restart once left the last pairs 2 s
RATE, SLOW_RATE = "250mbit", "50mbit"


def _mgmt_ip(i: int) -> str:
    return f"10.10.0.{i + 1}"


class Fabric:
    """The switch namespace (bridges ``bridge-m``, ``bridge-d``) and one namespace per node."""

    def __init__(self) -> None:
        for tool in ("ip", "tc", "bridge"):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} is not installed (iproute2): no namespace fabric")
        self.switch = Netns()
        self.nodes = [Netns() for _ in NODES]
        sw = self.switch
        for bridge in ("bridge-m", "bridge-d"):
            sw.ip("link", "add", "name", bridge, "type", "bridge")
            sw.ip("link", "set", bridge, "up")
        for i, node in enumerate(self.nodes):
            for kind, bridge, net in (("m", "bridge-m", "10.10.0"), ("d", "bridge-d", "10.20.0")):
                port, far = f"{kind}{i}", f"{kind}{i}-node"
                sw.ip("link", "add", port, "type", "veth", "peer", "name", far)
                sw.ip("link", "set", far, "netns", str(node.holder.pid))
                sw.ip("link", "set", port, "master", bridge)
                sw.ip("link", "set", port, "up")
                name = "mgmt" if kind == "m" else "data"
                node.ip("link", "set", far, "name", name)
                node.ip("addr", "add", f"{net}.{i + 1}/24", "dev", name)
                node.ip("link", "set", name, "up")

    def port(self, i: int) -> str:
        """node i's data port on the switch."""
        return f"d{i}"

    def close(self) -> None:
        for ns in [*self.nodes, self.switch]:
            ns.close()


@pytest.fixture(scope="module")
def fabric() -> Iterator[Fabric]:
    f = Fabric()
    try:
        yield f
    finally:
        f.close()


@pytest.fixture(scope="module")
def cluster(fabric, tmp_path_factory):
    pytest.importorskip("ray", reason="ray is not installed: pip install 'ascendfix[ray]'")
    pytest.importorskip("torch", reason="ray smoke runs real torch.distributed collectives: pip install torch")
    base = tmp_path_factory.mktemp("ray-faults")
    c = LocalCluster(base, team_profile(base), ray_of_this_interpreter(base), fabric.nodes[0], node_ip=_mgmt_ip(0))
    c.env.update(GLOO_SOCKET_IFNAME="data", HCCL_SOCKET_IFNAME="data")
    try:
        for i, name in enumerate(NODES):
            c.start(name, prefix=fabric.nodes[i].prefix, node_ip=_mgmt_ip(i))
            c.wait_for_head() if i == 0 else c.wait_started(name)
        yield c
    finally:
        left = c.stop()
        assert not left, f"Ray processes still running after SIGTERM to ray start --block: {left}"


def _smoke(c: LocalCluster, timeout: float = TIMEOUT) -> tuple[dict, float]:
    start = time.monotonic()
    args = ["ray", "smoke", "--profile", str(c.profile), "--device", "npu", "--backend", "gloo", "--size", "1"]
    result = c.ascendfix(*args, "--address", c.address, "--nodes", "4", "--timeout", str(timeout), "--json")
    took = time.monotonic() - start
    assert result.stdout, result.stderr
    print(result.stdout)  # shown when the test fails
    return {"code": result.returncode, **json.loads(result.stdout)}, took


def _gso_max_segs(node: Netns) -> int:
    """The node's data interface's ``gso_max_segs``."""
    shown = node.run("ip", "-d", "-j", "link", "show", "dev", "data", check=True)
    return json.loads(shown.stdout)[0]["gso_max_segs"]


def _named(report: dict) -> set[str]:
    ips = {n["node_id"]: n["address"] for n in report["nodes"]}
    return {ips[p["node_id"]] for p in report["problems"] if p["node_id"]}


@contextlib.contextmanager
def _shaped(fabric: Fabric, slow: int | None = None) -> Iterator[None]:
    """Every data link shaped to ``RATE`` both ways (``slow``'s to ``SLOW_RATE``), as a site's links are: what a
    link carries is then the fabric's, not what the test machine's busy cores leave the bridge (a healthy node's
    gloo links once measured at 0.44 of the others' median while another test's job took both cores)."""
    shaped = []
    try:
        for i, node in enumerate(fabric.nodes):
            rate = SLOW_RATE if i == slow else RATE
            for ns, dev in ((fabric.switch, fabric.port(i)), (node, "data")):  # both directions
                ns.run("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "64kb", "latency",
                       "400ms", check=True)  # fmt: skip
                shaped.append((ns, dev))
        yield
    finally:
        for ns, dev in shaped:
            ns.run("tc", "qdisc", "del", "dev", dev, "root")


@pytest.mark.slow
def test_a_healthy_fabric_names_nobody(cluster, fabric):
    with _shaped(fabric):
        report, _ = _smoke(cluster)
    assert report["code"] == 0 and report["problems"] == [], report["problems"]


@pytest.mark.slow
@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_a_silently_dropping_data_port_under_a_tight_timeout_blames_no_healthy_node(cluster, fabric, attempt):
    """The issue's case: ``--timeout 60``, the healthy nodes' ranks hung in the first gloo step and restarted.
    Either node3 alone is named, or the links the bound left untried are, with no healthy node failed."""
    fabric.switch.run("bridge", "link", "set", "dev", fabric.port(FAULTY), "state", "0", check=True)
    try:
        report, took = _smoke(cluster, TIGHT)
    finally:
        fabric.switch.run("bridge", "link", "set", "dev", fabric.port(FAULTY), "state", "3", check=True)
    named, faulty = _named(report), _mgmt_ip(FAULTY)
    assert report["code"] == 1 and named <= {faulty}, report["problems"]
    if named:
        assert any(p["item"] == "gloo link" and "every failing pair" in p["message"] for p in report["problems"])
    else:
        assert report["untried_links"] and report["timeout_needed_s"] > TIGHT, report
        (why,) = [p["message"] for p in report["problems"] if not p["node_id"]]
        assert "links untried" in why and f"--timeout {report['timeout_needed_s']:g} would" in why
        assert all(s.startswith(f"{faulty} ") for s in report["suspects"]) or faulty in why, report["suspects"]
    assert took < TIGHT + 30, took


@pytest.mark.slow
def test_an_mtu_blackhole_names_its_node_within_the_timeout(cluster, fabric):
    sw, data = fabric.switch, ["bridge-d", *(fabric.port(i) for i in range(len(NODES)))]
    for name in data:
        sw.ip("link", "set", name, "mtu", "9000")
    for node in fabric.nodes:
        node.ip("link", "set", "data", "mtu", "9000")
    sw.ip("link", "set", fabric.port(FAULTY), "mtu", "1500")  # the switch port the hosts' jumbo frames die at
    segs = [_gso_max_segs(node) for node in fabric.nodes]
    for node in fabric.nodes:  # every frame on the wire is one segment, as from a NIC doing TSO
        node.ip("link", "set", "dev", "data", "gso_max_segs", "1")
    try:
        report, took = _smoke(cluster)
    finally:
        for node, was in zip(fabric.nodes, segs, strict=True):
            node.ip("link", "set", "dev", "data", "gso_max_segs", str(was))
            node.ip("link", "set", "data", "mtu", "1500")
        for name in data:
            sw.ip("link", "set", name, "mtu", "1500")
    assert report["code"] == 1 and _named(report) == {_mgmt_ip(FAULTY)}, report["problems"]
    assert took < TIMEOUT + 30, took


@pytest.mark.slow
def test_a_link_throttled_five_times_names_its_node(cluster, fabric):
    with _shaped(fabric, slow=FAULTY):
        report, took = _smoke(cluster)
    assert report["code"] == 1 and _named(report) == {_mgmt_ip(FAULTY)}, report["problems"]
    (slow,) = [p for p in report["problems"] if p["item"] == "gloo link"]
    assert "below half the nodes' median" in slow["message"]
    assert took < TIMEOUT + 30, took
