"""triage's ordering: lines into bursts, bursts into the first failure and its consequences.

Findings from one process (relayed under the same Ray prefix, or none) within :data:`BURST_LINES`
lines of each other in one file are one burst: torch_npu prints ``RuntimeError``, then
``ERR02200`` with the rank, then the CANN code that says why (with the worker's pid). A line
joins a burst when it names no other rank and no other pid (a line that names neither joins the
nearest burst above it); the pid a message names wins over the Ray prefix's (the relaying
process). A line that names only a pid and a burst that names only a rank (or the other way
round) stay apart: torchrun's agent below rank 0's error. A burst is named by its most specific
fingerprint (the table's order) and timed by that line's own stamp, else by the earliest stamp in
it; a burst without any stamp takes its time from its neighbours in the file: the last stamped
finding above it, else the first one below (a rank's traceback printed before torchrun's stamped
lines); a file without any stamp leaves it untimed, after every timed one, in file order.

The first failure is chosen by cause before the clock:

- roots: what a launcher says failed first (torchrun's ``Root Cause (first observed failure)``
  entry, its ``failed (exitcode: N) … (pid: P)`` line) wins, whatever the exit code; the rank's
  own burst (its traceback) names it when there is one, with the root's pid, node and time; but
  when that rank's own lines only lost a peer and another rank raised on its own (the bad rank tore
  its group down before raising, and the survivor exited first), that rank is named, with the pid
  and time of its launcher entry (``role = "report"``: a rank's own lines are preferred to it);
- consequences (a fingerprint's ``role``: a gloo peer that went away, torchrun's SIGTERM of the
  survivors and their ``-15`` exits, its own ChildFailedError, RayTaskError wrappers) are first only when nothing else
  failed; an earlier consequence passed over is said in :attr:`Tally.discounted`;
- otherwise the earliest burst, with two corrections:

- clock skew: the ranks that time out on one collective (they name the same remote rank) report
  it at about the same moment; a node whose stamps for it are more than :data:`SKEW` off the
  median of three or more nodes has its clock off by that much, and its stamps are corrected;
- pointers: a burst that names the rank it waited for (``remote rank: [N]``, dstRank) is that
  rank's consequence: when that rank has a burst, it is the failure, whatever the stamps say.

Memory stays bounded: one earliest burst per node and tier, per rank, and a few roots are kept, not every burst.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from ascendfix.job.triage.lines import Discount, Finding

BURST_LINES = 30
SKEW = timedelta(minutes=5)
_OPEN = 8  # bursts of one file followed at once (interleaved processes in a driver log)
_HELD = 64  # untimed bursts of one file held until its first stamp
_ROOTS = 16  # root bursts kept
_PIDS = 4096  # pids whose node a message names, kept
MAX_CONSEQUENCES = 20  # the later findings listed by name (the rest are counted)
ROOT, OWN, CONSEQUENCE = 0, 1, 2  # a burst's tier: the launcher's root cause, a failure of its own, a consequence


@dataclass
class Burst:
    """Nearby findings of one process in one file, named by the most specific of them."""

    best: Finding
    file_index: int
    last_line: int
    codes: Counter[str]
    time: datetime | None = None  # the earliest own stamp in it
    pids: set[int] = field(default_factory=set)
    rank: int | None = None
    message_pid: int | None = None
    node: str | None = None
    points_to: int | None = None
    root: bool = False  # a launcher names it its first observed failure
    task: str | None = None  # the innermost Ray task a wrapper in it names
    near: datetime | None = None  # the last stamp of the file above it, for a burst without one
    side: int = 0  # 0: timed by its own stamp, 1: by the first stamp below it, 2: by the last one above it

    @classmethod
    def of(cls, f: Finding, file_index: int) -> Burst:
        """A burst of one finding."""
        burst = cls(f, file_index, f.line, Counter())
        burst.take(f)
        return burst

    @property
    def size(self) -> int:
        return self.codes.total()

    def joins(self, f: Finding) -> bool:
        """Relayed by the same process (the same Ray prefix, or none) and tagged alike (torch elastic's
        ``[rankN]:``, or none: torchrun's own traceback never joins a rank's lines), a consequence only to
        consequences (an exception joins the wrapper above it), a launcher's report only to reports and its root
        entry only to a launcher's lines (each is another process's line: a root entry below the rank's own
        lines, joined to them, would make them a root), no other rank, no other pid (a line may not say them),
        close enough below; but a line that says only a pid does not join a burst that says only a rank, nor the
        other way round (nothing ties them)."""
        rank_ok = f.rank is None or self.rank is None or f.rank == self.rank
        pid_ok = not f.pids or not self.pids or bool(f.pids & self.pids)
        says = (f.rank is not None, bool(f.pids))
        apart = says in ((True, False), (False, True)) and (self.rank is not None, bool(self.pids)) == says[::-1]
        same_origin = f.origin == self.best.origin and f.tag == self.best.tag
        reports_apart = (f.role == "report") != (self.best.role == "report")  # the launcher's entry, the rank's lines
        reports_apart |= f.role == "root" and self.best.role not in ("report", "root")
        kind_ok = (f.role != "consequence" or self.best.role == "consequence") and not reports_apart
        return same_origin and kind_ok and rank_ok and pid_ok and not apart and f.line - self.last_line <= BURST_LINES

    def take(self, f: Finding) -> None:
        """Add a finding: the most specific names the burst, the earliest stamp times it."""
        self.codes[f.code] += 1
        self.last_line = f.line
        if f.priority < self.best.priority or (
            f.priority == self.best.priority and self.best.rank is None and f.rank is not None
        ):
            self.best = f  # the most specific; of two alike, the one that says its rank (torchrun's entry)
        if f.time is not None and (self.time is None or f.time < self.time):
            self.time = f.time
        self.pids |= f.pids
        self.rank = self.rank if self.rank is not None else f.rank
        if f.message_pid and self.message_pid is None:
            self.message_pid = f.pid
        self.node = self.node or f.node
        self.points_to = self.points_to if self.points_to is not None else f.points_to
        self.root = self.root or f.role == "root"
        self.task = f.task or self.task

    @property
    def tier(self) -> int:
        """ROOT, OWN or CONSEQUENCE."""
        if self.root:
            return ROOT
        return CONSEQUENCE if self.best.role == "consequence" else OWN

    @property
    def when(self) -> datetime | None:
        """The named line's own stamp, else the burst's earliest."""
        return self.best.time or self.time

    def named(self, offset: timedelta = timedelta(0)) -> Finding:
        """The burst as one finding: the most specific line, with the burst's time, pid, rank and node."""
        b = self.best
        pid = self.message_pid if self.message_pid is not None and not b.message_pid else b.pid
        rank = b.rank if b.rank is not None else self.rank
        when = self.when + offset if self.when is not None else None
        message = b.message if b.task or not self.task else f"{b.message} (in {self.task})"
        node = b.node or self.node
        return replace(b, time=when, pid=pid, rank=rank, node=node, points_to=self.points_to, message=message)


