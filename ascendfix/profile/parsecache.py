"""Parsed TOML kept in the user's cache under the file's sha256, so the same bytes are parsed once.

Only the parse is kept, never a validation: a profile is validated on every load, and the
file's bytes are read every time, so an edited file has another digest and is parsed anew;
nothing here can be stale. Entries are JSON (a damaged one is simply parsed again), one per
digest, under ``$XDG_CACHE_HOME/ascendfix/toml`` (default ~/.cache). The folder may be
deleted at any time; where it cannot be written, files are parsed every time.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascendfix.fsutil import sha256_bytes
from ascendfix.resources import cache_dir


def parsed(data: bytes, parse: Callable[[bytes], dict[str, Any]]) -> dict[str, Any]:
    """``parse(data)``, from the cache when these bytes were parsed before."""
    digest = sha256_bytes(data)
    entry = cache_dir() / "toml" / f"{digest}.json"
    try:
        cached = json.loads(entry.read_bytes())
        if cached["sha256"] == digest:
            return cached["data"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    result = parse(data)
    _store(entry, {"sha256": digest, "data": result})
    return result


def _store(entry: Path, value: dict[str, Any]) -> None:
    """Write one entry (a private temp file renamed into place); give up quietly on any failure."""
    try:
        text = json.dumps(value, allow_nan=False)  # TOML dates and times, inf and nan: not kept
    except (TypeError, ValueError):
        return
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, entry)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
