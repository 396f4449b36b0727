"""upgrade-check: judge a profile's patches and pins against candidate releases, installing nothing.

Each ``--with DIST==VERSION`` is fetched from the package index with ``pip download --no-deps``
into the user's cache folder (for the device's platform), or read from a local checkout
(``--with DIST=PATH``). The patch files are read out of the wheel (or the checkout) into memory
and run through the profile's chosen variant, exactly as ``apply`` would plan them; nothing is
written anywhere but the cache. The candidates' own requirements, and the requirements of the
profile's other pinned releases (their metadata only, through ``pip install --dry-run``), are
checked against the pins the upgraded stack would have.
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ascendfix.errors import AscendfixError, UsageError
from ascendfix.patching.drop_probes import NO_SITE, PROBES
from ascendfix.patching.evaluate import sites_state
from ascendfix.patching.index import PLATFORMS, Tell, WheelTarget, fetch, pinned_requires
from ascendfix.profile.records import Patch, Profile, Variant
from ascendfix.profile.schema import read_toml
from ascendfix.states import Name, State
from ascendfix.transforms.base import TransformError


class Judgement(Name):
    """A patch's verdict on a candidate release (``verdict`` in JSON)."""

    APPLIES = "applies"
    REFUSED = "refused"
    OBSOLETE = "obsolete"
    UNCHANGED = "unchanged"
    NOT_APPLICABLE = "not-applicable"  # a file that only a source checkout has, judged on a wheel


APPLIES, REFUSED, OBSOLETE, UNCHANGED, NOT_APPLICABLE = Judgement
PASSING = (APPLIES, OBSOLETE, UNCHANGED, NOT_APPLICABLE)
_WITH = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(==|=)\s*(\S.*?)\s*$")


def canonical(name: str) -> str:
    """A distribution name as the package index compares it (PEP 503)."""
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


@dataclass(frozen=True)
class Candidate:
    """One release being judged: a fetched wheel or a local checkout, with its metadata."""

    dist: str  # canonical name
    version: str | None  # from the wheel's METADATA or the checkout; None when a checkout does not say
    requires: tuple[str, ...] | None  # Requires-Dist; None when a checkout's are not static
    source: Path
    is_checkout: bool

    def read(self, rel: str) -> bytes | None:
        """The bytes of ``rel`` (package-relative) in this release, or None when it has no such file."""
        if self.is_checkout:
            path = self.source / rel
            return path.read_bytes() if path.is_file() else None
        with zipfile.ZipFile(self.source) as wheel:
            try:
                return wheel.read(rel)
            except KeyError:
                return None

    @property
    def label(self) -> str:
        """``dist version`` (or ``dist checkout PATH``), for messages."""
        if self.is_checkout:
            return f"{self.dist} checkout {self.source}" + (f" ({self.version})" if self.version else "")
        return f"{self.dist} {self.version}"


@dataclass(frozen=True)
class Verdict:
    """What upgrading does to one patch of the profile."""

    id: str
    verdict: str
    reason: str
    variant: str | None = None
    sites: int | None = None


@dataclass(frozen=True)
class Conflict:
    """A requirement of one release of the upgraded stack that another release's pin violates."""

    requirer: str  # dist==version
    requirement: str
    pinned: str  # dist==version


@dataclass(frozen=True)
class Accepted:
    """One of the profile's accepted conflicts, judged on the upgraded stack."""

    requirer: str
    requirement: str
    pinned: str
    needed: bool


