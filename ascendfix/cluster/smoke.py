"""``ascendfix ray smoke``: one real collective across every node of the Ray cluster, before the job.

First a Ray task pinned to each node checks what the job's collectives will bind to there
(:func:`node_checks`): each ``*_SOCKET_IFNAME`` the profile names must select an interface
that is up and has an address, the route to the head should leave by it, and on npu, where
``hccn_tool`` exists, every NPU's network port must be up and have an IP. Then real
``torch.distributed`` collectives run in Ray actors that inherit each node's environment,
as the job's workers do: gloo ``all_reduce`` with one rank per node (the channel of verl's
CPU barrier), and hccl (npu) or nccl (cuda) ``all_reduce`` and ``all_gather`` with one rank
per accelerator, each checked for the right result and timed for nccl-tests' bus bandwidth.
Every phase has a timeout: a rank that fails says why, one that hangs is named by where it
hangs. torch is imported only inside the actors, ray only inside :func:`smoke`; nothing here
prints.
"""

from __future__ import annotations

import fcntl
import importlib.util
import ipaddress
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ascendfix.cluster import fanout
from ascendfix.cluster import wait as raywait
from ascendfix.cluster.start import RESOURCE
from ascendfix.errors import UsageError
from ascendfix.profile.records import Profile

BACKENDS = ("gloo", "device", "all")
DEVICE_BACKEND = {"npu": "hccl", "cuda": "nccl"}
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"
OK, WARN, FAIL = "ok", "warn", "fail"
GRACE_S = 30.0  # on top of --timeout: an actor's start and its `import torch`
ITERATIONS = 5
IFF_UP = 0x1
SIOCGIFADDR = 0x8915
HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


# --- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One thing checked on one node: ``status`` ok, warn or fail."""

    item: str
    value: str
    status: str
    message: str = ""

    def __post_init__(self) -> None:  # values come from nodes, tools and exceptions: no control characters
        for name in ("item", "value", "message"):
            object.__setattr__(self, name, _CONTROL.sub("?", getattr(self, name)))


@dataclass
class Node:
    """A node of the cluster and what was checked there (its collectives' outcomes included)."""

    node_id: str
    ip: str
    hostname: str = ""
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed here."""
        return all(c.status != FAIL for c in self.checks)

    @property
    def label(self) -> str:
        """The node's address and the start of its Ray node id (as ``ray wait`` names it)."""
        return fanout.node_label(self.ip, self.node_id)


@dataclass(frozen=True)
class Collective:
    """One collective over the cluster: its result, its bus bandwidth (GB/s) and its slowest node."""

    backend: str
    op: str
    bytes: int
    ok: bool
    busbw_gbps: float | None = None
    slowest: str = ""  # the slowest node's label


@dataclass(frozen=True)
class Problem:
    """A failed check or rank, naming its node (empty for the cluster as a whole)."""

    node_id: str
    ip: str
    hostname: str
    item: str
    value: str
    message: str


@dataclass
class SmokeReport:
    """The outcome of ``ray smoke``."""

    address: str
    nodes: list[Node] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    cluster_problems: list[str] = field(default_factory=list)  # not one node's: too few nodes

    @property
    def problems(self) -> list[Problem]:
        """Every failure: the cluster's, then each node's failed checks."""
        found = [Problem("", "", "", "cluster", "", message) for message in self.cluster_problems]
        for n in self.nodes:
            found.extend(
                Problem(n.node_id, n.ip, n.hostname, c.item, c.value, c.message) for c in n.checks if c.status == FAIL
            )
        return found

    @property
    def ok(self) -> bool:
        """Every node passed and every collective gave the right result."""
        return not self.problems and all(c.ok for c in self.collectives)

    def to_json(self) -> dict:
        """Plain data: ``{"address", "nodes", "collectives", "problems"}``."""
        return {
            "address": self.address,
            "nodes": [
                {
                    "node_id": n.node_id,
                    "ip": n.ip,
                    "hostname": n.hostname,
                    "checks": [vars(c) for c in n.checks],
                    "ok": n.ok,
                }
                for n in self.nodes
            ],
            "collectives": [
                {
                    "backend": c.backend,
                    "op": c.op,
                    "bytes": c.bytes,
                    "ok": c.ok,
                    "busbw_gbps": c.busbw_gbps,
                    "slowest": c.slowest,
                }
                for c in self.collectives
            ],
            "problems": [vars(p) for p in self.problems],
        }


