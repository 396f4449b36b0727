"""The NIC selection grammar (``ascendfix.doctor.nic``): each form, on interfaces listed as the kernel lists
them, and the same forms through doctor's env check, ``ray smoke``'s node check and run's preflight on
real interfaces made in a private network namespace of the test's own (veth pairs up and down, with and
without addresses)."""

from __future__ import annotations

import json

import pytest
from ascendfix.doctor import nic
from ascendfix.doctor.nic import Interface

from tests import cli
from tests.cluster import private_netns

LO = Interface("lo", 1, True, "unknown", ("127.0.0.1",), 65536)
DOCKER0 = Interface("docker0", 2, True, "up", ("172.17.0.1",), 1500)
ETH0 = Interface("eth0", 3, True, "up", ("10.0.0.5",), 9000)
ETH1 = Interface("eth1", 4, False, "down", ("10.0.1.5",), 1500)
IB0 = Interface("ib0", 5, True, "up", (), 2044)
HERE = [LO, DOCKER0, ETH0, ETH1, IB0]

# (value, the interface used or None, ok)
FORMS = [
    ("eth0", "eth0", True),
    ("eth", "eth0", True),  # prefixes: the first match in the kernel's order
    ("=eth0", "eth0", True),
    ("=eth0,=eth1", "eth0", True),
    ("^docker0,lo", "eth0", True),  # the ^ applies to the whole list
    ("^=docker0", "lo", True),  # all but exactly docker0: lo comes first
    ("^=lo,docker", "docker0", True),  # exact for the whole list: "docker" is not docker0
    ("eth1,eth0", "eth0", True),  # the list is a set: the kernel's order decides, eth0 (3) before eth1 (4)
    ("=eth", None, False),  # exact: there is no "eth"
    ("eth1", "eth1", False),  # its first match is down
    ("ib", None, False),  # matches only an interface without an address
    ("nosuchnic", None, False),
    ("^", "lo", True),  # excluding nothing: everything
]


