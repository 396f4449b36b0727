"""``ascendfix ray wait`` and ``run``'s cluster gate: are the nodes there, and do they all see the same?

:func:`wait` polls the cluster until N alive nodes with K NPUs (GPUs) each are registered,
then :func:`survey` asks every node, through the ``--ray`` fan-out of :mod:`ascendfix.cluster.fanout`,
what a Ray task pinned to it sees: each variable the profile sets, ``ulimit -n``, the node's
accelerator resource and the patch status. :func:`differences` names each node that lacks
something or disagrees with the others. :func:`job_problems` is ``run``'s preflight gate: it
asks nothing (and imports nothing) unless a cluster is reachable. Ray is imported only inside
functions; nothing here prints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ascendfix.cluster import fanout
from ascendfix.cluster.start import RESOURCE
from ascendfix.errors import UsageError
from ascendfix.profile.records import Profile

NNODES, PER_NODE = "trainer.nnodes", "trainer.n_gpus_per_node"
UNSET = "(unset)"
ULIMIT = "ulimit -n"
POLL_S = 0.5


@dataclass(frozen=True)
class Arrival:
    """How many alive nodes and accelerators are registered, against how many are wanted."""

    nodes: int
    nodes_wanted: int
    accelerators: float
    accelerators_wanted: int
    unit: str
    ready: bool = False

    def line(self) -> str:
        """``12 of 16 nodes, 96 of 128 NPU``."""
        have, unit = f"{self.accelerators:g}", self.unit
        return f"{self.nodes} of {self.nodes_wanted} nodes, {have} of {self.accelerators_wanted} {unit}"


@dataclass(frozen=True)
class NodeView:
    """What a Ray task pinned to one node saw there (``error`` when it could not answer)."""

    node_id: str
    address: str
    hostname: str = ""
    resources: dict[str, float] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    ulimit_nofile: str = ""
    patches: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (state, file hashes)
    error: str = ""

    @property
    def label(self) -> str:
        """The node's address and the start of its Ray node id (as ``--ray`` tables name it)."""
        return fanout.node_label(self.address, self.node_id)


@dataclass(frozen=True)
class Difference:
    """One node that lacks ``item`` or sees another value than the other nodes."""

    node: str
    item: str
    value: str
    others: str  # the value(s) on the other nodes, or what is wanted
    why: str  # unset | differs | below N | no answer


@dataclass(frozen=True)
class WaitReport:
    """The outcome of ``ray wait``: the arrival, and (once arrived) each node's view and the differences."""

    address: str
    arrival: Arrival
    nodes: tuple[NodeView, ...] = ()
    differences: tuple[Difference, ...] = ()
    timeout_s: float = 0.0  # how long it waited at most

    @property
    def ok(self) -> bool:
        """Every node arrived and they all see the same."""
        return self.arrival.ready and not self.differences

    def to_json(self) -> dict:
        """Plain data: everything the table shows."""
        a = self.arrival
        return {
            "timeout_s": self.timeout_s,
            "address": self.address,
            "ok": self.ok,
            "ready": a.ready,
            "arrival": {
                "line": a.line(),
                "nodes": a.nodes,
                "nodes_wanted": a.nodes_wanted,
                "accelerators": a.accelerators,
                "accelerators_wanted": a.accelerators_wanted,
                "unit": a.unit,
            },
            "nodes": [
                {
                    "node": n.label,
                    "node_id": n.node_id,
                    "address": n.address,
                    "hostname": n.hostname,
                    "resources": n.resources,
                    "env": n.env,
                    "ulimit_nofile": n.ulimit_nofile,
                    "patches": {pid: {"state": s, "detail": d} for pid, (s, d) in n.patches.items()},
                    "error": n.error,
                }
                for n in self.nodes
            ],
            "differences": [vars(d) for d in self.differences],
        }


def job_size(overrides: Mapping[str, str], origin: str) -> tuple[int, int]:
    """``trainer.nnodes`` and ``trainer.n_gpus_per_node`` from a job's overrides (a UsageError when absent)."""
    sizes = []
    for key in (NNODES, PER_NODE):
        try:
            sizes.append(int(overrides[key].strip("'\"")))
        except (KeyError, ValueError):
            raise UsageError(f"{origin}: sets no integer {key}= (pass --nodes N --per-node K instead)") from None
    return sizes[0], sizes[1]


def connect(ray: ModuleType, address: str | None, namespace: str | None = None) -> None:
    """``ray.init`` to ``address`` (else RAY_ADDRESS, else the local cluster), in ``namespace``; a UsageError
    saying why not."""
    named = ("--address", address) if address else ("RAY_ADDRESS", os.environ.get("RAY_ADDRESS", ""))
    if named[1] and named[1] not in ("auto", "local") and not _answers(named[1], 5.0):
        raise UsageError(f"{named[0]} {named[1]}: no Ray head answers there (expected HEAD_IP:PORT of a started head)")
    try:
        fanout.init(ray, address, f"{named[0]} {named[1]}" if named[1] else "the local Ray cluster", namespace)
    except (ConnectionError, ValueError, RuntimeError) as e:
        if not address and not os.environ.get("RAY_ADDRESS"):
            raise UsageError(
                "no Ray cluster runs on this machine: start one (ascendfix ray start --head), "
                "or pass --address HEAD_IP:PORT"
            ) from None
        where = address or os.environ["RAY_ADDRESS"]
        raise UsageError(f"{where}: cannot connect to a Ray cluster: {str(e).splitlines()[0]}") from None


