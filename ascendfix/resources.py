"""Where the bundled data (manifests/, patches/) lives, installed or in a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The bundled ``manifests`` or ``patches`` folder: inside a wheel, or beside the package in a checkout."""
    installed = _PACKAGE / "_data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name
