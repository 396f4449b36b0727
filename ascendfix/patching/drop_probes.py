"""Drop probes: the checks of a patch's ``drop_when`` that upgrade-check runs on a candidate release.

A patch file names one (``drop_probe``, one of the profile's ``DROP_PROBES``); :data:`PROBES`
holds each one's function, given the patch, the release (its files, read in memory) and how the
patch's own variant fared on it (:func:`~ascendfix.patching.upgrade.judge`'s site verdict). A probe
that holds makes the patch ``obsolete`` on that release.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ascendfix.profile.records import Patch

NO_SITE = "no-site"  # a file where the variant finds no site; also the drop probe that looks for that
SCAN_PROBE = "sub-quadratic-scan"


class Release(Protocol):
    """What a probe reads of a candidate release."""

    @property
    def label(self) -> str: ...

    def read(self, rel: str) -> bytes | None: ...


def no_site(patch: Patch, release: Release, sites: str) -> tuple[bool, str]:
    """Holds when the patch's variant finds no site left in any of its files of ``release``."""
    if sites != NO_SITE:
        return False, ""
    return True, f"no site of {patch.id} is left in {release.label}: it has nothing to change (probe {NO_SITE})"


def sub_quadratic_scan(patch: Patch, release: Release, sites: str) -> tuple[bool, str]:
    """Holds when torch's own overlap check, in every file of the patch, grows slower than n²
    (:mod:`~ascendfix.patching.scan_probe`)."""
    from ascendfix.patching import scan_probe

    found = []
    for pfile in patch.files:
        code = release.read(pfile.path)
        if code is None:
            return False, f"probe {SCAN_PROBE}: {pfile.path} is missing"
        try:
            m = scan_probe.measure(pfile.path, code)
        except ValueError as e:
            return False, f"probe {SCAN_PROBE} could not run: {e}"
        kind = "sub-quadratic" if m.sub_quadratic else "still quadratic"
        found.append((m.sub_quadratic, f"{m.function}() is {kind}: {m.growth:.1f}x the work for 4x the chunks"))
    text = f"{release.label} on the expert layout: " + "; ".join(t for _, t in found) + f" (probe {SCAN_PROBE})"
    return all(holds for holds, _ in found), text


PROBES: dict[str, Callable[[Patch, Release, str], tuple[bool, str]]] = {
    NO_SITE: no_site,
    SCAN_PROBE: sub_quadratic_scan,
}
