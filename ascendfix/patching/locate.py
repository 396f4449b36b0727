"""Where a package's files are, in the target interpreter, without importing the package.

Importing torch or torch_npu to find them can fail on a half-set-up Ascend box (CANN
libraries, backend autoload), so nothing here imports a target package: the target
interpreter runs a small probe that uses ``importlib.util.find_spec`` (which only
locates a top-level package) and ``importlib.metadata``. The probe runs in-process
when the target is the interpreter ascendfix itself runs in.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

from ascendfix.errors import UsageError

PROBE = r"""
import importlib.metadata, importlib.util, json, sys

def marker_environment():
    import os, platform
    impl = sys.implementation
    version = "%d.%d.%d" % impl.version[:3]
    if impl.version.releaselevel != "final":
        version += impl.version.releaselevel[0] + str(impl.version.serial)
    return {
        "implementation_name": impl.name, "implementation_version": version, "os_name": os.name,
        "platform_machine": platform.machine(), "platform_release": platform.release(),
        "platform_system": platform.system(), "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "platform_python_implementation": platform.python_implementation(), "sys_platform": sys.platform,
    }

def installed():
    found = {}
    for dist in importlib.metadata.distributions():
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        fields = {"Name": None, "Version": None}
        requires = []
        for line in text.split("\n\n", 1)[0].splitlines():
            key, _, value = line.partition(": ")
            if key in fields and fields[key] is None:
                fields[key] = value.strip()
            elif key == "Requires-Dist":
                requires.append(value.strip())
        if not requires and dist.read_text("requires.txt"):
            requires = list(dist.requires or [])
        if fields["Name"] and fields["Name"].lower() not in found:
            found[fields["Name"].lower()] = {"name": fields["Name"], "version": fields["Version"], "requires": requires}
    return list(found.values())

def probe(packages, distributions, everything=False):
    out = {"python": sys.executable, "version": list(sys.version_info[:3]), "packages": {}, "distributions": {}}
    if everything:
        out["markers"] = marker_environment()
        out["installed"] = installed()
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec else []
        origin = spec.origin if spec and spec.origin not in (None, "namespace") else None
        out["packages"][name] = {"locations": locations, "origin": origin}
    for name in distributions:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            out["distributions"][name] = None
            continue
        direct_url = dist.read_text("direct_url.json")
        out["distributions"][name] = {
            "version": dist.version,
            "direct_url": json.loads(direct_url) if direct_url else None,
            "metadata_dir": str(getattr(dist, "_path", "")) or None,
        }
    return out

if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    print(json.dumps(probe(request["packages"], request["distributions"], request["everything"])))
"""


class Distribution(NamedTuple):
    """One installed distribution the probe was asked about (importlib.metadata)."""

    version: str
    direct_url: dict | None  # PEP 610 direct_url.json, when pip wrote one
    metadata_dir: str | None  # the .dist-info folder (its RECORD lists the installed files)


class Installed(NamedTuple):
    """Any installed distribution: name, version and its Requires-Dist lines (for ``pip check``'s job)."""

    name: str
    version: str
    requires: tuple[str, ...]


class Probe(NamedTuple):
    """The target interpreter's answer: itself, where packages are, and what is installed."""

    python: str
    version: tuple[int, ...]
    packages: dict[str, dict]  # top-level package -> {"locations": [...], "origin": ...} (find_spec)
    distributions: dict[str, Distribution | None]
    markers: dict[str, str]  # the PEP 508 marker environment ("everything" only)
    installed: tuple[Installed, ...]  # every installed distribution ("everything" only)

    @classmethod
    def from_json(cls, data: dict) -> Probe:
        """The probe's JSON answer as a Probe."""
        dists = {n: Distribution(**d) if d else None for n, d in data["distributions"].items()}
        installed = tuple(Installed(d["name"], d["version"], tuple(d["requires"])) for d in data.get("installed", ()))
        return cls(data["python"], tuple(data["version"]), data["packages"], dists, data.get("markers", {}), installed)


class Target(NamedTuple):
    """Where one package's files live, and how that was decided."""

    package: str
    root: Path | None
    how: str
    is_checkout: bool = False


def is_checkout(root: Path) -> bool:
    """A source checkout (git tree or project folder), not a site-packages directory."""
    return any((root / marker).exists() for marker in (".git", "pyproject.toml", "setup.py"))


def _same_interpreter(python: str | None) -> bool:
    """Whether ``python`` is the running interpreter. A venv's python links to its base
    interpreter, so the paths are compared as given, not resolved."""
    return python is None or os.path.abspath(python) == os.path.abspath(sys.executable)


def probe(python: str | None, packages: list[str], distributions: list[str] = (), everything: bool = False) -> Probe:
    """Run the probe in ``python`` (None: this interpreter); raise UsageError if it cannot run.

    With ``everything``, the answer also has ``markers`` (the PEP 508 marker environment)
    and ``installed`` (name, version and Requires-Dist of every installed distribution).
    """
    if _same_interpreter(python):
        namespace: dict = {}
        exec(compile(PROBE, "<ascendfix-probe>", "exec"), namespace)
        return Probe.from_json(namespace["probe"](list(packages), list(distributions), everything))
    import subprocess

    request = json.dumps({"packages": list(packages), "distributions": list(distributions), "everything": everything})
    try:
        result = subprocess.run(
            [python, "-c", PROBE, request], capture_output=True, text=True, timeout=60, env=_clean_env()
        )
    except FileNotFoundError:
        raise UsageError(f"--python {python}: no such interpreter") from None
    except PermissionError:
        raise UsageError(f"--python {python}: not executable") from None
    except OSError as e:  # e.g. ENOEXEC: an executable file that is no program (--python /etc/hostname)
        raise UsageError(f"--python {python}: not a Python interpreter ({e.strerror or e})") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"--python {python}: the interpreter did not answer within 60 s") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--python {python}: the interpreter failed to run the probe: {last}")
    try:
        return Probe.from_json(json.loads(result.stdout))
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"--python {python}: did not answer like a Python interpreter") from None


