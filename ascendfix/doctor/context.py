"""Everything the checks need, gathered once: profile, device, target interpreter, host paths.

The probe of the target interpreter (versions, direct_url.json, requirements of every
installed distribution) runs once, lazily, for all checks together: in-process for the
interpreter ascendfix runs in, one subprocess for ``--python``. Nothing imports a package.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from ascendfix import resources
from ascendfix.patching import locate
from ascendfix.profile import device
from ascendfix.profile.manifest import Component, Profile

REPORTED_ONLY = ("ray",)  # reported when installed; the guide pins no version


def choose_device(profile: Profile, ascend_home: Path) -> tuple[str, str]:
    """The device to check against and why: the one detected, else the profile's primary device.

    On a machine with no accelerator doctor still reports (what is missing for the
    profile's first device) rather than refusing to run.
    """
    found = device.detect_device(ascend_home)
    if found in profile.devices:
        return found, f"detected {found}"
    first = next(iter(profile.devices))
    return first, f"no accelerator detected; checking for {first}, the profile's primary device (pass --device)"


class Context:
    """The inputs of every check. ``environ`` stands for the environment the job will run in; ``overrides``
    are the job's Hydra overrides (``run``'s preflight reads them from the script; doctor alone has none).

    The target interpreter is probed once, by the first check that asks, and shared by all.
    """

    def __init__(
        self,
        profile: Profile,
        device: str,
        device_reason: str = "",
        python: str | None = None,
        roots: dict[str, Path] | None = None,
        ascend_home: Path = device.ASCEND_HOME,
        os_release: Path = Path("/etc/os-release"),
        environ: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 20.0,
        overrides: Mapping[str, str] | None = None,
    ):
        self.profile, self.device, self.device_reason, self.python = profile, device, device_reason, python
        self.roots = dict(roots or {})
        self.ascend_home, self.os_release = ascend_home, os_release
        self.environ = dict(os.environ) if environ is None else environ
        self.cwd = Path.cwd() if cwd is None else cwd
        self.timeout = timeout
        self.overrides = dict(overrides or {})  # the job's Hydra overrides, when run's preflight knows them
        self._probe: locate.Probe | None = None
        self._probe_error: Exception | None = None
        self._from_roots: dict[str, tuple[locate.Distribution, str]] | None = None
        self._lock = threading.Lock()

    def components(self, kind: str | None = None) -> list[Component]:
        """The profile's components that apply to this device (optionally of one kind)."""
        return [c for c in self.profile.components if self.device in c.devices and (kind is None or c.kind == kind)]

    def packages(self) -> list[str]:
        """Top-level packages the checks locate: those the patches edit, mindspeed and the rules' modules (hazards)."""
        from ascendfix.profile.rules import modules

        patched = {p.package for p in self.profile.patches.values()}
        return sorted(patched | {"mindspeed"} | set(modules(self.profile.rules)))

    def probe(self) -> locate.Probe:
        """The target interpreter's answer (computed once, shared by all checks)."""
        with self._lock:
            if self._probe is None and self._probe_error is None:
                dists = [c.distribution for c in self.profile.components if c.distribution] + list(REPORTED_ONLY)
                try:
                    self._probe = locate.probe(self.python, self.packages(), dists, everything=True)
                except Exception as e:  # every check that needs it reports the same error, probed once
                    self._probe_error = e
            if self._probe_error is not None:
                raise self._probe_error
            return self._probe

    @property
    def probe_error(self) -> Exception | None:
        """Why the target interpreter could not be probed (None: not probed, or it answered)."""
        return self._probe_error

    def installed(self, distribution: str) -> locate.Distribution | None:
        """Version, direct_url and metadata_dir of one distribution, or None when not installed: from
        the ``.dist-info`` in a ``--root`` site-packages folder holding its package, else from the probe."""
        found = self.from_roots().get(canonicalize_name(distribution))
        return found[0] if found else self.probe().distributions.get(distribution)

    def from_roots(self) -> dict[str, tuple[locate.Distribution, str]]:
        """Distributions installed in a ``--root PKG=DIR`` that is a site-packages folder (not a checkout),
        by canonical name, with the ``--root`` they were read from; read once."""
        with self._lock:
            if self._from_roots is None:
                self._from_roots = {}
                pinned = {canonicalize_name(c.distribution) for c in self.profile.components if c.distribution}
                for package, folder in self.roots.items():
                    if locate.is_checkout(folder):
                        continue
                    for name, info in site_distributions(folder, package, pinned).items():
                        self._from_roots.setdefault(name, (info, f"--root {package}={folder}"))
            return self._from_roots

    def targets(self) -> dict[str, locate.Target]:
        """Where each located package lives (``--root`` first, else where the target finds it)."""
        return locate.targets_from_probe(self.probe(), self.packages(), self.roots)

    def package_root(self, package: str) -> Path | None:
        """The directory holding ``package``, or None when it is not found."""
        target = self.targets().get(package)
        return target.root if target else None

    def which(self, command: str) -> str | None:
        """``command`` on the job's PATH."""
        return shutil.which(command, path=self.environ.get("PATH", ""))

    @property
    def profile_ref(self) -> str:
        """How commands name this profile: its bundled name, else its manifest's path."""
        bundled = resources.data_dir("manifests") / f"{self.profile.name}.toml"
        return self.profile.name if self.profile.source == bundled else str(self.profile.source)

    def command(self, verb: str, profile: str | None = None) -> str:
        """The ascendfix command ``verb`` for this profile (or the one named) and device, interpreter and roots."""
        words = ["ascendfix", verb, "--profile", profile or self.profile_ref]
        words += [] if verb == "revert" else ["--device", self.device]  # revert takes back every device's patches
        if self.python:
            words += ["--python", self.python]
        for package, folder in self.roots.items():
            words += ["--root", f"{package}={folder}"]
        return shlex.join(words)

    @property
    def interpreter(self) -> str:
        """The target interpreter, as fix commands should name it."""
        return self.python or self.probe().python


