"""Where ascendfix's files live: the bundled data (manifests/, patches/) and the user's cache."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The bundled ``manifests``, ``patches`` or ``mappings`` folder: in a wheel, or beside the package."""
    installed = _PACKAGE / "_data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name


def cache_dir() -> Path:
    """What ascendfix keeps (fetched wheels, parsed TOML): ``$XDG_CACHE_HOME/ascendfix`` (default ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ascendfix"
