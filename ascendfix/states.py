"""The names modules exchange: a patch's state, what a command did to it, how a check ended.

Each is a :class:`Name`, an enumeration of strings: a member compares equal to its JSON spelling
(``State.APPLIED == "applied"``), prints as that spelling on every Python version, and is what ``--json``
writes. The spellings are a contract other tools depend on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from enum import Enum

    class Name(str, Enum):
        """A string enumeration: ``class State(Name): APPLIED = "applied"``."""

else:

    class _Names(type):
        """Makes each ``UPPER_CASE = "spelling"`` of a :class:`Name` subclass's body a member of it."""

        def __new__(mcls, name, bases, namespace):
            spellings = {k: v for k, v in namespace.items() if k.isupper() and isinstance(v, str)}
            cls = super().__new__(mcls, name, bases, {k: v for k, v in namespace.items() if k not in spellings})
            type.__setattr__(cls, "_members", {})
            for key, spelling in spellings.items():
                member = str.__new__(cls, spelling)
                member._name = key
                type.__setattr__(cls, key, member)
                cls._members[spelling] = member
            return cls

        def __call__(cls, spelling):
            """The member spelled ``spelling`` (a ValueError for any other value)."""
            try:
                return cls._members[spelling]
            except (KeyError, TypeError):
                raise ValueError(f"{spelling!r} is not a valid {cls.__name__}") from None

        def __iter__(cls):
            return iter(cls._members.values())

        def __len__(cls):
            return len(cls._members)

        def __contains__(cls, member):
            return isinstance(member, str) and member in cls._members

        def __setattr__(cls, key, value):
            raise AttributeError(f"cannot reassign members of {cls.__name__}")

        @property
        def __members__(cls):
            return {member.name: member for member in cls._members.values()}

    class Name(str, metaclass=_Names):
        """A string enumeration, as ``class Name(str, enum.Enum)`` reads to a type checker and to a reader: a
        subclass's ``UPPER_CASE = "spelling"`` attributes are its members (``State.APPLIED``, ``State("applied")``,
        ``list(State)``, ``.name``, ``.value``), each the string it spells. ``enum`` makes a class in about 0.8 M
        instructions, and every command's start-up makes five or more; this makes one in a tenth of that."""

        @property
        def name(self):
            """The member's attribute name (``APPLIED``)."""
            return self._name

        @property
        def value(self):
            """The member's spelling, a plain ``str``."""
            return str.__str__(self)

        def __str__(self):
            return str.__str__(self)

        def __format__(self, spec):
            return str.__format__(self, spec)

        def __repr__(self):
            return f"<{type(self).__name__}.{self._name}: {str.__repr__(self)}>"

        def __reduce_ex__(self, protocol):
            return type(self), (self.value,)

        def __copy__(self):
            return self

        def __deepcopy__(self, memo):
            return self

        __hash__ = str.__hash__


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