def bursts(findings: Iterable[Finding], file_index: int) -> Iterator[Burst]:
    """A file's findings (in line order) grouped into bursts, each timed by its own stamp or its neighbours'."""
    open_: list[Burst] = []
    held: list[Burst] = []  # closed before the file's first stamp: they take it
    first: datetime | None = None  # the file's first stamp of a finding
    last: datetime | None = None  # the latest so far

    def close(burst: Burst) -> list[Burst]:
        if burst.time is None:
            if burst.near is None and first is None and len(held) < _HELD:
                held.append(burst)
                return []
            burst.time, burst.side = (burst.near, 2) if burst.near is not None else (first, 1)
        return [burst]

    for f in findings:
        if f.time is not None:
            if first is None:
                first = f.time
                for burst in held:
                    burst.time, burst.side = f.time, 1
                yield from held
                held.clear()
            last = f.time
        while open_ and f.line - open_[0].last_line > BURST_LINES:
            yield from close(open_.pop(0))
        joined = next((b for b in reversed(open_) if b.joins(f)), None)
        if joined is not None:
            joined.take(f)
            continue
        if len(open_) == _OPEN:
            yield from close(open_.pop(0))
        burst = Burst.of(f, file_index)
        burst.near = last
        open_.append(burst)
    for burst in open_:
        yield from close(burst)
    yield from held


def _own_key(burst: Burst) -> tuple:
    """A rank's own lines before a launcher's entry for it, then earliest first."""
    return (burst.best.role == "report", _key(burst, timedelta(0)))


