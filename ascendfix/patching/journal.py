"""What ascendfix wrote into a package root, kept in ``<root>/.ascendfix/``, and the one way to write it.

- ``state.json``: for each patched file (path relative to the root) the patch id and
  variant, the sha256 of the original and of what ascendfix wrote;
- ``backup/<path>``: the original bytes, for a byte-exact revert;
- ``journal.json`` and ``undo/<path>``: present only while a transaction is writing. They
  name every file (and so every temp file) the transaction may touch, the sha256 of its bytes
  before and after, and keep each file's bytes and record as they were;
- ``commit.json``: in the first root of a transaction only, written once every root's files
  and records are written: the commit point. A transaction whose marker is there is finished
  forward by the next command, one whose marker is not is rolled back, in every root alike. Only
  what is read decides: while the first root cannot be stat'ed or its marker read, every journal
  is kept and the command refused (:class:`Unseen`), naming the root to mount;
- ``.gitignore``: the folder ignores itself, so a checkout's ``git status`` stays clean.

Everything in the folder is untrusted input: every path in it must be a plain relative path
that resolves inside the root without passing a symbolic link, ``.ascendfix`` itself must be a
real folder, and bytes from ``undo/`` are written back only when the caller's ``restore`` proves
them (or computes the same bytes from the file on disk). A folder that breaks this is refused whole, naming the file.

Every state file carries ``schema``; a folder written by a newer ascendfix is refused, an
older one is read (schema 3 added the transaction's id, roots and each file's hashes; schema 2
each record's ``profile``; before schema 1 there was no field).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ascendfix.errors import RefusedError
from ascendfix.fsutil import Escape, check_rel
from ascendfix.patching.records import Journal, PlannedWrite, Record, digest, parse_record, plain_rel, refuse_folder
from ascendfix.patching.tree import TEMP_SUFFIX, Tree, locked

STATE_DIR = ".ascendfix"
SCHEMA = 3
MAX_SOURCE_BYTES = 4 * 1024 * 1024  # no upstream source file ascendfix patches is over 1 MB
_GITIGNORE = b"# written by ascendfix: this folder is ascendfix's state, not part of the tree\n*\n"

Restore = Callable[[str, str, "bytes | None", "bytes | None"], "tuple[bytes, str] | None"]
"""``restore(rel, sha256, candidate, current)``: the bytes to write back over ``rel`` (now ``current``, None when
absent) so that it hashes to ``sha256``, and what they are: the undo copy ``candidate`` only when the caller can
prove it, else bytes the caller computes from ``current`` itself; None when neither can be had."""
OnWait = Callable[[Path, "int | None"], None]


class WriteError(RefusedError):
    """A write failed (disk full, read-only file, size limit, a file changed meanwhile)."""


class Unseen(RefusedError):
    """The root that holds a transaction's commit marker cannot be read: whether it committed is unknown (exit 2)."""

    exit_code = 2


class Changed(Exception):
    """A file changed between planning and writing."""


