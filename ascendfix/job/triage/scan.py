"""triage's reading: the files under LOGDIR, and each one's failure lines, streamed in blocks.

Files are read in :data:`BLOCK` blocks, up to the size they had when opened (a log that grows
while it is read still ends); a few fast searches pick the lines that can matter
(:data:`PREFILTER`, and :func:`needles_for` the file), and only those are decoded and parsed; a line is
looked at up to :data:`MAX_LINE` bytes, and a partial line longer than that is not carried into
the next block (as ``run``'s live pump caps one). Symlinks are never followed, binary files (a
NUL in the first 8 KiB) are skipped, and a file or folder that cannot be read is named.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from ascendfix.job.triage.lines import ANSI, DATED, MAX_MESSAGE, Clock, Discount, Finding, clean, first_stamp, parse
from ascendfix.job.triage.table import Table

BLOCK = 1 << 22
MAX_LINE = 1 << 16
LOOKBACK = 1 << 16
ABOVE = 1024  # how far above a line a fingerprint's ``above`` pattern is looked for
BELOW = 8192  # how far below a line a fingerprint's ``below`` pattern is looked for
# the end of an entry of torchrun's report: its rules and the next entry's "[N]:"
_ENTRY_END = re.compile(rb"^(?:={8,}|-{8,}|\[\d+\]:)\s*$", re.M)
SNIFF = 8192
MAX_DISCOUNTED = 20  # discounted lines said per file
_PARSED, _PARSED_LINE = 4096, 512  # distinct short lines whose parse is kept, per file (at most 2 MiB)

# "E" then rror / RROR / xception / RR<digit> / a CANN code / a glog stamp / Ray's error level
# ("[2025-04-08 18:07:20,444 E 1234 5678]"); one regex with a literal first byte is as fast as a
# substring search. NEEDLES are the failures printed without any of these (searched with find).
PREFILTER = re.compile(rb"E(?:rror|RROR|xception|RR\d|[A-Z0-9]\d{4}|\d{3,4} \d| \d+ \d+\])")
# the failures printed without any of these, searched with find, in the files that print them: Ray's
# own logs, the driver's and the job's (the kernel's words in kernel logs only); a Ray worker's
# stdout/stderr (worker-*.out/err, most of a session's bytes) holds none of them, only WORKER_NEEDLES
NEEDLES = (
    b"NODE_OUT_OF_MEMORY",
    b"memory pressure (OOM)",
    b"cannot be scheduled right now",
    b"exitcode",  # torchrun's failure block and its "failed (exitcode: -9)"
    b"kill details",  # the raylet's INFO "Killing 1 worker(s), kill details: Memory on the node (IP: …"
)
# a native crash, printed without any of the pre-filter's words: faulthandler's "Fatal Python error" and
# Ray's failure signal handler's "*** SIGSEGV received at time=…" (its longest literal: the fastest to find)
WORKER_NEEDLES = (b"Fatal Python error", b" received at time=")
# a Ray worker's log is one process's output, and a native crash is the last it writes: Ray's handler's line
# and its native stack (a few KiB), faulthandler's dump of the Python threads (a worker's dozen threads at 100
# frames of ~120 bytes: ~150 KiB) and its extension modules: the crash's needles are searched in its last bytes
# only (a crash further up is still named by the raylet's notice of the worker's death)
DEATH_TAIL = 1 << 18
KERNEL_NEEDLES = (b"of memory",)  # the OOM killer, "Out of memory: Killed process" / "Memory cgroup out of memory"
KERNEL_LOG = re.compile(r"^(?:dmesg|kern|syslog|messages|journal)", re.I)
# what ``ascendfix run`` writes beside the job's train.log to record the run (read for the exit status, not scanned)
RUN_LOG = "train.log"
RUN_RECORDS = ("run.json", "run.json.tmp")
RAY_WORKER_LOG = re.compile(r"^worker-[0-9a-f]+-[0-9a-f]+-\d+\.(?:out|err)$")


def needles_for(name: str) -> tuple[bytes, ...]:
    """The needles a file of this name is searched for, beside the pre-filter."""
    if KERNEL_LOG.match(name):
        return NEEDLES + KERNEL_NEEDLES
    return WORKER_NEEDLES if RAY_WORKER_LOG.match(name) else NEEDLES + WORKER_NEEDLES


def log_files(root: Path, skipped: list[tuple[str, str]]) -> Iterator[Path]:
    """Every regular file under ``root`` in name order; symlinks (to files or folders) are not followed.
    An ``ascendfix run`` folder's own record (:data:`RUN_RECORDS` beside a ``train.log``) is no log and
    is left out. A folder that cannot be listed is added to ``skipped`` as (its path under root, why)."""
    if not root.is_dir():
        yield root
        return

    def unreadable(error: OSError) -> None:
        where = Path(error.filename or root)
        skipped.append((str(where.relative_to(root)) if where != root else ".", error.strerror or str(error)))

    for folder, dirs, names in os.walk(root, onerror=unreadable):
        dirs.sort()
        own = RUN_RECORDS if RUN_LOG in names else ()
        for name in sorted(names):
            if name in own:
                continue
            path = Path(folder, name)
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    yield path
            except OSError as e:
                skipped.append((str(path.relative_to(root)), e.strerror or str(e)))


class FileScan:
    """One file's findings, read in blocks without holding the file."""

    def __init__(self, path: Path, rel: str, node: str | None, file_pid: int | None, table: Table):
        self.path, self.rel, self.node, self.file_pid, self.table = path, rel, node, file_pid, table
        self.needles = needles_for(path.name)
        self.one_process = bool(RAY_WORKER_LOG.match(path.name))
        self.needles_from = 0  # the file offset the needles are searched from
        self.undated: bytes = b""  # the end of the last block, searched for a dated stamp only when one is needed
        self.parsed: dict[bytes, Finding | None] = {}  # the last lines parsed, by their bytes
        self.seen: dict[bytes, int] = {}  # each `after` literal: the file offset it was last seen at
        self.searched: dict[bytes, int] = {a: 0 for a in table.afters}  # ... searched for up to here
        self.text = False
        self.size = 0
        self.error: str | None = None  # why the file could not be read
        self.discounted: list[Discount] = []  # lines a fingerprint fired on that are no failure, and why

    def findings(self) -> Iterator[Finding]:
        """Parse the file's failure lines in order; nothing for a binary, unreadable or non-regular file."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            self.error = e.strerror or str(e)
            return
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return
            left = info.st_size  # what the file held when opened: a log still growing ends here
            self.needles_from = max(0, left - DEATH_TAIL) if self.one_process else 0
            try:
                chunk = f.read(min(BLOCK, left))
            except OSError as e:
                self.error = e.strerror or str(e)
                return
            if b"\0" in chunk[:SNIFF]:
                return
            self.text = True
            clock = Clock(info.st_mtime)
            lines = _Lines(fd)
            base, tail = 0, b""  # base: the file offset of the block
            while chunk:
                self.size += len(chunk)
                left -= len(chunk)
                buf = tail + chunk
                cut = buf.rfind(b"\n") + 1
                if len(buf) - cut > MAX_LINE:
                    cut = len(buf)  # an overlong line: its rest is read on as a line of its own block
                block, tail = buf[:cut], buf[cut:]
                yield from self._block(block, base, lines, clock)
                base += cut
                chunk = f.read(min(BLOCK, left)) if left > 0 else b""
            if tail:
                yield from self._block(tail, base, lines, clock)

    def _block(self, block: bytes, base: int, lines: _Lines, clock: Clock) -> Iterator[Finding]:
        """Findings in a block of whole lines at file offset ``base``."""
        dated = 0  # dated stamps before this offset are reflected in the clock's year
        for start, hit in _candidates(block, self.needles, self.needles_from - base):
            end = block.find(b"\n", start)
            end = len(block) if end == -1 else end
            cut = start
            if end - start > MAX_LINE:
                cut = max(start, hit - MAX_LINE // 4)
                end = cut + MAX_LINE
            raw = block[cut:end]
            if raw in self.parsed:  # a log repeats its short lines: each distinct one is parsed once
                finding = self.parsed[raw]
            else:
                finding = parse(raw, self.table, self.rel, self.file_pid, self.node)
                if len(raw) <= _PARSED_LINE:
                    if len(self.parsed) >= _PARSED:
                        self.parsed.clear()
                    self.parsed[raw] = finding
            if finding is None or not self._below(finding.fingerprint.after, block, base, start):
                continue
            fp = finding.fingerprint
            said = _handled(fp.handled, fp.after, block, start) if fp.handled is not None else None
            if said is not None:
                why = f"logged by a program that went on: the line above its traceback says {said!r}"
                self._discount(finding, lines.at(base + start, block, base), why)
                continue
            if fp.discount is not None and fp.discount.search(raw):
                self._discount(finding, lines.at(base + start, block, base), fp.discount_why)
                continue
            own = first_stamp(raw)
            if own is None or own.re not in DATED:  # a year-less stamp takes the year of a dated one above
                if self.undated:
                    _dated_year(self.undated, 0, len(self.undated), clock)
                _dated_year(block, max(dated, start - LOOKBACK), start, clock)
            self.undated = b""
            dated = end
            time = clock.time(own) if own is not None else None
            above = finding.fingerprint.above
            if above is not None:
                finding, time = _with_above(finding, above, block[max(0, start - ABOVE) : start], clock, time)
            below, where = finding.fingerprint.below, finding.fingerprint.where
            if below is not None:
                finding = _with_below(finding, below, block, end)
            if where is not None:
                finding = _where(finding, where, block, cut)
            line = lines.at(base + start, block, base)
            yield finding.placed(line, time)
        if self.undated:  # a block without a finding: the one before it ends in the year to carry
            _dated_year(self.undated, 0, len(self.undated), clock)
        # the block's end is searched for a dated stamp only when a later block's finding needs a year
        self.undated = block[max(dated, len(block) - LOOKBACK) :]
        for after in self.table.afters:
            self._below(after, block, base, len(block))  # remember the block's last one for the next

    def _discount(self, finding: Finding, line: int, why: str) -> None:
        if len(self.discounted) < MAX_DISCOUNTED:
            self.discounted.append(Discount(finding.code, self.rel, line, why))

    def _below(self, after: bytes, block: bytes, base: int, start: int) -> bool:
        """Whether ``after`` is on a line above ``start`` (within LOOKBACK bytes); each byte is searched once."""
        if not after:
            return True
        lo = max(0, self.searched[after] - base - len(after), start - LOOKBACK)
        if lo < start:
            pos = block.rfind(after, lo, start)
            if pos != -1:
                self.seen[after] = base + pos
            self.searched[after] = base + start
        return base + start - self.seen.get(after, -LOOKBACK - 1) <= LOOKBACK


def _handled(handled: re.Pattern[bytes], after: bytes, block: bytes, start: int) -> str | None:
    """The line right above the nearest ``after`` line above ``start`` (in this block), when it matches
    ``handled``: a library that logs an exception it goes on from prints its traceback under such a line."""
    at = block.rfind(after, max(0, start - LOOKBACK), start)
    if at == -1:
        return None
    line_start = block.rfind(b"\n", 0, at) + 1  # the after line's own start
    if line_start == 0:
        return None
    above = block[block.rfind(b"\n", 0, line_start - 1) + 1 : line_start - 1]
    if handled.search(above) is None:
        return None
    said = clean(ANSI.sub(b"", above).decode("utf-8", "replace"))
    return said if len(said) <= 120 else said[:119] + "…"


def _dated_year(block: bytes, lo: int, hi: int, clock: Clock) -> None:
    """Set the clock's year from the last dated stamp in ``block[lo:hi]``."""
    last = None
    for rx in DATED:
        for m in rx.finditer(block, lo, hi):
            if last is None or m.start() > last.start():
                last = m
    if last is not None:
        clock.time(last)


