"""``ray smoke``'s node checks: a Ray task pinned to each node runs :func:`node_checks` there.

What the job's collectives will bind to on that node: each ``*_SOCKET_IFNAME`` (or ``HCCL_IF_IP``)
the profile names, read with doctor's one implementation of the grammar (:mod:`ascendfix.doctor.nic`),
must select an interface that is up with an address; the route to the head should leave by it; on
npu, HCCL's listen ports should be reserved, and where ``hccn_tool`` exists every NPU's network port
(by its physical device id) must be up with an IP, its TLS switch and speed read for the driver to
compare across nodes. Nothing here prints.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ascendfix.cluster.smoke.report import FAIL, OK, WARN, Check
from ascendfix.doctor import nic
from ascendfix.tuples import NamedTuple

HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
_DAVINCI = re.compile(r"davinci(\d+)$")


def route_device(ip_route_get: str) -> str:
    """The ``dev`` that ``ip route get HEAD`` names, or "" (also for a ``local`` route: the head itself)."""
    if ip_route_get.lstrip().startswith("local "):
        return ""
    match = re.search(r"\bdev\s+(\S+)", ip_route_get)
    return match.group(1) if match else ""


def interface_check(var: str, environ: Mapping[str, str], route_dev: str, nics: Sequence[nic.Interface]) -> list[Check]:
    """What ``var`` (or ``HCCL_IF_IP``, which wins over it) selects here; a warning when the route to the head
    leaves by another interface."""
    verdict = nic.select(var, environ, nics)
    if verdict is None:
        return [Check(var, "(unset)", FAIL, f"{var} is unset on this node: export it before `ascendfix ray start`")]
    if not verdict.ok:
        return [Check(verdict.var, verdict.value, FAIL, verdict.message)]
    checks = [Check(verdict.var, verdict.value, OK, verdict.message)]
    used = {n.name for n in verdict.chosen}
    if route_dev and route_dev not in used:
        why = f"the route to the head leaves by {route_dev}, not by {', '.join(sorted(used))} ({var})"
        checks.append(Check(f"{var} route", route_dev, WARN, why))
    return checks


def ports_check(environ: Mapping[str, str], sysctl: Path = nic.IPV4_SYSCTL) -> list[Check]:
    """A warning when HCCL's listen ports lie in the ephemeral range unreserved (doctor's env check says the same)."""
    base = nic.base_port_problem(environ)
    checks = [Check("hccl ports", "HCCL_IF_BASE_PORT", WARN, base)] if base else []
    found = nic.port_warning(environ, sysctl)
    if found is None:
        return checks
    low, high = nic.hccl_ports(environ)
    return [*checks, Check("hccl ports", f"{low}-{high}", WARN, f"{found[0]}; fix: {found[1]}")]


def parse_hccn_link(text: str) -> str:
    """``hccn_tool -i N -link -g``'s state (``link status: UP`` gives ``UP``), or "" when it says none."""
    match = re.search(r"link\s+status\s*:\s*(\w+)", text, re.IGNORECASE)
    return match.group(1).upper() if match else ""


def parse_hccn_ip(text: str) -> dict[str, str]:
    """``hccn_tool -i N -ip -g``'s ``ipaddr:A`` and ``netmask:M`` lines as a dict."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("ipaddr", "netmask") and value.strip():
            found[key.strip().lower()] = value.strip()
    return found


def parse_hccn_tls(text: str) -> str:
    """``hccn_tool -i N -tls -g``'s switch (``tls switch[1](0:disable, 1:enable)`` gives ``1``), or ""."""
    match = re.search(r"tls\s+switch\s*[\[:]\s*(\d)", text, re.IGNORECASE)
    return match.group(1) if match else ""


def parse_hccn_speed(text: str) -> int | None:
    """``hccn_tool -i N -speed -g``'s port speed in Mb/s (``Speed: 200000 Mb/s`` gives 200000), or None
    (a port that is down says ``unknown``)."""
    match = re.search(r"speed\s*:\s*(\d+)\s*mb", text, re.IGNORECASE)
    return int(match.group(1)) if match else None


class PortReadings(NamedTuple):
    """What ``hccn_tool`` says of a node's NPU ports: the checks, and per physical id what the driver
    compares across nodes."""

    checks: list[Check]
    tls: dict[str, str]  # {id: TLS switch}
    speed: dict[str, int]  # {id: Mb/s}