def _key(burst: Burst, offset: timedelta) -> tuple:
    """Earliest first; at one time, a burst's own stamp before one it took from a neighbour (a driver's log
    interleaves what the processes relay), then the most specific, and a process's own log before a copy relayed
    by another."""
    when = burst.when
    at = when + offset if when else datetime.min
    relayed = burst.best.origin is not None
    return (when is None, at, burst.side, burst.best.priority, relayed, burst.file_index, burst.best.line)


class Tally:
    """The candidates for the first failure (bounded: per node and tier, per rank, a few roots), and every
    finding by code."""

    def __init__(self) -> None:
        self.total = 0
        self.by_code: Counter[str] = Counter()
        self.by_node: dict[tuple[int, str | None], Burst] = {}  # each node's earliest burst of each tier
        self.by_rank: dict[int, Burst] = {}  # each rank's earliest own burst that points at no one else
        self.roots: list[Burst] = []  # the earliest root bursts
        self.waits: dict[tuple[int, str], dict[str, datetime]] = {}  # (remote rank, code) -> node -> earliest
        self.discounted: list[Discount] = []
        self.pid_nodes: dict[int, set[str]] = {}  # the nodes a message names for a pid (Ray's death notices)
        self.entries: dict[int, Burst] = {}  # each rank's first burst that says its pid (a launcher's entry)
        self.lost: dict[int, Burst] = {}  # each rank's first consequence of its own (a lost peer)

    def add(self, burst: Burst) -> None:
        """Count a burst, and keep it when it is the earliest of its node, tier or rank so far."""
        self.total += burst.size
        self.by_code.update(burst.codes)
        zero = timedelta(0)
        node, tier = burst.node, burst.tier
        if tier == ROOT:
            self.roots = sorted([*self.roots, burst], key=lambda b: _key(b, zero))[:_ROOTS]
        elif (tier, node) not in self.by_node or _key(burst, zero) < _key(self.by_node[tier, node], zero):
            self.by_node[tier, node] = burst
        rank = burst.rank if burst.points_to is None and tier == OWN else None
        if rank is not None and (rank not in self.by_rank or _own_key(burst) < _own_key(self.by_rank[rank])):
            self.by_rank[rank] = burst
        if burst.rank is not None and burst.pids and burst.rank not in self.entries and len(self.entries) < _PIDS:
            self.entries[burst.rank] = burst
        if burst.rank is not None and tier == CONSEQUENCE and len(self.lost) < _PIDS:  # a lost peer, a wrapper
            self.lost.setdefault(burst.rank, burst)
        if burst.message_pid is not None and node is not None and len(self.pid_nodes) < _PIDS:
            self.pid_nodes.setdefault(burst.message_pid, set()).add(node)
        if burst.points_to is not None and node is not None and burst.when is not None:
            seen = self.waits.setdefault((burst.points_to, burst.best.code), {})
            if node not in seen or burst.when < seen[node]:
                seen[node] = burst.when

    def others(self, first: Finding | None, limit: int = MAX_CONSEQUENCES) -> list[Finding]:
        """What the tally kept besides ``first`` (each node's earliest finding of each tier, each rank's own, the
        launcher's roots), earliest first, at most ``limit``: the likely consequences a person checks next."""
        kept = {id(b): b for b in (*self.roots, *self.by_node.values(), *self.by_rank.values())}.values()
        shown = [b.best for b in kept if first is None or (b.best.file, b.best.line) != (first.file, first.line)]
        far = datetime.max
        return sorted(shown, key=lambda f: (f.time is None, f.time or far, f.file, f.line))[:limit]

    def skew(self) -> dict[str, timedelta]:
        """Each node whose clock is off: the correction to add to its stamps."""
        offsets: dict[str, timedelta] = {}
        for seen in self.waits.values():
            if len(seen) < 3:
                continue
            median = datetime.fromtimestamp(statistics.median(t.timestamp() for t in seen.values()))
            for node, t in seen.items():
                if abs(median - t) > SKEW and node not in offsets:
                    offsets[node] = median - t
        return offsets

    def first(self, offsets: dict[str, timedelta]) -> tuple[Finding | None, int]:
        """The first failure (its node's clock corrected, pointers followed to the rank they name, a root named
        by its rank's own burst, its node the one another message names for its pid) and how many findings it
        stands for."""
        first, size = self._first(offsets)
        if first is not None and first.node is None and first.pid is not None:
            nodes = self.pid_nodes.get(first.pid, set())
            if len(nodes) == 1:
                first = replace(first, node=next(iter(nodes)))
        return first, size

    def _first(self, offsets: dict[str, timedelta]) -> tuple[Finding | None, int]:

        def offset(b: Burst) -> timedelta:
            return offsets.get(b.node or "", timedelta(0))

        def earliest(tier: int) -> Burst | None:
            found = [b for (t, _), b in self.by_node.items() if t == tier]
            return min(found, key=lambda b: _key(b, offset(b))) if found else None

        if self.roots:
            return self._root(offset)
        first = earliest(OWN)
        if first is None:
            first = earliest(CONSEQUENCE)
            if first is None:
                return None, 0
        else:
            self._passed_over(earliest(CONSEQUENCE), first, offset)
        visited: set[int] = set()
        while first.points_to is not None and first.points_to not in visited:
            visited.add(first.points_to)
            target = self.by_rank.get(first.points_to)
            if target is None:
                break
            first = target
        return first.named(offset(first)), first.size

    def _root(self, offset: Callable[[Burst], timedelta]) -> tuple[Finding, int]:
        """The launcher's first observed failure, named by its rank's own burst when there is one."""
        roots = sorted(self.roots, key=lambda b: (b.best.role == "consequence", _key(b, offset(b))))
        root = roots[0]
        rank = root.rank
        if rank is None:  # torchrun's "failed (exitcode…" line says the local rank only: its entry says the rank
            rank = next((b.rank for b in roots if b.rank is not None and b.pids & root.pids), None)
        named = root.named(offset(root))
        pid = named.pid if named.pid is not None else next((p for p in root.pids), None)
        named = replace(named, rank=rank, pid=pid)
        own = self.by_rank.get(rank) if rank is not None else None
        if own is None or own.best.role == "report":
            raised = self._raised_instead(rank, named, offset)
            if raised is not None:
                return raised
        if own is None:
            return named, root.size
        mine = own.named(offset(own))
        return (
            replace(
                mine,
                pid=mine.pid if mine.message_pid else named.pid,
                node=mine.node or named.node,
                time=named.time or mine.time,
                rank=rank,
            ),
            root.size + own.size,
        )

    def _raised_instead(
        self, rank: int | None, root: Finding, offset: Callable[[Burst], timedelta]
    ) -> tuple[Finding, int] | None:
        """When the launcher's first observed failure is a rank whose own lines only lost a peer (it exited
        before the rank that tore its group down and then raised), the rank that raised on its own: its burst,
        with its launcher entry's pid, node and time. The root passed over is said in :attr:`discounted`."""
        lost = self.lost.get(rank) if rank is not None else None
        raised = [b for r, b in self.by_rank.items() if r != rank and b.best.role != "report"]
        if lost is None or not raised:
            return None
        own = min(raised, key=lambda b: _key(b, offset(b)))
        mine = own.named(offset(own))
        entry = self.entries.get(own.rank) if own.rank is not None else None
        told = entry.named(offset(entry)) if entry is not None else None
        why = (
            f"the launcher's first observed failure, but rank {rank}'s own lines only lost a peer "
            f"({lost.best.code}, line {lost.best.line}); rank {own.rank} raised on its own ({mine.code})"
        )
        self.discounted.append(Discount(root.code, root.file, root.line, why))
        return (
            replace(
                mine,
                pid=mine.pid if mine.message_pid or told is None else told.pid,
                node=mine.node or (told.node if told else None),
                time=(told.time if told else None) or mine.time,
            ),
            own.size,
        )

    def _passed_over(self, consequence: Burst | None, first: Burst, offset: Callable[[Burst], timedelta]) -> None:
        """Say so when an earlier consequence was passed over for ``first``."""
        if consequence is None or _key(consequence, offset(consequence)) > _key(first, offset(first)):
            return
        b = consequence.best
        why = f"earlier, but a consequence ({b.fingerprint.code}): it follows another failure"
        self.discounted.append(Discount(b.code, b.file, b.line, why))
