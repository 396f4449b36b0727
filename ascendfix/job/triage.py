"""``triage``: the first failure in a job's logs, named; the errors after it, counted.

When a job on 128 NPUs fails, every rank prints errors and HCCL's own advice is to find the rank
that failed first. :func:`triage` reads a folder of logs -- a Ray session's ``logs``, ``ascendfix
run`` folders (``<time>/train.log``), CANN plog folders -- picks the lines that fingerprint a
failure (``triage_codes.toml``), orders them by their own time stamps and names the earliest.

Reading streams: files are read in 4 MiB blocks, a few fast searches pick the lines that can
matter (:data:`PREFILTER`), and only those are decoded and parsed; a line is looked at up to
:data:`MAX_LINE` bytes. Symlinks are never followed, binary files (a NUL in the first 8 KiB)
are skipped, and every text taken from a file is stripped of control characters.

Time stamps, naive local time as the logs print it:

- CANN ``2025-04-08-18:07:20.444.436`` (also ``2025-04-08-18:07:20``), Ray's ``[2025-04-08
  18:07:20,444 E 1234 5678]`` and Python logging's ``2025-04-08 18:07:20,444``;
- torch/glog ``[E1120 10:35:12.061505]`` (c10 also prints ``[E331 ...]``) and vllm's ``ERROR 11-20
  10:35:12`` carry no year: they take the year of the last dated stamp above them in the same
  file, else that of the file's modification time -- one year earlier when that would put the
  line more than a day after the file was last written (a December line in a January file);
- a line without a stamp takes the last one above it in the same file (looked for up to
  :data:`LOOKBACK` bytes back); before any stamp its time is unknown, and such findings sort
  after every timed one.

Findings from one process (same pid and rank) within :data:`BURST_LINES` lines of each other in
one file are one burst: torch_npu prints ``RuntimeError``, then ``ERR02200``, then the CANN code
that says why. A burst is named by its most specific fingerprint (the table's order) and timed by
that line's own stamp, else by the burst's earliest. The earliest burst is the first failure;
every other finding is counted as one of its likely consequences.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import stat
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ascendfix.errors import UsageError

DEFAULT_LOGDIR = Path("/tmp/ray/session_latest/logs")
CODES = Path(__file__).with_name("triage_codes.toml")
BLOCK = 1 << 22
MAX_LINE = 1 << 16
LOOKBACK = 1 << 16
SNIFF = 8192
BURST_LINES = 30
MAX_MESSAGE = 300

# "E" then rror / RROR / xception / RR<digit> / a CANN code / a glog stamp / Ray's error level
# ("[2025-04-08 18:07:20,444 E 1234 5678]"); one regex with a literal first byte is as fast as a
# substring search. Kernel logs are also searched for KERNEL_NEEDLES (the Linux OOM killer's
# "Out of memory: Killed process").
PREFILTER = re.compile(rb"E(?:rror|RROR|xception|RR\d|[A-Z0-9]\d{4}|\d{3,4} \d| \d+ \d+\])")
KERNEL_LOG = re.compile(r"^(?:dmesg|kern|syslog|messages|journal)", re.I)
KERNEL_NEEDLES = (b"of memory",)

_YEAR_STAMP = re.compile(rb"(20\d\d)-(\d\d)-(\d\d)[-T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{3})(?:\.(\d{3}))?)?")
_GLOG_STAMP = re.compile(rb"\[[EWIF](\d{1,2}?)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})")
_VLLM_STAMP = re.compile(rb"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_STAMPS = (_YEAR_STAMP, _GLOG_STAMP, _VLLM_STAMP)

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_RAY_PREFIX = re.compile(r"^\((?P<inner>[^()]{0,200})\) ?")
_RAY_PID = re.compile(r"(?:^|[\s,])pid=(\d+)")
_RAY_IP = re.compile(r"(?:^|[\s,])ip=([0-9A-Fa-f.:]+)")
_RAY_RANK = re.compile(r"(?:^|[\s,])rank=(\d+)")
_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]|RankID:(\d+)|(?<!\w)rank\[(\d+)\]")  # torch, torch_npu, HCCL
_LINE_PID = re.compile(r"\[PID: ?(\d+)\]|\(PID:(\d+)|^\[[A-Z]+\] [A-Z_]+\((\d+),|Worker PID: (\d+)")  # CANN, Ray
_LINE_IP = re.compile(r"Worker IP address: ([0-9A-Fa-f.:]+)")  # Ray's worker-death message
_FILE_PID = re.compile(r"^(?:worker-[0-9a-f]+-[0-9a-f]+-|python-core-worker-[0-9a-f]+_|plog-)(\d+)")
_HEADER = re.compile(
    r"""^(?:
      \[[Rr]ank\d+\]:\ ?                                                   # torch elastic: [rank3]:
    | \[[EWIF]\d{3,4}\ [\d:.]+\ [^\]]*\]\ ?                                # glog / c10
    | (?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\ \d\d-\d\d\ [\d:]+\ \[[^\]]*\]\ ?  # vllm
    | 20\d\d-\d\d-\d\d\ [\d:,]+\s+(?:[A-Z]+\s+)?(?:\S+:\d+\ --\ )?         # Python logging, Ray's
    | \[20\d\d-\d\d-\d\d\ [^\]]*\]\ ?(?:\(\w+\)\ )?(?:\S+:\d+:\ )?         # Ray's C++ logs
    | \[[A-Z]+\]\ [A-Z_]+\(\d+,[^)]*\):\S+\ (?:\[[\w.]+:\d+\]\ ?)?(?:\[\d+\])?  # CANN plog
    )""",
    re.X,
)


@dataclass(frozen=True)
class Fingerprint:
    """One kind of failure: its code, the regex that finds it, and what to do about it."""

    code: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    source: str
    needles: tuple[str, ...] = ()  # a line it matches holds one of these; () when the pattern has none
    after: bytes = b""  # fires only below a line that holds this (within LOOKBACK bytes)


@dataclass(frozen=True)
class Finding:
    """One failure line: where and when, which process, and what it says."""

    time: datetime | None
    stamped: bool  # the time is the line's own, not the last one above it
    file: str
    line: int
    node: str | None
    pid: int | None
    rank: int | None
    code: str
    message: str
    fingerprint: Fingerprint
    priority: int  # the fingerprint's place in the table: lower is more specific

    def to_json(self) -> dict[str, Any]:
        """The issue's ``first`` object."""
        return {
            "time": self.time.isoformat() if self.time else None,
            "file": self.file,
            "line": self.line,
            "node": self.node,
            "pid": self.pid,
            "rank": self.rank,
            "code": self.code,
            "message": self.message,
            "cause": self.fingerprint.cause,
            "fix": self.fingerprint.fix,
        }


