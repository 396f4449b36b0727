"""The package index side of upgrade-check: fetch a release's wheel, read a pinned release's requirements.

Both are kept in the user's cache (``wheels/`` and ``metadata/`` under ``$XDG_CACHE_HOME/ascendfix``) and
held to the parse cache's rules: a folder or entry is used only when it is a real folder or regular file of
this user's that nobody else can write, reached without following a symlink; entries are written to a
private temp file and renamed into place; an entry that cannot be read or parsed is a miss. A wheel is
downloaded into a fresh private folder, never into the cache itself, and is used from the cache only while
its sha256 is the one recorded when it was downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ascendfix.errors import AscendfixError, UsageError
from ascendfix.fsutil import is_private, open_private_folder, read_private, write_private
from ascendfix.resources import cache_dir

# The wheel platforms of each device: the newer manylinux tag, and the older one as fallback.
PLATFORMS = {
    "npu": ("manylinux_2_28_aarch64", "manylinux2014_aarch64"),
    "cuda": ("manylinux_2_28_x86_64", "manylinux2014_x86_64"),
}
_ARCHES = ("x86_64", "aarch64", "arm64", "universal2")


@dataclass(frozen=True)
class WheelTarget:
    """Where the candidate releases come from: wheel platform tags and the Python they are for."""

    platforms: tuple[str, ...]
    python: str

    @property
    def key(self) -> str:
        """A folder name for this target's cache."""
        return f"{'+'.join(self.platforms)}-py{self.python}"

    def markers(self) -> dict[str, str]:
        """The environment markers of a machine this target describes."""
        tag = self.platforms[0]
        arch = next((a for a in _ARCHES if tag.endswith(a)), tag.rsplit("_", 1)[-1])
        system = "Darwin" if tag.startswith("macosx") else "Windows" if tag.startswith("win") else "Linux"
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "platform_machine": arch,
            "platform_system": system,
            "sys_platform": {"Darwin": "darwin", "Windows": "win32"}.get(system, "linux"),
            "os_name": "nt" if system == "Windows" else "posix",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "extra": "",
        }


# --- fetching ---------------------------------------------------------------------------------


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        raise AscendfixError(f"pip did not answer within 30 minutes: {' '.join(cmd)}") from None


def _target_args(target: WheelTarget) -> list[str]:
    platforms = [arg for p in target.platforms for arg in ("--platform", p)]
    return ["--no-deps", "--only-binary=:all:", "--python-version", target.python, *platforms]


def _not_found(spec: str, target: WheelTarget, stderr: str) -> AscendfixError:
    """pip's failure as one line: a release that does not exist (or has no wheel here) is bad input."""
    from packaging.version import InvalidVersion, Version

    dist, _, version = spec.partition("==")
    offered = re.search(r"\(from versions: ([^)]*)\)", stderr)
    if offered:
        versions = [v.strip() for v in offered.group(1).split(",") if v.strip() and v.strip() != "none"]
        try:
            exists = any(Version(v) == Version(version) for v in versions)
        except InvalidVersion:
            exists = False
        if exists:
            return UsageError(
                f"{spec}: the release exists but has no wheel for {' or '.join(target.platforms)} "
                f"and Python {target.python} (pass --platform TAG)"
            )
        if not versions:
            return UsageError(
                f"{spec}: the package index has no wheel of {dist} for {' or '.join(target.platforms)} "
                f"and Python {target.python} (pass --platform TAG)"
            )
        return UsageError(f"{spec}: no such release of {dist} on the package index (newest: {versions[-1]})")
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
    return AscendfixError(f"cannot fetch {spec}: {lines[-1].strip() if lines else 'pip failed'}")


Tell = Callable[[str], None]
"""Told, before a slow step, what is being fetched (the command line says it on stderr)."""
_RECORD_LIMIT = 1 << 20