def site_distributions(folder: Path, package: str, names: set[str]) -> dict[str, locate.Distribution]:
    """Those of the distributions ``names`` (canonical) whose ``.dist-info`` in ``folder`` installed top-level
    ``package`` (``top_level.txt`` names it, or ``RECORD`` lists a file under it), by canonical name."""
    found = {}
    for info in sorted(folder.glob("*.dist-info")):
        if canonicalize_name(info.name.partition("-")[0]) not in names:
            continue  # the folder's name starts with the distribution's: only the pinned ones are read
        fields = _metadata(info)
        if fields is None or not _installs(info, package):
            continue
        try:
            direct_url = json.loads((info / "direct_url.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            direct_url = None
        found[canonicalize_name(fields[0])] = locate.Distribution(fields[1], direct_url, str(info))
    return found


def _metadata(info: Path) -> tuple[str, str] | None:
    """Name and Version of a ``.dist-info``, from the headers of its METADATA."""
    try:
        headers = (info / "METADATA").read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0]
    except OSError:
        return None
    fields = {}
    for line in headers.splitlines():
        key, _, value = line.partition(": ")
        fields.setdefault(key, value.strip())
    return (fields["Name"], fields["Version"]) if fields.get("Name") and fields.get("Version") else None


def _installs(info: Path, package: str) -> bool:
    try:
        if package in (info / "top_level.txt").read_text(encoding="utf-8", errors="replace").split():
            return True
    except OSError:
        pass
    try:
        with open(info / "RECORD", encoding="utf-8", errors="replace") as record:
            return any(line.startswith(f"{package}/") for line in record)
    except OSError:
        return False


def editable_dir(info: locate.Distribution | None) -> Path | None:
    """The project folder of an editable or local-directory install (PEP 610 ``dir_info``)."""
    direct = (info.direct_url if info else None) or {}
    if "dir_info" not in direct or not direct.get("url", "").startswith("file:"):
        return None
    return Path(unquote(urlparse(direct["url"]).path))