@dataclass(frozen=True)
class Triage:
    """What :func:`triage` found: the first failure (None when nothing failed) and the rest, counted."""

    logs: str
    first: Finding | None
    later: int
    by_code: dict[str, int]
    files: int
    bytes_read: int

    def to_json(self) -> dict[str, Any]:
        """``{"logs", "first", "later", "by_code"}``."""
        first = self.first.to_json() if self.first else None
        return {"logs": self.logs, "first": first, "later": self.later, "by_code": self.by_code}


def clean(text: str) -> str:
    """Text from a file made safe to print: no control characters (a run of them becomes one space)."""
    return _CONTROL.sub(" ", text).strip()


@functools.cache
def fingerprints(path: Path = CODES) -> tuple[Fingerprint, ...]:
    """The table of fingerprints, most specific first."""
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (guarded: Python 3.10 reads tomli, the same parser)
    else:  # pragma: no cover - exercised on the container's Python 3.10
        import tomli as tomllib
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
        return tuple(
            Fingerprint(
                e["code"],
                re.compile(e["pattern"]),
                e["cause"],
                e["fix"],
                e["source"],
                needles(e["pattern"]),
                e.get("after", "").encode(),
            )
            for e in table["fingerprint"]
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, re.error) as e:
        raise UsageError(f"{path}: not a valid fingerprint table: {e}") from None


def needles(pattern: str) -> tuple[str, ...]:
    """The literal text each top-level alternative of ``pattern`` starts with, when every one has 3 characters
    or more (a line the pattern matches holds one of them); else ()."""
    found = []
    for alternative in _alternatives(pattern):
        text, i = re.sub(r"^\(\?(?:P<\w+>|:)", "", alternative), 0
        literal = []
        while i < len(text):
            if text[i] == "\\" and i + 1 < len(text) and not text[i + 1].isalnum():
                literal.append(text[i + 1])
                i += 2
            elif text[i] in _SPECIAL:
                break
            else:
                literal.append(text[i])
                i += 1
        if i < len(text) and text[i] in "*?{":
            literal = literal[:-1]  # a quantifier makes the last character optional
        if len(literal) < 3:
            return ()
        found.append("".join(literal))
    return tuple(found)


_SPECIAL = frozenset(".^$*+?{}[]()|\\")


