"""``ascendfix ray smoke``, the driver: real collectives across every node of the Ray cluster, before the job.

Within one wall-time bound (``--timeout``), in phases that each take a share of what is left:
1. a Ray task pinned to each node checks what the job's collectives will bind to there
   (:mod:`node`); the NPUs' TLS switches are compared across nodes;
2. with ``--for SCRIPT``, the job's placement: one STRICT_PACK placement group of
   ``n_gpus_per_node`` × ``{"CPU": 1, "<NPU|GPU>": 1}`` per node, as verl asks
   (``single_controller/ray/base.py:110-117``); a node where none lands is named with what is free there;
3. gloo ``all_reduce`` with one rank per node (the channel of verl's CPU barrier), then the link
   phase (:mod:`links`) pair by pair, which names the node a bad link belongs to;
4. hccl (npu) or nccl (cuda) ``all_reduce``, ``all_gather``, ``reduce_scatter`` and ``all_to_all``
   (the MoE job's traffic) over a size sweep, one rank per accelerator (:mod:`rank`), HCCL's
   timeouts set below the phase's bound so HCCL names the broken peer before the smoke gives up;
   when it fails, stalls, or its bus bandwidth is below the floor (``--min-busbw``; on npu by default half
   the NPU ports' speed), the link phase over it.
A rank that fails says why, one that hangs is named by where it hangs; one (or a node's checks) that did
not get its time is untried, a warning, and so is a pair (:mod:`links`). ray is imported only inside
:func:`smoke`; nothing here prints.
"""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ascendfix.cluster import fanout
from ascendfix.cluster import wait as raywait
from ascendfix.cluster.smoke import links
from ascendfix.cluster.smoke.node import node_checks
from ascendfix.cluster.smoke.rank import Rank
from ascendfix.cluster.smoke.report import (
    CONTROL,
    FAIL,
    OK,
    WARN,
    BusbwFloor,
    Check,
    Collective,
    Node,
    SmokeReport,
    UntriedLink,
    busbw_gbps,
)
from ascendfix.cluster.start import RESOURCE
from ascendfix.errors import UsageError
from ascendfix.profile.records import Profile

if TYPE_CHECKING:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

DEVICE_BACKEND = {"npu": "hccl", "cuda": "nccl"}
DEVICE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"
DEFAULT_TIMEOUT = 300.0  # leaves the device collective HCCL_EXPLAINS_S after the node checks and gloo
HCCL_CONNECT_TIMEOUT = 120  # CANN's floor and default
HCCL_EXPLAINS_S = 150.0  # HCCL names a broken peer (EI0006, EI0015) HCCL_CONNECT_TIMEOUT + 20 s in
GLOO_SHARE = 0.25  # of what is left, when the device phase follows
GBIT = 1e9 / 8  # bytes per second in one Gb/s


class Budget:
    """The smoke's one wall-time bound, shared out phase by phase."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left (never below 1, so a late phase still fails by itself rather than crashing)."""
        return max(self.end - time.monotonic(), 1.0)

    def share(self, fraction: float, most: float | None = None) -> float:
        """``fraction`` of what is left, at most ``most`` seconds."""
        part = self.left() * fraction
        return min(part, most) if most is not None else part


def _gather(ray: ModuleType, refs: Mapping, timeout: float) -> dict:
    """``{key: result}`` for each ref within ``timeout``; an ``{"error"}`` for those that failed or did not answer."""
    by_ref = {ref: key for key, ref in refs.items()}
    ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=timeout) if by_ref else ([], [])
    results = {}
    for ref, key in by_ref.items():
        if ref not in ready:
            results[key] = {"error": f"no answer within {timeout:.0f} s", "stuck": True}
            continue
        try:
            results[key] = ray.get(ref)
        except Exception as e:  # a task or actor that died on its node is that node's row
            results[key] = {"error": f"died on this node: {type(e).__name__}: {_first_line(e)}"}
    return results


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