# --- bandwidth ---------------------------------------------------------------------------------


def busbw_gbps(op: str, nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth in GB/s: algbw × 2(n−1)/n for all_reduce, × (n−1)/n for all_gather.

    ``nbytes`` is the buffer all_reduce reduces, or the whole output all_gather fills.
    """
    if seconds <= 0 or ranks < 1:
        return 0.0
    factor = {"all_reduce": 2 * (ranks - 1) / ranks, "all_gather": (ranks - 1) / ranks}[op]
    return nbytes / seconds / 1e9 * factor


# --- per-node checks (run on the node) ---------------------------------------------------------


@dataclass(frozen=True)
class Interface:
    """What the kernel says about one network interface."""

    name: str
    exists: bool
    up: bool = False
    operstate: str = ""
    addresses: tuple[str, ...] = ()


def interface(name: str, sys_net: Path = Path("/sys/class/net"), inet6: Path = Path("/proc/net/if_inet6")) -> Interface:
    """``name``'s state from sysfs (administratively up and operstate up, or unknown as lo's is) and addresses."""
    base = sys_net / name
    if "/" in name or name in ("", ".", "..") or not base.is_dir():
        return Interface(name, False)
    operstate = _read(base / "operstate") or "unknown"
    try:
        flags = int(_read(base / "flags") or "0", 16)
    except ValueError:
        flags = 0
    up = bool(flags & IFF_UP) and operstate in ("up", "unknown")
    try:
        v6 = ipv6_addresses(inet6.read_text(), name)
    except OSError:
        v6 = []
    v4 = ipv4_address(name)
    return Interface(name, True, up, operstate, tuple(([v4] if v4 else []) + v6))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


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


def route_device(ip_route_get: str) -> str:
    """The ``dev`` that ``ip route get HEAD`` names, or ""."""
    match = re.search(r"\bdev\s+(\S+)", ip_route_get)
    return match.group(1) if match else ""


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


def interface_check(var: str, value: str | None, route_dev: str, sys_net: Path = Path("/sys/class/net")) -> list[Check]:
    """``var`` selects interfaces that are up with an address; a warning when the route to the head avoids them."""
    from ascendfix.doctor.host import selected_interfaces

    if not value:
        return [Check(var, "(unset)", FAIL, f"{var} is unset on this node: export it before `ascendfix ray start`")]
    present = sorted(p.name for p in sys_net.iterdir()) if sys_net.is_dir() else []
    names = [v.strip() for v in value.split(",") if v.strip()]
    if var != GLOO_IFNAME:  # HCCL/NCCL read prefixes and =exact; gloo takes exact names
        names = selected_interfaces(value, present) or names
    checks, bad = [], []
    for name in names:
        nic = interface(name, sys_net)
        if not nic.exists:
            bad.append(f"{name} does not exist (this node has: {', '.join(present)})")
        elif not nic.up or not nic.addresses:
            state = "up" if nic.up else f"down (operstate {nic.operstate})"
            bad.append(f"{name} is {state}" + ("" if nic.addresses else " and has no address"))
    if bad:
        checks.append(Check(var, value, FAIL, f"{var}={value}: " + "; ".join(bad)))
    else:
        shown = ", ".join(f"{n} {' '.join(interface(n, sys_net).addresses)}" for n in names)
        checks.append(Check(var, value, OK, f"{shown} up"))
        if route_dev and route_dev not in names:
            why = f"the route to the head leaves by {route_dev}, not by {var}={value}"
            checks.append(Check(f"{var} route", route_dev, WARN, why))
    return checks


def hccn_checks(count: int, tool: str | None = None, timeout: float = 10.0) -> list[Check]:
    """Each NPU's network port (``hccn_tool -i N -link -g``) up and with an IP (``-ip -g``); none without the tool."""
    tool = tool or shutil.which("hccn_tool") or (HCCN_TOOL if os.access(HCCN_TOOL, os.X_OK) else None)
    if tool is None:
        return [Check("hccn_tool", "not found", OK, "hccn_tool is not on PATH: the NPU ports were not checked")]
    checks, up = [], []
    for npu in range(count):
        item = f"npu {npu} port"
        try:
            link = _run([tool, "-i", str(npu), "-link", "-g"], timeout)
            ip = parse_hccn_ip(_run([tool, "-i", str(npu), "-ip", "-g"], timeout))
        except (OSError, subprocess.SubprocessError) as e:
            checks.append(Check(item, "error", FAIL, f"hccn_tool -i {npu}: {e}"))
            continue
        state = parse_hccn_link(link)
        if state != "UP":
            said = state or (link.strip().splitlines() or ["no output"])[-1][:200]
            checks.append(Check(item, said, FAIL, f"hccn_tool -i {npu} -link -g: {said} (the port must be UP)"))
        elif "ipaddr" not in ip:
            checks.append(Check(item, "no ip", FAIL, f"hccn_tool -i {npu} -ip -g: no ipaddr configured"))
        else:
            up.append(f"{npu}={ip['ipaddr']}")
    if up:  # one row for the ports that are fine
        checks.insert(0, Check("npu ports", f"{len(up)} of {count} UP", OK, " ".join(up)))
    return checks