def _alternatives(pattern: str) -> list[str]:
    """``pattern`` split at its top-level ``|``."""
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    return [*parts, pattern[start:]]


def log_files(root: Path) -> Iterator[Path]:
    """Every regular file under ``root`` in name order; symlinks (to files or folders) are not followed."""
    if not root.is_dir():
        yield root
        return
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder, name)
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    yield path
            except OSError:
                continue


def triage(logdir: Path = DEFAULT_LOGDIR) -> Triage:
    """Read every log under ``logdir`` and name the first failure; raises UsageError on a missing folder."""
    if not logdir.exists():
        raise UsageError(
            f"{logdir}: no such folder; pass the job's logs (a Ray session's logs, an ascendfix-runs/<time> "
            "folder or a CANN plog folder)"
        )
    table = _Table(fingerprints())
    tally = _Tally()
    files = size = 0
    nodes: dict[Path, str | None] = {}
    for index, path in enumerate(log_files(logdir)):
        rel = path.relative_to(logdir) if path != logdir else Path(path.name)
        if rel.parent not in nodes:
            nodes[rel.parent] = _node_of(rel.parent)
        read = _FileScan(path, rel, nodes[rel.parent], table)
        bursts = _bursts(read.findings())
        for burst in bursts:
            tally.add(burst, index)
        if read.text:
            files += 1
            size += read.size
    if not files:
        raise UsageError(f"{logdir}: no readable text log files here")
    first = tally.first.named() if tally.first else None
    later = tally.total - (tally.first.size if tally.first else 0)
    return Triage(clean(str(logdir)), first, later, dict(tally.by_code.most_common()), files, size)


def _node_of(folder: Path) -> str | None:
    """The node a file's folder names: the first folder on its path (under LOGDIR) named as an IP address."""
    for part in folder.parts:
        try:
            return str(ipaddress.ip_address(part))
        except ValueError:
            continue
    return None


@dataclass
class _Burst:
    """Consecutive findings of one process in one file, named by the most specific of them."""

    first: Finding
    best: Finding
    last_line: int
    codes: Counter[str]

    @classmethod
    def of(cls, f: Finding) -> _Burst:
        return cls(f, f, f.line, Counter([f.code]))

    @property
    def size(self) -> int:
        return self.codes.total()

    def joins(self, f: Finding) -> bool:
        """Same rank, no other pid (a line may not say its pid), close enough below."""
        pid = self.best.pid if self.best.pid is not None else self.first.pid
        same = f.rank == self.first.rank and (f.pid is None or pid is None or f.pid == pid)
        return same and f.line - self.last_line <= BURST_LINES

    def take(self, f: Finding) -> None:
        self.codes[f.code] += 1
        self.last_line = f.line
        if f.priority < self.best.priority:
            self.best = f
        if f.stamped and (not self.first.stamped or f.time < self.first.time):
            self.first = f

    @property
    def time(self) -> datetime | None:
        """The named line's own stamp, else the burst's earliest."""
        return self.best.time if self.best.stamped else self.first.time

    def named(self) -> Finding:
        """The burst as one finding: the most specific line, at the burst's time."""
        return replace(self.best, time=self.time, stamped=self.best.stamped or self.first.stamped)


def _bursts(findings: Iterator[Finding]) -> Iterator[_Burst]:
    current: _Burst | None = None
    for f in findings:
        if current is not None and current.joins(f):
            current.take(f)
            continue
        if current is not None:
            yield current
        current = _Burst.of(f)
    if current is not None:
        yield current


class _Tally:
    """The earliest burst so far, and every finding counted by code."""

    def __init__(self) -> None:
        self.first: _Burst | None = None
        self.first_key: tuple = ()
        self.total = 0
        self.by_code: Counter[str] = Counter()

    def add(self, burst: _Burst, file_index: int) -> None:
        self.total += burst.size
        self.by_code.update(burst.codes)
        key = (burst.time is None, burst.time or datetime.min, file_index, burst.first.line)
        if self.first is None or key < self.first_key:
            self.first, self.first_key = burst, key


class _Clock:
    """Turns a stamp into a datetime, supplying the year where the stamp has none."""

    def __init__(self, mtime: float):
        self.mtime = datetime.fromtimestamp(mtime)
        self.year: int | None = None  # of the last dated stamp seen

    def time(self, m: re.Match[bytes]) -> datetime | None:
        g = m.groups()
        try:
            if m.re is _YEAR_STAMP:
                self.year = int(g[0])
                micro = int(g[6] or 0) * 1000 + int(g[7] or 0)
                return datetime(*map(int, g[:6]), micro)
            micro = int(g[5][:6].ljust(6, b"0")) if m.re is _GLOG_STAMP else 0
            month, day, hour, minute, second = map(int, g[:5])
            year = self.year or self.mtime.year
            t = datetime(year, month, day, hour, minute, second, micro)
            if self.year is None and t > self.mtime + timedelta(days=1):
                t = t.replace(year=year - 1)
            return t
        except ValueError:
            return None


