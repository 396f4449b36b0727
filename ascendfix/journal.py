"""What ascendfix wrote into a package root, kept in ``<root>/.ascendfix/``.

- ``state.json``: for each patched file (path relative to the root) the patch id and
  variant, the sha256 of the original and of what ascendfix wrote;
- ``backup/<path>``: the original bytes, for a byte-exact revert;
- ``journal.json`` (and ``undo/``): present only while an apply or revert is writing; the
  next command finds it and finishes (revert) or rolls back (apply) the interrupted run.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ascendfix.errors import RefusedError
from ascendfix.fsutil import sha256_bytes, write_atomic

STATE_DIR = ".ascendfix"


@dataclass(frozen=True)
class Record:
    """One file ascendfix patched."""

    patch: str
    variant: str
    original_sha256: str
    patched_sha256: str


class Store:
    """The ``.ascendfix`` folder of one package root."""

    def __init__(self, root: Path):
        self.root = root
        self.dir = root / STATE_DIR

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def journal_file(self) -> Path:
        return self.dir / "journal.json"

    def backup_path(self, rel: str) -> Path:
        """Where the original of ``rel`` is kept."""
        return self.dir / "backup" / rel

    def records(self) -> dict[str, Record]:
        """Every file ascendfix patched in this root, by relative path."""
        try:
            data = json.loads(self.state_file.read_text())
            return {rel: Record(**rec) for rel, rec in data["files"].items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError) as e:
            raise RefusedError(f"{self.state_file}: unreadable ({e}); move it aside to start over") from None

    def save_records(self, records: dict[str, Record]) -> None:
        """Write state.json (or remove the whole state folder when nothing is patched any more)."""
        if not records:
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        self.dir.mkdir(exist_ok=True)
        data = {"files": {rel: asdict(rec) for rel, rec in sorted(records.items())}}
        write_atomic(self.state_file, (json.dumps(data, indent=1) + "\n").encode())

    def save_backup(self, rel: str, original: bytes) -> None:
        """Keep the original bytes of ``rel`` (once; an existing identical backup is kept)."""
        path = self.backup_path(rel)
        if path.is_file() and sha256_bytes(path.read_bytes()) == sha256_bytes(original):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, original, 0o644)

    def load_backup(self, rel: str, expected_sha256: str) -> bytes | None:
        """The original bytes of ``rel``, if the backup is there and intact."""
        try:
            data = self.backup_path(rel).read_bytes()
        except FileNotFoundError:
            return None
        return data if sha256_bytes(data) == expected_sha256 else None

    def drop_backup(self, rel: str) -> None:
        """Forget the original of ``rel`` (after a revert)."""
        with contextlib.suppress(FileNotFoundError):
            self.backup_path(rel).unlink()

    def begin(self, op: str, files: dict[str, Record], before: dict[str, bytes] | None = None) -> None:
        """Record that ``op`` ('apply' or 'revert') is about to write ``files``.

        For an apply, ``before`` holds each file's bytes as they are now (the original, or the
        variant being switched from) and the record each file has now is kept in the journal,
        so an interrupted apply rolls back to exactly what was there.
        """
        self.dir.mkdir(exist_ok=True)
        current = self.records()
        for rel, data in (before or {}).items():
            path = self.dir / "undo" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data, 0o644)
        data = {
            "op": op,
            "files": {rel: asdict(rec) for rel, rec in files.items()},
            "previous": {rel: asdict(current[rel]) if rel in current else None for rel in files},
        }
        write_atomic(self.journal_file, json.dumps(data).encode())

    def pending(self) -> tuple[str, dict[str, Record], dict[str, Record | None]] | None:
        """The interrupted operation, if a journal is left: op, the records it was writing, the ones before."""
        try:
            data = json.loads(self.journal_file.read_text())
            files = {rel: Record(**rec) for rel, rec in data["files"].items()}
            previous = {rel: Record(**rec) if rec else None for rel, rec in data.get("previous", {}).items()}
            return data["op"], files, previous
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            # A journal is written atomically; an unreadable one was never completed, so no file was touched.
            return "apply", {}, {}

    def load_undo(self, rel: str) -> bytes | None:
        """The bytes ``rel`` had before the interrupted apply, if kept."""
        try:
            return (self.dir / "undo" / rel).read_bytes()
        except FileNotFoundError:
            return None

    def end(self) -> None:
        """The operation finished: drop the journal and the undo copies."""
        with contextlib.suppress(FileNotFoundError):
            self.journal_file.unlink()
        shutil.rmtree(self.dir / "undo", ignore_errors=True)
