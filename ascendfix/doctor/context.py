"""Everything the checks need, gathered once: profile, device, target interpreter, host paths.

The probe of the target interpreter (versions, direct_url.json, requirements of every
installed distribution) is the site's (:class:`~ascendfix.site.Site`): it runs once, lazily, for
all checks together, in-process for the interpreter ascendfix runs in, one subprocess for
``--python``. Nothing imports a package.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.utils import NormalizedName, canonicalize_name

from ascendfix.errors import UsageError
from ascendfix.profile import device
from ascendfix.profile.records import Component, Profile
from ascendfix.site import Distribution, Probe, Site, Target, is_checkout


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
    """The inputs of every check: the ``site`` (profile, device, interpreter, roots, and the
    environment the job will run in), the host's own paths, and ``overrides``: the job's Hydra overrides
    (``run``'s preflight reads them from the script; doctor alone has none).

    The target interpreter is probed once, by the first check that asks, and shared by all.
    """

    def __init__(
        self,
        site: Site,
        device_reason: str = "",
        ascend_home: Path = device.ASCEND_HOME,
        os_release: Path = Path("/etc/os-release"),
        cwd: Path | None = None,
        timeout: float = 20.0,
        overrides: Mapping[str, str] | None = None,
    ):
        if site.device is None:
            raise UsageError("doctor checks one device: pass --device npu or --device cuda")
        self.site, self.device_reason = site, device_reason
        self.profile, self.device, self.environ = site.profile, site.device, site.environ
        self.ascend_home, self.os_release = ascend_home, os_release
        self.cwd = Path.cwd() if cwd is None else cwd
        self.timeout = timeout
        self.overrides = dict(overrides or {})  # the job's Hydra overrides, when run's preflight knows them
        self._from_roots: dict[str, tuple[Distribution, str]] | None = None
        self._lock = threading.Lock()

    def components(self, kind: str | None = None) -> list[Component]:
        """The profile's components that apply to this device (optionally of one kind)."""
        return [c for c in self.profile.components if self.device in c.devices and (kind is None or c.kind == kind)]

    def probe(self) -> Probe:
        """The target interpreter's whole answer (probed once, shared by all checks)."""
        return self.site.probe(everything=True)

    def installed(self, distribution: str) -> Distribution | None:
        """Version, direct_url and metadata_dir of one distribution, or None when not installed: from
        the ``.dist-info`` in a ``--root`` site-packages folder holding its package, else from the probe."""
        found = self.from_roots().get(canonicalize_name(distribution))
        return found[0] if found else self.probe().distributions.get(distribution)

    def from_roots(self) -> dict[str, tuple[Distribution, str]]:
        """Distributions installed in a ``--root PKG=DIR`` that is a site-packages folder (not a checkout),
        by canonical name, with the ``--root`` they were read from; read once."""
        with self._lock:
            if self._from_roots is None:
                self._from_roots = {}
                pinned = {canonicalize_name(c.distribution) for c in self.profile.components if c.distribution}
                for package, folder in self.site.roots.items():
                    if is_checkout(folder):
                        continue
                    for name, info in site_distributions(folder, package, pinned).items():
                        self._from_roots.setdefault(name, (info, f"--root {package}={folder}"))
            return self._from_roots

    def targets(self) -> dict[str, Target]:
        """Where each located package lives (``--root`` first, else where the target finds it)."""
        self.probe()  # doctor reads the interpreter in any case: one whole probe, not a partial one first
        return self.site.targets

    def package_root(self, package: str) -> Path | None:
        """The directory holding ``package``, or None when it is not found."""
        target = self.targets().get(package)
        return target.root if target else None

    def which(self, command: str) -> str | None:
        """``command`` on the job's PATH."""
        return shutil.which(command, path=self.environ.get("PATH", ""))

    @property
    def interpreter(self) -> str:
        """The target interpreter, as fix commands should name it."""
        return self.site.python or self.probe().python


def site_distributions(folder: Path, package: str, names: set[NormalizedName]) -> dict[str, Distribution]:
    """Those of the distributions ``names`` (canonical) whose ``.dist-info`` in ``folder`` installed top-level
    ``package`` (``top_level.txt`` names it, or ``RECORD`` lists a file under it), by canonical name."""
    found: dict[str, Distribution] = {}
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
        found[canonicalize_name(fields[0])] = Distribution(fields[1], direct_url, str(info))
    return found


def _metadata(info: Path) -> tuple[str, str] | None:
    """Name and Version of a ``.dist-info``, from the headers of its METADATA."""
    try:
        headers = (info / "METADATA").read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0]
    except OSError:
        return None
    fields: dict[str, str] = {}
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


def editable_dir(info: Distribution | None) -> Path | None:
    """The project folder of an editable or local-directory install (PEP 610 ``dir_info``)."""
    direct = (info.direct_url if info else None) or {}
    if "dir_info" not in direct or not direct.get("url", "").startswith("file:"):
        return None
    return Path(unquote(urlparse(direct["url"]).path))