class Store:
    """The ``.ascendfix`` folder of one package root."""

    def __init__(self, root: Path):
        self.root = root
        self.tree = Tree(root)
        self.dir = root / STATE_DIR

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def journal_file(self) -> Path:
        return self.dir / "journal.json"

    @staticmethod
    def _backup(rel: str) -> str:
        """Where the original of ``rel`` is kept, relative to the root."""
        return f"{STATE_DIR}/backup/{check_rel(rel)}"

    def _check_dir(self) -> None:
        """The state folder, when there is one, is a real folder that only the root's owner (or this user)
        owns and can write: anything else may hold what another user planted."""
        info = self.tree.info(STATE_DIR)
        if info is None:
            return
        if stat.S_ISLNK(info.st_mode):
            raise RefusedError(
                f"{self.dir} is a symbolic link; ascendfix keeps its state only in a real folder: "
                f"remove the link (rm {self.dir}) and run again"
            )
        if not stat.S_ISDIR(info.st_mode):
            raise RefusedError(f"{self.dir} is not a folder; move it aside and run again")
        owner = os.stat(self.root).st_uid
        problem = None
        if info.st_uid not in (owner, os.geteuid()):
            problem = f"owned by uid {info.st_uid}, not by the owner of {self.root} (uid {owner})"
        elif info.st_mode & 0o022:
            problem = f"writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
        if problem:
            raise RefusedError(
                f"{self.dir}: {problem}, so anyone may have planted what it holds; nothing was touched: "
                f"check it, then move it aside"
            )

    def _read(self, name: str) -> dict | None:
        self._check_dir()
        path = self.dir / name
        try:
            data = json.loads(self.tree.read(f"{STATE_DIR}/{name}", MAX_SOURCE_BYTES))
        except FileNotFoundError:
            return None
        except (ValueError, RecursionError) as e:
            raise RefusedError(f"{path}: unreadable ({e}); move it aside to start over") from None
        except Escape as e:
            raise refuse_folder(path, str(e)) from None
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
        data = self._read("state.json")
        if data is None:
            return {}
        files = data.get("files")
        if not isinstance(files, dict):
            raise RefusedError(f"{self.state_file}: unreadable (no files table); move it aside to start over")
        return {plain_rel(self.state_file, rel): parse_record(self.state_file, rec) for rel, rec in files.items()}

    def read(self, rel: str) -> bytes | None:
        """The bytes of the file ``rel`` below the root, or None when it is absent. A link, a folder or a
        file over :data:`MAX_SOURCE_BYTES` is refused (:class:`~ascendfix.fsutil.Escape`)."""
        try:
            return self.tree.read(rel, MAX_SOURCE_BYTES)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise Escape(f"{self.root / rel} is a folder") from None

    def load_backup(self, rel: str, expected_sha256: str) -> bytes | None:
        """The original bytes of ``rel``, if the backup is there and intact (the caller proves them)."""
        try:
            data = self.tree.read(self._backup(rel), MAX_SOURCE_BYTES)
        except (FileNotFoundError, Escape, IsADirectoryError):
            return None
        return data if digest(data) == expected_sha256 else None

    def leftovers(self, rels: list[str]) -> list[Path]:
        """ascendfix temp files a killed write left beside ``rels`` (the next transaction removes them)."""
        return [self.root / tmp for rel in rels for tmp in self.tree.leftover_temps(rel)]

    def _save_records(self, records: dict[str, Record]) -> None:
        data = {"schema": SCHEMA, "files": {rel: rec._asdict() for rel, rec in sorted(records.items())}}
        self.tree.write(f"{STATE_DIR}/state.json", (json.dumps(data, indent=1) + "\n").encode())

    def _ensure_dir(self) -> None:
        self._check_dir()
        if not self.tree.exists(f"{STATE_DIR}/.gitignore"):
            self.tree.write(f"{STATE_DIR}/.gitignore", _GITIGNORE, 0o644)

    def _save_backup(self, rel: str, original: bytes) -> None:
        if self.load_backup(rel, digest(original)) is None:
            self.tree.write(self._backup(rel), original, 0o644)

    def _drop_backup(self, rel: str) -> None:
        backup = self._backup(rel)
        self.tree.unlink(backup)
        self.tree.prune(backup, STATE_DIR)

    def _load_undo(self, rel: str) -> bytes | None:
        try:
            return self.tree.read(f"{STATE_DIR}/undo/{rel}", MAX_SOURCE_BYTES)
        except FileNotFoundError:
            return None

    def journal(self) -> Journal | None:
        """The interrupted transaction's journal in this root, validated; None when there is none."""
        data = self._read("journal.json")
        return None if data is None else Journal.parse(self.journal_file, data, self.root)

    def marker(self) -> tuple[str, list[Path]] | None:
        """The commit marker this root holds: its transaction's id and roots (None when there is none; a
        marker that cannot be read is refused, never taken for none)."""
        data = self._read("commit.json")
        if not isinstance(data, dict) or not isinstance(data.get("txid"), str):
            return None
        roots = data.get("roots")
        return data["txid"], [Path(r) for r in roots if isinstance(r, str)] if isinstance(roots, list) else []

    def committed(self, journal: Journal, journal_file: Path) -> bool:
        """Whether this root, the first of the transaction ``journal`` (read from ``journal_file``), holds that
        transaction's commit marker: read, never guessed. False only when it holds the transaction's journal and
        no marker (it is rolled back there last, see :func:`_roll_back_root`); a root that cannot be stat'ed or
        read, or that holds neither (another image's folder at that path), raises :class:`Unseen` naming the root
        to mount, so that no root of a committed transaction is ever rolled back."""
        try:
            info = os.stat(self.root)
            if not stat.S_ISDIR(info.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a folder")
            marker = self.marker()
            if marker is not None and marker[0] == journal.txid:
                return True
            if self.root == journal_file.parent.parent:
                return False
            ours = self.journal()
            if ours is not None and ours.txid == journal.txid:
                return False
            why = "it holds neither its commit marker nor its journal: not the folder the transaction wrote"
        except (OSError, RefusedError) as e:
            why = (e.strerror or str(e)) if isinstance(e, OSError) else str(e)
        raise Unseen(
            f"{journal_file}: an interrupted {journal.op} is finished forward or rolled back by its commit marker "
            f"in {self.root}, which cannot be read ({why}); every journal is kept: mount the {self.root} it wrote "
            "and run ascendfix again"
        ) from None

    def sweep_temps(self) -> None:
        """Remove temp files a killed write left inside the state folder, and the folders that leaves empty."""
        self._check_dir()
        self._sweep(STATE_DIR)

    def _sweep(self, folder: str) -> bool:
        """Sweep ``folder``; True when it is empty afterwards."""
        names = self.tree.listdir(folder)
        left = len(names)
        for name in names:
            rel = f"{folder}/{name}"
            kind = self.tree.kind(rel)
            if (kind == "file" and name.endswith(TEMP_SUFFIX)) or (kind == "folder" and self._sweep(rel)):
                if kind == "folder":
                    with contextlib.suppress(OSError):
                        self.tree.remove_tree(rel)
                else:
                    self.tree.unlink(rel)
                left -= 1
        return left == 0

    def begin(self, op: str, planned: list[PlannedWrite], txid: str, roots: list[Path]) -> Transaction:
        """Journal that ``op`` will write ``planned``: undo copies first, then the journal (its commit point)."""
        current = self.records()
        writing = self.dir
        try:
            self._ensure_dir()
            self.tree.remove_tree(f"{STATE_DIR}/undo")
            entries = []
            for w in planned:
                self.tree.remove_temps(w.rel)
                before = self.read(w.rel)
                if before is not None:
                    writing = self.dir / "undo" / w.rel
                    self.tree.write(f"{STATE_DIR}/undo/{w.rel}", before, 0o644)
                after = w.data if w.data is not None else before
                entries.append(
                    {
                        "rel": w.rel,
                        "before": None if before is None else digest(before),
                        "after": None if after is None else digest(after),
                    }
                )
            data = {
                "schema": SCHEMA,
                "op": op,
                "txid": txid,
                "roots": [str(r) for r in roots],
                "files": entries,
                "previous": {w.rel: current[w.rel]._asdict() if w.rel in current else None for w in planned},
            }
            writing = self.journal_file
            self.tree.write(f"{STATE_DIR}/journal.json", json.dumps(data).encode())
        except BaseException as e:
            with contextlib.suppress(OSError, RefusedError):
                self._drop_journal()
            if isinstance(e, OSError):
                raise WriteError(f"{op} failed writing {writing}: {e.strerror or e}; nothing was changed") from None
            raise
        return Transaction(self, op, current)

    def roll_back(self, journal: Journal, restore: Restore) -> list[str]:
        """Put every file and record the journal names back as it was; the journal stays (see :meth:`finish`)."""
        notes, restores = [], []
        for entry in journal.files:  # everything is checked before anything is written
            try:
                current = self.read(entry.rel)
                before = self._load_undo(entry.rel)
            except Escape as e:
                raise refuse_folder(self.journal_file, f"names {entry.rel!r}: {e}") from None
            if entry.before == "":  # schema 2 and older kept no hashes: the undo copy is what was there
                if before is None or current == before:
                    continue
                want = digest(before)
            else:
                now = None if current is None else digest(current)
                if entry.before is None or now == entry.before:
                    continue  # never written, or already back
                if entry.after is not None and now != entry.after:
                    notes.append(f"{entry.rel}: changed by someone else since the interrupted {journal.op}; left")
                    continue
                want = entry.before
            found = restore(entry.rel, want, before, current)
            if found is None:
                raise RefusedError(
                    f"{self.dir / 'undo' / entry.rel}: its bytes cannot be proven to be {entry.rel} as it was; "
                    f"nothing was touched: check {self.root / entry.rel}, then move {self.dir} aside"
                )
            restores.append((entry.rel, *found))
        for entry in journal.files:
            self.tree.remove_temps(entry.rel)
        for rel, data, what in restores:
            self.tree.write(rel, data)
            self.tree.drop_bytecode(rel)
            notes.append(f"{rel}: rolled back an interrupted {journal.op}: wrote {what}")
        records = self.records()
        for entry in journal.files:
            rel = entry.rel
            previous = journal.previous.get(rel)
            if previous is not None:
                records[rel] = previous
            else:
                records.pop(rel, None)
                if entry.before is not None and rel not in records:
                    self._drop_backup(rel)
        self._save_or_clear(records)
        return notes

    def finish(self, journal: Journal) -> None:
        """The transaction is over in this root: drop the backups of files that went back to upstream, the
        undo copies and the journal (and the folder, when it holds nothing else)."""
        records = self.records()
        for entry in journal.files:
            if entry.rel not in records:
                self._drop_backup(entry.rel)
        self._save_or_clear(records)
        self.sweep_temps()
        self._drop_journal()

    def _save_or_clear(self, records: dict[str, Record]) -> None:
        if records:
            self._save_records(records)
        else:
            self.tree.unlink(f"{STATE_DIR}/state.json")

    def _drop_journal(self) -> None:
        self.tree.remove_tree(f"{STATE_DIR}/undo")
        self.tree.unlink(f"{STATE_DIR}/journal.json")
        self._drop_if_empty()

    def _drop_if_empty(self) -> None:
        names = set(self.tree.listdir(STATE_DIR))
        if names - {".gitignore", "backup"}:
            return
        if "backup" in names and self.tree.listdir(f"{STATE_DIR}/backup"):
            return
        try:
            self.tree.remove_tree(STATE_DIR)
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            # a mount point: what it held is gone and the empty folder stays, which is nothing to recover

    def mark_committed(self, txid: str, roots: list[Path]) -> None:
        """Write the commit marker of ``txid`` (this root is the first of the transaction's ``roots``)."""
        data = {"schema": SCHEMA, "txid": txid, "roots": [str(r) for r in roots]}
        self.tree.write(f"{STATE_DIR}/commit.json", json.dumps(data).encode())

    def drop_marker(self) -> None:
        """Remove the commit marker (once every root of its transaction is seen without its journal)."""
        self.tree.unlink(f"{STATE_DIR}/commit.json")
        self._drop_if_empty()

    def needs_recovery(self) -> bool:
        """A killed command left something in the state folder: a journal, undo copies, a commit marker, a
        temp file, or a folder without records (one listing of the folder)."""
        self._check_dir()
        names = set(self.tree.listdir(STATE_DIR))
        return bool(names - {"state.json", ".gitignore", "backup"}) or bool(names and "state.json" not in names)

    def tidy(self) -> None:
        """Remove what a killed command can leave without a journal: undo copies of a transaction that never
        wrote its journal, and a commit marker whose transaction no root still journals."""
        if self.tree.kind(STATE_DIR) != "folder" or self.tree.exists(f"{STATE_DIR}/journal.json"):
            return
        self.sweep_temps()
        self.tree.remove_tree(f"{STATE_DIR}/undo")
        try:
            marker = self.marker()
        except RefusedError:
            marker = None  # an unreadable marker is left as it is: it decides nothing here
        if marker is not None and not any(_journals(Store(r), marker[0]) for r in marker[1] if r != self.root):
            self.tree.unlink(f"{STATE_DIR}/commit.json")
        self._drop_if_empty()


def has_journal(root: Path) -> bool:
    """An interrupted transaction left its journal in ``root``."""
    return Tree(root).exists(f"{STATE_DIR}/journal.json")


@contextlib.contextmanager
def reading(roots: list[Path], restore: Restore, on_wait: OnWait | None = None) -> Iterator[list[str]]:
    """Hold every root's lock while a command reads them (an apply in progress is never seen half-way), after
    finishing what a killed command left; yields what that recovery did."""
    with locked(roots, on_wait):
        yield _recovered(roots, restore)[1]


def _recovered(roots: list[Path], restore: Restore) -> tuple[list[Store], list[str]]:
    """Each root's store, after finishing what a killed command left there; and what those recoveries did."""
    stores, notes = [], []
    for root in roots:
        store = Store(root)
        if store.needs_recovery():
            notes += _recover_root(store, restore)
        stores.append(store)
    for store in stores:  # a first root keeps its journal until the others are rolled back: they may be now
        if has_journal(store.root):
            notes += [n for n in _recover_root(store, restore) if n not in notes]
    return stores, notes


def _journals(store: Store, txid: str) -> bool:
    """``store``'s root may still journal transaction ``txid``: anything but seeing it without that journal (a
    root not mounted, unreadable or refused keeps the marker, else it would roll back later)."""
    try:
        os.stat(store.root)
        journal = store.journal()
    except (RefusedError, OSError):
        return True
    return journal is not None and journal.txid == txid


def _recover_root(store: Store, restore: Restore) -> list[str]:
    journal = store.journal()
    if journal is None:
        store.tidy()
        return []
    first = Store(journal.roots[0]) if journal.roots else store
    if journal.txid and first.committed(journal, store.journal_file):
        store.finish(journal)
        store.tidy()
        if first.root != store.root:
            with contextlib.suppress(RefusedError, OSError):
                first.tidy()
        return []
    try:
        return _roll_back_root(store, journal, restore)
    except OSError as e:
        raise WriteError(
            f"rolling back an interrupted {journal.op} in {store.root} failed: {e.strerror or e}; "
            "its journal is kept: the next ascendfix command finishes the rollback"
        ) from None


def _roll_back_root(store: Store, journal: Journal, restore: Restore) -> list[str]:
    """Roll ``store`` back and drop its journal, except in the first root of a transaction while another of its
    roots may still journal it: so that while any root journals a transaction, its first root holds that
    transaction's journal or marker, and a first root holding neither is never taken for "not committed"."""
    notes = store.roll_back(journal, restore)
    store.sweep_temps()
    others = [Store(r) for r in journal.roots[1:] if r != store.root]
    if not (journal.roots and journal.roots[0] == store.root and any(_journals(o, journal.txid) for o in others)):
        store._drop_journal()
    return notes


class Transaction:
    """The writes of one journaled operation on one root (made by :meth:`Store.begin`)."""

    def __init__(self, store: Store, op: str, records: dict[str, Record]):
        self.store, self.op = store, op
        self.records = dict(records)
        self.current: str | None = None

    def write(self, planned: PlannedWrite) -> None:
        """Back up the original (apply), write the file atomically (if it is still what was planned on), drop
        its bytecode, note its record."""
        self.current = planned.rel
        if planned.original is not None:
            self.store._save_backup(planned.rel, planned.original)
        if planned.data is not None:
            self.store.tree.write(planned.rel, planned.data, check=lambda: self._unchanged(planned))
            self.store.tree.drop_bytecode(planned.rel)
        if planned.record is None:
            self.records.pop(planned.rel, None)
        else:
            self.records[planned.rel] = planned.record
        self.current = None

    def _unchanged(self, planned: PlannedWrite) -> None:
        if planned.expected_sha256 is None:
            return
        now = self.store.read(planned.rel)
        if now is None or digest(now) != planned.expected_sha256:
            raise Changed(f"{self.store.root / planned.rel} changed while ascendfix was planning")

    def save(self) -> None:
        """Save the records (the journal stays: a failure after this still rolls back)."""
        self.current = f"{STATE_DIR}/state.json"
        self.store._save_or_clear(self.records)
        self.current = None

    def failure(self, error: OSError) -> str:
        """The one line that says which file failed and why."""
        where = self.store.root / self.current if self.current else self.store.dir
        return f"{self.op} failed writing {where}: {error.strerror or error}; rolled back, nothing was changed"


class Session:
    """The roots of one command, locked, recovered and swept: plan inside it, then :meth:`write`."""

    def __init__(self, restore: Restore):
        self.restore = restore

    def write(self, op: str, writes: dict[Path, list[PlannedWrite]]) -> None:
        """Write ``writes`` (planned writes by package root) in one transaction across the roots."""
        plans = {root: planned for root, planned in sorted(writes.items()) if planned}
        for root, planned in plans.items():
            rels = [w.rel for w in planned]
            twice = next((rel for rel in rels if rels.count(rel) > 1), None)
            if twice is not None:
                raise RefusedError(f"{op} refused: {root / twice} is planned twice in one transaction; nothing changed")
        if plans:
            _transaction(op, plans, self.restore)


@contextlib.contextmanager
def session(
    roots: list[Path], files: dict[Path, list[str]], restore: Restore, on_wait: OnWait | None = None
) -> Iterator[Session]:
    """Hold every root's lock for a command that may write: finish what a killed command left, remove
    the temp files beside ``files`` (relative paths by root) and inside each state folder, then yield."""
    with locked(roots, on_wait):
        for store in _recovered(roots, restore)[0]:
            _refuse_if_kept(store)
            for rel in files.get(store.root, []):
                store.tree.remove_temps(rel)
            store.sweep_temps()
        yield Session(restore)


def _refuse_if_kept(store: Store) -> None:
    """A root that keeps an interrupted transaction's journal or commit marker until its other roots are seen is
    not written: a new transaction would overwrite what decides the old one."""
    journal = store.journal()
    kept = (journal.txid, journal.roots, "journal") if journal else (*(store.marker() or ("", [])), "commit marker")
    txid, roots, what = kept
    unseen = [str(r) for r in roots if r != store.root and _journals(Store(r), txid)] if txid else []
    if unseen:
        raise Unseen(
            f"{store.dir}: keeps the {what} of an interrupted transaction until ascendfix sees {', '.join(unseen)}; "
            "nothing was written: mount it and run ascendfix again"
        )


def _transaction(op: str, plans: dict[Path, list[PlannedWrite]], restore: Restore) -> None:
    """Write ``plans`` all or nothing across roots, under kill -9 at any instruction.

    Every root is journaled (undo copies, then the journal) before anything is written; then the
    files and records; then the commit marker in the first root, the one commit point; then each
    root's journal is dropped, the first root's last, and the marker after it. Recovery reads the
    marker: present, every root is finished forward; absent, every root is rolled back. Any
    exception before the marker rolls every root back here; an OSError becomes one
    :class:`WriteError` line naming the file and the reason.
    """
    roots = list(plans)
    txid = os.urandom(8).hex()  # secrets.token_hex(8), without importing secrets (random, hmac, base64)
    opened: dict[Path, Transaction] = {}
    try:
        for root in roots:
            opened[root] = Store(root).begin(op, plans[root], txid, roots)
        for root, tx in opened.items():
            for planned in plans[root]:
                tx.write(planned)
        for tx in opened.values():
            tx.save()
        first = opened[roots[0]]
        first.current = f"{STATE_DIR}/commit.json"
        first.store.mark_committed(txid, roots)
    except BaseException as e:
        failed = next((tx for tx in opened.values() if tx.current is not None), None)
        _roll_back_all(op, opened, restore, e, failed)
        raise
    try:
        for root in reversed(roots):
            journal = opened[root].store.journal()
            if journal is not None:
                opened[root].store.finish(journal)
        opened[roots[0]].store.drop_marker()
    except OSError as e:
        raise WriteError(
            f"{op} is done, but cleaning up its journal failed: {e.strerror or e}; the next ascendfix command "
            "finishes it"
        ) from None


def _roll_back_all(
    op: str, opened: dict[Path, Transaction], restore: Restore, error: BaseException, failed: Transaction | None
) -> None:
    """Roll every opened root back after ``error``; raise the one line that says what happened."""
    stuck = None
    for tx in reversed(opened.values()):  # the first root last: see _roll_back_root
        try:
            journal = tx.store.journal()
            if journal is not None:
                _roll_back_root(tx.store, journal, restore)
        except (OSError, RefusedError) as e:
            stuck = stuck or e
    if stuck is not None:
        why = getattr(error, "strerror", None) or error
        raise WriteError(
            f"{op} failed ({why}) and its rollback could not finish ({getattr(stuck, 'strerror', None) or stuck}); "
            "the journal is kept: the next ascendfix command finishes the rollback"
        ) from None
    if isinstance(error, Changed):
        raise WriteError(f"{op} refused: {error}; rolled back, nothing was changed: run it again") from None
    if isinstance(error, Escape):
        raise RefusedError(f"{op} refused: {error}; rolled back, nothing was changed") from None
    if isinstance(error, OSError):
        raise WriteError(failed.failure(error) if failed else f"{op} failed: {error}") from None
