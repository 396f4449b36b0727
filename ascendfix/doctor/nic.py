"""The NIC a job's collectives bind to, read as HCCL, NCCL and gloo read their variables; HCCL's ports.

``HCCL_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` take one comma list whose leading ``=`` (exact
names) or ``^`` (every interface but those) applies to the whole list; otherwise the items are
prefixes. The libraries walk the node's addresses in the kernel's interface order (ifindex, as
``ip link`` lists them) and use the first interface that matches: that one must be up. ``HCCL_IF_IP``,
when set, wins over ``HCCL_SOCKET_IFNAME`` and must be an address of an up interface. torch's gloo
reads ``GLOO_SOCKET_IFNAME`` as plain interface names, one device each: every one must be up with an
address, and ``=``/``^`` are no names it can bind (torch 2.13: ``ifa != nullptr``).

HCCL listens on 32 ports from 60000 (from ``HCCL_IF_BASE_PORT`` when set) on CANN 8.2 and later (8.3.RC1's
``HCCL_IF_BASE_PORT`` page: "默认HCCL使用60000-60031端口"), 16 on 8.0 and 8.1; when those lie in the
kernel's ephemeral range and are not reserved, any outgoing socket can take one first (EJ0003).
Everything here reads the calling process's own network namespace; nothing prints.
"""

from __future__ import annotations

import dataclasses
import fcntl
import ipaddress
import re
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SYS_NET = Path("/sys/class/net")
IF_INET6 = Path("/proc/net/if_inet6")
IPV4_SYSCTL = Path("/proc/sys/net/ipv4")
IFF_UP = 0x1
SIOCGIFADDR = 0x8915
GLOO = "GLOO_SOCKET_IFNAME"
IF_IP = {"HCCL_SOCKET_IFNAME": "HCCL_IF_IP"}  # the address variable that wins over the interface one
HCCL_PORTS, HCCL_BASE_PORT = 32, 60000  # CANN >= 8.2 (the guide's 8.3.RC1), and when the version is unknown
HCCL_PORTS_BEFORE_8_2 = 16
RESERVE_FIX = "sysctl -w net.ipv4.ip_local_reserved_ports={low}-{high}"


@dataclass(frozen=True)
class Interface:
    """What the kernel says about one network interface: up means administratively up and operstate
    up (or unknown, as lo's is)."""

    name: str
    index: int = 0
    up: bool = False
    operstate: str = ""
    addresses: tuple[str, ...] = ()
    mtu: int = 0

    def describe(self) -> str:
        """``eth0 10.0.0.5, up`` / ``veth0 (no address), down (operstate down)``."""
        where = " ".join(self.addresses) if self.addresses else "(no address)"
        return f"{self.name} {where}, " + ("up" if self.up else f"down (operstate {self.operstate})")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(text: str, base: int = 10) -> int:
    try:
        return int(text, base)
    except ValueError:
        return 0


def ipv4_address(name: str) -> str:
    """The interface's IPv4 address (the SIOCGIFADDR ioctl), or "" when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return ""
    return socket.inet_ntoa(packed[20:24])


def ipv6_addresses(if_inet6: str, name: str) -> list[str]:
    """The IPv6 addresses ``/proc/net/if_inet6`` lists for ``name`` (link-local ones left out)."""
    found = []
    for line in if_inet6.splitlines():
        fields = line.split()
        if len(fields) == 6 and fields[5] == name and len(fields[0]) == 32:
            address = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            if not address.is_link_local:
                found.append(str(address))
    return found


def interface(name: str, sys_net: Path = SYS_NET, inet6: Path = IF_INET6) -> Interface | None:
    """``name``'s state from sysfs and its addresses; None when the node has no such interface."""
    base = sys_net / name
    if "/" in name or name in ("", ".", "..") or not base.is_dir():
        return None
    operstate = _read(base / "operstate") or "unknown"
    up = bool(_int(_read(base / "flags") or "0", 16) & IFF_UP) and operstate in ("up", "unknown")
    v6 = ipv6_addresses(_read(inet6), name)
    v4 = ipv4_address(name)
    index, mtu = _int(_read(base / "ifindex")), _int(_read(base / "mtu"))
    return Interface(name, index, up, operstate, tuple(([v4] if v4 else []) + v6), mtu)


