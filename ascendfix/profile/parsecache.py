"""Parsed TOML kept in the user's cache under the file's sha256, so the same bytes are parsed once.

Only the parse is kept, never a validation: a profile is validated on every load, and the
file's bytes are read every time, so an edited file has another digest and is parsed anew;
nothing here can be stale. Entries are JSON (a damaged one is simply parsed again), one per
digest, under ``$XDG_CACHE_HOME/ascendfix/toml`` (default ~/.cache). The folder may be
deleted at any time; where it cannot be written, files are parsed every time.

A parse decides what a patch writes, so an entry is used only when nobody but this user can
have written it: the folder must be a real folder (not a symlink) owned by this user and not
writable by group or others, and so must each entry be, a regular file opened without
following a symlink. Everything is reached through the checked folder's descriptor, so a
folder swapped in after the check is never read or written. Anything else is ignored (the
file is parsed), never repaired.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable
from typing import Any

from ascendfix.fsutil import is_private, open_private_folder, sha256_bytes
from ascendfix.resources import cache_dir

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def parsed(data: bytes, parse: Callable[[bytes], dict[str, Any]]) -> dict[str, Any]:
    """``parse(data)``, from the cache when these bytes were parsed before."""
    digest = sha256_bytes(data)
    name = f"{digest}.json"
    folder = open_private_folder(cache_dir() / "toml", create=False)
    if folder is not None:
        try:
            cached = json.loads(_read_entry(folder, name))
            if cached["sha256"] == digest and isinstance(cached["data"], dict):
                return cached["data"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            pass
        finally:
            os.close(folder)
    result = parse(data)
    _store(name, {"sha256": digest, "data": result})
    return result


def _read_entry(folder: int, name: str) -> bytes:
    """The bytes of entry ``name``: a private regular file of this user, not reached through a symlink."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not is_private(st):
            raise ValueError(f"{name}: not a private regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def _store(name: str, value: dict[str, Any]) -> None:
    """Write one entry (a private temp file renamed into place); give up quietly on any failure."""
    try:
        text = json.dumps(value, allow_nan=False)  # TOML dates and times, inf and nan: not kept
    except (TypeError, ValueError, RecursionError):
        return
    folder = open_private_folder(cache_dir() / "toml", create=True)
    if folder is None:
        return
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder)  # a leftover (or anything planted under this name) goes first
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=folder)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
    finally:
        os.close(folder)