def sizes(nbytes: int) -> list[int]:
    """The device phase's size sweep: ``nbytes``/64, /8 and itself."""
    return sorted({max(nbytes // 64, 1024), max(nbytes // 8, 1024), nbytes})


def smoke(
    profile: Profile,
    device: str,
    address: str | None,
    nodes_wanted: int,
    per_node: int | None,
    backend: str = "all",
    timeout: float = DEFAULT_TIMEOUT,
    size_mb: float = 64.0,
    place: int | None = None,
    min_busbw: float | None = None,
) -> SmokeReport:
    """Check every alive node of the cluster at ``address``, then run the collectives ``backend`` picks, all
    within ``timeout`` seconds; ``place`` bundles per node reserve the job's placement first (``--for``);
    a node whose device bus bandwidth is below ``min_busbw`` GB/s fails."""
    ray = fanout.import_ray()
    raywait.connect(ray, address)
    try:
        job = _Job(ray, profile, device, Budget(timeout), int(size_mb * 2**20))
        return job.run(address, nodes_wanted, per_node, backend, place, min_busbw)
    finally:
        ray.shutdown()


class _Job:
    """One smoke run on the driver: the cluster's nodes, the bound, and the phases."""

    def __init__(self, ray: ModuleType, profile: Profile, device: str, budget: Budget, nbytes: int) -> None:
        self.ray, self.profile, self.device, self.budget, self.nbytes = ray, profile, device, budget, nbytes
        self.unit = RESOURCE[device]

    def on(self, node_id: str) -> NodeAffinitySchedulingStrategy:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id, soft=False)

    def run(
        self,
        address: str | None,
        nodes_wanted: int,
        per_node: int | None,
        backend: str,
        place: int | None,
        min_busbw: float | None,
    ) -> SmokeReport:
        ray = self.ray
        alive = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: (n["NodeManagerAddress"], n["NodeID"]))
        report = self.report = SmokeReport(address or "auto")
        hostname = CONTROL.sub  # hostnames come from the nodes: no control characters
        report.nodes = [
            Node(n["NodeID"], n["NodeManagerAddress"], hostname("?", n.get("NodeManagerHostname", ""))) for n in alive
        ]
        self.by_id = {n.node_id: n for n in report.nodes}
        if len(alive) < nodes_wanted:
            report.cluster_problems.append(f"{len(alive)} of {nodes_wanted} nodes are alive (ascendfix ray wait)")
        self.accelerators = {n["NodeID"]: int(n.get("Resources", {}).get(self.unit, 0)) for n in alive}
        self.mtu = self._node_checks(backend)
        if place:
            self._place(place)
        self.actor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=2)(Rank)
        phases = (["gloo"] if backend in ("gloo", "all") else []) + (["device"] if backend in ("device", "all") else [])
        for i, phase in enumerate(phases):
            bound = self.budget.left() * (GLOO_SHARE if i < len(phases) - 1 else 1.0)
            if phase == "gloo":
                report.collectives += self._gloo(bound)
            else:
                report.collectives += self._device(bound, per_node or 0, min_busbw, report)
        return report

    def _node_checks(self, backend: str) -> int:
        """Each node's checks; the NPU ports' TLS switches and speeds compared (the cluster's port speed kept for
        the bus-bandwidth floor); the smallest MTU of the interfaces the ranks use."""
        ray, by_id = self.ray, self.by_id
        head_ip = ray.get_runtime_context().gcs_address.rpartition(":")[0]
        variables = [v.name for v in self.profile.devices[self.device].env if v.check == "interface"]
        if backend != "device" and GLOO_IFNAME not in variables:
            variables.insert(0, GLOO_IFNAME)
        task = ray.remote(num_cpus=0, max_retries=0)(node_checks)
        refs = {
            nid: task.options(scheduling_strategy=self.on(nid)).remote(variables, head_ip, self.device, have)
            for nid, have in self.accelerators.items()
        }
        tls, speed, mtus = {}, {}, []
        for nid, answer in _gather(ray, refs, self.budget.share(0.25, 60.0)).items():
            if answer.get("stuck"):  # not given its time (a busy node): untried; its ranks still prove it
                why = f"untried: {answer['error']} (a busy node, or too short a --timeout)"
                by_id[nid].checks.append(Check("checks", "untried", WARN, why))
                continue
            if "error" in answer:
                by_id[nid].checks.append(Check("checks", "no answer", FAIL, answer["error"]))
                continue
            by_id[nid].checks.extend(Check(**c) for c in answer["checks"])
            tls[nid], speed[nid] = answer["tls"], answer.get("speed", {})  # none from an older ascendfix
            mtus += [answer["mtu"]] if answer["mtu"] else []
        _compare_tls(tls, by_id)
        self.port_mbps = _compare_speed(speed, by_id)
        return min(mtus, default=1500)

    def _place(self, count: int) -> None:
        """verl's placement: one STRICT_PACK group of ``count`` × {CPU: 1, unit: 1} per node, all at once."""
        from ray.util import placement_group_table
        from ray.util.placement_group import placement_group, remove_placement_group

        ray, by_id, bundle = self.ray, self.by_id, {"CPU": 1, self.unit: 1}
        bound = self.budget.share(0.2, 60.0)
        groups = [placement_group([dict(bundle) for _ in range(count)], strategy="STRICT_PACK") for _ in by_id]
        possible = min(len(groups), _groups_held(ray, count, bundle))  # no wait places the others anywhere
        try:
            if possible:
                ray.wait([g.ready() for g in groups], num_returns=possible, timeout=bound)
            placed = {}
            for g in groups:
                nodes = set(placement_group_table(g).get("bundles_to_node_id", {}).values())
                if len(nodes) == 1:
                    placed[nodes.pop()] = g
            free = _free_resources(ray)
        finally:
            for g in groups:
                remove_placement_group(g)
        shape = f"{count} × {{CPU: 1, {self.unit}: 1}}"
        for nid, node in by_id.items():
            here = free.get(nid, {})
            left = f"CPU {here.get('CPU', 0):g}, {self.unit} {here.get(self.unit, 0):g}"
            if nid in placed:
                node.checks.append(Check("placement", shape, OK, f"verl's STRICT_PACK group of {shape} fits here"))
            else:
                when = f"within {bound:.0f} s" if possible == len(groups) else f"(the nodes hold {possible} in all)"
                why = (
                    f"verl's STRICT_PACK group of {shape} (one per node) could not be placed here {when}: "
                    f"free here {left} (the job would hang in pg.ready())"
                )
                node.checks.append(Check("placement", f"free {left}", FAIL, why))

    def _ranks(self, nodes: list[tuple[str, int]], env: dict[str, str]) -> list:
        """One rank actor per ``(node, local rank)``; with ``env`` (a device rank), it and ``RAY_LOCAL_RANK`` in
        its runtime_env, holding one accelerator."""
        place: dict = {}
        if env:  # a device rank holds one accelerator, as the job's workers do
            place = {"resources": {"NPU": 1}} if self.unit == "NPU" else {"num_gpus": 1}

        def options(local: int) -> dict:
            return {"runtime_env": {"env_vars": {**env, "RAY_LOCAL_RANK": str(local)}}, **place} if env else {}

        return [
            (nid, self.actor.options(scheduling_strategy=self.on(nid), **options(local)).remote())
            for nid, local in nodes
        ]

    def _gloo(self, bound: float) -> list[Collective]:
        """gloo all_reduce over every node, then the link phase with the time the collective must leave it."""
        start = time.monotonic()
        ranks = self._ranks([(nid, 0) for nid in self.by_id], {})
        ops = [("all_reduce", self.nbytes)]
        reserve = links.Clock(0).needed(len(links.rounds(list(self.by_id))))  # the pairs' least time
        collective = max(min(bound / 2, bound - reserve), bound / 4)  # a hung collective leaves the pairs theirs
        results, stuck = _collective(self.ray, ranks, "gloo", ops, collective, self.by_id)
        pool = {nid: a for i, (nid, a) in enumerate(ranks) if i not in stuck}
        for i in stuck:
            self.ray.kill(ranks[i][1])
        if len(self.by_id) > 1:
            self._links("gloo", pool, {}, bound - (time.monotonic() - start))
        for a in pool.values():
            self.ray.kill(a)
        return results

    def _device(self, bound: float, wanted: int, min_busbw: float | None, report: SmokeReport) -> list[Collective]:
        by_id, unit, channel = self.by_id, self.unit, DEVICE_BACKEND[self.device]
        for nid, have in self.accelerators.items():
            if have < wanted:
                why = f"{have} {unit} registered, the job wants {wanted}"
                by_id[nid].checks.append(Check(unit, str(have), FAIL, why))
        start = time.monotonic()
        collective = min(max(HCCL_EXPLAINS_S, bound * 0.6), bound - 10) if bound > 20 else bound / 2
        env = device_env(collective)
        ranks = self._ranks([(nid, i) for nid, have in self.accelerators.items() for i in range(have)], env)
        if not ranks:
            report.cluster_problems.append(f"no node has a {unit} registered: the {channel} channel cannot run")
            return []
        ops = [(op, size) for op in DEVICE_OPS for size in sizes(self.nbytes)]
        results, _ = _collective(self.ray, ranks, channel, ops, collective, by_id)
        for _, a in ranks:
            self.ray.kill(a)
        report.busbw_floor = self._floor(min_busbw)
        slow = report.busbw_floor is not None and _below_floor(by_id, channel, report.busbw_floor)
        if len({nid for nid, _ in ranks}) > 1 and (slow or not all(c.ok for c in results)):
            first = {nid: 0 for nid, _ in ranks}
            pool = dict(self._ranks(list(first.items()), env))
            self._links(channel, pool, env, bound - (time.monotonic() - start))
            for a in pool.values():
                self.ray.kill(a)
        return results

    def _floor(self, min_busbw: float | None) -> BusbwFloor | None:
        """The all_reduce bus bandwidth below which a node fails: ``--min-busbw``, else (npu) half the NPU ports'
        speed that hccn_tool reports, else none."""
        if min_busbw is not None:
            return BusbwFloor(min_busbw, "--min-busbw")
        if self.device != "npu" or not self.port_mbps:
            return None
        gbits = self.port_mbps / 1000
        floor = gbits * GBIT / 1e9 / 2  # GB/s
        return BusbwFloor(round(floor, 3), f"half the {gbits:g} Gb/s NPU port speed (hccn_tool -speed -g)")

    def _links(self, backend: str, pool: dict, env: dict[str, str], bound: float) -> None:
        """The pairwise link phase over ``backend``: a message larger than the smallest MTU, each way."""

        def make(nid: str) -> Any:  # the Rank actor's handle
            return self._ranks([(nid, 0)], env)[0][1]

        nbytes = max(self.nbytes, 4 * self.mtu)
        clock = links.Clock(max(bound, 1.0))
        results = links.run_pairs(self.ray, pool, make, self.by_id, backend, nbytes, clock, _gather)
        verdict = links.blame(results, self.by_id, backend)
        named = [n.label for n in self.by_id.values() if _failed(n, f"{backend} link")]
        self._unsettled(backend, verdict, clock, isolated=bool(named))
        pointed = named or [self.by_id[nid].label for nid in verdict.suspects]
        if not pointed:
            return
        for node in self.by_id.values():  # the collective failed everywhere because of the link the pairs point at
            if not _failed(node, f"{backend} link") and _failed(node, f"{backend} rank"):
                says = f"names {', '.join(pointed)}" if named else f"points at {', '.join(pointed)}, not isolated"
                node.checks = [
                    Check(c.item, "waited", WARN, f"{c.message} (the link phase {says})")
                    if c.item == f"{backend} rank" and c.status == FAIL
                    else c
                    for c in node.checks
                ]

    def _unsettled(self, backend: str, verdict: links.Verdict, clock: links.Clock, isolated: bool) -> None:
        """The report's untried links, suspects and the ``--timeout`` that would try them; a problem when the
        culprit was not isolated."""
        if not verdict.untried:
            return
        report, label = self.report, (lambda nid: self.by_id[nid].label)
        report.untried_links += [
            UntriedLink(backend, (label(a), label(b)), why) for (a, b), why in verdict.untried.items()
        ]
        report.suspects += [label(nid) for nid in verdict.suspects if label(nid) not in report.suspects]
        left = sum(any(p in verdict.untried for p in r) for r in links.rounds(sorted(self.by_id)))
        needed = _tens(self.budget.seconds + clock.needed(left))
        report.timeout_needed_s = max(report.timeout_needed_s or 0.0, needed)
        if isolated:
            return
        shown = "; ".join(f"{label(a)} – {label(b)}" for a, b in list(verdict.untried)[:4])
        more = f" and {len(verdict.untried) - 4} more" if len(verdict.untried) > 4 else ""
        total = len(self.by_id) * (len(self.by_id) - 1) // 2
        point = (
            f"; the failing links point at {', '.join(label(n) for n in verdict.suspects)}" if verdict.suspects else ""
        )
        report.cluster_problems.append(
            f"the {backend} link phase ran out of time (--timeout {self.budget.seconds:g}) before it isolated a node: "
            f"{len(verdict.untried)} of {total} links untried ({shown}{more}){point}; "
            f"--timeout {needed:g} would try them all"
        )


