"""``ray smoke``'s link phase, on the driver: which node's link a failing, stalled or slow collective points at.

One collective over every node cannot point at a node: every rank waits for the slowest link.
Two ranks can. The nodes are paired in rounds of disjoint pairs (the circle method: N nodes take
about N rounds, every pair once), each pair exchanging a small message and then one larger than
the smallest interface MTU (so an MTU blackhole fails as a pair, not as a timeout of everything)
over the same backend and interface as the collective. A node in every failing pair is the one
named, with the pairs it cannot complete; a node whose links carry less than half the median
bandwidth is named too; a failing or slow link neither explains is named on both its nodes.

Only pairs that really ran count. A pair that did not get its time (the bound ran out before it could
start, a rank was not up, the store never gathered both ends) is untried; when untried pairs leave the
failing ones pointing at more than one node, those are suspects, not failures.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ascendfix.cluster.smoke.report import FAIL, OK, WARN, Check, Node

Pair = tuple[str, str]
PAIR_FLOOR_S = 4.0  # a pair's least timeout before any connection was measured
CONNECT_FACTOR = 3.0  # a pair's timeout, at least, in connections (a loaded node connects slower)
PAIR_SHARE = 0.6  # of a round's time, the pair's own timeout (the rest: its actors' answers)
_NEVER_MET = re.compile(r"clients joined|waiting for clients|trying to connect to \(", re.I)


def rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every pair of ``nodes`` once, in rounds of disjoint pairs (N−1 rounds for even N, N for odd)."""
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    m, out = len(ring), []
    for _ in range(m - 1):
        pairs = [(ring[i], ring[m - 1 - i]) for i in range(m // 2)]
        out.append([(a, b) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [r for r in out if r]


def untried(answer: Mapping) -> str:
    """Why one side's answer says nothing of the link (the pair never met: the store did not gather both
    ends, or the run gave it no time), or "" when it does."""
    if answer.get("untried"):
        return str(answer["untried"])
    error = str(answer.get("error", ""))
    return error if _NEVER_MET.search(error) else ""


@dataclass
class Verdict:
    """What the link phase could not settle: the pairs it never really ran, and the nodes the failing pairs
    point at when they do not single one out (each given a warning rather than blamed)."""

    untried: dict[Pair, str] = field(default_factory=dict)  # pair -> why
    suspects: list[str] = field(default_factory=list)  # node ids


def blame(results: Mapping[Pair, dict], by_id: Mapping[str, Node], backend: str) -> Verdict:
    """Add each node's link findings to its checks, deciding only from the pairs that really ran: the node in
    every failing pair, slow nodes, stray links. When untried pairs leave the failing ones pointing at more
    than one node, those nodes are suspects (a warning each), not failures."""
    verdict = Verdict({pair: why for pair, r in results.items() if (why := untried(r))})
    ran = {pair: r for pair, r in results.items() if pair not in verdict.untried}
    failing = {pair: r for pair, r in ran.items() if "error" in r}
    carries = {nid for pair, r in ran.items() if r.get("ok") for nid in pair}
    named: set[str] = set()
    if failing:
        common = set.intersection(*(set(p) for p in failing))
        # of both ends of the only failing pair(s), the one whose links to others carry is not the bad one
        if len(common) > 1 and common - carries:
            common -= carries
        first = next(iter(failing.values()))["error"]
        if len(common) == 1 or (common and not verdict.untried):
            for nid in common:
                peers = sorted(by_id[b if a == nid else a].label for a, b in failing)
                why = f"its {backend} link fails with {', '.join(peers)} (every failing pair has it): {first}"
                by_id[nid].checks.append(Check(f"{backend} link", "failed", FAIL, why))
                named.add(nid)
        elif not verdict.untried:
            for (a, b), r in failing.items():
                for nid, peer in ((a, b), (b, a)):
                    why = f"the {backend} link to {by_id[peer].label} fails: {r['error']}"
                    by_id[nid].checks.append(Check(f"{backend} link", "failed", FAIL, why))
        else:  # the untried pairs would have told which end is bad
            ends = {nid for pair in failing for nid in pair}
            verdict.suspects = sorted(common or (ends - carries) or ends)
            for nid in verdict.suspects:
                peers = sorted(by_id[b if a == nid else a].label for a, b in failing if nid in (a, b))
                left = sorted(by_id[b if a == nid else a].label for a, b in verdict.untried if nid in (a, b))
                why = (
                    f"suspect: its {backend} link fails with {', '.join(peers)}; untried with "
                    f"{', '.join(left) or 'none'}, so the other end may be the bad one: {first}"
                )
                by_id[nid].checks.append(Check(f"{backend} link", "suspect", WARN, why))
                named.add(nid)
    _speeds(ran, by_id, backend, named)
    return verdict


def _speeds(ran: Mapping[Pair, dict], by_id: Mapping[str, Node], backend: str, named: set[str]) -> None:
    """A node whose links carry less than half the nodes' median is named; a link below half the median that
    no named node explains warns on both its ends."""
    speeds = {pair: r["bytes"] / r["seconds"] / 1e9 for pair, r in ran.items() if r.get("seconds")}
    if len(speeds) < 2:
        return
    median = statistics.median(speeds.values())
    per_node = {
        nid: statistics.median(s for pair, s in speeds.items() if nid in pair)
        for nid in by_id
        if any(nid in pair for pair in speeds)
    }
    node_median = statistics.median(per_node.values())
    for nid, speed in per_node.items():
        if nid in named:
            continue
        if speed < node_median / 2:
            why = f"its {backend} links carry {speed:.3f} GB/s, below half the nodes' median {node_median:.3f} GB/s"
            by_id[nid].checks.append(Check(f"{backend} link", f"{speed:.3f} GB/s", FAIL, why))
            named.add(nid)
        else:
            by_id[nid].checks.append(Check(f"{backend} link", f"{speed:.3f} GB/s", OK))
    for (a, b), speed in speeds.items():
        if speed < median / 2 and not {a, b} & named:
            for nid, peer in ((a, b), (b, a)):
                why = f"the link to {by_id[peer].label} carries {speed:.3f} GB/s, below half the median {median:.3f}"
                by_id[nid].checks.append(Check(f"{backend} link", f"{speed:.3f} GB/s", WARN, why))


class Clock:
    """The link phase's time: its end, and what one round needs on this cluster, measured as it runs.

    A pair needs at least ``CONNECT_FACTOR`` × the longest connection (``init_process_group`` of both ends)
    measured so far (``PAIR_FLOOR_S`` before any); a round gets its share of what is left, never less.
    """

    def __init__(self, bound: float, connect_s: float = 0.0) -> None:
        self.end = time.monotonic() + bound
        self.connect_s = connect_s
        self.round_s = 0.0  # the longest round that ran

    def left(self) -> float:
        """Seconds left in the phase."""
        return self.end - time.monotonic()

    def pair_s(self) -> float:
        """The least time a pair may be started with."""
        return max(PAIR_FLOOR_S, CONNECT_FACTOR * self.connect_s)

    def needed(self, rounds: int) -> float:
        """About how long ``rounds`` more rounds take: the longest round seen, or a pair's least time."""
        return rounds * max(self.round_s, self.pair_s() / PAIR_SHARE)


def run_pairs(
    ray: ModuleType,
    pool: dict[str, Any],  # node id -> its Rank actor's handle
    make: Callable[[str], Any],
    by_id: Mapping[str, Node],
    backend: str,
    nbytes: int,
    clock: Clock,
    gather: Callable,
) -> dict[Pair, dict]:
    """Every pair's exchange before ``clock`` runs out, with each node's rank actor from ``pool`` (``make(node)``
    starts one where there is none, or the old one hung and was killed). A pair whose actors are not up, or
    that would get less than :meth:`Clock.pair_s`, is untried, not started.
    ``{pair: {"ok", "seconds", "bytes", "connect_s"}, {"error"} or {"untried": why}}``."""
    plan = rounds(sorted(by_id))
    results: dict[Pair, dict] = {}
    for i, pairs in enumerate(plan):
        began, least = time.monotonic(), clock.pair_s() / PAIR_SHARE
        share = max(clock.left() / (len(plan) - i), least)
        members = {nid for pair in pairs for nid in pair}
        for nid in members - set(pool):
            pool[nid] = make(nid)
        slack = clock.left() - clock.needed(len(plan) - i)  # what the rounds left need not: for ranks starting
        up = gather(ray, {nid: pool[nid].ready.remote(backend) for nid in members}, max(share / 2, slack))
        meet = gather(ray, {a: pool[a].rendezvous.remote() for a, b in pairs if _up(up, a, b)}, share / 4)
        timeout = min(max((began + share - time.monotonic()) * PAIR_SHARE, clock.pair_s()), clock.left() * PAIR_SHARE)
        refs = {}
        for a, b in pairs:
            if clock.left() < least:
                results[(a, b)] = {
                    "untried": f"not started: {max(clock.left(), 0):.0f} s left, a pair needs {least:.0f} s here"
                }
            elif not _up(up, a, b):
                late = ", ".join(by_id[n].label for n in (a, b) if up.get(n) is not True)
                results[(a, b)] = {"untried": f"the rank on {late} was not up in time"}
            elif not isinstance(meet.get(a), (tuple, list)):
                results[(a, b)] = {"untried": f"rendezvous on {by_id[a].label}: no answer"}
            else:
                addr, port = meet[a]
                spec = {"backend": backend, "addr": addr, "port": port, "bytes": nbytes, "timeout": timeout}
                refs[(a, b, 0)] = pool[a].pair.remote({**spec, "rank": 0})
                refs[(a, b, 1)] = pool[b].pair.remote({**spec, "rank": 1})
        answers = gather(ray, refs, timeout / PAIR_SHARE)
        for (a, b, side), answer in sorted(answers.items()):
            node = b if side else a
            if answer.get("stuck") and node in pool:  # hung in the link: its replacement starts now
                ray.kill(pool.pop(node))
                pool[node] = make(node)
                pool[node].ready.remote(backend)
        for a, b in pairs:
            if (a, b) not in results:
                results[(a, b)] = _outcome([answers[(a, b, 0)], answers[(a, b, 1)]], (by_id[a], by_id[b]))
                clock.connect_s = max(clock.connect_s, results[(a, b)].get("connect_s", 0.0))
        clock.round_s = max(clock.round_s, time.monotonic() - began)
    return results


def _up(up: Mapping[str, object], *nodes: str) -> bool:
    return all(up.get(n) is True for n in nodes)


def _outcome(sides: list[dict], nodes: tuple[Node, Node]) -> dict:
    """A pair's result from its two sides' answers: untried when either says the two never met."""
    never = next((f"{n.label}: {why}" for s, n in zip(sides, nodes, strict=True) if (why := untried(s))), "")
    if never:
        return {"untried": never}
    said = sorted(
        ((bool(s.get("stuck")), n.label, s["error"]) for s, n in zip(sides, nodes, strict=True) if "error" in s)
    )
    failed = f"{said[0][1]}: {said[0][2]}" if said else ""  # a side's own error says more than a hang
    if failed:
        return {"error": failed}
    connect = min(s.get("connect_s", 0.0) for s in sides)  # the end that came last: the connection alone
    return {**sides[0], "connect_s": connect}
