"""What every transform shares, without importing libcst.

Transforms import libcst (and ``cst_util``) on first use, inside their methods: the
engine's fast paths (status, a no-op apply) never parse a file, and must start fast.
"""

from __future__ import annotations

from typing import ClassVar

from ascendfix.tuples import NamedTuple

MARKER_PREFIX = "# ascendfix: "
MAX_FILE_BYTES = 256 * 1024  # the cap on a file a transform reads (a patch's template)


class TransformError(Exception):
    """The file is not one this transform understands (unparsable, unexpected shape)."""


class HandEditError(TransformError):
    """A hand edit's site in a form that cannot be adopted: the line, what is wrong there, and what to do."""

    def __init__(self, line: int, problem: str, fix: str):
        super().__init__(problem)
        self.line, self.problem, self.fix = line, problem, fix


class Outcome(NamedTuple):
    """What a transform found and produced for one file.

    ``pending`` counts sites still in their original form, ``done`` sites already
    carrying this patch's marker. ``code`` is the transformed source (for ``apply``:
    every pending site done; for ``revert``: every done site restored).
    """

    code: bytes
    pending: int
    done: int


def marker(patch_id: str) -> str:
    """The trailing comment that says a line was written by ``patch_id``."""
    return f"{MARKER_PREFIX}{patch_id}"


class Transform:
    """One libcst transform: its parameters (the subclass's ``__init__``, set once) with a forward and an inverse.

    A subclass names itself (``name``, as patch files spell it), says in its docstring what it
    matches, takes the patch file's parameters as its ``__init__``'s (the registry checks them
    against that signature), and implements ``_rewrite``; ``apply`` and ``revert`` are the same walk in the two
    directions, so every site is found the same way both ways.
    """

    name: ClassVar[str]

    @classmethod
    def description(cls) -> str:
        """The first line of the transform's docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0]

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        raise NotImplementedError

    def reproduces(self, original: bytes, code: bytes, patch_id: str) -> bool:
        """Whether ``code`` is this transform's forward over ``original``: byte for byte, unless a form's inverse
        recognises several harmless spellings of a done site (a hand edit's)."""
        return self.apply(original, patch_id).code == code

    def apply(self, source: bytes, patch_id: str) -> Outcome:
        """Patch every pending site (marking each edited line); done sites are left as they are."""
        return self._rewrite(source, patch_id, forward=True)

    def revert(self, source: bytes, patch_id: str) -> Outcome:
        """Restore every site this patch marked, byte for byte."""
        return self._rewrite(source, patch_id, forward=False)
