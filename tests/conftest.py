"""Shared fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import upstream


@pytest.fixture
def copy_tree(tmp_path):
    """Copy a cached upstream tree into this test's own folder (tests may write to it)."""

    def copy(src: Path, name: str = "root") -> Path:
        dest = tmp_path / name
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".complete"))
        return dest

    return copy


@pytest.fixture(scope="session")
def upstream_files():
    """The upstream helper module (downloads on first use)."""
    return upstream