def _with_above(
    finding: Finding, above: re.Pattern[str], text: bytes, clock: Clock, time: datetime | None
) -> tuple[Finding, datetime | None]:
    """A finding completed from the lines above it (torchrun's block: time, host and rank above the exitcode)."""
    matches = list(above.finditer(text.decode("utf-8", "replace")))
    if not matches:
        return finding, time
    groups = matches[-1].groupdict()  # the nearest above
    if groups.get("stamp"):
        own = first_stamp(groups["stamp"].encode())
        time = (clock.time(own) if own else None) or time
    rank = int(groups["rank"]) if groups.get("rank") else finding.rank
    role = "root" if groups.get("root") else finding.role
    return replace(finding, node=groups.get("node") or finding.node, rank=rank, role=role), time


def _where(finding: Finding, where: re.Pattern[str], block: bytes, start: int) -> Finding:
    """A finding placed where its message says it happened (the node and pid its ``where`` groups name, the
    first of each, in the line and the entry below it), over a relaying process's prefix."""
    stop = _ENTRY_END.search(block, start, start + BELOW)
    text = ANSI.sub(b"", block[start : stop.start() if stop else start + BELOW]).decode("utf-8", "replace")
    node = pid = None
    for m in where.finditer(text):
        node = node or m.groupdict().get("node")
        pid = pid or m.groupdict().get("pid")
    if node is not None:
        try:
            node = str(ipaddress.ip_address(node))
        except ValueError:
            node = None
    if pid is not None:
        finding = replace(finding, pid=int(pid), message_pid=True, pids=finding.pids | {int(pid)})
    return replace(finding, node=node) if node is not None else finding