def arrival(nodes: Sequence[Mapping], wanted: int, per_node: int, unit: str) -> Arrival:
    """Count the alive nodes and their ``unit`` resource; ready when ``wanted`` of them have ``per_node`` each."""
    alive = [n for n in nodes if n.get("Alive")]
    have = [float(n.get("Resources", {}).get(unit, 0)) for n in alive]
    ready = sum(h >= per_node for h in have) >= wanted
    return Arrival(len(alive), wanted, sum(have), wanted * per_node, unit, ready)


def wait(
    address: str | None,
    wanted: int,
    per_node: int,
    unit: str,
    timeout: float,
    on_progress: Callable[[Arrival], None] | None = None,
) -> Arrival:
    """Poll the cluster until it is ready or ``timeout`` seconds pass; the last count either way."""
    ray = fanout.import_ray()
    connect(ray, address)
    try:
        deadline = time.monotonic() + timeout
        while True:
            now = arrival(ray.nodes(), wanted, per_node, unit)
            if on_progress is not None:
                on_progress(now)
            if now.ready or time.monotonic() >= deadline:
                return now
            time.sleep(POLL_S)
    finally:
        ray.shutdown()


def _node_task(names: tuple[str, ...]) -> Callable[[list[str], float], dict]:
    """The function each node's Ray task runs: :func:`fanout.run_local` (the patch status), plus what it sees."""

    def see(argv: list[str], timeout: float) -> dict:
        import ray

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        node_id = ray.get_runtime_context().get_node_id()
        info: dict = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
        seen: dict[str, object] = {
            "env": {name: os.environ.get(name) for name in names},
            "ulimit_nofile": "unlimited" if soft == resource.RLIM_INFINITY else str(soft),
            "resources": info.get("Resources", {}),
        }
        answer: dict = fanout.run_local(argv, timeout) if argv else {"hostname": socket.gethostname(), "returncode": 0}
        try:
            seen["status"] = json.loads(answer.get("stdout", "null"))
        except json.JSONDecodeError:
            seen["status_error"] = (answer.get("stderr", "").strip().splitlines() or ["no output"])[-1]
        if "error" in answer:
            seen["status_error"] = answer["error"]
        return {"hostname": answer["hostname"], "returncode": 0, "stdout": json.dumps(seen), "stderr": ""}

    return see


def survey(
    profile: Profile, device: str, address: str | None, timeout: float, status_argv: Sequence[str] = ()
) -> list[NodeView]:
    """Each alive node's view: the profile's variables, ``ulimit -n``, resources, and ``status_argv``'s patches."""
    names = tuple(v.name for v in profile.devices[device].env)
    answers = fanout.run(list(status_argv), address, timeout, local=_node_task(names))
    views = []
    for a in answers:
        if a.error or not isinstance(a.data, dict):
            views.append(NodeView(a.node_id, a.address, a.hostname, error=a.error or "no answer"))
            continue
        data = a.data
        patches = fanout.cells(data["status"]) if isinstance(data.get("status"), dict) else {}
        views.append(
            NodeView(
                a.node_id,
                a.address,
                a.hostname,
                {k: float(v) for k, v in data.get("resources", {}).items()},
                data.get("env", {}),
                data.get("ulimit_nofile", ""),
                patches,
                f"ascendfix status failed there: {data['status_error']}" if "status_error" in data else "",
            )
        )
    return sorted(views, key=lambda v: (v.address, v.node_id))


def _compare(
    item: str, values: dict[str, str], lacking: Callable[[str], str], into: list[Difference], wanted: str = ""
) -> None:
    """Flag each node whose value is lacking (``lacking`` says why) or not the most common one."""
    common = Counter(values.values()).most_common(1)[0][0] if values else ""
    for node, value in values.items():
        others = sorted({v for n, v in values.items() if n != node})
        short = lacking(value)
        why = short or ("differs" if value != common else "")
        if why:  # a value too low is shown against what is wanted, one that differs against the others'
            into.append(Difference(node, item, value, (wanted if short else "") or ", ".join(others) or wanted, why))