def _run(argv: list[str], timeout: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return done.stdout + done.stderr


def node_checks(variables: Sequence[str], head_ip: str, device: str, npus: int) -> list[dict]:
    """What the Ray task on a node checks: each interface variable, its route to the head, the NPU ports."""
    try:
        route = subprocess.run(["ip", "route", "get", head_ip], capture_output=True, text=True, timeout=10)
        route_dev = route_device(route.stdout)
    except (OSError, subprocess.SubprocessError):
        route_dev = ""
    checks = []
    for var in variables:
        checks.extend(interface_check(var, os.environ.get(var), route_dev))
    if device == "npu":
        checks.extend(hccn_checks(npus))
    return [vars(c) for c in checks]


# --- the collectives (run in the actors) -------------------------------------------------------


class Rank:
    """One rank of the smoke's collectives: a Ray actor (two threads, so ``where`` answers while it works)."""

    def __init__(self) -> None:
        self.phase = "starting"

    def where(self) -> str:
        """The step this rank is in (asked when it does not answer in time)."""
        return self.phase

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's side: this node's IP and a port free here, for the others to meet at."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def run(self, spec: dict) -> dict:
        """Join the process group, run each op, check its result, time it: ``{"ops": {op: ...}}`` or ``{"error"}``."""
        try:
            return self._run(spec)
        except Exception as e:  # the rank's own failure is its answer, with the step it failed in
            return {"error": f"{self.phase}: {type(e).__name__}: {_first_line(e)}"}

    def _run(self, spec: dict) -> dict:
        from datetime import timedelta

        backend, rank, world = spec["backend"], spec["rank"], spec["world"]
        self.phase = "import torch"
        try:
            import torch
            import torch.distributed as dist
        except ImportError as e:
            return {"error": f"torch is not importable on this node ({e}): the job needs it"}
        device = "cpu"
        if backend == "hccl":
            self.phase = "import torch_npu"
            try:
                import torch_npu  # noqa: F401 - registers the npu device and hccl
            except ImportError as e:
                return {"error": f"torch_npu is not importable on this node ({e}): the job needs it"}
            torch.npu.set_device(0)
            device = "npu:0"
        elif backend == "nccl":
            if not torch.cuda.is_available():
                return {"error": "torch sees no CUDA device on this node (torch.cuda.is_available() is False)"}
            torch.cuda.set_device(0)
            device = "cuda:0"
        timeout = timedelta(seconds=spec["timeout"])
        self.phase = f"init_process_group({backend}) at {spec['addr']}:{spec['port']}"
        dist.init_process_group(
            backend, init_method=f"tcp://{spec['addr']}:{spec['port']}", rank=rank, world_size=world, timeout=timeout
        )
        try:
            if backend == "gloo":
                self.phase = "monitored_barrier"
                dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
            return {"ops": {op: self._op(torch, dist, op, spec, device) for op in spec["ops"]}}
        finally:
            dist.destroy_process_group()

    def _op(self, torch, dist, op: str, spec: dict, device: str) -> dict:
        rank, world = spec["rank"], spec["world"]
        self.phase = op

        def sync() -> None:
            if device.startswith("npu"):
                torch.npu.synchronize()
            elif device.startswith("cuda"):
                torch.cuda.synchronize()

        if op == "all_reduce":
            count = max(spec["bytes"] // 4, 1)
            probe = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
            dist.all_reduce(probe)
            good = bool(torch.all(probe == world * (world + 1) / 2).item())
            buffer = torch.zeros(count, dtype=torch.float32, device=device)

            def once() -> None:
                dist.all_reduce(buffer)
        else:
            chunk = max(spec["bytes"] // 4 // world, 1)
            count = chunk * world
            mine = torch.full((chunk,), float(rank), dtype=torch.float32, device=device)
            gathered = torch.empty(count, dtype=torch.float32, device=device)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
            gather(gathered, mine)
            want = torch.arange(world, dtype=torch.float32, device=device).repeat_interleave(chunk)
            good = bool(torch.equal(gathered, want))

            def once() -> None:
                gather(gathered, mine)

        sync()
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            once()
        sync()
        seconds = (time.perf_counter() - start) / ITERATIONS
        return {"ok": good, "seconds": seconds, "bytes": count * 4}


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


# --- the driver ---------------------------------------------------------------------------------


def _gather(ray, refs: Mapping, timeout: float) -> dict:
    """``{key: result}`` for each ref within ``timeout``; an ``{"error"}`` for those that failed or did not answer."""
    by_ref = {ref: key for key, ref in refs.items()}
    ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=timeout) if by_ref else ([], [])
    results = {}
    for ref, key in by_ref.items():
        if ref not in ready:
            results[key] = {"error": f"no answer within {timeout:g} s", "stuck": True}
            continue
        try:
            results[key] = ray.get(ref)
        except Exception as e:  # a task or actor that died on its node is that node's row
            results[key] = {"error": f"died on this node: {type(e).__name__}: {_first_line(e)}"}
    return results


def smoke(
    profile: Profile,
    device: str,
    address: str | None,
    nodes_wanted: int,
    per_node: int | None,
    backend: str = "all",
    timeout: float = 120.0,
    size_mb: float = 64.0,
) -> SmokeReport:
    """Check every alive node of the cluster at ``address``, then run the collectives ``backend`` picks."""
    ray = fanout.import_ray()
    raywait.connect(ray, address)
    try:
        return _smoke(ray, profile, device, address, nodes_wanted, per_node, backend, timeout, size_mb)
    finally:
        ray.shutdown()


def _smoke(ray, profile, device, address, nodes_wanted, per_node, backend, timeout, size_mb) -> SmokeReport:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    unit = RESOURCE[device]
    alive = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: (n["NodeManagerAddress"], n["NodeID"]))
    report = SmokeReport(address or "auto")
    report.nodes = [
        Node(n["NodeID"], n["NodeManagerAddress"], _CONTROL.sub("?", n.get("NodeManagerHostname", ""))) for n in alive
    ]
    by_id = {n.node_id: n for n in report.nodes}
    if len(alive) < nodes_wanted:
        report.cluster_problems.append(f"{len(alive)} of {nodes_wanted} nodes are alive (ascendfix ray wait)")
    accelerators = {n["NodeID"]: int(n.get("Resources", {}).get(unit, 0)) for n in alive}

    def on(node_id: str) -> NodeAffinitySchedulingStrategy:
        return NodeAffinitySchedulingStrategy(node_id, soft=False)

    head_ip = ray.get_runtime_context().gcs_address.rpartition(":")[0]
    variables = [v.name for v in profile.devices[device].env if v.check == "interface"]
    if backend != "device" and GLOO_IFNAME not in variables:
        variables.insert(0, GLOO_IFNAME)
    task = ray.remote(num_cpus=0, max_retries=0)(node_checks)
    refs = {
        nid: task.options(scheduling_strategy=on(nid)).remote(variables, head_ip, device, accelerators[nid])
        for nid in by_id
    }
    for nid, answer in _gather(ray, refs, timeout).items():
        if isinstance(answer, dict):
            by_id[nid].checks.append(Check("checks", "no answer", FAIL, answer["error"]))
        else:
            by_id[nid].checks.extend(Check(**c) for c in answer)
    actor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=2)(Rank)
    nbytes = int(size_mb * 2**20)
    if backend in ("gloo", "all"):
        ranks = [(nid, actor.options(scheduling_strategy=on(nid)).remote()) for nid in by_id]
        report.collectives += _collective(ray, ranks, "gloo", ["all_reduce"], nbytes, timeout, by_id)
    if backend in ("device", "all"):
        wanted = per_node or 0
        for nid, have in accelerators.items():
            if have < wanted:
                why = f"{have} {unit} registered, the job wants {wanted}"
                by_id[nid].checks.append(Check(unit, str(have), FAIL, why))
        place = {"resources": {"NPU": 1}} if unit == "NPU" else {"num_gpus": 1}
        ranks = [
            (nid, actor.options(scheduling_strategy=on(nid), **place).remote())
            for nid, have in accelerators.items()
            for _ in range(have)
        ]
        if not ranks:
            channel = DEVICE_BACKEND[device]
            report.cluster_problems.append(f"no node has a {unit} registered: the {channel} channel cannot run")
        else:
            ops = ["all_reduce", "all_gather"]
            report.collectives += _collective(ray, ranks, DEVICE_BACKEND[device], ops, nbytes, timeout, by_id)
    return report