def interfaces(sys_net: Path = SYS_NET, inet6: Path = IF_INET6) -> list[Interface]:
    """Every interface of this node in the kernel's order (ifindex, as ``ip link`` lists them)."""
    names = [p.name for p in sys_net.iterdir()] if sys_net.is_dir() else []
    found = [nic for nic in (interface(n, sys_net, inet6) for n in names) if nic is not None]
    return sorted(found, key=lambda nic: (nic.index, nic.name))


# --- the grammar -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """A parsed ``*_SOCKET_IFNAME``: its items, exact names or prefixes, selected or excluded."""

    items: tuple[str, ...]
    exact: bool = False
    exclude: bool = False

    def matches(self, name: str) -> bool:
        """Whether interface ``name`` is selected."""
        hit = any(name == item if self.exact else name.startswith(item) for item in self.items)
        return hit != self.exclude


def parse(value: str) -> Selection:
    """``=a,b`` exact names, ``^a,b`` all but those prefixes, ``^=a`` all but exactly ``a``, ``a,b`` prefixes."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    return Selection(tuple(i.strip() for i in text.split(",") if i.strip()), exact, exclude)


@dataclass(frozen=True)
class Verdict:
    """What one variable selects on this node: the interface(s) used, and whether they can carry traffic."""

    var: str
    value: str
    ok: bool
    message: str
    chosen: tuple[Interface, ...] = ()


def _present(nics: Sequence[Interface]) -> str:
    return "; ".join(n.describe() for n in nics) or "none"


def choose(var: str, value: str, nics: Sequence[Interface]) -> Verdict:
    """The interface ``var=value`` makes the library use among ``nics`` (kernel order), and whether it is usable."""
    shown = f"{var}={value}"
    if var == GLOO:
        return _gloo(value, nics)
    selection = parse(value)
    if not selection.items and not selection.exclude:
        return Verdict(var, value, False, f"{shown} names no interface (this node has: {_present(nics)})")
    matching = [n for n in nics if selection.matches(n.name)]
    used = next((n for n in matching if n.addresses), None)  # the libraries walk addresses, not links
    if used is None:
        why = "matches no interface" if not matching else "matches only interfaces without an address"
        return Verdict(var, value, False, f"{shown} {why} (this node has: {_present(nics)})")
    if not used.up:
        return Verdict(var, value, False, f"{shown} selects {used.describe()}", (used,))
    return Verdict(var, value, True, f"{shown} selects {used.describe()}", (used,))


def _gloo(value: str, nics: Sequence[Interface]) -> Verdict:
    shown = f"{GLOO}={value}"
    names = [v.strip() for v in value.split(",") if v.strip()]
    if value.strip()[:1] in ("^", "="):
        why = f"{shown}: gloo takes interface names, not HCCL's =/^ grammar (this node has: {_present(nics)})"
        return Verdict(GLOO, value, False, why)
    by_name = {n.name: n for n in nics}
    bad, good = [], []
    for name in names:
        nic = by_name.get(name)
        if nic is None:
            bad.append(f"{name} does not exist")
        elif not nic.up or not nic.addresses:
            bad.append(nic.describe())
        else:
            good.append(nic)
    if bad or not names:
        why = "; ".join(bad) or "no interface named"
        return Verdict(GLOO, value, False, f"{shown}: {why} (this node has: {_present(nics)})")
    return Verdict(GLOO, value, True, f"{shown} selects " + "; ".join(n.describe() for n in good), tuple(good))


def address_owner(address: str, nics: Sequence[Interface]) -> Interface | None:
    """The interface holding ``address``, or None."""
    try:
        wanted = ipaddress.ip_address(address.strip())
    except ValueError:
        return None
    return next((n for n in nics if any(ipaddress.ip_address(a) == wanted for a in n.addresses)), None)


def check_if_ip(var: str, address: str, nics: Sequence[Interface]) -> Verdict:
    """``HCCL_IF_IP``: an address of an up interface of this node (it wins over ``HCCL_SOCKET_IFNAME``)."""
    owner = address_owner(address, nics)
    shown = f"{var}={address}"
    if owner is None:
        return Verdict(var, address, False, f"{shown} is no address of this node (it has: {_present(nics)})")
    return Verdict(var, address, owner.up, f"{shown} is {owner.describe()}", (owner,))


def select(var: str, environ: Mapping[str, str], nics: Sequence[Interface]) -> Verdict | None:
    """What ``var`` (or the address variable that wins over it) selects here; None when neither is set."""
    address = environ.get(IF_IP.get(var, ""), "").strip()
    if address:
        verdict = check_if_ip(IF_IP[var], address, nics)
        wins = f"; it wins over {var}" if environ.get(var) else ""
        return dataclasses.replace(verdict, message=verdict.message + wins)
    value = environ.get(var)
    return choose(var, value, nics) if value else None


# --- HCCL's ports ------------------------------------------------------------------------------------


def port(text: str) -> int | None:
    """``text`` as a port: ASCII digits (``²`` and other Unicode digits are not) of 1–65535, else None; never an
    exception, whatever its length."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,5}", text) and 0 < int(text) < 65536 else None