def _clean_env() -> dict[str, str]:
    """The environment for the target interpreter: ours, minus our own PYTHONPATH/PYTHONHOME."""
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"):
        env.pop(key, None)
    return env


def parse_roots(values: tuple[str, ...] | list[str]) -> dict[str, Path]:
    """``--root PKG=DIR`` values as a dict; bad forms and missing folders are UsageErrors."""
    roots: dict[str, Path] = {}
    for value in values:
        package, sep, folder = value.partition("=")
        if not sep or not package or not folder:
            raise UsageError(f"--root {value!r}: expected PKG=DIR, e.g. --root verl=/src/verl")
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise UsageError(f"--root {value!r}: {folder} is not a directory")
        roots[package] = path.resolve()
    return roots


def distinct_folders(folders: list[Path]) -> list[Path]:
    """``folders`` resolved, each distinct folder (by device and inode) once, in the order given: a venv reached
    through a symlinked prefix and a ``--root`` naming its real site-packages are one root."""
    seen: set[tuple[int, int]] = set()
    out = []
    for folder in folders:
        resolved = folder.resolve()
        info = os.stat(resolved)
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            out.append(resolved)
    return out


def located_root(location: str) -> Path:
    """The folder holding a package the probe found at ``location``, resolved (as ``--root`` is), so one folder
    has one name however the interpreter reached it."""
    return Path(location).parent.resolve()


def locate(packages: list[str], python: str | None = None, roots: dict[str, Path] | None = None) -> dict[str, Target]:
    """Find the directory holding each package: ``--root`` first, else the target interpreter."""
    roots = roots or {}
    wanted = [p for p in packages if p not in roots]
    return targets_from_probe(probe(python, wanted) if wanted else None, packages, roots)


def targets_from_probe(
    found: Probe | None, packages: list[str], roots: dict[str, Path] | None = None
) -> dict[str, Target]:
    """Each package's Target: ``--root`` first, else from an answer of :func:`probe` that looked for it."""
    roots = roots or {}
    targets = {name: Target(name, path, "--root", is_checkout(path)) for name, path in roots.items()}
    where = found.python if found else None
    for name in packages:
        if name in targets:
            continue
        info = found.packages.get(name) or {}
        locations = info.get("locations") or []
        if locations:
            root = located_root(locations[0])
            kind = "checkout" if is_checkout(root) else "site-packages"
            targets[name] = Target(name, root, f"{kind} of {where}", kind == "checkout")
        else:
            targets[name] = Target(name, None, f"not installed in {where} (pass --root {name}=DIR)")
    return targets


def reinstall_spec(package: str, root: Path | None) -> str:
    """``package==<version>`` as the dist-info in ``root`` records it, else the bare name."""
    version = installed_version(package, root) if root is not None else None
    return f"{package}=={version}" if version else package


def installed_version(package: str, root: Path) -> str | None:
    """The version of ``package`` that ``root`` (a site-packages folder) holds, from its dist-info folder's name."""
    import re

    wanted = re.sub(r"[-_.]+", "_", package).lower()
    try:
        folders = [p for p in root.iterdir() if p.name.endswith(".dist-info") and not p.is_symlink()]
    except OSError:
        return None
    for folder in sorted(folders):
        name, _, version = folder.name.removesuffix(".dist-info").partition("-")
        if re.sub(r"[-_.]+", "_", name).lower() == wanted and re.fullmatch(r"[0-9A-Za-z.+!_-]+", version):
            return version
    return None
