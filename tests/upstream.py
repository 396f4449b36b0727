"""Real upstream files, downloaded from PyPI at test time into a cache outside the repo.

Nothing here is committed upstream code: wheels are fetched with ``pip download`` into
``$ASCENDFIX_TEST_CACHE`` (default ``~/.cache/ascendfix-tests``) and only the members a
test needs are extracted. Tests that need them are marked ``upstream`` and skip with the
reason when PyPI cannot be reached.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

VERL_VERSIONS = ["0.4.0", "0.4.1", "0.5.0", "0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1"]
TORCH_RELEASES = ["2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0", "2.9.1", "2.10.0", "2.11.0"]
TORCH_RELEASES += ["2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"]
# version: (platform, python version) -- every release from 2.5 to 2.14: the A2's own wheel for 2.7.1,
# else the small macOS arm64 one (the two checkpoint files are the same on every platform)
TORCH_WHEELS = {
    v: ("manylinux_2_28_aarch64", "3.10") if v == "2.7.1" else ("macosx_14_0_arm64", "3.11") for v in TORCH_RELEASES
}
# One release per distinct body of the two functions: the pairwise scans (typing.List, then list
# annotations, then 2.9's volume condition), 2.10's sort-and-sweep returning bool, >= 2.12's list[str].
EQUIVALENCE_VERSIONS = ["2.5.1", "2.7.1", "2.9.1", "2.10.0", "2.13.0"]
SHARD_INTERNALS = "torch/distributed/_shard/sharding_spec/_internals.py"
DEFAULT_PLANNER = "torch/distributed/checkpoint/default_planner.py"
# Where a hand edit goes in those two files: the end of the overlap check's docstring, the plan check's def line.
SHARDS_DOC_END = '        ``ValueError`` if there\'s overlap in any two shards.\n    """\n'
PLANNER_DEF = "def _validate_global_plan(global_plan: list[SavePlan], metadata: Metadata) -> bool:\n"


def cache_dir() -> Path:
    """The cache folder outside the repo."""
    path = Path(os.environ.get("ASCENDFIX_TEST_CACHE", Path.home() / ".cache" / "ascendfix-tests"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _download(spec: str, extra: list[str], sdist: bool = False) -> Path:
    wheels = cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    name, version = spec.split("==")
    pattern = f"{name}-{version}.tar.gz" if sdist else f"{name}-{version}-*.whl"
    with open(cache_dir() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test processes share the cache
        found = sorted(wheels.glob(pattern))
        if not found:
            binary = "--no-binary=:all:" if sdist else "--only-binary=:all:"
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", binary]
            result = subprocess.run(
                [*cmd, *extra, "-d", str(wheels), spec], capture_output=True, text=True, timeout=900
            )
            found = sorted(wheels.glob(pattern))
            if result.returncode != 0 or not found:
                pytest.skip(f"cannot download {spec} from PyPI: {result.stderr.strip()[-300:]}")
    return found[0]


def extract(wheel: Path, members: list[str] | None, dest_name: str) -> Path:
    """Unzip ``members`` (all .py files when None) of ``wheel`` once into the cache; return the folder."""
    dest = cache_dir() / "trees" / dest_name
    with open(cache_dir() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / ".complete").exists():
            shutil.rmtree(dest, ignore_errors=True)
            with zipfile.ZipFile(wheel) as zf:
                names = members if members is not None else [n for n in zf.namelist() if n.endswith(".py")]
                for name in names:
                    zf.extract(name, dest)
            (dest / ".complete").touch()
    return dest


def verl_tree(version: str) -> Path:
    """A folder holding ``verl/`` exactly as the PyPI wheel of ``version`` installs it (.py files)."""
    wheel = _download(f"verl=={version}", [])
    return extract(wheel, None, f"verl-{version}")


def torch_tree(version: str) -> Path:
    """A folder holding the two checkpoint-validation files of the torch ``version`` wheel."""
    platform, python = TORCH_WHEELS[version]
    wheel = _download(f"torch=={version}", ["--platform", platform, "--python-version", python])
    return extract(wheel, [SHARD_INTERNALS, DEFAULT_PLANNER], f"torch-{version}")


CHECKPOINT_FILES = [  # what a DCP .metadata pickle names: its classes, and the layout's reducer
    "torch/distributed/checkpoint/metadata.py",
    "torch/distributed/checkpoint/filesystem.py",
    "torch/distributed/checkpoint/planner.py",
    "torch/serialization.py",
]


def torch_checkpoint_tree(version: str) -> Path:
    """A folder holding the checkpoint metadata, filesystem, planner and serialization modules of torch ``version``."""
    platform, python = TORCH_WHEELS[version]
    wheel = _download(f"torch=={version}", ["--platform", platform, "--python-version", python])
    return extract(wheel, CHECKPOINT_FILES, f"torch-{version}-checkpoint")


def verl_wheel(version: str) -> Path:
    """The verl ``version`` wheel itself, as PyPI serves it."""
    return _download(f"verl=={version}", [])


def verl_checkout(version: str) -> Path:
    """verl's PyPI source distribution of ``version``, unpacked: a checkout's layout (setup.py, version
    file, verl/), without recipe/ (which only the git repository has)."""
    archive = _download(f"verl=={version}", [], sdist=True)
    dest = cache_dir() / "trees" / f"verl-{version}-sdist"
    with open(cache_dir() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / ".complete").exists():
            shutil.rmtree(dest, ignore_errors=True)
            with tarfile.open(archive) as tar:
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.10.12+ has filters
                tar.extractall(dest, **safe)
            (dest / ".complete").touch()
    return dest / f"verl-{version}"
