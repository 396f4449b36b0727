"""The detector: which calls have stopped progressing, and which rank holds them up.

Each poll hands :class:`Detector` what every rank of the followed jobs was seen doing: the method
its process title names (Ray titles an actor's process ``ray::Class.method`` while it runs one),
its state and CPU ticks, and its Python stack and its NPU's use (``npu-smi``'s AICore %) when they
were asked for. A *call* is the ranks of one actor group (verl's
``{prefix}WorkerDict_{pg}:{local_rank}`` without ``_{pg}:{local_rank}``) running one method. A rank
makes progress while it uses CPU (:data:`BUSY_SHARE` of a core over a poll), its NPU's AICore is
above 0 % or its stack changes; a call is *quiet* while none of its ranks does. NPU use is asked for
only while a call is quiet (or its NPUs are what moves), so ``npu-smi`` runs on no node while every
call shows CPU moving. A quiet call is sampled twice, at half its bound and at its bound, and named
a stall when the stacks did not move between the two. The bound is learned per method from the
run's own completed calls (:meth:`Budget.bound`), so a busy long tail (CPU or AICore moving) is
never a stall and a phase ten times longer than another gets its own bound. Memory and work per
poll depend on the ranks, never on the steps run.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

POLL_S = 2.0  # the watch's poll interval
FLOOR_POLLS = 3  # a bound is never shorter than three polls
CAP_S = 180.0  # nor longer than 3 minutes: with the two stack samples, a stall is named within 5
QUIET_FACTOR = 3.0  # a bound is 3x the longest quiet stretch a completed call of the method had …
USUAL_SHARE = 0.1  # … and at least a tenth of the method's longest completed call
BUSY_SHARE = 0.05  # a rank using 5 % of a core over a poll is computing
HISTORY = 20  # the completed calls each method's budget remembers
STOPPED = ("T", "t")  # /proc state: stopped by a signal, or by a tracer
COLLECTIVES = frozenset(
    "all_reduce all_gather all_gather_into_tensor all_gather_object reduce_scatter reduce_scatter_tensor "
    "all_to_all all_to_all_single broadcast broadcast_object_list barrier monitored_barrier reduce gather "
    "scatter send recv isend irecv batch_isend_irecv wait".split()
)


def iso(t: float) -> str:
    """A UTC time stamp to the second."""
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def method_of(title: str) -> str | None:
    """The method a Ray worker's title names (``ray::WorkerDict.update_actor`` -> ``update_actor``), else None."""
    word = title.split(" ", 1)[0] if title else ""
    if not word.startswith("ray::") or "." not in word:
        return None
    return word.split(".", 1)[1].removesuffix("()") or None


def group_of(actor: str, cls: str) -> str:
    """The actor group a rank belongs to: its name without verl's ``_{pg}:{local_rank}``, else its class."""
    return re.sub(r"_\d+:\d+$", "", actor) if actor else cls


def in_collective(stack: tuple[str, ...] | None) -> bool:
    """Whether a frame is a collective (or a wait on one) in a ``distributed`` module (torch's, torch_npu's)."""
    for frame in stack or ():
        name, _, where = frame.partition(" ")
        if name.rsplit(".", 1)[-1] in COLLECTIVES and "distributed" in where:
            return True
    return False


def waits_on_ray(stack: tuple[str, ...] | None) -> bool:
    """Whether the stack's innermost frames are Ray's ``get``/``wait``: the rank waits on other Ray calls."""
    for frame in stack or ():
        name, _, where = frame.partition(" ")
        if re.search(r"[(/]ray/", where):
            if name.rsplit(".", 1)[-1] in ("get", "wait"):
                return True
            continue
        return False
    return False


@dataclass(frozen=True)
class Rank:
    """Who one rank is: its process and where, its actor, its job."""

    pid: int
    node_ip: str
    node_id: str
    actor: str
    job_id: str
    cls: str = ""

    @property
    def group(self) -> tuple[str, str]:
        """(job, actor group)."""
        return self.job_id, group_of(self.actor, self.cls)


@dataclass(frozen=True)
class Sample:
    """What one poll saw of one rank (``stack`` only when one was asked for)."""

    title: str
    state: str
    ticks: int
    wchan: str = ""
    stack: tuple[str, ...] | None = None
    stack_error: str = ""
    npu: dict | None = field(default=None, compare=False)  # probe.npu_use's answer, when one was asked for

    @property
    def npu_busy(self) -> bool:
        """Whether its NPU's AICore was above 0 % (work on the device is progress too)."""
        return bool(self.npu and (self.npu.get("aicore_pct") or 0) > 0)