@dataclass(frozen=True)
class UpgradeReport:
    """The whole judgement: verdicts per patch, conflicts, and the accepted conflicts it concerns."""

    profile: str
    device: str
    with_: dict[str, str]
    target: WheelTarget
    patches: tuple[Verdict, ...]
    conflicts: tuple[Conflict, ...]
    accepted: tuple[Accepted, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Every patch applies, is obsolete or unchanged (or needs a checkout), and nothing conflicts."""
        return all(v.verdict in PASSING for v in self.patches) and not self.conflicts

    def to_json(self) -> dict:
        """The JSON contract: profile, device, with, patches, conflicts; plus the accepted conflicts judged and
        notes (requirements that could not be read, so were not checked)."""
        return {
            "profile": self.profile,
            "device": self.device,
            "with": dict(self.with_),
            "patches": [
                {"id": v.id, "verdict": v.verdict, "reason": v.reason, "variant": v.variant, "sites": v.sites}
                for v in self.patches
            ],
            "conflicts": [
                {"requirer": c.requirer, "requirement": c.requirement, "pinned": c.pinned} for c in self.conflicts
            ],
            "accepted": [
                {"requirer": a.requirer, "requirement": a.requirement, "pinned": a.pinned, "needed": a.needed}
                for a in self.accepted
            ],
            "notes": list(self.notes),
        }


# --- input ------------------------------------------------------------------------------------


def _distributions(profile: Profile, device: str) -> dict[str, str]:
    """canonical distribution -> component name, for the components the device uses."""
    return {
        canonical(c.distribution): c.name
        for c in profile.components
        if c.distribution and c.kind in ("pypi", "git") and device in c.devices
    }


def parse_with(profile: Profile, device: str, values: tuple[str, ...] | list[str]) -> dict[str, str | Path]:
    """``--with DIST==VERSION`` / ``--with DIST=PATH`` values -> {canonical dist: version or checkout path}."""
    from packaging.version import InvalidVersion, Version

    profile.device(device)
    known = _distributions(profile, device)
    names = {canonical(name): dist for dist, name in known.items()}
    chosen: dict[str, str | Path] = {}
    if not values:
        raise UsageError("name at least one release: --with DIST==VERSION (or --with DIST=PATH for a checkout)")
    for value in values:
        match = _WITH.match(value)
        if not match:
            raise UsageError(f"--with {value!r}: expected DIST==VERSION, or DIST=PATH for a local checkout")
        name, op, what = match.groups()
        dist = names.get(canonical(name), canonical(name))
        if dist not in known:
            raise UsageError(
                f"--with {value!r}: {name} is not a component of {profile.name} on {device} "
                f"(its distributions: {', '.join(sorted(known))})"
            )
        if dist in chosen:
            raise UsageError(f"--with {value!r}: {dist} is named twice")
        if op == "==":
            try:
                Version(what)
            except InvalidVersion:
                raise UsageError(f"--with {value!r}: {what!r} is not a version") from None
            chosen[dist] = what
        else:
            path = Path(what).expanduser()
            if not path.is_dir():
                raise UsageError(f"--with {value!r}: {what} is not a folder (DIST=PATH names a local checkout)")
            chosen[dist] = path.resolve()
    return chosen


def target_for(profile: Profile, device: str, platform: str | None) -> WheelTarget:
    """The platforms (``--platform``, else the device's) and the profile's Python the releases must fit."""
    python = next((c.version for c in profile.components if c.kind == "python" and c.version), None)
    python = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    return WheelTarget((platform,) if platform else PLATFORMS[device], python)


def _metadata_fields(text: str) -> tuple[str | None, tuple[str, ...]]:
    """(Version, Requires-Dist) of a METADATA file."""
    version, requires = None, []
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        if key == "Version" and version is None:
            version = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    return version, tuple(requires)


def _wheel_candidate(dist: str, version: str, target: WheelTarget, tell: Tell | None) -> Candidate:
    wheel = fetch(dist, version, target, tell)
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        found, requires = _metadata_fields(zf.read(names[0]).decode("utf-8", "replace")) if names else (None, ())
    return Candidate(dist, found or version, requires, wheel, False)


def _checkout_candidate(dist: str, path: Path) -> Candidate:
    """A local checkout: its version and requirements where its build files state them statically."""
    version, requires = None, None
    pyproject = path / "pyproject.toml"
    data = read_toml(pyproject) if pyproject.is_file() else {}
    project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
    if isinstance(project.get("version"), str):
        version = project["version"]
    else:
        dynamic = data.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version", {})
        file = dynamic.get("file") if isinstance(dynamic, dict) else None
        if isinstance(file, str) and (path / file).is_file():
            version = (path / file).read_text(encoding="utf-8").strip() or None
    if isinstance(project.get("dependencies"), list) and "dependencies" not in project.get("dynamic", []):
        requires = tuple(project["dependencies"])
    elif (path / "setup.py").is_file():
        requires = _setup_py_requires((path / "setup.py").read_text(encoding="utf-8", errors="replace"))
    return Candidate(dist, version, requires, path, True)


def _setup_py_requires(text: str) -> tuple[str, ...] | None:
    """``install_requires`` of a setup.py, when it is a literal list (assigned or passed as one)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        value = None
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "install_requires" for t in node.targets):
            value = node.value
        elif isinstance(node, ast.keyword) and node.arg == "install_requires":
            value = node.value
        if value is not None:
            try:
                found = ast.literal_eval(value)
            except ValueError:
                continue
            if isinstance(found, list) and all(isinstance(r, str) for r in found):
                return tuple(found)
    return None


# --- judging ------------------------------------------------------------------------------------


def _sites(patch: Patch, variant: Variant, candidate: Candidate) -> tuple[str, str, int]:
    """(state, reason, sites found) of ``patch`` on ``candidate``, as the engine would plan it."""
    states: list[str] = []  # a Judgement, or NO_SITE
    reasons: list[str] = []
    total = 0
    for pfile in patch.files:
        code = candidate.read(pfile.path)
        if code is None and pfile.only_in_checkout and not candidate.is_checkout:
            states.append(NOT_APPLICABLE)
            reasons.append(
                f"{pfile.path} ships only in a {patch.package} source checkout, not in the {candidate.label} "
                f"wheel (judge it with --with {candidate.dist}=CHECKOUT)"
            )
            continue
        if code is None:
            states.append(REFUSED)
            reasons.append(f"{pfile.path} is missing in {candidate.label}")
            continue
        try:
            outcome = variant.build().apply(code, patch.id)
        except TransformError as e:
            states.append(REFUSED)
            reasons.append(f"{pfile.path}: {e}")
            continue
        found = outcome.pending + outcome.done
        total += found
        planned, why = sites_state(outcome, pfile.sites, pfile.path, patch.id)  # the engine's own verdict
        if found == 0:
            states.append(NO_SITE)
            reasons.append(why)
        elif planned in (State.APPLIED, State.NOT_APPLIED):
            states.append(APPLIES)
        else:
            states.append(REFUSED)
            reasons.append(why)
    judged = set(states) - {NOT_APPLICABLE}
    state: str
    if not judged:
        state = NOT_APPLICABLE
    elif REFUSED in judged:
        state = REFUSED
    elif judged == {NO_SITE}:
        state = NO_SITE
    else:
        state = REFUSED if NO_SITE in judged else APPLIES
    return state, "; ".join(reasons), total


def judge(profile: Profile, patch: Patch, candidate: Candidate | None) -> Verdict:
    """The verdict on one patch: applies, refused, obsolete (its drop probe holds) or unchanged."""
    if candidate is None:
        return Verdict(patch.id, UNCHANGED, f"{_dist_of(profile, patch)} is not being upgraded")
    variant = profile.variant(patch.id)
    state, reason, sites = _sites(patch, variant, candidate)
    if patch.drop_probe is not None:
        holds, found = PROBES[patch.drop_probe](patch, candidate, state)
        if holds:
            return Verdict(patch.id, OBSOLETE, found)
        reason = "; ".join(filter(None, [reason, found]))
    if state == APPLIES:
        return Verdict(patch.id, APPLIES, reason, variant.name, sites)
    if state == NOT_APPLICABLE:
        return Verdict(patch.id, NOT_APPLICABLE, reason)
    others = [v.name for v in patch.variants if v is not variant and _sites(patch, v, candidate)[0] == APPLIES]
    if others:
        reason += f" (variant {', '.join(others)} applies: --variant {patch.id}={others[0]})"
    return Verdict(patch.id, REFUSED, reason, variant.name)


def _dist_of(profile: Profile, patch: Patch) -> str:
    """The distribution that ships a patch's package."""
    component = profile.component(patch.package)
    return canonical(component.distribution if component and component.distribution else patch.package)


def _pins(profile: Profile, device: str, candidates: dict[str, Candidate]) -> dict[str, str]:
    """canonical dist -> version of the upgraded stack (the profile's pins, the candidates replacing theirs)."""
    pins = {
        canonical(c.distribution): c.version
        for c in profile.components
        if c.distribution and c.version and device in c.devices and c.kind in ("pypi", "git")
    }
    for dist, candidate in candidates.items():
        pins.pop(dist, None)
        if candidate.version:
            pins[dist] = candidate.version
    return pins


def _applicable(requires: tuple[str, ...], target: WheelTarget) -> list:
    """The parsed requirements whose markers hold on ``target`` (no extras)."""
    from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement

    found = []
    for text in requires:
        try:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(target.markers()):
                found.append(req)
        except InvalidRequirement:
            continue
        except (UndefinedComparison, UndefinedEnvironmentName):  # a marker we cannot decide: check it anyway
            found.append(req)
    return found


def conflicts(
    profile: Profile, device: str, candidates: dict[str, Candidate], target: WheelTarget, tell: Tell | None = None
) -> tuple[list[Conflict], list[Accepted], list[str]]:
    """Requirements the upgraded stack violates, the profile's accepted conflicts it concerns, and notes."""
    pins = _pins(profile, device, candidates)
    notes = []
    requires: dict[str, tuple[str, ...]] = {}
    for dist, candidate in candidates.items():
        if candidate.requires is None:
            notes.append(f"{candidate.label}: its requirements are not stated statically; not checked")
        else:
            requires[dist] = candidate.requires
    for c in profile.components:
        dist = canonical(c.distribution or "")
        if c.kind == "pypi" and device in c.devices and dist not in candidates and dist in pins:
            try:
                requires[dist] = pinned_requires(dist, pins[dist], target, tell)
            except AscendfixError as e:
                notes.append(f"requirements of {dist}=={pins[dist]} unknown: {e}")
    accepted = {
        (canonical(a.requirer), canonical(_requirement_name(a.requirement))): a for a in profile.accepted_conflicts
    }
    found, judged = [], {}
    for requirer, texts in requires.items():
        for req in _applicable(texts, target):
            needed = canonical(req.name)
            if needed == requirer or needed not in pins or not ({requirer, needed} & set(candidates)):
                continue
            if req.specifier.contains(pins[needed], prereleases=True):
                continue
            who, pinned = _release(requirer, pins, candidates), f"{needed}=={pins[needed]}"
            if (requirer, needed) in accepted:
                judged[(requirer, needed)] = Accepted(who, str(req), pinned, True)
            else:
                found.append(Conflict(who, str(req), pinned))
    for (requirer, needed), a in accepted.items():
        if (requirer, needed) in judged or not ({requirer, needed} & set(candidates)) or needed not in pins:
            continue
        who, pinned = _release(requirer, pins, candidates), f"{needed}=={pins[needed]}"
        if requirer in requires:  # its requirements were read: none of them is violated any more
            own = [str(r) for r in _applicable(requires[requirer], target) if canonical(r.name) == needed]
            judged[(requirer, needed)] = Accepted(who, ", ".join(own) or "(none)", pinned, False)
        else:  # a requirer pinned by commit: judge the requirement the profile accepted
            (req,) = _applicable((a.requirement,), target) or (None,)
            still = req is not None and not req.specifier.contains(pins[needed], prereleases=True)
            judged[(requirer, needed)] = Accepted(who, a.requirement, pinned, still)
    return found, list(judged.values()), notes


def _release(dist: str, pins: dict[str, str], candidates: dict[str, Candidate]) -> str:
    """``dist==version``, or the checkout's label when it does not state a version."""
    return f"{dist}=={pins[dist]}" if dist in pins else candidates[dist].label if dist in candidates else dist


def _requirement_name(text: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text).name
    except InvalidRequirement:
        return text


def check(
    profile: Profile, device: str, with_: dict[str, str | Path], platform: str | None = None, tell: Tell | None = None
) -> UpgradeReport:
    """Fetch (or read) every named release and judge the device's patches and the pins on them (``tell``: told
    what is being fetched before each download)."""
    profile.device(device)
    target = target_for(profile, device, platform)
    candidates = {
        dist: _checkout_candidate(dist, what) if isinstance(what, Path) else _wheel_candidate(dist, what, target, tell)
        for dist, what in with_.items()
    }
    verdicts = tuple(
        judge(profile, patch, candidates.get(_dist_of(profile, patch))) for patch in profile.patches_for(device)
    )
    found, accepted, notes = conflicts(profile, device, candidates, target, tell)
    asked = {dist: str(what) for dist, what in with_.items()}
    return UpgradeReport(profile.name, device, asked, target, verdicts, tuple(found), tuple(accepted), tuple(notes))