def _collective(ray, ranks: list, backend: str, ops: list[str], nbytes: int, timeout: float, by_id: dict) -> list:
    """Run ``ops`` over ``ranks`` [(node id, actor)]; each failing rank becomes a failed check on its node."""
    world = len(ranks)
    try:
        rendezvous = _gather(ray, {"r": ranks[0][1].rendezvous.remote()}, timeout + GRACE_S)["r"]
        if isinstance(rendezvous, dict):
            by_id[ranks[0][0]].checks.append(Check(f"{backend} rendezvous", "no answer", FAIL, rendezvous["error"]))
            return [Collective(backend, op, nbytes, False) for op in ops]
        addr, port = rendezvous
        base = {"backend": backend, "world": world, "addr": addr, "port": port, "ops": ops, "bytes": nbytes}
        refs = {i: a.run.remote({**base, "rank": i, "timeout": timeout}) for i, (_, a) in enumerate(ranks)}
        answers = _gather(ray, refs, timeout * (1 + len(ops)) + GRACE_S)
        stuck = {i: ranks[i][1].where.remote() for i, a in answers.items() if a.get("stuck")}
        where = _gather(ray, stuck, 5.0)
    finally:
        for _, a in ranks:
            ray.kill(a)
    per_node: dict[str, list[int]] = {}
    for i, (nid, _) in enumerate(ranks):
        per_node.setdefault(nid, []).append(i)
    failed = {i: a["error"] + _stuck(a, where.get(i)) for i, a in answers.items() if "error" in a}
    own = sorted(i for i, a in answers.items() if "error" in a and not _waited(a))
    for nid, indices in per_node.items():
        errors = [i for i in indices if i in failed]
        if not errors:
            continue
        shown = f"rank {errors[0]}: {failed[errors[0]]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
        if own and not set(errors) & set(own):  # only waited for ranks that failed on their own
            others = ", ".join(str(i) for i in own)
            why = f"waited for rank(s) {others}, which failed: {shown}"
            by_id[nid].checks.append(Check(f"{backend} rank", "waited", WARN, why))
        else:
            by_id[nid].checks.append(Check(f"{backend} rank", "failed", FAIL, shown))
    results = []
    for op in ops:
        if failed:
            results.append(Collective(backend, op, nbytes, False))
            continue
        seconds: dict[str, float] = {}
        for nid, indices in per_node.items():
            wrong = [i for i in indices if not answers[i]["ops"][op]["ok"]]
            if wrong:
                why = f"rank {wrong[0]}: the result is not the sum (all_reduce) or the ranks' values (all_gather)"
                by_id[nid].checks.append(Check(f"{backend} {op}", "wrong result", FAIL, why))
            seconds[nid] = max(answers[i]["ops"][op]["seconds"] for i in indices)
        size = answers[0]["ops"][op]["bytes"]
        for nid, s in seconds.items():
            by_id[nid].checks.append(Check(f"{backend} {op} busbw", f"{busbw_gbps(op, size, s, world):.2f} GB/s", OK))
        slowest = max(seconds, key=seconds.__getitem__)
        bw = round(busbw_gbps(op, size, seconds[slowest], world), 3)
        good = all(answers[i]["ops"][op]["ok"] for i in answers)
        results.append(Collective(backend, op, size, good, bw, by_id[slowest].label))
    return results


