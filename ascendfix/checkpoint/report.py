"""What ``ckpt check`` found: problems and warnings, each about a tensor or a file, and the checkpoint's counts."""

from __future__ import annotations

from ascendfix.tuples import NamedTuple


class Problem(NamedTuple):
    """One thing wrong, about a ``tensor`` or a ``file`` (``about``) named ``subject``; a problem in a
    file's bytes also names the ``item`` (tensor fqn) and its chunk's ``offsets`` whose record it is."""

    kind: str
    about: str  # "tensor" or "file"
    subject: str
    detail: str
    item: str = ""
    offsets: tuple | None = None

    def to_json(self) -> dict:
        """``{"kind", "tensor" | "file", "detail"}``, plus ``"tensor"`` and ``"offsets"`` for a record's problem."""
        found: dict[str, object] = {"kind": self.kind, self.about: self.subject, "detail": self.detail}
        if self.item:
            found["tensor"] = self.item
            found["offsets"] = None if self.offsets is None else list(self.offsets)
        return found


class CheckReport(NamedTuple):
    """What the check found: counts, every problem, warnings (not failures) and the bytes proven.

    ``proven_bytes``: the record bytes whose CRC-32 matched torch's (``--bytes``); None when the bytes
    were not read (only each record's zip frame was).
    """

    checkpoint: str
    tensors: int
    chunks: int
    files: int
    bytes: int
    problems: list[Problem]
    warnings: tuple = ()
    proven_bytes: int | None = None

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
            "proven_bytes": self.proven_bytes,
            "problems": [p.to_json() for p in self.problems],
            "warnings": [p.to_json() for p in self.warnings],
        }

    @classmethod
    def from_json(cls, data: dict) -> CheckReport:
        """The report :meth:`to_json` made (a child process's answer)."""
        return cls(
            data["checkpoint"],
            data["tensors"],
            data["chunks"],
            data["files"],
            data["bytes"],
            [_problem(p) for p in data["problems"]],
            tuple(_problem(p) for p in data["warnings"]),
            data["proven_bytes"],
        )


def _problem(data: dict) -> Problem:
    about = "file" if "file" in data else "tensor"
    item = data.get("tensor", "") if about == "file" else ""
    offsets = data.get("offsets")
    return Problem(data["kind"], about, data[about], data["detail"], item, None if offsets is None else tuple(offsets))