def differences(views: Sequence[NodeView], profile: Profile, device: str, per_node: int) -> list[Difference]:
    """Every node that lacks a profile variable, a big enough ``ulimit -n`` or its accelerators, or differs."""
    spec = profile.devices[device]
    unit = RESOURCE[device]
    found = [Difference(v.label, "answer", v.error, "", "no answer") for v in views if v.error and not v.env]
    seen = [v for v in views if v.env or not v.error]
    for var in spec.env:
        values = {v.label: v.env.get(var.name) or UNSET for v in seen}
        wanted = var.value if var.value is not None else "set per site"
        if var.value is None:  # site-specific (a NIC name): must be set, may differ between nodes
            for node, value in values.items():
                if value == UNSET:
                    found.append(Difference(node, var.name, value, wanted, "unset"))
            continue
        _compare(var.name, values, lambda value: "unset" if value == UNSET else "", found, wanted)

    def low(value: str) -> str:
        return (
            f"below {spec.ulimit_nofile}"
            if spec.ulimit_nofile and value.isdigit() and int(value) < spec.ulimit_nofile
            else ""
        )

    _compare(ULIMIT, {v.label: v.ulimit_nofile for v in seen}, low, found, str(spec.ulimit_nofile or ""))

    def few(value: str) -> str:
        return f"below {per_node}" if float(value) < per_node else ""

    _compare(unit, {v.label: f"{v.resources.get(unit, 0):g}" for v in seen}, few, found, str(per_node))
    for v in views:
        if v.error and v.env:
            found.append(Difference(v.label, "patches", v.error, "", "no answer"))
    with_patches = [v for v in seen if v.patches]
    for pid in dict.fromkeys(pid for v in with_patches for pid in v.patches):
        cells = {v.label: v.patches.get(pid, ("(absent)", "")) for v in with_patches}
        show_detail = len({d for _, d in cells.values()}) > 1
        values = {node: f"{s} {d}" if show_detail and d else s for node, (s, d) in cells.items()}
        _compare(f"patch {pid}", values, lambda value: "", found)
    return found


def check(
    profile: Profile,
    device: str,
    address: str | None,
    arrived: Arrival,
    per_node: int,
    timeout: float,
    status_argv: Sequence[str],
    waited: float = 0.0,
) -> WaitReport:
    """Once the nodes arrived: every node's view and what differs."""
    views = survey(profile, device, address, timeout, status_argv)
    found = tuple(differences(views, profile, device, per_node))
    return WaitReport(address or "auto", arrived, tuple(views), found, waited)


# --- run's preflight gate ----------------------------------------------------------------------


def _temp_root(environ: Mapping[str, str]) -> Path:
    """Where ``ray start`` writes ``ray/ray_current_cluster`` (as Ray decides it, without importing Ray)."""
    if environ.get("RAY_TMPDIR"):
        return Path(environ["RAY_TMPDIR"])
    if sys.platform.startswith("linux") and environ.get("TMPDIR"):
        return Path(environ["TMPDIR"])
    return Path("/tmp")


def _answers(address: str, seconds: float = 1.0) -> bool:
    return fanout.unreachable(address, seconds) is None


def reachable_address(environ: Mapping[str, str]) -> str | None:
    """``RAY_ADDRESS``, else the local cluster's address from ``ray start``'s file, when something answers there.

    Costs one file read when no cluster was started here, and at most a second when one was.
    """
    address = environ.get("RAY_ADDRESS", "").strip()
    if not address or address in ("auto", "local"):
        try:
            address = (_temp_root(environ) / "ray" / "ray_current_cluster").read_text().strip()
        except OSError:
            return None
    return address if address and _answers(address) else None


def job_problems(
    profile: Profile, device: str, overrides: Mapping[str, str], environ: Mapping[str, str], timeout: float = 60.0
) -> list[str] | None:
    """Why the reachable Ray cluster cannot take this job: too few accelerators, or nodes that disagree
    on the profile's variables. None (quietly) when ray is not installed or no cluster is reachable."""
    if importlib.util.find_spec("ray") is None:
        return None
    address = reachable_address(environ)
    if address is None:
        return None
    try:
        views = survey(profile, device, address, timeout)
    except UsageError as e:  # something answers there, but not a Ray cluster this ray can join
        return [f"cannot read the Ray cluster at {address}: {e}"]
    unit = RESOURCE[device]
    problems = []
    nodes: int | None
    per_node: int | None
    try:
        nodes, per_node = job_size(overrides, "the job")
    except UsageError:
        nodes = per_node = None
    have = sum(v.resources.get(unit, 0) for v in views)
    if nodes and per_node and nodes * per_node > have:
        problems.append(
            f"the job needs {NNODES} × {PER_NODE} = {nodes} × {per_node} = {nodes * per_node} {unit}, "
            f"the Ray cluster at {address} has {have:g} registered (ascendfix ray wait --nodes {nodes})"
        )
    for var in profile.devices[device].env:
        if var.value is None:  # site-specific (a NIC name): may differ between nodes
            continue
        values = {v.label: v.env.get(var.name) or UNSET for v in views if not v.error}
        if len(set(values.values())) > 1:
            common = Counter(values.values()).most_common(1)[0][0]
            odd = "; ".join(f"{value} on {node}" for node, value in values.items() if value != common)
            problems.append(
                f"Ray nodes disagree on {var.name}: {odd}, {common} on the others "
                "(restart those nodes with ascendfix ray start)"
            )
    return problems
