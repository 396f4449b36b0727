"""``ray smoke``'s link phase, on the driver: which node's link a failing, stalled or slow collective points at.

One collective over every node cannot point at a node: every rank waits for the slowest link.
Two ranks can. The nodes are paired in rounds of disjoint pairs (the circle method: N nodes take
about N rounds, every pair once), each pair exchanging a small message and then one larger than
the smallest interface MTU (so an MTU blackhole fails as a pair, not as a timeout of everything)
over the same backend and interface as the collective. A node in every failing pair is the one
named, with the pairs it cannot complete; a node whose links carry less than half the median
bandwidth is named too; a failing or slow link neither explains is named on both its nodes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

from ascendfix.cluster.smoke.report import FAIL, OK, WARN, Check, Node

Pair = tuple[str, str]


def rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every pair of ``nodes`` once, in rounds of disjoint pairs (N−1 rounds for even N, N for odd)."""
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    m, out = len(ring), []
    for _ in range(m - 1):
        pairs = [(ring[i], ring[m - 1 - i]) for i in range(m // 2)]
        out.append([(a, b) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [r for r in out if r]


def blame(results: Mapping[Pair, dict], by_id: Mapping[str, Node], backend: str) -> None:
    """Add each node's link findings to its checks: the node in every failing pair, slow nodes, stray links
    (a pair the bound left no time for counts for nothing)."""
    failing = {pair: r for pair, r in results.items() if "error" in r}
    named: set[str] = set()
    if failing:
        common = set.intersection(*(set(p) for p in failing))
        # both ends of the only failing pair(s): the one whose links to others carry is not the bad one
        # (a bound that cut the phase short can leave the bad node's other pairs untried)
        carries = {nid for pair, r in results.items() if r.get("ok") for nid in pair}
        if len(common) > 1 and common - carries:
            common -= carries
        for nid in common:
            peers = sorted(by_id[b if a == nid else a].label for a, b in failing)
            first = next(iter(failing.values()))["error"]
            why = f"its {backend} link fails with {', '.join(peers)} (every failing pair has it): {first}"
            by_id[nid].checks.append(Check(f"{backend} link", "failed", FAIL, why))
            named.add(nid)
        if not common:
            for (a, b), r in failing.items():
                for nid, peer in ((a, b), (b, a)):
                    why = f"the {backend} link to {by_id[peer].label} fails: {r['error']}"
                    by_id[nid].checks.append(Check(f"{backend} link", "failed", FAIL, why))
    speeds = {pair: r["bytes"] / r["seconds"] / 1e9 for pair, r in results.items() if r.get("seconds")}
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


def run_pairs(
    ray,
    pool: dict[str, object],
    make: Callable[[str], object],
    by_id: Mapping[str, Node],
    backend: str,
    nbytes: int,
    bound: float,
    gather: Callable,
) -> dict[Pair, dict]:
    """Every pair's exchange within ``bound`` seconds in all, with each node's rank actor from ``pool``
    (``make(node)`` starts one where there is none, or the old one hung and was killed).
    ``{pair: {"ok", "seconds", "bytes"}, {"error"} or {"untried"}}``."""
    end = time.monotonic() + bound
    plan = rounds(sorted(by_id))
    results: dict[Pair, dict] = {}
    for i, pairs in enumerate(plan):
        left = end - time.monotonic()
        if left <= 1:
            results.update({pair: {"untried": True} for pair in pairs})  # the smoke's --timeout ran out
            continue
        members = {nid for pair in pairs for nid in pair}
        for nid in members - set(pool):
            pool[nid] = make(nid)
        gather(ray, {nid: pool[nid].ready.remote(backend) for nid in members}, left / (len(plan) - i) / 2)
        share = max(end - time.monotonic(), 1.0) / (len(plan) - i)
        meet = gather(ray, {a: pool[a].rendezvous.remote() for a, _ in pairs}, share / 2)
        refs = {}
        for a, b in pairs:
            if isinstance(meet[a], dict):
                results[(a, b)] = {"error": f"rendezvous on {by_id[a].label}: {meet[a]['error']}"}
                continue
            addr, port = meet[a]
            spec = {"backend": backend, "addr": addr, "port": port, "bytes": nbytes}
            spec["timeout"] = max(share * 0.6, 1.0)
            refs[(a, b, 0)] = pool[a].pair.remote({**spec, "rank": 0})
            refs[(a, b, 1)] = pool[b].pair.remote({**spec, "rank": 1})
        answers = gather(ray, refs, max(share, 1.0))
        for (a, b, side), answer in sorted(answers.items()):
            node = b if side else a
            if answer.get("stuck") and node in pool:
                ray.kill(pool.pop(node))
            if "error" in answer and (a, b) not in results:
                results[(a, b)] = {"error": f"{by_id[node].label}: {answer['error']}"}
        for a, b in pairs:
            results.setdefault((a, b), answers.get((a, b, 0), {"error": "no answer"}))
    return results