def parse_ranges(text: str) -> list[tuple[int, int]]:
    """``ip_local_reserved_ports``' ``60000-60015,8080`` as ``[(60000, 60015), (8080, 8080)]``."""
    found = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        first, last = port(low), port(high or low)
        if first is not None and last is not None:
            found.append((first, last))
    return found


def hccl_port_count(cann: str | None) -> int:
    """How many ports HCCL listens on for CANN version ``cann`` (``8.1.RC1``): 16 before 8.2, else 32."""
    match = re.match(r"\s*(\d+)\.(\d+)", cann or "")
    if match and (int(match[1]), int(match[2])) < (8, 2):
        return HCCL_PORTS_BEFORE_8_2
    return HCCL_PORTS


def hccl_ports(environ: Mapping[str, str], cann: str | None = None) -> tuple[int, int]:
    """The ports HCCL listens on (:func:`hccl_port_count` of ``cann``): from ``HCCL_IF_BASE_PORT`` when set to a
    port they fit above, else from 60000."""
    count = hccl_port_count(cann)
    low = port(environ.get("HCCL_IF_BASE_PORT", ""))
    low = low if low is not None and low <= 65536 - count else HCCL_BASE_PORT
    return low, low + count - 1


def base_port_problem(environ: Mapping[str, str], cann: str | None = None) -> str | None:
    """Why ``HCCL_IF_BASE_PORT`` is no base HCCL can listen from (None when unset, or a port with HCCL's other
    ports for CANN ``cann`` above it)."""
    value = environ.get("HCCL_IF_BASE_PORT")
    if value is None or not value.strip():
        return None
    highest = 65536 - hccl_port_count(cann)
    low = port(value)
    if low is not None and low <= highest:
        return None
    shown = ascii(value[:20]) + ("…" if len(value) > 20 else "")
    return f"HCCL_IF_BASE_PORT={shown} is not a port HCCL can listen from: ASCII digits, 1 to {highest}"


def port_warning(
    environ: Mapping[str, str], sysctl: Path = IPV4_SYSCTL, cann: str | None = None
) -> tuple[str, str] | None:
    """(warning, fix) when HCCL's ports (for CANN version ``cann``) lie in the ephemeral range unreserved; None when
    safe or unreadable."""
    low, high = hccl_ports(environ, cann)
    ephemeral = [port(p) for p in _read(sysctl / "ip_local_port_range").split()]  # "32768\t60999"
    if len(ephemeral) != 2:
        return None
    first, last = ephemeral
    if first is None or last is None:
        return None
    reserved = parse_ranges(_read(sysctl / "ip_local_reserved_ports"))
    exposed = [p for p in range(low, high + 1) if first <= p <= last and not any(a <= p <= b for a, b in reserved)]
    if not exposed:
        return None
    warning = (
        f"HCCL's ports {low}-{high} lie in the ephemeral range {first}-{last} and {len(exposed)} are not reserved: "
        "an outgoing socket can take one before HCCL listens (EJ0003)"
    )
    return warning, RESERVE_FIX.format(low=low, high=high)