@pytest.mark.parametrize(("value", "used", "ok"), FORMS)
def test_each_form_of_the_grammar_selects_as_hccl_and_nccl_do(value, used, ok):
    for var in ("HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        verdict = nic.choose(var, value, HERE)
        assert verdict.ok is ok and [n.name for n in verdict.chosen] == ([used] if used else []), verdict
        if used:
            assert verdict.message.startswith(f"{var}={value} selects {used} ")
        else:
            assert "(this node has: lo 127.0.0.1, up; docker0 172.17.0.1, up; eth0 10.0.0.5, up; " in verdict.message


def test_the_messages_name_what_was_selected_and_what_exists():
    assert nic.choose("HCCL_SOCKET_IFNAME", "^docker0,lo", HERE).message == (
        "HCCL_SOCKET_IFNAME=^docker0,lo selects eth0 10.0.0.5, up"
    )
    assert nic.choose("HCCL_SOCKET_IFNAME", "eth1", HERE).message == (
        "HCCL_SOCKET_IFNAME=eth1 selects eth1 10.0.1.5, down (operstate down)"
    )
    assert nic.choose("HCCL_SOCKET_IFNAME", "ib", HERE).message.startswith(
        "HCCL_SOCKET_IFNAME=ib matches only interfaces without an address (this node has: "
    )


def test_gloo_takes_plain_names_and_needs_every_one():
    assert nic.choose("GLOO_SOCKET_IFNAME", "eth0", HERE).ok
    assert [n.name for n in nic.choose("GLOO_SOCKET_IFNAME", "eth0,lo", HERE).chosen] == ["eth0", "lo"]
    for bad in ("eth", "eth0,eth1", "^lo", "=eth0", "ib0"):
        assert not nic.choose("GLOO_SOCKET_IFNAME", bad, HERE).ok, bad
    assert "gloo takes interface names, not HCCL's =/^ grammar" in nic.choose("GLOO_SOCKET_IFNAME", "^lo", HERE).message


def test_hccl_if_ip_wins_and_must_be_an_address_of_an_up_interface():
    both = {"HCCL_IF_IP": "10.0.0.5", "HCCL_SOCKET_IFNAME": "nosuchnic"}
    verdict = nic.select("HCCL_SOCKET_IFNAME", both, HERE)
    assert verdict.ok and verdict.var == "HCCL_IF_IP" and verdict.chosen == (ETH0,)
    assert verdict.message == "HCCL_IF_IP=10.0.0.5 is eth0 10.0.0.5, up; it wins over HCCL_SOCKET_IFNAME"
    assert not nic.select("HCCL_SOCKET_IFNAME", {"HCCL_IF_IP": "10.0.1.5"}, HERE).ok  # eth1 is down
    gone = nic.select("HCCL_SOCKET_IFNAME", {"HCCL_IF_IP": "10.9.9.9"}, HERE)
    assert not gone.ok and gone.message.startswith("HCCL_IF_IP=10.9.9.9 is no address of this node (it has: ")
    assert nic.select("NCCL_SOCKET_IFNAME", {"HCCL_IF_IP": "10.9.9.9"}, HERE) is None  # NCCL has no HCCL_IF_IP
    assert nic.select("HCCL_SOCKET_IFNAME", {}, HERE) is None


def test_hccls_ports_warn_in_the_ephemeral_range_unless_reserved(tmp_path):
    (tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    (tmp_path / "ip_local_reserved_ports").write_text("60000-60007\n")
    warning, fix = nic.port_warning({}, tmp_path, cann="8.1.RC1")  # 8.0/8.1: 16 ports
    assert "60000-60015 lie in the ephemeral range 32768-60999 and 8 are not reserved" in warning
    assert fix == "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60015"
    assert nic.port_warning({"HCCL_IF_BASE_PORT": "61000"}, tmp_path, cann="8.1.RC1") is None  # above the range
    assert nic.port_warning({"HCCL_IF_BASE_PORT": "50000"}, tmp_path, cann="8.0.0")[1].endswith("=50000-50015")
    assert nic.parse_ranges("8080,60000-60015") == [(8080, 8080), (60000, 60015)]
    assert nic.port_warning({}, tmp_path / "absent") is None


@pytest.mark.parametrize("cann", ["8.2.RC1", "8.3.RC1", "8.5.0", "9.0.0", None])
def test_cann_8_2_and_later_listen_on_32_ports(tmp_path, cann):
    """CANN 8.3.RC1's HCCL_IF_BASE_PORT page: 60000-60031; a node that reserved only 16 still warns."""
    (tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    (tmp_path / "ip_local_reserved_ports").write_text("60000-60015\n")
    warning, fix = nic.port_warning({}, tmp_path, cann=cann)
    assert "60000-60031 lie in the ephemeral range 32768-60999 and 16 are not reserved" in warning
    assert fix == "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031"
    assert nic.hccl_ports({"HCCL_IF_BASE_PORT": "50000"}, cann) == (50000, 50031)
    (tmp_path / "ip_local_reserved_ports").write_text("60000-60031\n")
    assert nic.port_warning({}, tmp_path, cann=cann) is None


# --- on real interfaces --------------------------------------------------------------------------

PROBE = """
import json, os, sys
from ascendfix.cluster.smoke.node import interface_check
from ascendfix.doctor import nic
from ascendfix.job.preflight import nic_problems
from ascendfix.profile import manifest
here = nic.interfaces()
out = {"order": [n.name for n in here]}
for value in json.loads(sys.argv[1]):
    env = {"HCCL_SOCKET_IFNAME": value, "GLOO_SOCKET_IFNAME": "eth0"}
    [check] = interface_check("HCCL_SOCKET_IFNAME", env, "", here)
    out[value] = {"smoke": [str(check.status), check.message],
                  "preflight": nic_problems(manifest.load_profile("verl-796871d"), "npu", env)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interfaces_ns():
    """lo; docker0 up with an address; eth0 up with one; eth1 with one but down; ib0 up without one."""
    with private_netns() as ns:
        ns.ip("link", "add", "docker0", "type", "veth", "peer", "name", "dpeer")
        ns.ip("link", "add", "eth0", "type", "veth", "peer", "name", "epeer0")
        ns.ip("link", "add", "eth1", "type", "veth", "peer", "name", "epeer1")
        ns.ip("link", "add", "ib0", "type", "veth", "peer", "name", "ipeer")
        for name, address in (("docker0", "172.17.0.1/16"), ("eth0", "10.0.0.5/24"), ("eth1", "10.0.1.5/24")):
            ns.ip("addr", "add", address, "dev", name)
        for name in ("docker0", "dpeer", "eth0", "epeer0", "ib0", "ipeer"):
            ns.ip("link", "set", name, "up")
        yield ns


def test_doctor_the_smoke_and_preflight_read_each_form_alike_on_real_interfaces(interfaces_ns):
    values = [value for value, _, _ in FORMS if value not in ("^",)]
    probe = cli.run(json.dumps(values), code=PROBE, prefix=interfaces_ns.prefix, timeout=120)
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    order = [name for name in seen["order"] if name in ("lo", "docker0", "eth0", "eth1", "ib0")]
    assert order == ["lo", "docker0", "eth0", "eth1", "ib0"]  # ifindex: the order they were made in
    for value, used, ok in FORMS:
        if value == "^":
            continue
        doctor_env = {"HCCL_SOCKET_IFNAME": value, "GLOO_SOCKET_IFNAME": "eth0"}
        doctor = cli.run(
            "doctor", "--device", "npu", "--only", "env", "--json",
            prefix=interfaces_ns.prefix, env=doctor_env, timeout=120,
        )  # fmt: skip
        messages = json.loads(doctor.stdout)["checks"][0]["messages"]
        [line] = [m for m in messages if m.startswith(f"HCCL_SOCKET_IFNAME={value} ")]
        status, smoke = seen[value]["smoke"]
        assert line == smoke, value  # one implementation, one message
        assert (status == "ok") is ok, (value, smoke)
        if used:
            assert smoke.startswith(f"HCCL_SOCKET_IFNAME={value} selects {used} "), smoke
        assert (seen[value]["preflight"] == []) is ok and (ok or seen[value]["preflight"] == [smoke])
        assert any(m.startswith("GLOO_SOCKET_IFNAME=eth0 selects eth0 10.0.0.5") for m in messages)


def test_runs_preflight_refuses_an_unusable_selection_and_takes_every_valid_one(monkeypatch):
    from ascendfix.job.preflight import Seams, run_preflight
    from ascendfix.profile import manifest
    from ascendfix.site import Site

    from tests.stack import fake_preflight

    fake_preflight(monkeypatch, states={})
    profile = manifest.load_profile("verl-796871d")
    here = nic.interfaces()
    usable = next(n for n in here if n.up and n.addresses)

    def preflight(value: str, full: bool = True):
        return run_preflight(Site(profile, "npu", environ={"HCCL_SOCKET_IFNAME": value}), ["true"], Seams(), full)

    bad = preflight("=nosuchnic9")
    assert [f.message for f in bad.problems if f.source == "env"] == [
        nic.choose("HCCL_SOCKET_IFNAME", "=nosuchnic9", here).message
    ]
    for value in (usable.name, f"={usable.name}", f"={usable.name},nosuchnic9"):
        good = preflight(value)
        assert [f for f in good.problems if f.source == "env"] == [], value
    unchecked = preflight("=nosuchnic9", full=False)
    assert [f for f in unchecked.problems if f.source == "env"] == []  # --no-preflight