def _stuck(answer: dict, where: object) -> str:
    """Where a rank that did not answer hangs; or that its actor never started (its resource taken)."""
    if not answer.get("stuck"):
        return ""
    if isinstance(where, str):
        return f" (stuck in {where})"
    return " (its actor did not start: is the NPU/GPU it needs taken by another job?)"


_CONSEQUENCE = re.compile(r"time[ds]? ?out|connection (was likely )?closed|closed by peer|reset by peer", re.I)


def _waited(answer: dict) -> bool:
    """A rank that timed out waiting, or whose peer went away (gloo: "Connection was likely closed"), rather
    than failing on its own: a consequence of another rank's failure, when there is one."""
    return bool(answer.get("stuck")) or _CONSEQUENCE.search(answer["error"]) is not None


# --- run's --smoke -------------------------------------------------------------------------------


def job_problems(
    profile: Profile, device: str, overrides: Mapping[str, str], environ: Mapping[str, str], timeout: float = 120.0
) -> list[str]:
    """``run --smoke``: what ``ray smoke`` finds wrong with the reachable cluster, one line each.

    The job's ``trainer.nnodes`` and ``trainer.n_gpus_per_node`` when it sets them; a problem when
    ray is missing or no cluster is reachable (the smoke was asked for).
    """
    if importlib.util.find_spec("ray") is None:
        return [f"--smoke: {fanout.INSTALL_HINT}"]
    address = raywait.reachable_address(environ)
    if address is None:
        return ["--smoke: no Ray cluster is reachable (set RAY_ADDRESS, or start one with ascendfix ray start)"]
    try:
        nodes, per_node = raywait.job_size(overrides, "the job")
    except UsageError:
        nodes, per_node = 1, profile.device(device).accelerators_per_node
    try:
        report = smoke(profile, device, address, nodes, per_node, "all", timeout)
    except UsageError as e:
        return [f"--smoke: {e}"]
    return [
        f"{p.ip} {p.node_id[:8]} ({p.hostname}) {p.item}: {p.message}" if p.node_id else p.message
        for p in report.problems
    ]  # a collective that failed failed on a node: its problem is there
