"""What ``ckpt check`` found: problems, each about a tensor or a file, and the checkpoint's counts."""

from __future__ import annotations

from typing import NamedTuple


class Problem(NamedTuple):
    """One thing wrong, about a ``tensor`` or a ``file`` (``about``) named ``subject``."""

    kind: str
    about: str  # "tensor" or "file"
    subject: str
    detail: str

    def to_json(self) -> dict:
        """``{"kind", "tensor" | "file", "detail"}``."""
        return {"kind": self.kind, self.about: self.subject, "detail": self.detail}


class CheckReport(NamedTuple):
    """What the check found: counts, and every problem."""

    checkpoint: str
    tensors: int
    chunks: int
    files: int
    bytes: int
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems

    def to_json(self) -> dict:
        """The ``--json`` answer."""
        return {
            "checkpoint": self.checkpoint,
            "ok": self.ok,
            "tensors": self.tensors,
            "chunks": self.chunks,
            "files": self.files,
            "bytes": self.bytes,
            "problems": [p.to_json() for p in self.problems],
        }
