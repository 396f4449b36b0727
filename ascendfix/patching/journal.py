"""What ascendfix wrote into a package root, kept in ``<root>/.ascendfix/``, and the one way to write it.

- ``state.json``: for each patched file (path relative to the root) the patch id and
  variant, the sha256 of the original and of what ascendfix wrote;
- ``backup/<path>``: the original bytes, for a byte-exact revert;
- ``journal.json`` and ``undo/<path>``: present only while a transaction is writing. They
  name every file (and so every temp file) the transaction may touch and keep each file's
  bytes and record as they were; the next command rolls an interrupted transaction back to
  exactly that, and removes the temp files of its writes.
- ``.gitignore``: the folder ignores itself, so a checkout's ``git status`` stays clean.

Every state file carries ``schema``; a folder written by a newer ascendfix is refused, an
older one is read (schema 2 added each record's ``profile``; before schema 1 there was no field).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ascendfix.errors import RefusedError
from ascendfix.fsutil import (
    TEMP_SUFFIX,
    drop_bytecode,
    leftover_temps,
    locked,
    remove_temps,
    remove_tree,
    sha256_bytes,
    write_atomic,
)

STATE_DIR = ".ascendfix"
SCHEMA = 2


def digest(data: bytes) -> str:
    """The sha256 a record keeps of a file's bytes."""
    return sha256_bytes(data)


class Record(NamedTuple):
    """One file ascendfix patched: which patch and variant (and the profile that applied it), the original's
    and the written bytes' sha256."""

    patch: str
    variant: str
    original_sha256: str
    patched_sha256: str
    profile: str = ""  # unknown in folders written before schema 2

    @classmethod
    def of(cls, patch: str, variant: str, original: bytes, written: bytes, profile: str) -> Record:
        """The record of writing ``written`` over ``original``."""
        return cls(patch, variant, digest(original), digest(written), profile)


class PlannedWrite(NamedTuple):
    """One file a transaction will write: its new bytes and its record afterwards.

    ``record`` None means the file goes back to upstream (a revert): its record and backup
    are dropped; ``data`` None leaves the file's bytes as they are (only the record goes).
    ``original`` is kept as the backup when given (an apply).
    """

    rel: str
    data: bytes | None
    record: Record | None
    original: bytes | None = None


