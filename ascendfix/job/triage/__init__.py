"""``triage``: the first failure in a job's logs, named; the errors after it, counted.

When a job on 128 NPUs fails, every rank prints errors and HCCL's own advice is to find the rank
that failed first. :func:`triage` reads a folder of logs -- a Ray session's ``logs``, ``ascendfix
run`` folders (``<time>/train.log``), CANN plog folders, per-node copies of them, a collected
``dmesg -T`` or ``kern.log`` -- picks the lines that fingerprint a failure (``codes.toml``,
:mod:`ascendfix.job.triage.table`), reads each one's time, node, pid and rank
(:mod:`ascendfix.job.triage.lines`), streaming (:mod:`ascendfix.job.triage.scan`), and orders them
(:mod:`ascendfix.job.triage.order`): the earliest burst, after clock skew and the ranks the
timeouts point at, is the first failure; every other finding is counted as one of its likely
consequences.

What an ``ascendfix run`` folder's job logged is no failure when its run.json says it exited 0: it is
listed, with why, among the findings discounted. run.json itself is ascendfix's record of the run, read
for that exit status, never scanned as a log (the profile's rationale it records names failures).

The node of a line is the Ray prefix's ip, else the one its message names (``IP: 10.0.0.9``),
else the kernel log's host, else the folder's: the first folder on its path named as an IP
address, or the top folder under LOGDIR when it is named like a host (``node07/ascend/log/…``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ascendfix.errors import UsageError
from ascendfix.job.triage.lines import MAX_MESSAGE, Discount, Finding, clean
from ascendfix.job.triage.order import Tally, bursts
from ascendfix.job.triage.scan import KERNEL_NEEDLES, MAX_DISCOUNTED, NEEDLES, PREFILTER, FileScan, log_files
from ascendfix.job.triage.table import CODES, Fingerprint, Table, fingerprints, needles

__all__ = [
    "CODES",
    "DEFAULT_LOGDIR",
    "Discount",
    "KERNEL_NEEDLES",
    "MAX_MESSAGE",
    "NEEDLES",
    "PREFILTER",
    "Finding",
    "Fingerprint",
    "Triage",
    "clean",
    "fingerprints",
    "needles",
    "triage",
]

DEFAULT_LOGDIR = Path("/tmp/ray/session_latest/logs")
_MAX_RUN_JSON = 1 << 20
_SUCCEEDED = "the job exited 0 (its run.json says so): what it logged and went on from is no failure"
_FILE_PID = re.compile(r"^(?:worker-[0-9a-f]+-[0-9a-f]+-|python-core-worker-[0-9a-f]+_|plog-)(\d+)")
_HOST = re.compile(r"^[A-Za-z][A-Za-z0-9-]*\d[A-Za-z0-9.-]*$")
_NOT_A_HOST = re.compile(r"^(?:session_|device-|worker-|plog|debug|run|logs?$|old$|events$)", re.I)


@dataclass(frozen=True)
class Triage:
    """What :func:`triage` found: the first failure (None when nothing failed), the rest counted,
    what could not be read, and the nodes whose clocks are off."""

    logs: str
    first: Finding | None
    later: int
    by_code: dict[str, int]
    files: int
    bytes_read: int
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path under LOGDIR, why), unread
    clock_skew: dict[str, float] = field(default_factory=dict)  # node -> seconds its stamps are behind
    discounted: list[Discount] = field(default_factory=list)  # earlier findings not taken as the first, and why
    consequences: list[Finding] = field(default_factory=list)  # what followed, by name (``later`` counts all)

    @property
    def failed(self) -> bool:
        """Something failed, or some file could not be read (so nothing failing is not known)."""
        return self.first is not None or bool(self.skipped)

    @property
    def ok(self) -> bool:
        """Nothing failed, and every file was read."""
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        """``{"logs", "first", "later", "consequences", "by_code", "skipped", "clock_skew", "discounted"}``."""
        first = self.first.to_json() if self.first else None
        skipped = [{"path": path, "why": why} for path, why in self.skipped]
        return {
            "logs": self.logs,
            "first": first,
            "later": self.later,
            "consequences": [f.to_json() for f in self.consequences],
            "by_code": self.by_code,
            "skipped": skipped,
            "clock_skew": self.clock_skew,
            "discounted": [d.to_json() for d in self.discounted],
        }


def triage(logdir: Path = DEFAULT_LOGDIR) -> Triage:
    """Read every log under ``logdir`` and name the first failure; raises UsageError on a missing folder."""
    if not logdir.exists():
        raise UsageError(
            f"{logdir}: no such folder; pass the job's logs (a Ray session's logs, an ascendfix-runs/<time> "
            "folder or a CANN plog folder)"
        )
    table = Table(fingerprints())
    tally = Tally()
    files = size = 0
    skipped: list[tuple[str, str]] = []
    nodes: dict[Path, str | None] = {}
    succeeded: dict[Path, bool] = {}
    for index, path in enumerate(log_files(logdir, skipped)):
        rel = path.relative_to(logdir) if path != logdir else Path(path.name)
        if rel.parent not in nodes:
            nodes[rel.parent] = _node_of(rel.parent)
            succeeded[rel.parent] = _exited_zero(path.parent)
        m = _FILE_PID.match(path.name)
        scan = FileScan(path, clean(str(rel)), nodes[rel.parent], int(m.group(1)) if m else None, table)
        if succeeded[rel.parent]:  # an `ascendfix run` folder whose job exited 0: what it logged is no failure
            for f in scan.findings():
                if len(scan.discounted) < MAX_DISCOUNTED:
                    scan.discounted.append(Discount(f.code, f.file, f.line, _SUCCEEDED))
        else:
            for burst in bursts(scan.findings(), index):
                tally.add(burst)
        tally.discounted += scan.discounted[: max(0, MAX_DISCOUNTED - len(tally.discounted))]
        if scan.error is not None:
            skipped.append((clean(str(rel)), scan.error))
        if scan.text:
            files += 1
            size += scan.size
    skipped = [(clean(path), clean(why)) for path, why in skipped]
    if not files and not skipped:
        raise UsageError(f"{logdir}: no readable text log files here")
    offsets = tally.skew()
    first, size_first = tally.first(offsets)
    skew = {node: _seconds(delta) for node, delta in sorted(offsets.items())}
    by_code = dict(tally.by_code.most_common())
    later = tally.others(first)
    return Triage(
        clean(str(logdir)),
        first,
        tally.total - size_first,
        by_code,
        files,
        size,
        skipped,
        skew,
        tally.discounted,
        later,
    )


def _exited_zero(folder: Path) -> bool:
    """Whether the folder is an ``ascendfix run`` folder whose run.json says the job ended with exit status 0."""
    try:
        fd = os.open(folder / "run.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return False
            record = json.loads(f.read(_MAX_RUN_JSON))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("exit_status") == 0 and "ended" in record


def _seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 3)


def _node_of(folder: Path) -> str | None:
    """The node a file's folder names: the first folder on its path (under LOGDIR) named as an IP address,
    else the top folder when it is named like a host (letters, then a digit: node07, gpu-a3)."""
    for part in folder.parts:
        try:
            return str(ipaddress.ip_address(part))
        except ValueError:
            continue
    top = folder.parts[0] if folder.parts else ""
    if _HOST.match(top) and not _NOT_A_HOST.match(top):
        return top
    return None
