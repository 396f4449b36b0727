"""Small file-system primitives every wing may use: hashing, plain relative paths, private cache folders.

A private folder is this user's own and writable by nobody else, reached without following a
symbolic link; what it holds is still read as untrusted input. The package roots' state folders
have their own primitives, inside the patching wing (:mod:`ascendfix.patching.tree`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path

from ascendfix.errors import RefusedError

try:  # CPython's own sha256, for a command that hashes a few files: hashlib's import loads OpenSSL (3 ms)
    from _sha256 import sha256 as _own_sha256  # type: ignore[import-not-found]
except ImportError:  # a Python built without it (a FIPS build)
    _own_sha256 = None


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``: OpenSSL's (hashlib) where something loaded it already, else CPython's own."""
    if _own_sha256 is None or "hashlib" in sys.modules:
        import hashlib

        return hashlib.sha256(data).hexdigest()
    return str(_own_sha256(data).hexdigest())


class Escape(RefusedError):
    """A path that leaves its root, passes through a symbolic link, or is not what it must be (exit 1);
    ``fix``: what to do, where the refusal knows it."""

    def __init__(self, message: str, fix: str = ""):
        super().__init__(f"{message}: {fix}" if fix else message)
        self.problem, self.fix = message, fix


def check_rel(rel: object) -> str:
    """``rel`` when it is a plain relative path (``a/b.py``: no ``..``, no ``.``, not absolute, no NUL)."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel or rel.startswith("/"):
        raise Escape(f"{rel!r} is not a relative path")
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise Escape(f"{rel!r} is not a plain relative path (empty, '.' or '..' parts)")
    return rel


# --- private cache folders: this user's own, writable by nobody else, reached without a symlink ---------

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def is_private(st: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def open_private_folder(path: Path, create: bool, parts: tuple[str, ...] = ()) -> int | None:
    """A descriptor of ``path`` (then of each of ``parts`` below it, opened through its parent's descriptor) when
    every one is a private folder of this user (made 0700 when ``create``), else None."""
    if create:
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.mkdir(mode=0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError:
        return None
    for part in parts:
        if not is_private(os.fstat(fd)):
            break
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nfd
    if is_private(os.fstat(fd)):
        return fd
    os.close(fd)
    return None


def read_private(folder: int, name: str, limit: int | None = None) -> bytes:
    """The bytes of entry ``name`` of a private folder: a private regular file of this user, not reached through a
    symlink, of at most ``limit`` bytes (OSError or ValueError otherwise)."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not is_private(st):
            raise ValueError(f"{name}: not a private regular file")
        if limit is not None and st.st_size > limit:
            raise ValueError(f"{name}: over {limit} bytes")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def write_private(folder: int, name: str, data: bytes) -> None:
    """Write entry ``name`` of a private folder: a fresh 0600 temp file beside it, renamed into place (OSError)."""
    tmp = f".{name}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=folder)  # a leftover (or anything planted under this name) goes first
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise
