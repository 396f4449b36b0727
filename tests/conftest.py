"""Shared fixtures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests import upstream

# Every Ray node the tests start binds to loopback. `--node-ip-address 127.0.0.1` alone is not
# enough: Ray replaces a loopback address with the host's own (ray._private.services
# .resolve_ip_for_localhost) unless multi-host clusters are off, which Ray reads once, at import.
# The in-process ray.cluster_utils nodes and the commands the tests start inherit this;
# tests/test_ray_start.py turns it back on for its `ray start` nodes, which run in a network
# namespace that has nothing but loopback.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


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
