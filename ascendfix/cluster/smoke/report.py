"""What ``ray smoke`` reports: each node's checks, each collective's outcome, the problems they add up to.

Plain data only; the node task, the rank actors and the driver fill it in (``node``,
``rank``, ``driver``). A check's status is doctor's own :class:`~ascendfix.doctor.model.Status`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ascendfix.cluster import fanout
from ascendfix.doctor.model import Status

OK, WARN, FAIL = Status.OK, Status.WARN, Status.FAIL
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Check:
    """One thing checked on one node: ``status`` ok, warn or fail."""

    item: str
    value: str
    status: Status
    message: str = ""

    def __post_init__(self) -> None:  # values come from nodes, tools and exceptions: no control characters
        for name in ("item", "value", "message"):
            object.__setattr__(self, name, CONTROL.sub("?", getattr(self, name)))
        object.__setattr__(self, "status", Status(self.status))


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
class BusbwFloor:
    """The all_reduce bus bandwidth (GB/s) below which a node fails, and where that number comes from."""

    busbw_gbps: float
    source: str


@dataclass(frozen=True)
class Problem:
    """A failed check or rank, naming its node (empty for the cluster as a whole)."""

    node_id: str
    ip: str
    hostname: str
    item: str
    value: str
    message: str


@dataclass(frozen=True)
class UntriedLink:
    """A pair of nodes whose link the link phase did not really test, and why (the bound ran out, the two never
    met in what was left)."""

    backend: str
    nodes: tuple[str, str]  # the two nodes' labels
    why: str


@dataclass
class SmokeReport:
    """The outcome of ``ray smoke``."""

    address: str
    nodes: list[Node] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    cluster_problems: list[str] = field(default_factory=list)  # not one node's: too few nodes
    busbw_floor: BusbwFloor | None = None  # the device phase's, when it had one
    untried_links: list[UntriedLink] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)  # labels of the nodes failing links point at, not isolated
    timeout_needed_s: float | None = None  # about the --timeout that would try every untried link

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
        """Plain data: ``{"address", "nodes", "collectives", "busbw_floor", "untried_links", "suspects",
        "timeout_needed_s", "problems"}``; a node is named as ``--ray`` and ``ray wait`` name it: ``node`` (its
        label), ``node_id``, ``address`` (its IP), ``hostname``."""
        return {
            "address": self.address,
            "nodes": [
                {
                    "node": n.label,
                    "node_id": n.node_id,
                    "address": n.ip,
                    "hostname": n.hostname,
                    "checks": [{**vars(c), "status": str(c.status)} for c in n.checks],
                    "ok": n.ok,
                }
                for n in self.nodes
            ],
            "collectives": [vars(c) for c in self.collectives],
            "busbw_floor": vars(self.busbw_floor) if self.busbw_floor else None,
            "untried_links": [{**vars(u), "nodes": list(u.nodes)} for u in self.untried_links],
            "suspects": list(self.suspects),
            "timeout_needed_s": self.timeout_needed_s,
            "problems": [
                {
                    "node": fanout.node_label(p.ip, p.node_id) if p.node_id else "",
                    "node_id": p.node_id,
                    "address": p.ip,
                    "hostname": p.hostname,
                    "item": p.item,
                    "value": p.value,
                    "message": p.message,
                }
                for p in self.problems
            ],
        }


# nccl-tests' bus-bandwidth factor per op (PERFORMANCE.md): algbw × factor(n)
_BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


def busbw_gbps(op: str, nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth in GB/s: algbw × 2(n−1)/n for all_reduce, × (n−1)/n for all_gather,
    reduce_scatter and all_to_all, × 1 for one send/recv pair.

    ``nbytes`` is the buffer all_reduce reduces, the whole output all_gather fills, the whole input
    reduce_scatter and all_to_all split, or the message a pair sends.
    """
    if seconds <= 0 or ranks < 1:
        return 0.0
    return nbytes / seconds / 1e9 * _BUS_FACTOR[op](ranks)
