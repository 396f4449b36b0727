"""Where ascendfix's files live: the bundled data (:data:`DATA_DIRS`) and the user's cache."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# The data folders beside the package in a checkout, under ``ascendfix/_data`` in a wheel (pyproject.toml's
# force-include, and the image's COPY lines, name each; a test holds them to this list).
DATA_DIRS = ("manifests", "patches", "mappings")


def data_dir(name: str) -> Path:
    """The bundled data folder ``name`` (one of :data:`DATA_DIRS`): in a wheel, or beside the package."""
    installed = _PACKAGE / "_data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name


def cache_dir() -> Path:
    """What ascendfix keeps (fetched wheels, parsed TOML): ``$XDG_CACHE_HOME/ascendfix`` (default ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ascendfix"
