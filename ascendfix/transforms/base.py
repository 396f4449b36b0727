"""What every transform shares, without importing libcst.

Transforms import libcst (and ``cst_util``) on first use, inside their methods: the
engine's fast paths (status, a no-op apply) never parse a file, and must start fast.
"""

from __future__ import annotations

from dataclasses import dataclass

MARKER_PREFIX = "# ascendfix: "


class TransformError(Exception):
    """The file is not one this transform understands (unparsable, unexpected shape)."""


@dataclass(frozen=True)
class Outcome:
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
