"""One log line read for triage: its time stamp, its level, who printed it (node, pid, rank), whom it waited for.

Time stamps, naive local time as the logs print it:

- CANN ``2025-04-08-18:07:20.444.436`` (also ``2025-04-08-18:07:20``), Ray's ``[2025-04-08
  18:07:20,444 E 1234 5678]``, Python logging's ``2025-04-08 18:07:20,444``, torchrun's
  ``2025-04-08_18:07:20`` and ``dmesg -T``'s ``[Tue Apr  8 18:07:20 2025]``;
- torch/glog ``[E1120 10:35:12.061505]`` (c10 also prints ``[E331 ...]``, torch elastic a bare
  ``E1120 10:35:12.061505`` at the line's start), vllm's ``ERROR 11-20 10:35:12`` and syslog's
  ``Nov 20 10:35:12`` carry no year: they take the year of the last dated stamp above them in
  the same file, else that of the file's modification time -- one year earlier when that would
  put the line more than a day after the file was last written (a December line in a January file).

A line without a stamp has no time: it is ordered by the burst it belongs to, or after every timed one.
"""

from __future__ import annotations

import ipaddress
import re
import signal
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ascendfix.job.triage.table import Fingerprint, Table

MAX_MESSAGE = 300
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_MONTH = {name.encode(): i + 1 for i, name in enumerate(_MONTHS.split("|"))}

YEAR_STAMP = re.compile(rb"(20\d\d)-(\d\d)-(\d\d)[-T _](\d\d):(\d\d):(\d\d)(?:[.,](\d{3})(?:\.(\d{3}))?)?")
_GLOG_STAMP = re.compile(rb"(?:\[|^|\]:)[EWIF](\d{1,2}?)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})", re.M)
_VLLM_STAMP = re.compile(rb"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_DMESG_STAMP = re.compile(
    rb"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (" + _MONTHS.encode() + rb") +(\d{1,2}) (\d\d):(\d\d):(\d\d) (20\d\d)\]"
)
_SYSLOG_STAMP = re.compile(rb"^(" + _MONTHS.encode() + rb") +(\d{1,2}) (\d\d):(\d\d):(\d\d) ", re.M)
STAMPS = (YEAR_STAMP, _GLOG_STAMP, _VLLM_STAMP, _DMESG_STAMP, _SYSLOG_STAMP)
DATED = (YEAR_STAMP, _DMESG_STAMP)  # the stamps that carry their year

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_RAY_PREFIX = re.compile(r"^\((?P<inner>[^()]{0,200})\) ?")
_RAY_PID = re.compile(r"(?:^|[\s,])pid=(\d+)")
_RAY_IP = re.compile(r"(?:^|[\s,])ip=([0-9A-Fa-f.:]+)")
_RAY_RANK = re.compile(r"(?:^|[\s,])rank=(\d+)")
_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]|RankID:(\d+)|(?<!\w)rank\[(\d+)\]")  # torch, torch_npu, HCCL
# the process that failed, as the message says it: CANN, torch_npu, Ray's death notice and task error, the kernel
_LINE_PID = re.compile(
    r"\[PID: ?(\d+)\]|\(PID:(\d+)|^\[[A-Z]+\] [A-Z_]+\((\d+),|Worker PID: (\d+)|ray::\S+ \(pid=(\d+)"
    r"|Killed process (\d+)|\(pid: (\d+)\)"
)
_LINE_IP = re.compile(
    r"Worker IP address: ([0-9A-Fa-f.:]+)|\b(?:IP|ip)[:=] ?([0-9A-Fa-f.:]*[0-9A-Fa-f])"
    r"|\baddress = ([0-9A-Fa-f.:]*[0-9A-Fa-f])"  # the GCS's "Reporting worker exit, …, address = 10.0.0.5"
)
_POINTER = re.compile(r"remote rank: ?\[(\d+)\]|dst_?[Rr]ank ?[\[:=] ?(\d+)|remoteUserrank\[(\d+)\]")
_SOURCE = re.compile(r"src_?[Rr]ank ?[\[:=] ?(\d+)")
_SYSLOG_HOST = re.compile(r"^(?:[A-Z][a-z]{2} [ \d]\d [\d:]{8}|20\d\d-\d\d-\d\dT\S+) (\S+) kernel: ")
_ELASTIC = r"\[(?:[Rr]ank|default)\d+\]:"  # the tag torch elastic puts on each line of a rank: [rank3]: / [default3]:
_HEADER = re.compile(
    r"""^(?:
      """
    + _ELASTIC
    + r"""\ ?                                                                # torch elastic's tag
    | \[[EWIF]\d{3,4}\ [\d:.]+\ [^\]]*\]\ ?                                # glog / c10
    | [EWIF]\d{4}\ [\d:.]+\ \d+\ \S+:\d+\]\ ?                              # torch elastic's logging
    | (?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\ \d\d-\d\d\ [\d:]+\ \[[^\]]*\]\ ?  # vllm
    | 20\d\d-\d\d-\d\d\ [\d:,]+\s+(?:[A-Z]+\s+)?(?:\S+:\d+\ --\ )?         # Python logging, Ray's
    | \[20\d\d-\d\d-\d\d\ [^\]]*\]\ ?(?:\(\w+\)\ )?(?:\S+:\d+:\ )?         # Ray's C++ logs
    | \[[A-Z]+\]\ [A-Z_]+\(\d+,[^)]*\):\S+\ (?:\[[\w.]+:\d+\]\ ?)?(?:\[\d+\])?  # CANN plog
    | (?:[A-Z][a-z]{2}\ [\ \d]\d\ [\d:]{8}|20\d\d-\d\d-\d\dT\S+)\ \S+\ kernel:\ (?:\[\s*[\d.]+\]\ )?  # syslog
    | \[(?:[A-Z][a-z]{2}\ ){2}[\ \d]\d\ [\d:]{8}\ 20\d\d\]\ |\[\s*\d+\.\d+\]\ # dmesg -T, dmesg
    )""",
    re.X,
)
_ELASTIC_TAG = re.compile(_ELASTIC)
# a header that says INFO or DEBUG: Ray's "[... I 12 34]", logging's "INFO", glog's "[I1120", CANN's "[INFO]"
_INFO = re.compile(
    r"^(?:\[20[^\]]* [ID] \d|20\S+ [\d:,]+\s+(?:INFO|DEBUG)\b|\[?[ID]\d{3,4} |(?:INFO|DEBUG) \d\d-"
    r"|\[(?:INFO|DEBUG|EVENT|TRACE)\] )"
)