def physical_ids(count: int, environ: Mapping[str, str], dev: Path = Path("/dev")) -> list[int]:
    """The NPUs' physical ids, which ``hccn_tool -i`` takes: ``ASCEND_RT_VISIBLE_DEVICES``, else the
    ``/dev/davinciN`` nodes this container sees, else ``0..count-1``."""
    visible = [v.strip() for v in environ.get(VISIBLE, "").split(",") if v.strip()]
    if visible and all(v.isdigit() for v in visible):
        return [int(v) for v in visible]
    try:
        seen = sorted(int(m.group(1)) for p in dev.iterdir() if (m := _DAVINCI.match(p.name)))
    except OSError:
        seen = []
    return seen or list(range(count))


def hccn_checks(ids: Sequence[int], tool: str | None = None, timeout: float = 10.0) -> PortReadings:
    """Each NPU's network port (``hccn_tool -i N -link -g``) up and with an IP (``-ip -g``); its TLS
    switch (``-tls -g``) and speed (``-speed -g``) for the driver to compare across nodes."""
    tool = tool or shutil.which("hccn_tool") or (HCCN_TOOL if os.access(HCCN_TOOL, os.X_OK) else None)
    if tool is None:
        missing = Check("hccn_tool", "not found", OK, "hccn_tool is not on PATH: the NPU ports were not checked")
        return PortReadings([missing], {}, {})
    checks, up, tls, speed = [], [], {}, {}
    for npu in ids:
        item = f"npu {npu} port"
        try:
            link = _run([tool, "-i", str(npu), "-link", "-g"], timeout)
            ip = parse_hccn_ip(_run([tool, "-i", str(npu), "-ip", "-g"], timeout))
            switch = parse_hccn_tls(_run([tool, "-i", str(npu), "-tls", "-g"], timeout))
            mbps = parse_hccn_speed(_run([tool, "-i", str(npu), "-speed", "-g"], timeout))
        except (OSError, subprocess.SubprocessError) as e:
            checks.append(Check(item, "error", FAIL, f"hccn_tool -i {npu}: {e}"))
            continue
        if switch:
            tls[str(npu)] = switch
        if mbps:
            speed[str(npu)] = mbps
        state = parse_hccn_link(link)
        if state != "UP":
            said = state or (link.strip().splitlines() or ["no output"])[-1][:200]
            checks.append(Check(item, said, FAIL, f"hccn_tool -i {npu} -link -g: {said} (the port must be UP)"))
        elif "ipaddr" not in ip:
            checks.append(Check(item, "no ip", FAIL, f"hccn_tool -i {npu} -ip -g: no ipaddr configured"))
        else:
            up.append(f"{npu}={ip['ipaddr']}")
    if up:  # one row for the ports that are fine
        checks.insert(0, Check("npu ports", f"{len(up)} of {len(ids)} UP", OK, " ".join(up)))
    return PortReadings(checks, tls, speed)


def _run(argv: list[str], timeout: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return done.stdout + done.stderr


def node_checks(variables: Sequence[str], head_ip: str, device: str, npus: int) -> dict:
    """What the Ray task on a node checks: each interface variable, its route to the head, HCCL's ports and
    the NPU ports. ``{"checks": [...], "tls": {id: switch}, "speed": {id: Mb/s}, "mtu": smallest MTU of the
    interfaces used}``."""
    try:
        route = subprocess.run(["ip", "route", "get", head_ip], capture_output=True, text=True, timeout=10)
        route_dev = route_device(route.stdout)
    except (OSError, subprocess.SubprocessError):
        route_dev = ""
    here = nic.interfaces()
    checks = []
    for var in variables:
        checks.extend(interface_check(var, os.environ, route_dev, here))
    used = [n for v in variables if (verdict := nic.select(v, os.environ, here)) for n in verdict.chosen]
    ports = PortReadings([], {}, {})
    if device == "npu":
        checks.extend(ports_check(os.environ))
        ports = hccn_checks(physical_ids(npus, os.environ))
        checks.extend(ports.checks)
    mtu = min((n.mtu for n in used if n.mtu), default=0)
    return {"checks": [vars(c) for c in checks], "tls": ports.tls, "speed": ports.speed, "mtu": mtu}