def _sha256_of(folder: int, name: str) -> str | None:
    """sha256 of the private regular file ``name`` in ``folder``, read in blocks; None when it is not one."""
    import hashlib

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or not is_private(st):
            return None
        digest = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_record(folder: int, name: str) -> object:
    """The JSON of a private cache entry, or None when it is absent, not private, truncated or not JSON."""
    try:
        return json.loads(read_private(folder, name, _RECORD_LIMIT))
    except (OSError, ValueError, RecursionError):
        return None


def _cached_wheel(folder: int, dist: str, version: str) -> str | None:
    """The file name of the wheel of ``dist==version`` in ``folder``, when its sha256 is still the one recorded when
    it was downloaded."""
    record = _read_record(folder, f"{dist}-{version}.json")
    if not isinstance(record, dict) or not isinstance(record.get("wheel"), str) or "/" in record["wheel"]:
        return None
    wheel = record["wheel"]
    return wheel if wheel.endswith(".whl") and _sha256_of(folder, wheel) == record.get("sha256") else None


def _wheel_named(names: list[str], dist: str, version: str) -> str | None:
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    for name in sorted(names):
        try:
            found, release, _build, _tags = parse_wheel_filename(name)
            if found == canonicalize_name(dist) and release == Version(version):
                return name
        except (InvalidWheelFilename, InvalidVersion):
            continue
    return None


def fetch(dist: str, version: str, target: WheelTarget, tell: Tell | None = None) -> Path:
    """The wheel of ``dist==version`` for ``target``: from the cache when its hash still matches, else downloaded
    with ``pip download --no-deps`` into a fresh private folder, hashed, and moved into the cache."""
    path = cache_dir() / "wheels"
    folder = open_private_folder(path, create=True, parts=(target.key,))
    if folder is None:
        raise AscendfixError(f"{path / target.key}: not a private folder of yours; move it aside and run again")
    try:
        wheel = _cached_wheel(folder, dist, version)
        if wheel is not None:
            return path / target.key / wheel
        spec = f"{dist}=={version}"
        if tell is not None:
            tell(f"fetching {spec} ({' or '.join(target.platforms)}, Python {target.python}) with pip download")
        with tempfile.TemporaryDirectory(prefix=".download-", dir=path / target.key) as scratch:
            result = _pip(["download", "-q", *_target_args(target), "-d", scratch, spec])
            wheel = _wheel_named(os.listdir(scratch), dist, version)
            if result.returncode != 0 or wheel is None:
                raise _not_found(spec, target, result.stderr)
            os.replace(Path(scratch) / wheel, wheel, dst_dir_fd=folder)
        record = {"wheel": wheel, "sha256": _sha256_of(folder, wheel)}
        write_private(folder, f"{dist}-{version}.json", json.dumps(record).encode())
        return path / target.key / wheel
    finally:
        os.close(folder)


def pinned_requires(dist: str, version: str, target: WheelTarget, tell: Tell | None = None) -> tuple[str, ...]:
    """Requires-Dist of a pinned release, from its metadata alone (``pip install --dry-run``; cached)."""
    folder = open_private_folder(cache_dir() / "metadata", create=True, parts=(target.key,))
    name = f"{dist}-{version}.json"
    try:
        cached = _read_record(folder, name) if folder is not None else None
        if isinstance(cached, list) and all(isinstance(r, str) for r in cached):
            return tuple(cached)
        spec = f"{dist}=={version}"
        if tell is not None:
            tell(f"reading {spec}'s requirements from the package index (pip install --dry-run)")
        with tempfile.TemporaryDirectory(prefix="ascendfix-") as scratch:
            report = Path(scratch) / "report.json"
            args = ["install", "-q", "--dry-run", "--ignore-installed", *_target_args(target)]
            result = _pip([*args, "--target", str(Path(scratch) / "t"), "--report", str(report), spec])
            if result.returncode != 0 or not report.is_file():
                raise _not_found(spec, target, result.stderr)
            (install,) = json.loads(report.read_text())["install"]
        requires = [str(r) for r in install["metadata"].get("requires_dist") or []]
        if folder is not None:
            with contextlib.suppress(OSError):
                write_private(folder, name, json.dumps(requires).encode())
        return tuple(requires)
    finally:
        if folder is not None:
            os.close(folder)
