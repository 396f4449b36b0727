"""Small file-system primitives the engine needs: hashing, atomic writes, locks."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path

TEMP_SUFFIX = ".ascendfix-tmp"


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def temp_path(path: Path) -> Path:
    """Where ``write_atomic`` stages ``path``'s new bytes: a fixed name beside it, known before it exists."""
    return path.with_name(f".{path.name}{TEMP_SUFFIX}")


def leftover_temps(path: Path) -> list[Path]:
    """ascendfix's own temp files for ``path`` left by a killed write (this name, and older random ones)."""
    prefix = f".{path.name}"
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    return sorted(
        path.parent / n
        for n in names
        if n.startswith(prefix) and n.endswith(TEMP_SUFFIX) and _is_temp_tag(n[len(prefix) : -len(TEMP_SUFFIX)])
    )


def _is_temp_tag(tag: str) -> bool:
    """Nothing (today's fixed name), or the ``.xxxxxxxx`` random tag of older releases."""
    return tag == "" or (len(tag) == 9 and tag[0] == "." and all(c in _TAG_CHARS for c in tag[1:]))


_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def remove_tree(path: Path) -> None:
    """Remove a folder and everything under it, if it is there (shutil loads only when something is removed)."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def remove_temps(path: Path) -> list[Path]:
    """Remove the leftovers :func:`leftover_temps` finds; returns what was removed."""
    removed = []
    for tmp in leftover_temps(path):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically: temp file in the same folder, fsync, rename.

    ``mode`` (default: the existing file's, else 0o644) is set on the new file, so a
    reader sees either the whole old file or the whole new one, never a mix. The temp
    file has a fixed name (:func:`temp_path`), so whoever journals the write knows it
    before it exists; callers hold the folder's lock. A failed write removes it.
    """
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_bytecode(path: Path) -> list[Path]:
    """Remove the cached bytecode of the module ``path`` (pip compiles with timestamp checks; an
    unchecked-hash .pyc would keep running the old code). Returns what was removed."""
    cache = path.parent / "__pycache__"
    removed = []
    for pyc in cache.glob(f"{path.stem}.*.pyc") if cache.is_dir() else []:
        with contextlib.suppress(FileNotFoundError):
            pyc.unlink()
            removed.append(pyc)
    return removed


@contextlib.contextmanager
def locked(folders: list[Path]):
    """Hold an exclusive flock on each folder (sorted, so concurrent runs cannot deadlock).

    The lock is taken on the folder itself, so it leaves no file behind.
    """
    fds = []
    try:
        for folder in sorted(set(folders)):
            fd = os.open(folder, os.O_RDONLY)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
