"""The records of a state folder as data: what a file's record, a planned write and a journal hold, and the checks
every one of them read from disk must pass (an untrusted folder: each path a plain relative one, each hash 64 hex
digits, each field of the type ascendfix writes)."""

from __future__ import annotations

from pathlib import Path

from ascendfix.errors import RefusedError
from ascendfix.fsutil import Escape, check_rel, sha256_bytes
from ascendfix.tuples import NamedTuple

_HEX = frozenset("0123456789abcdef")


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
    ``original`` is kept as the backup when given (an apply). ``expected_sha256`` is the hash of
    the file as it was planned on: right before the file is replaced it must still be that.
    """

    rel: str
    data: bytes | None
    record: Record | None
    original: bytes | None = None
    expected_sha256: str | None = None


def refuse_folder(path: Path, problem: str) -> RefusedError:
    """The one line refusing a state folder whose file ``path`` breaks the rules (``problem``)."""
    return RefusedError(f"{path}: {problem}; nothing was touched: check it, then move {path.parent} aside")


class Entry(NamedTuple):
    """One file of a journal: its relative path and the sha256 of its bytes before and after."""

    rel: str
    before: str | None
    after: str | None


class Journal(NamedTuple):
    """A validated ``journal.json``: every path in it checked to stay in its root."""

    op: str
    txid: str
    roots: tuple[Path, ...]
    files: tuple[Entry, ...]
    previous: dict[str, Record | None]

    @classmethod
    def parse(cls, path: Path, data: dict, root: Path) -> Journal:
        """Check every field of an untrusted journal; a RefusedError names what is wrong."""
        op = data.get("op", "write")
        txid = data.get("txid", "")
        roots = data.get("roots", [str(root)])
        files, previous = data.get("files", []), data.get("previous", {})
        if isinstance(files, dict):  # schema 0 named the records it was writing
            files = list(files)
        if not isinstance(op, str) or not isinstance(txid, str) or not isinstance(files, list):
            raise refuse_folder(path, "not a journal ascendfix wrote (op, txid or files of the wrong type)")
        if not isinstance(previous, dict):
            raise refuse_folder(path, "not a journal ascendfix wrote (previous is not a table)")
        if not isinstance(roots, list) or not all(isinstance(r, str) and r.startswith("/") for r in roots):
            raise refuse_folder(path, "not a journal ascendfix wrote (roots are not absolute paths)")
        entries = []
        for item in files:
            if isinstance(item, str):  # schema 2 and older: no hashes
                entries.append(Entry(plain_rel(path, item), "", None))
            elif isinstance(item, dict) and all(_is_sha(item.get(k)) for k in ("before", "after")):
                entries.append(Entry(plain_rel(path, item.get("rel")), item.get("before"), item.get("after")))
            else:
                raise refuse_folder(path, f"not a journal ascendfix wrote (a file entry {str(item)[:80]!r})")
        prev = {plain_rel(path, rel): None if rec is None else parse_record(path, rec) for rel, rec in previous.items()}
        return cls(op[:40], txid, tuple(Path(r) for r in roots), tuple(entries), prev)


def _is_sha(value: object) -> bool:
    return value is None or _is_hex64(value)


def _is_hex64(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def plain_rel(path: Path, rel: object) -> str:
    """``rel`` read from the state file ``path`` when it is a plain relative path, else the folder is refused."""
    try:
        return check_rel(rel)
    except Escape as e:
        raise refuse_folder(path, f"unsafe path: {e}") from None


def parse_record(path: Path, rec: object) -> Record:
    """A record read from the state file ``path``, every field checked, else the folder is refused."""
    try:
        if not isinstance(rec, dict):
            raise TypeError(f"expected a table, got {type(rec).__name__}")
        record = Record(**rec)
    except TypeError as e:
        raise RefusedError(f"{path}: unreadable ({e}); move it aside to start over") from None
    if not all(isinstance(v, str) for v in record) or not all(map(_is_hex64, record[2:4])):
        raise RefusedError(f"{path}: unreadable (a record's fields are not what ascendfix writes); move it aside")
    return record
