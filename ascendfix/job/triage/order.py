"""triage's ordering: lines into bursts, bursts into the first failure and its consequences.

Findings from one process (relayed under the same Ray prefix, or none) within :data:`BURST_LINES`
lines of each other in one file are one burst: torch_npu prints ``RuntimeError``, then
``ERR02200`` with the rank, then the CANN code that says why (with the worker's pid). A line
joins a burst when it names no other rank and no other pid (a line that names neither joins the
nearest burst above it); the pid a message names wins over the Ray prefix's (the relaying
process). A line that names only a pid and a burst that names only a rank (or the other way
round) stay apart: torchrun's agent below rank 0's error. A burst is named by its most specific
fingerprint (the table's order) and timed by that line's own stamp, else by the earliest stamp in
it; a burst without any stamp has no time and sorts after every timed one.

The earliest burst is the first failure, with two corrections:

- clock skew: the ranks that time out on one collective (they name the same remote rank) report
  it at about the same moment; a node whose stamps for it are more than :data:`SKEW` off the
  median of three or more nodes has its clock off by that much, and its stamps are corrected;
- pointers: a burst that names the rank it waited for (``remote rank: [N]``, dstRank) is that
  rank's consequence: when that rank has a burst, it is the failure, whatever the stamps say.

Memory stays bounded: one earliest burst per node and per rank is kept, not every burst.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from ascendfix.job.triage.lines import Finding

BURST_LINES = 30
SKEW = timedelta(minutes=5)
_OPEN = 8  # bursts of one file followed at once (interleaved processes in a driver log)


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
        """Relayed by the same process (the same Ray prefix, or none), no other rank, no other pid (a line may
        not say them), close enough below; but a line that says
        only a pid does not join a burst that says only a rank, nor the other way round (nothing ties them)."""
        rank_ok = f.rank is None or self.rank is None or f.rank == self.rank
        pid_ok = not f.pids or not self.pids or bool(f.pids & self.pids)
        says = (f.rank is not None, bool(f.pids))
        apart = says in ((True, False), (False, True)) and (self.rank is not None, bool(self.pids)) == says[::-1]
        same_origin = f.origin == self.best.origin
        return same_origin and rank_ok and pid_ok and not apart and f.line - self.last_line <= BURST_LINES

    def take(self, f: Finding) -> None:
        """Add a finding: the most specific names the burst, the earliest stamp times it."""
        self.codes[f.code] += 1
        self.last_line = f.line
        if f.priority < self.best.priority:
            self.best = f
        if f.time is not None and (self.time is None or f.time < self.time):
            self.time = f.time
        self.pids |= f.pids
        self.rank = self.rank if self.rank is not None else f.rank
        if f.message_pid and self.message_pid is None:
            self.message_pid = f.pid
        self.node = self.node or f.node
        self.points_to = self.points_to if self.points_to is not None else f.points_to

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
        return replace(b, time=when, pid=pid, rank=rank, node=b.node or self.node, points_to=self.points_to)


def bursts(findings: Iterable[Finding], file_index: int) -> Iterator[Burst]:
    """A file's findings (in line order) grouped into bursts."""
    open_: list[Burst] = []
    for f in findings:
        while open_ and f.line - open_[0].last_line > BURST_LINES:
            yield open_.pop(0)
        joined = next((b for b in reversed(open_) if b.joins(f)), None)
        if joined is not None:
            joined.take(f)
            continue
        if len(open_) == _OPEN:
            yield open_.pop(0)
        open_.append(Burst.of(f, file_index))
    yield from open_


def _key(burst: Burst, offset: timedelta) -> tuple:
    when = burst.when
    return (when is None, when + offset if when else datetime.min, burst.file_index, burst.best.line)


class Tally:
    """The candidates for the first failure (bounded: per node and per rank), and every finding by code."""

    def __init__(self) -> None:
        self.total = 0
        self.by_code: Counter[str] = Counter()
        self.by_node: dict[str | None, Burst] = {}  # each node's earliest burst
        self.by_rank: dict[int, Burst] = {}  # each rank's earliest burst that points at no one else
        self.waits: dict[tuple[int, str], dict[str, datetime]] = {}  # (remote rank, code) -> node -> earliest

    def add(self, burst: Burst) -> None:
        """Count a burst, and keep it when it is the earliest of its node or rank so far."""
        self.total += burst.size
        self.by_code.update(burst.codes)
        zero = timedelta(0)
        node = burst.node
        if node not in self.by_node or _key(burst, zero) < _key(self.by_node[node], zero):
            self.by_node[node] = burst
        if burst.rank is not None and burst.points_to is None:
            if burst.rank not in self.by_rank or _key(burst, zero) < _key(self.by_rank[burst.rank], zero):
                self.by_rank[burst.rank] = burst
        if burst.points_to is not None and node is not None and burst.when is not None:
            seen = self.waits.setdefault((burst.points_to, burst.best.code), {})
            if node not in seen or burst.when < seen[node]:
                seen[node] = burst.when

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

    def first(self, offsets: dict[str, timedelta]) -> tuple[Burst | None, timedelta]:
        """The first failure and its node's clock correction, pointers followed to the rank they name."""
        if not self.by_node:
            return None, timedelta(0)

        def offset(b: Burst) -> timedelta:
            return offsets.get(b.node or "", timedelta(0))

        first = min(self.by_node.values(), key=lambda b: _key(b, offset(b)))
        visited: set[int] = set()
        while first.points_to is not None and first.points_to not in visited:
            visited.add(first.points_to)
            target = self.by_rank.get(first.points_to)
            if target is None:
                break
            first = target
        return first, offset(first)