def _first_stamp(line: bytes) -> re.Match[bytes] | None:
    found = [m for rx in _STAMPS if (m := rx.search(line))]
    return min(found, key=lambda m: m.start()) if found else None


def _last_stamp(block: bytes, lo: int, hi: int, stamps: tuple = _STAMPS) -> re.Match[bytes] | None:
    """The last stamp in ``block[lo:hi]``, searched backwards in growing windows."""
    end, size = hi, 1 << 14
    while end > lo:
        start = max(lo, end - size)
        last = None
        for rx in stamps:
            for m in rx.finditer(block, start, end):
                if last is None or m.start() > last.start():
                    last = m
        if last is not None:
            return last
        if start == lo:
            return None
        end, size = start + 64, size * 4  # overlap: a stamp cut by the window's edge is whole in the next
    return None


class _FileScan:
    """One file's findings, read in blocks without holding the file."""

    def __init__(self, path: Path, rel: Path, node: str | None, table: _Table):
        self.path, self.rel, self.node, self.table = path, rel, node, table
        m = _FILE_PID.match(path.name)
        self.file_pid = int(m.group(1)) if m else None
        self.needles = KERNEL_NEEDLES if KERNEL_LOG.match(path.name) else ()
        self.seen: dict[bytes, int] = {}  # each `after` literal: the file offset it was last seen at
        self.text = False
        self.size = 0

    def findings(self) -> Iterator[Finding]:
        """Parse the file's failure lines in order; nothing for a binary, unreadable or non-regular file."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return
            chunk = f.read(BLOCK)
            if b"\0" in chunk[:SNIFF]:
                return
            self.text = True
            clock = _Clock(info.st_mtime)
            lines = _Lines(fd)
            known: datetime | None = None  # the last stamp above the current position
            base, tail = 0, b""  # base: the file offset of the block
            while chunk:
                self.size += len(chunk)
                buf = tail + chunk
                cut = buf.rfind(b"\n") + 1
                if len(buf) - cut > MAX_LINE:
                    cut = len(buf)  # an overlong line: read on, counting it as one line
                block, tail = buf[:cut], buf[cut:]
                known = yield from self._block(block, base, lines, known, clock)
                base += cut
                chunk = f.read(BLOCK)
            if tail:
                yield from self._block(tail, base, lines, known, clock)

    def _block(self, block: bytes, base: int, lines: _Lines, known: datetime | None, clock: _Clock):
        """Findings in a block of whole lines at file offset ``base``; returns the last stamp above its end."""
        searched = 0  # stamps before this offset are reflected in `known` and the clock's year
        for start, hit in _candidates(block, self.needles):
            end = block.find(b"\n", start)
            end = len(block) if end == -1 else end
            cut = start
            if end - start > MAX_LINE:
                cut = max(start, hit - MAX_LINE // 4)
                end = cut + MAX_LINE
            raw = block[cut:end]
            finding = self._parse(raw)
            if finding is None or not self._below(finding.fingerprint.after, block, base, start):
                continue
            own = _first_stamp(raw)
            lo = max(searched, start - LOOKBACK)
            if own is None or own.re is not _YEAR_STAMP:
                above = _last_stamp(block, lo, start, _STAMPS if own is None else (_YEAR_STAMP,))
                if above is not None:
                    known = clock.time(above) or known
            time = clock.time(own) if own is not None else None
            if time is not None:
                known = time
            searched = end
            line = lines.at(base + start, block, base)
            yield replace(finding, line=line, time=time or known, stamped=time is not None)
        last = _last_stamp(block, max(searched, len(block) - LOOKBACK), len(block))
        if last is not None:
            known = clock.time(last) or known
        for after in self.table.afters:
            self._below(after, block, base, len(block))  # remember the block's last one for the next
        return known

    def _below(self, after: bytes, block: bytes, base: int, start: int) -> bool:
        """Whether ``after`` is on a line above ``start`` (within LOOKBACK bytes, this block or the last)."""
        if not after:
            return True
        pos = block.rfind(after, max(0, start - LOOKBACK), start)
        if pos != -1:
            self.seen[after] = base + pos
        return base + start - self.seen.get(after, -LOOKBACK - 1) <= LOOKBACK

    def _parse(self, raw: bytes) -> Finding | None:
        """The finding on one line (its line number and time not yet set), or None when no fingerprint fires."""
        if b"\x1b" in raw:
            raw = _ANSI.sub(b"", raw)
        text = raw.decode("utf-8", "replace")
        inner = None
        ray = _RAY_PREFIX.match(text)
        if ray and ("=" in ray["inner"] or ray["inner"].split(",")[0].strip().isidentifier()):
            inner, text = ray["inner"], text[ray.end() :]
        content = text
        for _ in range(4):
            head = _HEADER.match(content)
            if not head or not head.end():
                break
            content = content[head.end() :].lstrip()
        found = self.table.match(content)
        if found is None:
            return None
        priority, m = found
        fp = self.table.fingerprints[priority]
        pid = rank = node = None
        if inner is not None:
            pid, node, rank = _int(_RAY_PID.search(inner)), _group(_RAY_IP.search(inner)), _int(_RAY_RANK.search(inner))
        rank = rank if rank is not None else _int(_RANK.search(text))
        pid = pid if pid is not None else _int(_LINE_PID.search(text))
        node = node or _group(_LINE_IP.search(text))
        content = clean(content)
        message = content if len(content) <= MAX_MESSAGE else content[: MAX_MESSAGE - 1] + "…"
        return Finding(
            None,
            False,
            clean(str(self.rel)),
            0,
            node or self.node,
            pid if pid is not None else self.file_pid,
            rank,
            m.groupdict().get("code") or fp.code,
            message,
            fp,
            priority,
        )


class _Table:
    """The fingerprints, and which of them a line can match, by the needles it holds."""

    def __init__(self, fingerprints: tuple[Fingerprint, ...]):
        self.fingerprints = fingerprints
        self.needles = tuple((n, i) for i, fp in enumerate(fingerprints) for n in fp.needles)
        self.always = frozenset(i for i, fp in enumerate(fingerprints) if not fp.needles)
        self.afters = tuple({fp.after for fp in fingerprints if fp.after})
        literals = sorted({n for n, _ in self.needles}, key=len, reverse=True)
        self.any_needle = re.compile("|".join(map(re.escape, literals)) or "(?!)")  # literals only: fast

    def match(self, text: str) -> tuple[int, re.Match[str]] | None:
        """The first fingerprint (by index) that matches ``text``, and its match."""
        maybe = set(self.always)
        if self.any_needle.search(text):
            maybe.update(i for needle, i in self.needles if needle in text)
        for i in sorted(maybe):
            m = self.fingerprints[i].pattern.search(text)
            if m is not None:
                return i, m
        return None


class _Lines:
    """Line numbers by file offset, counted only when a finding asks: a file without one is never counted."""

    def __init__(self, fd: int):
        self.fd = fd
        self.offset = 0  # newlines before this file offset are counted
        self.count = 0

    def at(self, offset: int, block: bytes, base: int) -> int:
        """The number of the line at ``offset``, inside ``block`` (read from file offset ``base``)."""
        while self.offset < base:  # blocks read since the last finding
            data = os.pread(self.fd, min(BLOCK, base - self.offset), self.offset)
            if not data:  # the file shrank under us: count from the block
                self.offset = base
                break
            self.count += data.count(b"\n")
            self.offset += len(data)
        self.count += block.count(b"\n", self.offset - base, offset - base)
        self.offset = offset
        return self.count + 1


def _candidates(block: bytes, needles: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """(line start, first hit) of each line the pre-filter picks, in order."""
    starts: dict[int, int] = {}
    rfind, find = block.rfind, block.find
    m = PREFILTER.search(block)
    while m is not None:
        pos = m.start()
        starts.setdefault(rfind(b"\n", 0, pos) + 1, pos)
        end = find(b"\n", pos)
        if end == -1:
            break
        m = PREFILTER.search(block, end)
    for needle in needles:
        pos = find(needle)
        while pos != -1:
            starts.setdefault(rfind(b"\n", 0, pos) + 1, pos)
            end = find(b"\n", pos)
            if end == -1:
                break
            pos = find(needle, end)
    return sorted(starts.items())


def _int(m: re.Match[str] | None) -> int | None:
    value = _group(m)
    return int(value) if value is not None else None


def _group(m: re.Match[str] | None) -> str | None:
    if m is None:
        return None
    return next((g for g in m.groups() if g is not None), None)