def _with_below(finding: Finding, below: re.Pattern[str], block: bytes, end: int) -> Finding:
    """A finding completed from the entry below it: torchrun's report (the rank's error_file traceback names the
    exception), faulthandler's stack (its innermost frame)."""
    stop = _ENTRY_END.search(block, end + 1, end + 1 + BELOW)
    text = ANSI.sub(b"", block[end + 1 : stop.start() if stop else end + 1 + BELOW]).decode("utf-8", "replace")
    matches = list(below.finditer(text))
    if not matches:
        return finding
    g = matches[-1].groupdict()  # the last exception of a chained traceback is the one that ended the rank
    message = clean(g.get("message") or finding.message)
    if g.get("function"):
        message += " · " + clean(f"in {g['function']} ({g['file']}:{g['line']})")
    message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
    return replace(finding, code=g.get("code") or finding.code, message=message)


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


def _candidates(block: bytes, needles: tuple[bytes, ...], needles_from: int = 0) -> list[tuple[int, int]]:
    """(line start, first hit) of each line the pre-filter or a needle (from offset ``needles_from``) picks, in
    order."""
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
    for needle in needles if needles_from < len(block) else ():
        pos = find(needle, max(0, needles_from))
        while pos != -1:
            starts.setdefault(rfind(b"\n", 0, pos) + 1, pos)
            end = find(b"\n", pos)
            if end == -1:
                break
            pos = find(needle, end)
    return sorted(starts.items())
