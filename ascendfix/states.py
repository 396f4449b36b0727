"""The names modules exchange: a patch's state, what a command did to it, how a check ended.

Each is a ``(str, Enum)``: it compares equal to its JSON spelling (``State.APPLIED ==
"applied"``), prints as that spelling on every Python version, and is what ``--json``
writes. The spellings are a contract other tools depend on.
"""

from __future__ import annotations

from enum import Enum


class Name(str, Enum):
    """A str enum that prints as its value (Python 3.11 would print ``Class.MEMBER``)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


class State(Name):
    """Where a patch stands on disk."""

    APPLIED = "applied"
    NOT_APPLIED = "not-applied"
    NOT_APPLICABLE = "not-applicable"
    DRIFTED = "drifted"
    PARTIAL = "partial"
    HAND_EDITED = "hand-edited"  # holds the guide's own edit, typed by hand, over a known original: apply adopts it


class Action(Name):
    """What a command did to a patch."""

    APPLIED = "applied"
    SWITCHED = "switched"
    ADOPTED = "adopted"  # a hand-edited file, replaced by the patch applied to its upstream original
    WOULD_APPLY = "would-apply"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"
    REVERTED = "reverted"
    REFUSED = "refused"


class ReasonCode(Name):
    """Why a patch is drifted or partial (``reason_code`` in JSON); each has its own fix."""

    PACKAGE_NOT_FOUND = "package-not-found"
    WRONG_ROOT = "wrong-root"
    FILE_MISSING = "file-missing"
    UNREADABLE = "unreadable"
    UNSUPPORTED_UPSTREAM = "unsupported-upstream"
    CHANGED_SINCE_APPLIED = "changed-since-applied"
    PARTIALLY_PATCHED = "partially-patched"
    APPLIED_OFF_DEVICE = "applied-off-device"
    CANNOT_SWITCH = "cannot-switch-variant"
    PARTIAL_HAND_EDIT = "partial-hand-edit"  # the guide's hand edit at some of the sites only
    HAND_EDIT_AND_MORE = "hand-edit-and-more"  # the guide's hand edit and another change


class Status(Name):
    """How a check ended, in every wing (doctor's checks, ``ray smoke``'s); ``--json`` spells them so."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