class WriteError(RefusedError):
    """A write failed (disk full, read-only file, size limit); everything was rolled back."""


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

    def _read(self, path: Path) -> dict | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise RefusedError(f"{path}: unreadable ({e}); move it aside to start over") from None
        schema = data.get("schema", 0) if isinstance(data, dict) else None
        if not isinstance(schema, int):
            raise RefusedError(f"{path}: unreadable (no valid schema); move it aside to start over")
        if schema > SCHEMA:
            raise RefusedError(
                f"{path}: written by a newer ascendfix (schema {schema}, this one reads up to {SCHEMA}); "
                "upgrade ascendfix to act on this tree"
            )
        return data

    def records(self) -> dict[str, Record]:
        """Every file ascendfix patched in this root, by relative path."""
        data = self._read(self.state_file)
        if data is None:
            return {}
        try:
            return {rel: Record(**rec) for rel, rec in data["files"].items()}
        except (KeyError, TypeError, AttributeError) as e:
            raise RefusedError(f"{self.state_file}: unreadable ({e}); move it aside to start over") from None

    def _save_records(self, records: dict[str, Record]) -> None:
        """Write state.json (or remove the whole state folder when nothing is patched any more)."""
        if not records:
            remove_tree(self.dir)
            return
        data = {"schema": SCHEMA, "files": {rel: rec._asdict() for rel, rec in sorted(records.items())}}
        write_atomic(self.state_file, (json.dumps(data, indent=1) + "\n").encode())

    def _ensure_dir(self) -> None:
        self.dir.mkdir(exist_ok=True)
        ignore = self.dir / ".gitignore"
        if not ignore.exists():
            write_atomic(ignore, b"# written by ascendfix: this folder is ascendfix's state, not part of the tree\n*\n")

    def load_backup(self, rel: str, expected_sha256: str) -> bytes | None:
        """The original bytes of ``rel``, if the backup is there and intact."""
        try:
            data = self.backup_path(rel).read_bytes()
        except FileNotFoundError:
            return None
        return data if sha256_bytes(data) == expected_sha256 else None

    def _save_backup(self, rel: str, original: bytes) -> None:
        path = self.backup_path(rel)
        if path.is_file() and sha256_bytes(path.read_bytes()) == sha256_bytes(original):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, original, 0o644)

    def _drop_backup(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.backup_path(rel).unlink()

    def leftovers(self, rels: list[str]) -> list[Path]:
        """ascendfix temp files a killed write left beside ``rels`` (the next transaction removes them)."""
        return [tmp for rel in rels for tmp in leftover_temps(self.root / rel)]

    def begin(self, op: str, rels: list[str]) -> Transaction:
        """Journal that ``op`` will write ``rels`` (after rolling back any interrupted transaction)."""
        self.recover()
        current = self.records()
        undo = self.dir / "undo"
        remove_tree(undo)
        writing = self.dir
        try:
            self._ensure_dir()
            for rel in rels:
                path = self.root / rel
                remove_temps(path)
                if path.is_file():
                    writing = undo / rel
                    writing.parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(writing, path.read_bytes(), 0o644)
            data = {
                "schema": SCHEMA,
                "op": op,
                "files": list(rels),
                "previous": {rel: current[rel]._asdict() if rel in current else None for rel in rels},
            }
            writing = self.journal_file
            write_atomic(writing, json.dumps(data).encode())
        except OSError as e:
            self._end()
            raise WriteError(f"{op} failed writing {writing}: {e.strerror or e}; nothing was changed") from None
        return Transaction(self, op, current)

    def _end(self) -> None:
        """The transaction is over: drop the journal and the undo copies (and the folder, if it holds nothing)."""
        with contextlib.suppress(FileNotFoundError):
            self.journal_file.unlink()
        remove_tree(self.dir / "undo")
        if self.dir.is_dir() and not self.state_file.exists() and not (self.dir / "backup").exists():
            remove_tree(self.dir)

    def recover(self) -> list[str]:
        """Roll an interrupted transaction back to exactly what was there; returns what was done."""
        try:
            data = self._read(self.journal_file)
        except RefusedError:
            data = {}  # written atomically: an unreadable journal was never completed, so nothing was touched
        if data is None:
            return []
        rels = data.get("files", [])
        if isinstance(rels, dict):  # schema 0 named the records it was writing
            rels = list(rels)
        previous = {rel: Record(**rec) if rec else None for rel, rec in data.get("previous", {}).items()}
        notes = []
        for rel in rels:
            path = self.root / rel
            remove_temps(path)
            before = self._load_undo(rel)
            if before is not None and path.is_file() and path.read_bytes() != before:
                write_atomic(path.resolve(), before)
                drop_bytecode(path.resolve())
                notes.append(f"{rel}: rolled back (an interrupted {data.get('op', 'write')})")
        records = self.records()
        for rel in rels:
            if previous.get(rel) is not None:
                records[rel] = previous[rel]
            else:
                records.pop(rel, None)
                if self._load_undo(rel) is not None:
                    self._drop_backup(rel)
        self._save_records(records)
        self._end()
        return notes

    def _load_undo(self, rel: str) -> bytes | None:
        try:
            return (self.dir / "undo" / rel).read_bytes()
        except FileNotFoundError:
            return None

    def sweep_temps(self) -> None:
        """Remove temp files a killed write left inside the state folder itself."""
        if self.dir.is_dir():
            for tmp in self.dir.rglob(f"*{TEMP_SUFFIX}"):
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()


class Transaction:
    """The writes of one journaled operation on one root (made by :meth:`Store.transaction`)."""

    def __init__(self, store: Store, op: str, records: dict[str, Record]):
        self.store, self.op = store, op
        self.records = dict(records)
        self.written: list[str] = []
        self.current: str | None = None

    def write(self, planned: PlannedWrite) -> None:
        """Back up the original (apply), write the file atomically, drop its bytecode, note its record."""
        self.current = planned.rel
        path = (self.store.root / planned.rel).resolve()
        if planned.original is not None:
            self.store._save_backup(planned.rel, planned.original)
        self.written.append(planned.rel)
        if planned.data is not None:
            write_atomic(path, planned.data)
            drop_bytecode(path)
        if planned.record is None:
            self.records.pop(planned.rel, None)
        else:
            self.records[planned.rel] = planned.record
        self.current = None

    def save(self) -> None:
        """Save the records (the journal stays: a failure after this still rolls back)."""
        self.current = str(self.store.state_file.relative_to(self.store.root))
        if self.records:
            self.store._save_records(self.records)
        self.current = None

    def end(self) -> None:
        """The transaction is done: drop the backups of files that went back to upstream, and the journal."""
        for rel in self.written:
            if rel not in self.records:
                self.store._drop_backup(rel)
        if not self.records:
            self.store._save_records({})
        self.store._end()

    def rollback(self) -> None:
        """Undo every write and record of this transaction."""
        self.store.recover()

    def failure(self, error: OSError) -> str:
        """The one line that says which file failed and why."""
        where = self.store.root / self.current if self.current else self.store.dir
        return f"{self.op} failed writing {where}: {error.strerror or error}; rolled back, nothing was changed"


def has_journal(root: Path) -> bool:
    """An interrupted transaction left its journal in ``root``."""
    return (root / STATE_DIR / "journal.json").exists()


def recover(roots: list[Path]) -> list[str]:
    """Roll back what an interrupted transaction left in any of ``roots`` (under each one's lock)."""
    done = []
    for root in roots:
        if has_journal(root):
            with locked([root]):
                done += Store(root).recover()
    return done


class Session:
    """The roots of one command, locked, recovered and swept: plan inside it, then :meth:`write`."""

    def __init__(self, roots: list[Path]):
        self.roots = roots

    def write(self, op: str, writes: dict[Path, list[PlannedWrite]]) -> None:
        """Write ``writes`` (planned writes by package root) in one transaction across the roots."""
        plans = {root: [w.rel for w in planned] for root, planned in writes.items() if planned}
        if not plans:
            return
        with transaction(op, plans) as txs:
            for root, planned in writes.items():
                for w in planned:
                    txs[root].write(w)


@contextlib.contextmanager
def session(roots: list[Path], files: dict[Path, list[str]]) -> Iterator[Session]:
    """Hold every root's lock for a command that may write: roll back what a killed command left, remove
    the temp files beside ``files`` (relative paths by root) and inside each state folder, then yield."""
    with locked(roots):
        for root in roots:
            store = Store(root)
            store.recover()
            for rel in files.get(root, []):
                remove_temps(root / rel)
            store.sweep_temps()
        yield Session(roots)


@contextlib.contextmanager
def transaction(op: str, plans: dict[Path, list[str]]) -> Iterator[dict[Path, Transaction]]:
    """Write the files ``plans`` names (relative paths by package root) all or nothing, across roots.

    Each root is journaled before anything is written; the caller writes through each root's
    :class:`Transaction`. Any exception rolls every root back to exactly what was there (its
    files, records and backups); an OSError becomes one :class:`WriteError` line naming the file
    and the reason. A kill leaves the journals, and the next command's :meth:`Store.recover`
    rolls back. Callers hold the roots' locks.
    """
    opened: dict[Path, Transaction] = {}
    try:
        for root, rels in plans.items():
            opened[root] = Store(root).begin(op, rels)
        yield opened
        for tx in opened.values():
            tx.save()
    except BaseException as e:
        failed = next((tx for tx in opened.values() if tx.current is not None), None)
        for tx in opened.values():
            tx.rollback()
        if isinstance(e, OSError):
            raise WriteError(failed.failure(e) if failed else f"{op} failed: {e}") from None
        raise
    for tx in opened.values():
        tx.end()