@dataclass(frozen=True)
class Discount:
    """A finding that was not taken as the first failure although it came earlier, and why."""

    code: str
    file: str
    line: int
    why: str

    def to_json(self) -> dict[str, object]:
        """``{"code", "file", "line", "why"}``."""
        return {"code": self.code, "file": self.file, "line": self.line, "why": self.why}


@dataclass(frozen=True)
class Finding:
    """One failure line: where and when, which process, and what it says."""

    time: datetime | None  # the line's own stamp, or its burst's; None when neither has one
    file: str
    line: int
    node: str | None
    pid: int | None
    rank: int | None
    code: str
    message: str
    fingerprint: Fingerprint
    priority: int  # the fingerprint's place in the table: lower is more specific
    pids: frozenset[int] = frozenset()  # every pid the line names (the message's, the Ray prefix's, the file's)
    message_pid: bool = False  # ``pid`` is the one the message names (it wins over a relaying prefix's)
    points_to: int | None = None  # the rank it says it waited for (``remote rank: [N]``, dstRank)
    origin: str | None = None  # the Ray prefix's process (``WorkerDict pid=3007``, ``raylet``): who relayed it
    role: str = ""  # "root": the launcher's first observed failure; "consequence": it follows another failure
    task: str | None = None  # the Ray task a wrapper names (``ray::inner()``)
    tag: str | None = None  # torch elastic's tag of a rank's line (``[rank3]:``): the launcher's own lines have none

    def placed(self, line: int, time: datetime | None) -> Finding:
        """This finding at a line and time (a parsed line is shared by its repeats: each gets its own copy)."""
        copy = object.__new__(Finding)
        copy.__dict__.update(self.__dict__, line=line, time=time)  # a frozen dataclass's copy, without __init__
        return copy

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


def clean(text: str) -> str:
    """Text from a file made safe to print: no control characters (a run of them becomes one space)."""
    return _CONTROL.sub(" ", text).strip()


