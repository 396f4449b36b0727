"""What one command acts on: the profile on one device, in one interpreter, with ``--root``/``--variant``
and the environment (:class:`Site`); and where a package's files are there, without importing it.

Every command builds its ``Site`` once and hands it down (the patch engine, doctor's checks,
``run``'s preflight), so the facts it holds are found once: the target interpreter's probe, the
package roots, the job's resolved environment.

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
import threading
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from ascendfix import resources
from ascendfix.errors import UsageError
from ascendfix.profile.records import Profile
from ascendfix.tuples import NamedTuple

if TYPE_CHECKING:  # jobenv is imported where a job's environment is made (status and apply make none)
    from ascendfix.profile.jobenv import EnvSetting

REPORTED_ONLY = ("ray",)  # distributions doctor reports when installed; the guide pins no version
_MAX_MARKED_BYTES = 1 << 20  # what a marker test reads of a module's file

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
    """Where one package's files live, and how that was decided (``how``, for messages)."""

    package: str
    root: Path | None
    how: str
    is_checkout: bool = False
    given: bool = False  # the folder is a --root the user gave


def is_checkout(root: Path) -> bool:
    """A source checkout (git tree or project folder), not a site-packages directory."""
    return any((root / marker).exists() for marker in (".git", "pyproject.toml", "setup.py"))


def _same_interpreter(python: str) -> bool:
    """Whether ``python`` is the running interpreter. A venv's python links to its base
    interpreter, so the paths are compared as given, not resolved."""
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def probe(
    python: str | None, packages: Iterable[str], distributions: Iterable[str] = (), everything: bool = False
) -> Probe:
    """Run the probe in ``python`` (None: this interpreter); raise UsageError if it cannot run.

    With ``everything``, the answer also has ``markers`` (the PEP 508 marker environment)
    and ``installed`` (name, version and Requires-Dist of every installed distribution).
    """
    if python is None or _same_interpreter(python):
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
    """``--root PKG=DIR`` values as a dict; bad forms, missing folders and a package given two folders are
    UsageErrors."""
    roots: dict[str, Path] = {}
    for value in values:
        package, sep, folder = value.partition("=")
        if not sep or not package or not folder:
            raise UsageError(f"--root {value!r}: expected PKG=DIR, e.g. --root verl=/src/verl")
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise UsageError(f"--root {value!r}: {folder} is not a directory")
        if package in roots and roots[package] != path.resolve():
            raise UsageError(
                f"--root {package}= given twice ({roots[package]} and {folder}): give each package one folder"
            )
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


def targets_from_probe(
    found: Probe | None, packages: Iterable[str], roots: Mapping[str, Path] | None = None
) -> dict[str, Target]:
    """Each package's Target: ``--root`` first, else from an answer of :func:`probe` that looked for it."""
    roots = roots or {}
    targets = {name: Target(name, path, "--root", is_checkout(path), given=True) for name, path in roots.items()}
    where = found.python if found else None
    for name in packages:
        if name in targets:
            continue
        info = (found.packages.get(name) if found else None) or {}
        locations = info.get("locations") or []
        if locations:
            root = located_root(locations[0])
            kind = "checkout" if is_checkout(root) else "site-packages"
            targets[name] = Target(name, root, f"{kind} of {where}", kind == "checkout")
        else:
            targets[name] = Target(name, None, f"not installed in {where} (pass --root {name}=DIR)")
    return targets