def _tens(seconds: float) -> float:
    """``seconds`` rounded up to a multiple of ten."""
    return float(-(-int(seconds) // 10) * 10)


def device_env(bound: float) -> dict[str, str]:
    """What the device ranks' runtime_env sets, in place of the job's 3600 s: HCCL's connect timeout at its
    floor (it names the broken peer 120 + 20 s later) and its exec timeout below the collective's ``bound``."""
    exec_timeout = max(int(bound) - 20, int(bound * 0.8), 1)
    return {"HCCL_CONNECT_TIMEOUT": str(HCCL_CONNECT_TIMEOUT), "HCCL_EXEC_TIMEOUT": str(exec_timeout)}


def _failed(node: Node, item: str) -> bool:
    return any(c.item == item and c.status == FAIL for c in node.checks)


def _compare_tls(tls: Mapping[str, Mapping[str, str]], by_id: Mapping[str, Node]) -> None:
    """A node whose NPUs' TLS switch differs from the other nodes' (HCCL's links need the same on both ends)."""
    values = {nid: ",".join(sorted(set(t.values()))) for nid, t in tls.items() if t}
    if len(set(values.values())) < 2:
        return
    common = max(set(values.values()), key=list(values.values()).count)
    for nid, value in values.items():
        if value != common:
            why = f"hccn_tool -tls -g: TLS switch {value} here, {common} on the other nodes (they must match)"
            by_id[nid].checks.append(Check("npu tls", value, FAIL, why))


def _compare_speed(speed: Mapping[str, Mapping[str, int]], by_id: Mapping[str, Node]) -> int:
    """Warn of each NPU port that runs slower than the cluster's usual speed (a port that negotiated down: its
    cable or optics); that usual speed in Mb/s, 0 when hccn_tool reported none."""
    every = [mbps for ports in speed.values() for mbps in ports.values()]
    if not every:
        return 0
    usual = max(set(every), key=every.count)
    for nid, ports in speed.items():
        for npu, mbps in sorted(ports.items()):
            if mbps < usual:
                why = f"hccn_tool -i {npu} -speed -g: {mbps} Mb/s here, {usual} on most NPU ports (cable or optics?)"
                by_id[nid].checks.append(Check(f"npu {npu} speed", f"{mbps} Mb/s", WARN, why))
    return usual


def _groups_held(ray: ModuleType, count: int, bundle: Mapping[str, float]) -> int:
    """How many STRICT_PACK groups of ``count`` × ``bundle`` the alive nodes' total resources hold at most (a
    group lands on one node): the placement waits for no more than these, the others never fit."""
    held = 0
    for node in ray.nodes():
        if node.get("Alive"):
            total = node.get("Resources", {})
            held += min(int(total.get(key, 0) // (need * count)) for key, need in bundle.items())
    return held


def _free_resources(ray: ModuleType) -> dict[str, dict[str, float]]:
    """What is free on each node now ({} when this Ray cannot say)."""
    try:
        from ray._private.state import available_resources_per_node

        return available_resources_per_node()
    except (ImportError, AttributeError, Exception):  # a private API: absent or changed in another Ray
        return {}


def _below_floor(by_id: Mapping[str, Node], channel: str, floor: BusbwFloor) -> bool:
    """Fail each node whose all_reduce bus bandwidth (at the largest size) is below the floor; whether any was."""
    found = False
    for node in by_id.values():
        for c in list(node.checks):
            if c.item.startswith(f"{channel} all_reduce") and c.item.endswith("busbw") and c.status == OK:
                speed = float(c.value.split()[0])
                if speed < floor.busbw_gbps:
                    why = f"{c.item} {c.value} is below the floor of {floor.busbw_gbps:g} GB/s ({floor.source})"
                    node.checks.append(Check(f"{channel} busbw", c.value, FAIL, why))
                    found = True
    return found


_BEFORE_JOIN = ("starting", "import ", "set_device")  # a rank's steps before it joins the group
_CONSEQUENCE = re.compile(r"time[ds]? ?out|connection (was likely )?closed|closed by peer|reset by peer", re.I)


def _collective(
    ray: ModuleType, ranks: list, backend: str, ops: list, bound: float, by_id: dict
) -> tuple[list, set[int]]:
    """Run ``ops`` [(op, bytes)] over ``ranks`` [(node id, actor)] within ``bound`` seconds; each failing rank
    becomes a failed check on its node, one still importing when the others gave up an untried one (a warning).
    The collectives, and the ranks that hang (not those still importing)."""
    end, world = time.monotonic() + bound, len(ranks)
    rendezvous = _gather(ray, {"r": ranks[0][1].rendezvous.remote()}, bound / 2)["r"]
    if isinstance(rendezvous, dict):
        by_id[ranks[0][0]].checks.append(Check(f"{backend} rendezvous", "no answer", FAIL, rendezvous["error"]))
        return [Collective(backend, op, nbytes, False) for op, nbytes in ops], {0}
    addr, port = rendezvous
    left = max(end - time.monotonic(), 1.0)
    base = {"backend": backend, "world": world, "addr": addr, "port": port, "ops": ops, "timeout": left * 0.6}
    refs = {i: a.run.remote({**base, "rank": i, "join_within": left}) for i, (_, a) in enumerate(ranks)}
    answers = _gather(ray, refs, left)
    stuck = {i for i, a in answers.items() if a.get("stuck")}
    where = _gather(ray, {i: ranks[i][1].where.remote() for i in stuck}, 5.0)
    # a rank still importing did not get its time: untried, and left running (its run returns, joining nothing)
    late = {i for i, a in answers.items() if a.get("late")}
    late |= {i for i in stuck if isinstance(where.get(i), str) and where[i].startswith(_BEFORE_JOIN)}
    per_node: dict[str, list[int]] = {}
    for i, (nid, _) in enumerate(ranks):
        per_node.setdefault(nid, []).append(i)
    failed = {i: a["error"] + _stuck(a, where.get(i)) for i, a in answers.items() if "error" in a}
    own = sorted(i for i, a in answers.items() if "error" in a and not _waited(a) and i not in late)
    for nid, indices in per_node.items():
        errors = [i for i in indices if i in failed]
        if not errors:
            continue
        shown = f"rank {errors[0]}: {failed[errors[0]]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
        if set(errors) <= late:
            why = f"untried, not up in time on this busy node: {shown}"
            by_id[nid].checks.append(Check(f"{backend} rank", "untried", WARN, why))
        elif own and not set(errors) & set(own):  # only waited for ranks that failed on their own
            why = f"waited for rank(s) {', '.join(str(i) for i in own)}, which failed: {shown}"
            by_id[nid].checks.append(Check(f"{backend} rank", "waited", WARN, why))
        elif late and not own:  # only waited for ranks that were not up
            why = f"waited for rank(s) {', '.join(str(i) for i in sorted(late))}, which were not up in time: {shown}"
            by_id[nid].checks.append(Check(f"{backend} rank", "waited", WARN, why))
        else:
            by_id[nid].checks.append(Check(f"{backend} rank", "failed", FAIL, shown))
    if failed:
        return [Collective(backend, op, nbytes, False) for op, nbytes in ops], stuck - late
    largest = {op: max(n for o, n in ops if o == op) for op, _ in ops}
    results = []
    for k, (op, nbytes) in enumerate(ops):
        seconds: dict[str, float] = {}
        for nid, indices in per_node.items():
            wrong = [i for i in indices if not answers[i]["results"][k]["ok"]]
            if wrong:
                why = f"rank {wrong[0]}: {op} of {nbytes} bytes gave a wrong result"
                by_id[nid].checks.append(Check(f"{backend} {op}", "wrong result", FAIL, why))
            seconds[nid] = max(answers[i]["results"][k]["seconds"] for i in indices)
        size = answers[0]["results"][k]["bytes"]
        if nbytes == largest[op]:
            for nid, s in seconds.items():
                shown = f"{busbw_gbps(op, size, s, world):.2f} GB/s"
                by_id[nid].checks.append(Check(f"{backend} {op} busbw", shown, OK))
        slowest = max(seconds, key=seconds.__getitem__)
        bw = round(busbw_gbps(op, size, seconds[slowest], world), 3)
        good = all(answers[i]["results"][k]["ok"] for i in answers)
        results.append(Collective(backend, op, size, good, bw, by_id[slowest].label))
    return results, stuck


def _stuck(answer: dict, where: object) -> str:
    """Where a rank that did not answer hangs; or that its actor never started (its resource taken)."""
    if not answer.get("stuck"):
        return ""
    if isinstance(where, str):
        return f" (stuck in {where})"
    return " (its actor did not start: is the NPU/GPU it needs taken by another job?)"


def _waited(answer: dict) -> bool:
    """A rank that timed out waiting, or whose peer went away (gloo: "Connection was likely closed"), rather
    than failing on its own: a consequence of another rank's failure, when there is one."""
    return bool(answer.get("stuck")) or _CONSEQUENCE.search(answer["error"]) is not None


# --- run's --smoke -------------------------------------------------------------------------------


def job_problems(
    profile: Profile,
    device: str,
    overrides: Mapping[str, str],
    environ: Mapping[str, str],
    timeout: float = DEFAULT_TIMEOUT,
) -> list[str]:
    """``run --smoke``: what ``ray smoke`` finds wrong with the reachable cluster, one line each.

    The job's ``trainer.nnodes`` and ``trainer.n_gpus_per_node`` when it sets them (and then its
    placement too); a problem when ray is missing or no cluster is reachable (the smoke was asked for).
    """
    if importlib.util.find_spec("ray") is None:
        return [f"--smoke: {fanout.INSTALL_HINT}"]
    address = raywait.reachable_address(environ)
    if address is None:
        return ["--smoke: no Ray cluster is reachable (set RAY_ADDRESS, or start one with ascendfix ray start)"]
    per_node: int | None
    try:
        nodes, per_node = raywait.job_size(overrides, "the job")
        place: int | None = per_node
    except UsageError:
        nodes, per_node, place = 1, profile.device(device).accelerators_per_node, None
    try:
        report = smoke(profile, device, address, nodes, per_node, "all", timeout, place=place)
    except UsageError as e:
        return [f"--smoke: {e}"]
    return [
        f"{p.ip} {p.node_id[:8]} ({p.hostname}) {p.item}: {p.message}" if p.node_id else p.message
        for p in report.problems
    ]  # a collective that failed failed on a node: its problem is there