@dataclass
class Budget:
    """One method's learned durations and quiet stretches, from its last completed calls."""

    durations: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    quiet: deque = field(default_factory=lambda: deque(maxlen=HISTORY))

    @property
    def usual(self) -> float:
        """The longest of the remembered calls (s, to a poll)."""
        return max(self.durations, default=0.0)

    def bound(self, poll_s: float) -> float:
        """How long every rank of a call may show no progress before it is a stall."""
        learned = max(QUIET_FACTOR * max(self.quiet, default=0.0), USUAL_SHARE * self.usual)
        return min(max(learned, FLOOR_POLLS * poll_s), CAP_S)


@dataclass
class _Seen:
    rank: Rank
    sample: Sample
    at: float
    busy: bool = True  # no evidence of quiet before two samples
    dumped: float | None = None  # when its stack was dumped
    ended: bool = False
    npu: dict | None = None  # its NPU's use last read (shown with a stall)


@dataclass
class _Call:
    method: str
    start: float
    last: float
    pids: set = field(default_factory=set)
    quiet_since: float | None = None
    longest_quiet: float = 0.0
    first_stacks: dict | None = None  # pid -> stack signature, sampled at half the bound
    named: bool = False


class Detector:
    """Feed it each poll's samples (:meth:`observe`); it returns the events and asks for stacks (:meth:`wants`)."""

    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self.budgets: dict[str, Budget] = {}
        self.told: dict[str, float] = {}  # method -> the bound last announced
        self.seen: dict[int, _Seen] = {}
        self.calls: dict[tuple[str, str, str], _Call] = {}
        self.gone: dict[tuple[str, str], dict[int, _Seen]] = {}  # group -> ranks that vanished
        self._wants: set[int] = set()
        self._wants_npu: set[int] = set()
        self.last_poll: float | None = None

    def bound(self, method: str) -> float:
        """The method's bound; for one never completed yet, the largest learned one (else :data:`CAP_S`)."""
        if method in self.budgets:
            return self.budgets[method].bound(self.poll_s)
        return max((b.bound(self.poll_s) for b in self.budgets.values()), default=CAP_S)

    def wants(self) -> set[int]:
        """The pids whose stacks the next poll should dump."""
        return set(self._wants)

    def wants_npu(self) -> set[int]:
        """The pids whose NPU use the next poll should read."""
        return set(self._wants_npu)

    def observe(
        self,
        now: float,
        samples: dict[int, tuple[Rank, Sample]],
        clk_tck: int = 100,
        unknown: AbstractSet[int] = frozenset(),
    ) -> list[dict]:
        """Take one poll's samples (``unknown``: alive ranks whose node did not answer this time); return the
        events (``budget``, ``stall``) they give rise to."""
        events: list[dict] = []
        self._update_ranks(now, samples, clk_tck, unknown)
        running: dict[tuple[str, str, str], set[int]] = {}
        for pid, s in self.seen.items():
            method = method_of(s.sample.title)
            if method:
                running.setdefault((*s.rank.group, method), set()).add(pid)
        for key in list(self.calls):
            if key not in running:
                events += self._completed(self.calls.pop(key))
        self._wants, self._wants_npu = set(), set()
        for key, pids in running.items():
            call = self.calls.setdefault(key, _Call(key[2], now, now))
            call.pids, call.last = pids, now
            stall = self._judge(key, call, now)
            if stall:
                events.append(stall)
        self.last_poll = now
        return events

    def _update_ranks(
        self, now: float, samples: dict[int, tuple[Rank, Sample]], clk_tck: int, unknown: AbstractSet[int]
    ) -> None:
        for pid in unknown:
            if pid in self.seen:  # no evidence either way: not quiet
                self.seen[pid].busy, self.seen[pid].dumped = True, None
        for pid in set(self.seen) - set(samples) - set(unknown):
            old = self.seen.pop(pid)
            gone = self.gone.setdefault(old.rank.group, {})
            old.ended = True
            gone[pid] = old
            while len(gone) > 64:  # bounded: a long job's restarts do not pile up
                gone.pop(next(iter(gone)))
        for pid, (rank, sample) in samples.items():
            before = self.seen.get(pid)
            busy = True
            same = before if before is not None and before.rank == rank else None
            if sample.state in STOPPED:
                busy = False
            elif same is not None:
                used = sample.ticks - same.sample.ticks
                busy = used >= max(2.0, BUSY_SHARE * (now - same.at) * clk_tck) or sample.npu_busy
            dumped = now if sample.stack is not None or sample.stack_error else None
            if (
                dumped is None
                and before is not None
                and before.dumped is not None
                and method_of(sample.title) == method_of(before.sample.title)
            ):  # the last dump stands
                sample = replace(sample, stack=before.sample.stack, stack_error=before.sample.stack_error)
                dumped = before.dumped
            npu = sample.npu if sample.npu is not None else same.npu if same is not None else None
            self.seen[pid] = _Seen(rank, sample, now, busy, dumped, npu=npu)

    def _completed(self, call: _Call) -> list[dict]:
        budget = self.budgets.setdefault(call.method, Budget())
        budget.durations.append(call.last - call.start + self.poll_s)  # seen in k polls: at most k + 1 polls long
        budget.quiet.append(call.longest_quiet)
        bound = budget.bound(self.poll_s)
        told = self.told.get(call.method)
        if told is not None and told * 0.67 <= bound <= told * 1.5:
            return []
        self.told[call.method] = bound
        return [
            {"event": "budget", "method": call.method, "usual_s": round(budget.usual, 1), "bound_s": round(bound, 1)}
        ]

    def _judge(self, key: tuple[str, str, str], call: _Call, now: float) -> dict | None:
        ranks = [self.seen[pid] for pid in call.pids]
        if any(s.busy for s in ranks):
            if any(s.sample.npu_busy for s in ranks):  # the NPUs are what moves: keep reading them
                self._wants_npu |= call.pids
            call.quiet_since, call.first_stacks, call.named = None, None, False
            return None
        self._wants_npu |= call.pids
        if call.quiet_since is None:  # progress was last possible at the poll before
            call.quiet_since = max(call.start, self.last_poll or now)
        quiet = now - call.quiet_since
        call.longest_quiet = max(call.longest_quiet, quiet)
        bound = self.bound(call.method)
        if call.named or quiet < bound / 2:
            return None
        members = [s for s in self.seen.values() if s.rank.group == key[:2]]
        fresh = all(s.dumped == now for s in members)
        if call.first_stacks is None or quiet >= bound and not fresh:
            if fresh:  # the first sample, at half the bound
                call.first_stacks = {s.rank.pid: s.sample.stack for s in members}
            else:
                self._wants |= {s.rank.pid for s in members}
            return None
        if all(waits_on_ray(s.sample.stack) for s in ranks):
            call.named = True  # a call waiting on other Ray calls (verl's trainer): those are judged, not it
            return None
        if quiet < bound:
            return None
        now_stacks = {s.rank.pid: s.sample.stack for s in members}
        if any(now_stacks.get(p) and stack and now_stacks[p] != stack for p, stack in call.first_stacks.items()):
            call.quiet_since, call.first_stacks = now, None  # a stack moved: progress after all
            return None
        call.named = True
        return self._stall(key, call, ranks, members)

    def _stall(self, key: tuple[str, str, str], call: _Call, ranks: list[_Seen], members: list[_Seen]) -> dict:
        culprits = [s for s in ranks if s.sample.state in STOPPED]
        rest = [s for s in ranks if s not in culprits]
        known = [s for s in rest if s.sample.stack]
        waiting_in = [s for s in known if in_collective(s.sample.stack)]
        if waiting_in and len(waiting_in) < len(known):
            culprits += [s for s in known if s not in waiting_in]
        elif known:
            common, count = Counter(s.sample.stack for s in known).most_common(1)[0]
            if count < len(known) and count > 1:
                culprits += [s for s in known if s.sample.stack != common]
            elif count == 1 and len(known) > 1 and not waiting_in:
                culprits += known
        if not culprits:  # every rank of the call waits alike: the group's rank that is not in it
            absent = [s for s in members if s.rank.pid not in call.pids]
            culprits = absent or list(self.gone.get(key[:2], {}).values())
        waiting = [s for s in ranks if s not in culprits]
        return {
            "event": "stall",
            "method": call.method,
            "since": iso(call.quiet_since or call.start),
            "culprits": [
                {
                    "pid": s.rank.pid,
                    "node_ip": s.rank.node_ip,
                    "node_id": s.rank.node_id,
                    "actor": s.rank.actor,
                    "stack": _stack_text(s),
                    "npu": s.npu,
                }
                for s in culprits
            ],
            "waiting": [
                {
                    "pid": s.rank.pid,
                    "node_ip": s.rank.node_ip,
                    "actor": s.rank.actor,
                    "stack": _stack_text(s),
                    "npu": s.npu,
                }
                for s in waiting
            ],
        }


def _stack_text(s: _Seen) -> str:
    """The rank's frames one a line (innermost first), or why there are none, with its state when stopped."""
    if s.ended:
        return "(the process ended)"
    lines = list(s.sample.stack or ())
    if not lines:
        lines = [f"(no stack: {s.sample.stack_error or 'not sampled'}; waits in kernel {s.sample.wchan or '?'})"]
    if s.sample.state in STOPPED:
        lines.insert(0, "(process stopped: state T, by SIGSTOP or a tracer)")
    return "\n".join(lines)