class Site:
    """The profile on one device, in one interpreter, with the ``--root`` folders, the ``--variant``
    choices and the environment the job runs in (``environ``; the process's own by default).

    Each fact is found on first use and kept: the target interpreter's probe (another interpreter
    starts once, asked everything any check needs), where each package lives, the job's resolved
    environment. Doctor's checks ask from several threads at once.
    """

    def __init__(
        self,
        profile: Profile,
        device: str | None = None,
        python: str | None = None,
        roots: Mapping[str, Path] | None = None,
        variants: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
    ):
        if device is not None:
            profile.device(device)  # a UsageError naming the profile's devices
        self.profile, self.device, self.python = profile, device, python
        self.roots: dict[str, Path] = dict(roots or {})
        self.variants: dict[str, str] = dict(variants or {})
        self.environ: Mapping[str, str] = dict(os.environ) if environ is None else environ
        self._probe: Probe | None = None
        self._everything = False
        self._probe_error: Exception | None = None
        self._lock = threading.Lock()

    @cached_property
    def packages(self) -> list[str]:
        """The top-level packages anything asks about: those the patches edit, mindspeed and the rules' modules."""
        from ascendfix.profile.rules import modules

        patched = {p.package for p in self.profile.patches.values()}
        return sorted(patched | {"mindspeed"} | set(modules(self.profile.rules)))

    @cached_property
    def distributions(self) -> list[str]:
        """The distributions doctor reads: the profile's pinned ones and those it reports (ray)."""
        return [c.distribution for c in self.profile.components if c.distribution] + list(REPORTED_ONLY)

    def probe(self, everything: bool = False) -> Probe:
        """The target interpreter's answer about :attr:`packages` (with ``everything``: the
        distributions, markers and every installed distribution too); probed once and shared.

        Another interpreter is always asked everything, so it starts once whatever asks next; the one
        ascendfix runs in answers in-process, and only what was asked. An interpreter that cannot
        answer raises the same error to everyone who asks.
        """
        with self._lock:
            if self._probe_error is not None:
                raise self._probe_error
            if self._probe is None or (everything and not self._everything):
                full = everything or (self.python is not None and not _same_interpreter(self.python))
                dists = self.distributions if full else []
                try:
                    self._probe = probe(self.python, self.packages, dists, everything=full)
                except Exception as e:  # every asker gets the same error, probed once
                    self._probe_error = e
                    raise
                self._everything = full
            return self._probe

    @property
    def probe_error(self) -> Exception | None:
        """Why the target interpreter could not be probed (None: not probed, or it answered)."""
        return self._probe_error

    def locate(self, packages: Iterable[str] | None = None) -> dict[str, Target]:
        """Where each of ``packages`` (default: all of :attr:`packages`) lives: its ``--root``, else where
        the target interpreter finds it (probed only when a package has no ``--root``)."""
        names = self.packages if packages is None else sorted(packages)
        wanted = [name for name in names if name not in self.roots]
        ours = [name for name in names if name in self.packages]
        found = targets_from_probe(self.probe() if set(ours) - set(self.roots) else None, ours, self.roots)
        extra = [name for name in wanted if name not in self.packages]  # beyond the site's packages: probed apart
        if extra:
            found.update(targets_from_probe(probe(self.python, extra), extra))
        return {name: found[name] for name in names}

    @cached_property
    def targets(self) -> dict[str, Target]:
        """Where every package of :attr:`packages` lives."""
        return self.locate()

    def package_root(self, package: str) -> Path | None:
        """The directory holding ``package``, or None when it is not found."""
        target = self.targets.get(package)
        return target.root if target else None

    def importable(self, names: Iterable[str]) -> dict[str, bool]:
        """Whether the target interpreter finds each module (located, never imported)."""
        return {name: target.root is not None for name, target in self.locate(names).items()}

    def markers(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bool | None]:
        """Whether each ``(module, marker)``'s file has the marker (:data:`~ascendfix.profile.rules.MARKERS`);
        None when the file cannot be read."""
        pairs = list(pairs)
        found = self.locate({module for module, _ in pairs})
        return {(module, name): _has_marker(found[module].root, module, name) for module, name in pairs}

    @cached_property
    def settings(self) -> list[EnvSetting]:
        """The profile's variables for the device, resolved against :attr:`environ` (yours win)."""
        from ascendfix.profile.jobenv import resolve_env

        if self.device is None:
            raise UsageError("no device: pass --device npu or --device cuda")
        return resolve_env(self.profile, self.device, self.environ)

    @cached_property
    def job_env(self) -> dict[str, str]:
        """The environment the job runs in: :attr:`environ` with :attr:`settings` added."""
        from ascendfix.profile.jobenv import job_environment

        return job_environment(self.settings, self.environ)

    @property
    def profile_ref(self) -> str:
        """How commands name this profile: its bundled name, else its manifest's path."""
        bundled = resources.data_dir("manifests") / f"{self.profile.name}.toml"
        return self.profile.name if self.profile.source == bundled else str(self.profile.source)

    def command(self, verb: str, profile: str | None = None) -> str:
        """The ascendfix command ``verb`` for this profile (or the one named), device, interpreter and roots."""
        words = ["ascendfix", verb, "--profile", profile or self.profile_ref]
        if verb != "revert" and self.device is not None:  # revert takes back every device's patches
            words += ["--device", self.device]
        if self.python:
            words += ["--python", self.python]
        for package, folder in self.roots.items():
            words += ["--root", f"{package}={folder}"]
        import shlex

        return shlex.join(words)


def _has_marker(root: Path | None, module: str, name: str) -> bool | None:
    """Whether the module's file (under the folder holding the package) has the marker; None when unreadable."""
    from ascendfix.profile.rules import MARKERS

    if root is None:
        return None
    marker = MARKERS[name]
    path = root / module / marker.file
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb") as f:
            return marker.test(f.read(_MAX_MARKED_BYTES))
    except OSError:
        return None


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
