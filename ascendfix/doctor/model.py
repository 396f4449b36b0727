"""The plain data doctor produces: one ``Result`` per check, gathered in a ``DoctorReport``."""

from __future__ import annotations

from collections.abc import Sequence

from ascendfix.states import Status
from ascendfix.tuples import NamedTuple


class Finding(NamedTuple):
    """What a check function found: a status, short lines that say why, the command that fixes it,
    and the long lines behind them (whys, file lists) that ``-v`` shows."""

    status: Status
    messages: tuple[str, ...] = ()
    fix: str = ""
    details: tuple[str, ...] = ()


def ok(*messages: str, details: Sequence[str] = ()) -> Finding:
    """Nothing to do."""
    return Finding(Status.OK, messages, details=tuple(details))


def warn(*messages: str, fix: str = "", details: Sequence[str] = ()) -> Finding:
    """Not fatal, but worth acting on (``--strict`` makes it fatal)."""
    return Finding(Status.WARN, messages, fix, tuple(details))


def fail(*messages: str, fix: str = "", details: Sequence[str] = ()) -> Finding:
    """The job should not be started on this machine as it is."""
    return Finding(Status.FAIL, messages, fix, tuple(details))


def skip(*messages: str) -> Finding:
    """The check cannot be made here; the messages say why."""
    return Finding(Status.SKIP, messages)


LISTED = 100  # a list longer than this many characters is counted in the message and listed in the details


def listing(head: str, items: Sequence[str]) -> tuple[str, list[str]]:
    """A message naming ``items`` after ``head`` when they are few and short, else ``head`` alone with the
    items as details: one changed file is named, 3,000 of them are counted (``-v`` lists them)."""
    joined = ", ".join(items)
    if len(joined) <= LISTED:
        return f"{head}: {joined}", []
    return f"{head} (-v lists them)", list(items)


class Result(NamedTuple):
    """One check's outcome, as ``--json`` prints it."""

    id: str
    title: str
    status: Status
    messages: list[str]
    fix: str = ""
    details: tuple[str, ...] = ()


class DoctorReport(NamedTuple):
    """Every check that ran, for one profile and device."""

    profile: str
    device: str
    checks: list[Result]
    device_reason: str = ""  # why this device was checked (given, detected, or the profile's first)
    strict: bool = False  # a warning counts as a failure (``doctor --strict``)

    @property
    def summary(self) -> dict[str, int]:
        """How many checks ended in each status."""
        return {s: sum(1 for c in self.checks if c.status == s) for s in Status}

    @property
    def ok(self) -> bool:
        """Nothing failed (and, when ``strict``, nothing warned)."""
        bad = (Status.FAIL, Status.WARN) if self.strict else (Status.FAIL,)
        return not any(c.status in bad for c in self.checks)

    def to_json(self) -> dict:
        """The ``--json`` form."""
        checks = [
            {
                "id": c.id,
                "title": c.title,
                "status": c.status,
                "messages": list(c.messages),
                "fix": c.fix,
                "details": list(c.details),
            }
            for c in self.checks
        ]
        return {"profile": self.profile, "device": self.device, "checks": checks, "summary": self.summary}