class Clock:
    """Turns a stamp into a datetime, supplying the year where the stamp has none."""

    def __init__(self, mtime: float):
        self.mtime = datetime.fromtimestamp(mtime)
        self.year: int | None = None  # of the last dated stamp seen

    def time(self, m: re.Match[bytes]) -> datetime | None:
        """The stamp ``m`` as a datetime (None when it names no real day)."""
        g = m.groups()
        try:
            if m.re is YEAR_STAMP:
                self.year = int(g[0])
                y, mo, d, h, mi, sec = (int(v) for v in g[:6])
                return datetime(y, mo, d, h, mi, sec, int(g[6] or 0) * 1000 + int(g[7] or 0))
            if m.re is _DMESG_STAMP:
                self.year = int(g[5])
                d, h, mi, sec = (int(v) for v in g[1:5])
                return datetime(self.year, _MONTH[g[0]], d, h, mi, sec)
            if m.re is _SYSLOG_STAMP:
                month = _MONTH[g[0]]
                d, h, mi, sec = (int(v) for v in g[1:5])
                micro = 0
            else:
                micro = int(g[5][:6].ljust(6, b"0")) if m.re is _GLOG_STAMP else 0
                month, d, h, mi, sec = (int(v) for v in g[:5])
            year = self.year or self.mtime.year
            t = datetime(year, month, d, h, mi, sec, micro)
            if self.year is None and t > self.mtime + timedelta(days=1):
                t = t.replace(year=year - 1)
            return t
        except ValueError:
            return None


def first_stamp(line: bytes) -> re.Match[bytes] | None:
    """The leftmost stamp on a line."""
    found = [m for rx in STAMPS if (m := rx.search(line))]
    return min(found, key=lambda m: m.start()) if found else None


def parse(raw: bytes, table: Table, file: str, file_pid: int | None, node: str | None) -> Finding | None:
    """The finding on one line (its line number and time not yet set), or None when no fingerprint fires."""
    if b"\x1b" in raw:
        raw = ANSI.sub(b"", raw)
    text = raw.decode("utf-8", "replace")
    inner = None
    ray = _RAY_PREFIX.match(text)
    if ray and ("=" in ray["inner"] or ray["inner"].split(",")[0].strip().isidentifier()):
        inner, text = ray["inner"], text[ray.end() :]
    content, info, tag = text, False, None
    for _ in range(4):
        head = _HEADER.match(content)
        if not head or not head.end():
            break
        info = info or bool(_INFO.match(head.group()))
        if tag is None and _ELASTIC_TAG.match(head.group()):
            tag = head.group().strip()
        content = content[head.end() :].lstrip()
    found = table.match(content, info)
    if found is None:
        return None
    priority, m = found
    fp = table.fingerprints[priority]
    prefix_pid = prefix_rank = None
    if inner is not None:
        prefix_pid, node_prefix, prefix_rank = (
            _int(_RAY_PID.search(inner)),
            _ip(_RAY_IP.search(inner)),
            _int(_RAY_RANK.search(inner)),
        )
    else:
        node_prefix = None
    rank = prefix_rank if prefix_rank is not None else _int(_RANK.search(text))
    message_pid = _int(_LINE_PID.search(text))
    host = _SYSLOG_HOST.match(text)
    where = node_prefix or _ip(_LINE_IP.search(text)) or (host.group(1) if host else None) or node
    pid = next((p for p in (message_pid, prefix_pid, file_pid) if p is not None), None)
    content = clean(content)
    groups = m.groupdict()
    signal_number = groups.get("signal") or groups.get("signal2")
    if signal_number and "SIG" not in content:
        content += f" ({_signal_name(int(signal_number))})"
    message = content if len(content) <= MAX_MESSAGE else content[: MAX_MESSAGE - 1] + "…"
    return Finding(
        None,
        file,
        0,
        where,
        pid,
        rank,
        groups.get("code") or fp.code,
        message,
        fp,
        priority,
        frozenset(p for p in (message_pid, prefix_pid, file_pid) if p is not None),
        message_pid is not None,
        _pointer(text, rank),
        inner.split(",")[0].strip() if inner is not None else None,
        "root" if groups.get("root") else fp.role,
        groups.get("task"),
        tag,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _pointer(text: str, rank: int | None) -> int | None:
    """The rank a line says it waited for: the remote rank or destination, or the source when that is itself."""
    target = _int(_POINTER.search(text))
    if target is not None and target == rank:
        target = _int(_SOURCE.search(text))
    return None if target == rank else target


def _ip(m: re.Match[str] | None) -> str | None:
    value = _group(m)
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def _int(m: re.Match[str] | None) -> int | None:
    value = _group(m)
    return int(value) if value is not None else None


def _group(m: re.Match[str] | None) -> str | None:
    if m is None:
        return None
    return next((g for g in m.groups() if g is not None), None)
