"""Checks of the target interpreter: Python, packages, source commits, file integrity, conflicts.

All of them read the one shared probe (``Context.probe``); none imports a checked package.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import operator
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ascendfix.doctor.context import Context, editable_dir
from ascendfix.doctor.model import Finding, fail, listing, ok, skip, warn
from ascendfix.doctor.ours import hand_edited, without_patches
from ascendfix.errors import RefusedError
from ascendfix.fsutil import sha256_bytes
from ascendfix.patching.journal import Record, Store
from ascendfix.profile import rl_plugin
from ascendfix.profile.records import AcceptedConflict, Component
from ascendfix.site import REPORTED_ONLY, Distribution, Installed
from ascendfix.tuples import NamedTuple

if TYPE_CHECKING:
    import git

PLUGIN_DISTRIBUTION = "verl_npu"
PAIRED = {"torch-npu": "torch"}  # torch_npu X.Y.Z is built for torch X.Y.Z only
LOCAL_COMMIT = re.compile(r"[+.]g([0-9a-f]{7,40})\b")  # setuptools-scm: 0.9.2.dev1+g38217877a


def _matches(version: str, pin: str) -> bool:
    """Whether ``version`` satisfies ``pin`` (a pin with fewer than 3 parts matches as a prefix)."""
    try:
        parsed = Version(version)
        exact = len(Version(pin).release) >= 3 or pin.count(".") >= 2
    except InvalidVersion:
        return False
    return parsed in SpecifierSet(f"=={pin}" if exact else f"=={pin}.*")


def _pip(ctx: Context, *args: str) -> str:
    return " ".join([shlex.quote(ctx.interpreter), "-m", "pip", "install", *map(shlex.quote, args)])


def _install(ctx: Context, c: Component) -> str:
    """The command that installs component ``c`` as the profile pins it."""
    if c.kind == "pypi":
        return _pip(ctx, f"{c.distribution}=={c.version}")
    ref = c.commit or c.tag
    prefix = "VLLM_TARGET_DEVICE=empty " if c.distribution == "vllm" and ctx.device == "npu" else ""
    if c.subdirectory:  # the project is a folder of the repository, installed as its README says
        folder = c.name
        checkout = f"git clone {c.repo} {folder} && git -C {folder} checkout {ref} && "
        return checkout + _pip(ctx, "-v", f"{folder}/{c.subdirectory}")
    if c.editable:
        editable = str(c.distribution)  # the manifest requires a git component's distribution
        checkout = f"git clone {c.repo} {editable} && git -C {editable} checkout {ref} && "
        return checkout + prefix + _pip(ctx, "-e", editable)
    return prefix + _pip(ctx, f"{c.distribution} @ git+{c.repo}@{ref}")


def check_python(ctx: Context) -> Finding:
    """The target interpreter's version against the profile's."""
    found = ctx.probe()
    version, where = ".".join(map(str, found.version)), found.python
    pinned = ctx.components("python")
    if not pinned:
        return ok(f"Python {version} ({where}); the profile pins no Python version")
    pin = pinned[0].version
    assert pin is not None  # the manifest requires a python component's version
    if _matches(version, pin):
        return ok(f"Python {version} ({where})")
    return fail(
        f"{where} is Python {version}; the profile needs {pin}",
        details=[" ".join(pinned[0].why.split())],
        fix=f"run the job with Python {pin}, and check it: ascendfix doctor --python $(command -v python{pin})",
    )


def _post_release_of(version: str, pin: str) -> bool:
    """Whether ``version`` is a post release of exactly ``pin`` (torch-npu 2.7.1.post2 of 2.7.1)."""
    try:
        parsed = Version(version)
        return parsed.is_postrelease and not parsed.is_devrelease and Version(parsed.base_version) == Version(pin)
    except InvalidVersion:
        return False


def check_packages(ctx: Context) -> Finding:
    """Installed versions of the pinned distributions (a post release of a pin is accepted, with a note);
    torch_npu paired with torch. A ``--root`` site-packages folder is read for the packages it holds."""
    good, bad, wheels, sources, posts = [], [], [], [], []
    pinned = [(c, c.distribution) for c in ctx.components() if c.distribution]
    roots = ctx.from_roots()
    for c, distribution in pinned:
        info = ctx.installed(distribution)
        name = canonicalize_name(distribution)
        where = f" (from {roots[name][1]})" if name in roots else ""
        if info is None:
            bad.append(f"{c.distribution} is not installed (the profile pins {c.version or c.commit or c.tag})")
        elif c.version and _post_release_of(info.version, c.version):
            posts.append(f"{c.distribution} {info.version}")
            good.append(f"{c.distribution} {info.version}{where}: a post release of the pinned {c.version}, accepted")
            continue
        elif c.version and not _matches(info.version, c.version):
            bad.append(f"{c.distribution} {info.version}{where} is installed; the profile pins {c.version}")
        else:
            good.append(f"{c.distribution} {info.version}{where}" + ("" if c.version else " (commit: see commits)"))
            continue
        if c.kind == "pypi":
            wheels.append(f"{c.distribution}=={c.version}")
        else:
            sources.append(_install(ctx, c))
    for dist, partner in PAIRED.items():
        a, b = ctx.installed(dist), ctx.installed(partner)
        if not (a and b) or not any(d == dist for _, d in pinned):
            continue
        try:
            paired = Version(a.version).release[:3] == Version(b.version).release[:3]
        except InvalidVersion:
            paired = False
        if not paired:
            base = a.version.split("+")[0]
            bad.append(f"{dist} {a.version} is built for {partner} {base}, but {partner} {b.version} is installed")
    for reported in REPORTED_ONLY:
        info = ctx.installed(reported)
        good.append(f"{reported} {info.version} (not pinned)" if info else f"{reported}: not installed (not pinned)")
    if bad:
        # sources first: their requirements may move a pinned wheel (verl caps tensordict), the pins go last
        fix = "\n".join(sources + ([_pip(ctx, *wheels)] if wheels else []))
        return fail(f"{len(bad)} problem(s) with {len(pinned)} pinned distributions", *bad, *good, fix=fix)
    post = f" ({len(posts)} as a post release of its pin: {', '.join(posts)})" if posts else ""
    return ok(f"{len(pinned)} pinned distributions match{post}", *good)


def _commit_of(info: Distribution) -> tuple[str | None, str]:
    """The commit a non-editable install came from, and how that is known."""
    vcs = (info.direct_url or {}).get("vcs_info") or {}
    if vcs.get("commit_id"):
        return vcs["commit_id"], "direct_url.json"
    match = LOCAL_COMMIT.search(info.version)
    if match:
        return match.group(1), f"its version {info.version}"
    return None, ""


def _same_commit(a: str, b: str) -> bool:
    n = min(len(a), len(b))
    return n >= 7 and a[:n].lower() == b[:n].lower()


class Unreadable(Exception):
    """A folder that should be a git checkout cannot be read as one."""


class CheckoutState(NamedTuple):
    """A checkout's HEAD and its changed tracked files, sorted by who changed them."""

    head: str
    ours: list[str]  # changed only by ascendfix's patches
    plugin: list[str]  # changed exactly as the rl-plugin installer changes them (maybe patched by us too)
    foreign: list[str]  # changed otherwise
    plugin_missing: list[str]  # files the installer edits, left as HEAD has them
    elsewhere: list[tuple[str, Record]]  # written by another profile's patch (its record in state.json)
    by_hand: list[str]  # hand-edited exactly as the guide says, over HEAD's bytes: apply adopts them


def recorded_elsewhere(ctx: Context, root: Path) -> dict[str, Record]:
    """Files under ``root`` that a patch this profile does not have wrote (``.ascendfix/state.json``),
    by path relative to ``root``. An unreadable state folder names nothing (the patches check reports it)."""
    try:
        records = Store(root).records()
    except RefusedError:
        return {}
    return {rel: r for rel, r in records.items() if r.patch not in ctx.profile.patches}


def _whose(rel: str, record: Record, code: bytes | None) -> str:
    """``rel (profile team's patch team-fix)``, and whether it changed since that patch wrote it."""
    who = (
        f"profile {record.profile}'s patch {record.patch}"
        if record.profile
        else f"another profile's patch {record.patch}"
    )
    since = "" if code is not None and sha256_bytes(code) == record.patched_sha256 else ", changed since"
    return f"{rel} ({who}{since})"


def _elsewhere_fixes(ctx: Context, records: list[Record]) -> list[str]:
    """How to take another profile's patches back, for a job that should run without them."""
    fixes = []
    for profile in dict.fromkeys(r.profile or "PROFILE" for r in records):
        patches = sorted({r.patch for r in records if (r.profile or "PROFILE") == profile})
        fixes.append(f"{ctx.site.command('revert', profile)}  # only if this job runs without {', '.join(patches)}")
    return fixes


def _checkout_state(ctx: Context, c: Component, folder: Path) -> CheckoutState:
    """HEAD of the checkout holding ``folder`` and who changed which of its tracked files."""
    import git  # gitpython: imported here, only checks of checkouts pay for it

    try:
        repo = git.Repo(folder, search_parent_directories=True)
        head = repo.head.commit
        fields = repo.git.status("--porcelain", "-z", "--untracked-files=no").split("\0")
    except (git.exc.GitError, OSError, ValueError) as e:
        raise Unreadable(f"{folder} is not a readable git checkout ({type(e).__name__})") from None
    top = Path(repo.working_tree_dir or folder)  # None only for a bare repository, which has no files to check
    package_dir = ctx.package_root(c.name) or folder
    others = recorded_elsewhere(ctx, package_dir)
    ours, plugin, foreign, elsewhere, by_hand, changed, i = [], [], [], [], [], set(), 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        code, rel = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            i += 1  # the rename's source path follows
            foreign.append(rel)
            continue
        path = top / rel
        changed.add(rel)
        pkg_rel = _package_relative(path, package_dir, rel)
        if pkg_rel in others:
            code = path.read_bytes() if path.is_file() else None
            elsewhere.append((_whose(rel, others[pkg_rel], code), others[pkg_rel]))
            continue
        try:
            original = (head.tree / rel).data_stream.read()
            restored, patches = without_patches(ctx.profile, pkg_rel, path.read_bytes())
        except (KeyError, OSError):
            foreign.append(rel)
            continue
        ours_too = f" (and {', '.join(patches)})" if patches else ""
        if patches and restored == original:
            ours.append(f"{rel} ({', '.join(patches)})")
        elif rl_plugin.is_installer_edit(pkg_rel, original, restored):
            plugin.append(rel + ours_too)
        elif guide := hand_edited(ctx.profile, pkg_rel, restored, partial(operator.eq, original)):
            by_hand.append(f"{rel} (the guide's {guide})")
        else:
            foreign.append(rel)
    missing = []
    for rel, pkg_rel in _required_installer_files(head, top, package_dir):
        original = (head.tree / rel).data_stream.read()
        if rel not in changed and rl_plugin.installer_edit(pkg_rel, original) != original:
            missing.append(rel)
    return CheckoutState(head.hexsha, ours, plugin, foreign, missing, elsewhere, by_hand)


def _package_relative(path: Path, package_dir: Path, rel: str) -> str:
    try:
        return path.relative_to(package_dir).as_posix()
    except ValueError:
        return rel


def _required_installer_files(head: git.Commit, top: Path, package_dir: Path) -> list[tuple[str, str]]:
    """``(repository path, package path)`` of this checkout's files whose installer edits the plugin needs."""
    found = []
    for path in rl_plugin.REQUIRED:
        rel = (package_dir / path).relative_to(top).as_posix() if package_dir.is_relative_to(top) else path
        try:
            head.tree / rel
        except KeyError:
            continue
        found.append((rel, path))
    return found


def _reinstall_plugin(ctx: Context) -> str:
    """The command that redoes the rl-plugin installer's edits (its own install step)."""
    plugin = next((c for c in ctx.components("git") if c.distribution == PLUGIN_DISTRIBUTION), None)
    if plugin is None:
        return "reinstall MindSpeed-RL's rl-plugin: cd MindSpeed-RL/rl-plugin && pip install -v ."
    return _install(ctx, plugin)


@dataclass
class _Commits:
    """What :func:`check_commits` finds, line by line, and the fixes it gathers."""

    good: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    cannot: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


def check_commits(ctx: Context) -> Finding:
    """The commit each commit-pinned component was installed from; its checkout clean but for our patches."""
    found = _Commits()
    for c in ctx.components("git"):
        if not c.commit or not c.distribution:  # the manifest requires a git component's distribution
            continue
        info = ctx.installed(c.distribution)
        target = ctx.targets().get(c.name)
        folder = target.root if target and target.is_checkout else editable_dir(info) if info else None
        if folder is not None:
            _checkout_commit(ctx, c, c.commit, folder, found)
        elif info is None:
            found.missing.append(f"{c.distribution}: not installed, cannot tell its commit (see packages)")
        else:
            _installed_commit(ctx, c, c.commit, info, found)
    good, bad, missing, cannot, lost = found.good, found.bad, found.missing, found.cannot, found.lost
    fix = "\n".join(dict.fromkeys(found.fixes))
    if bad:
        return fail(*bad, *lost, *cannot, *missing, *good, fix=fix, details=found.details)
    if cannot or lost:
        return warn(*lost, *cannot, *missing, *good, fix=fix)
    if not good:
        return skip(*missing)
    return ok(f"{len(good)} commit-pinned components match", *good, *missing)


def _checkout_commit(ctx: Context, c: Component, pin: str, folder: Path, found: _Commits) -> None:
    """Component ``c`` installed from the checkout ``folder``: its HEAD against ``pin``, and who changed its files."""
    try:
        state = _checkout_state(ctx, c, folder)
    except Unreadable as e:
        found.cannot.append(f"{c.distribution}: {e}")
        found.fixes.append(_install(ctx, c))
        return
    head, ours, foreign = state.head, state.ours, state.foreign
    where = f"checkout {folder} at {head[:12]}"
    if not _same_commit(head, pin):
        found.bad.append(f"{c.distribution}: {where}; the profile pins {pin[:12]}")
        found.fixes.append(f"git -C {folder} checkout {pin}")
    if foreign:
        message, listed = listing(f"{c.distribution}: {folder} has changes ascendfix did not make", foreign)
        found.bad.append(message)
        found.details += listed
        undo = " ".join(foreign) if not listed else "FILE..."
        found.fixes.append(f"git -C {folder} diff  # review, then: git -C {folder} checkout -- {undo}")
    if state.elsewhere:  # never checked out: state.json would still record the patch
        names = [text for text, _ in state.elsewhere]
        found.lost.append(f"{c.distribution}: {folder} holds another profile's patches: {', '.join(names)}")
        found.fixes += _elsewhere_fixes(ctx, [record for _, record in state.elsewhere])
    if state.plugin:  # never undone: without them the NPU rollout is off
        found.good.append(
            f"{c.distribution}: {where}, changed by the {rl_plugin.INSTALLER} exactly as it edits them "
            f"(keep them): {', '.join(state.plugin)}"
        )
    if state.plugin_missing and ctx.installed(PLUGIN_DISTRIBUTION):
        found.lost.append(
            f"{c.distribution}: {folder}: {PLUGIN_DISTRIBUTION} is installed but the {rl_plugin.INSTALLER} "
            f"edits are missing from: {', '.join(state.plugin_missing)}"
        )
        found.fixes.append(_reinstall_plugin(ctx))
    if state.by_hand:  # the patches check's fix (apply) adopts them: no checkout that would discard them
        found.good.append(f"{c.distribution}: hand-edited as the guide says (see patches): {', '.join(state.by_hand)}")
    if ours:
        found.good.append(f"{c.distribution}: {where}, changed only by ascendfix's patches: {', '.join(ours)}")
    elif not (foreign or state.plugin or state.elsewhere or state.by_hand) and _same_commit(head, pin):
        found.good.append(f"{c.distribution}: {where}, clean")


def _installed_commit(ctx: Context, c: Component, pin: str, info: Distribution, found: _Commits) -> None:
    """Component ``c`` installed from a wheel or sdist: the commit its metadata records against ``pin``."""
    commit, how = _commit_of(info)
    if commit is None:
        found.cannot.append(f"{c.distribution} {info.version}: installed without a record of its commit")
        found.fixes.append(_install(ctx, c))
    elif _same_commit(commit, pin):
        found.good.append(f"{c.distribution}: {commit[:12]} (from {how})")
    else:
        found.bad.append(f"{c.distribution}: installed from {commit[:12]} (from {how}); the profile pins {pin[:12]}")
        found.fixes.append(_install(ctx, c))


def _record_rows(metadata_dir: Path) -> list[tuple[str, str, int | None]]:
    """``(path, sha256 digest, size)`` of each ``.py`` file a wheel's RECORD lists with a hash."""
    try:
        text = (metadata_dir / "RECORD").read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for row in csv.reader(text.splitlines()):
        if len(row) < 2 or not row[0].endswith(".py") or not row[1].startswith("sha256=") or ".." in row[0]:
            continue
        size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
        rows.append((row[0], row[1][len("sha256=") :], size))
    return rows


def _digest(code: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(code).digest()).rstrip(b"=").decode()


def _hashes_to(digest: str) -> Callable[[bytes], bool]:
    """Whether bytes have the RECORD's ``digest``."""
    return lambda code: _digest(code) == digest


def _changed_files(metadata_dir: Path) -> tuple[int, list[tuple[str, str, bytes | None]]]:
    """How many files the RECORD lists, and those whose bytes no longer match it: path, recorded
    digest, current bytes (None: missing).

    pip writes RECORD after every file it installs, so a file whose size is the recorded
    one and whose mtime is not later than RECORD's has not been written since: only the
    others are read and hashed (a stat per file instead of reading ~50 MB for torch).
    """
    site = metadata_dir.parent
    installed_at = (metadata_dir / "RECORD").stat().st_mtime_ns
    changed: list[tuple[str, str, bytes | None]] = []
    rows = _record_rows(metadata_dir)
    for rel, digest, size in rows:
        path = site / rel
        try:
            st = path.stat()
            if st.st_size == size and st.st_mtime_ns < installed_at:
                continue
            code = path.read_bytes()
        except OSError:
            changed.append((rel, digest, None))
            continue
        if _digest(code) != digest:
            changed.append((rel, digest, code))
    return len(rows), changed


def check_integrity(ctx: Context) -> Finding:
    """Installed ``.py`` files of the pinned distributions against their wheel's RECORD."""
    good, bad, warned, fixes, later, details, checked, files = [], [], [], [], [], [], 0, 0
    adopt: list[str] = []  # a reinstall (for a file that is more than hand-edited) drops the hand edits too
    for c in ctx.components():
        info = ctx.installed(c.distribution) if c.distribution else None
        if not info or not info.metadata_dir or editable_dir(info):
            continue
        metadata_dir = Path(info.metadata_dir)
        if not (metadata_dir / "RECORD").is_file():
            continue
        checked += 1
        others = recorded_elsewhere(ctx, metadata_dir.parent)
        count, changed = _changed_files(metadata_dir)
        files += count
        ours, plugin, foreign, elsewhere, by_hand = _who_changed(ctx, changed, others)
        name = f"{c.distribution} {info.version}"
        if ours:
            good.append(f"{name}: changed by ascendfix's patches, as expected: {', '.join(ours)}")
        if plugin:  # never reinstalled away: without them the NPU rollout is off
            good.append(f"{name}: changed by the {rl_plugin.INSTALLER} exactly as it edits them: {', '.join(plugin)}")
        if by_hand:  # apply adopts them: the same fix as the patches check's, no reinstall
            warned.append(f"{name}: hand-edited as the guide says, over the wheel's own bytes: {', '.join(by_hand)}")
            adopt = [ctx.site.command("apply") + "  # adopts the hand edits"]
        if elsewhere:
            warned.append(f"{name}: another profile's patches: {', '.join(text for text, _ in elsewhere)}")
            later += _elsewhere_fixes(ctx, [record for _, record in elsewhere])
        if foreign:
            message, listed = listing(f"{name}: {len(foreign)} file(s) differ from the wheel's RECORD", foreign)
            bad.append(message)
            details += listed
            fixes.append(_pip(ctx, "--force-reinstall", "--no-deps", f"{c.distribution}=={info.version}"))
            if plugin:  # the reinstall drops them: the plugin's install step writes them again
                fixes.append(_reinstall_plugin(ctx))
    leftovers = [f"{tmp}: left by a killed ascendfix write; the next apply or revert removes it" for tmp in _temps(ctx)]
    if bad:
        if ctx.profile.devices[ctx.device].patches:  # a reinstall drops them
            fixes.append(ctx.site.command("apply"))
        return fail(*bad, *warned, *leftovers, *good, fix="\n".join(fixes + later), details=details)
    if leftovers or warned:
        fix = "\n".join(later + (adopt or [ctx.site.command("apply")] if adopt or leftovers else []))
        return warn(*warned, *leftovers, *good, fix=fix)
    if not checked:
        return skip("no pinned distribution installed from a wheel (nothing to compare against a RECORD)")
    return ok(f"{checked} installed distribution(s) match their RECORD ({files} .py files)", *good)


class _Changed(NamedTuple):
    """A distribution's files that differ from its RECORD, sorted by who changed them."""

    ours: list[str]  # only by ascendfix's patches
    plugin: list[str]  # exactly as the rl-plugin installer edits them (maybe patched by us too)
    foreign: list[str]  # otherwise (or missing)
    elsewhere: list[tuple[str, Record]]  # by another profile's patch (its record in state.json)
    by_hand: list[str]  # hand-edited exactly as the guide says, over the wheel's own bytes


def _who_changed(ctx: Context, changed: list[tuple[str, str, bytes | None]], others: dict[str, Record]) -> _Changed:
    """Sort ``changed`` (path, RECORD digest, bytes or None) by who changed each file."""
    found = _Changed([], [], [], [], [])
    for rel, digest, code in changed:
        if rel in others:
            found.elsewhere.append((_whose(rel, others[rel], code), others[rel]))
            continue
        restored, patches = without_patches(ctx.profile, rel, code) if code is not None else (b"", [])
        if patches and _digest(restored) == digest:
            found.ours.append(f"{rel} ({', '.join(patches)})")
        elif code is not None and rl_plugin.original_of(rel, restored, _hashes_to(digest)):
            found.plugin.append(rel + (f" (and {', '.join(patches)})" if patches else ""))
        elif code is not None and (guide := hand_edited(ctx.profile, rel, code, _hashes_to(digest))):
            found.by_hand.append(f"{rel} (the guide's {guide})")
        else:
            found.foreign.append(rel + (" (missing)" if code is None else ""))
    return found


def _temps(ctx: Context) -> list[Path]:
    """ascendfix's temp files beside the files the profile patches (a write killed in its window)."""
    targets = ctx.targets()
    found = []
    for patch in ctx.profile.patches.values():
        target = targets.get(patch.package)
        if target is not None and target.root is not None:
            found += Store(target.root).leftovers([f.path for f in patch.files])
    return found


def _installed_by_name(ctx: Context) -> dict[str, Installed]:
    return {canonicalize_name(d.name): d for d in ctx.probe().installed}


def _accepted(ctx: Context, requirer: str, req: Requirement) -> AcceptedConflict | None:
    """The manifest's accepted conflict that covers ``requirer`` requiring ``req``, if any."""
    for conflict in ctx.profile.accepted_conflicts:
        try:
            known = Requirement(conflict.requirement)
        except InvalidRequirement:
            continue
        if (
            canonicalize_name(conflict.requirer) == requirer
            and canonicalize_name(known.name) == canonicalize_name(req.name)
            and known.specifier == req.specifier
        ):
            return conflict
    return None


def _extra_only(line: str) -> bool:
    """A requirement only an extra asks for (``; extra == "x"``, or ``and``-ed with one): pip check
    ignores these, and skipping them unparsed keeps the check fast (most lines in big envs)."""
    marker = line.partition(";")[2]
    return "extra" in marker and " or " not in marker


def check_conflicts(ctx: Context) -> Finding:
    """``pip check``: requirements of installed distributions that are missing or not satisfied."""
    installed = _installed_by_name(ctx)
    environment = {**ctx.probe().markers, "extra": ""}
    problems, accepted, fixes = [], [], []
    for name, dist in sorted(installed.items()):
        for line in dist.requires:
            if _extra_only(line):
                continue
            try:
                req = Requirement(line)
                if req.marker is not None and not req.marker.evaluate(environment):
                    continue
            except (InvalidRequirement, ValueError):
                continue
            dep = installed.get(canonicalize_name(req.name))
            if dep is not None and req.specifier.contains(dep.version, prereleases=True):
                continue
            who = f"{dist.name} {dist.version} requires {req.name}{req.specifier}"
            if dep is None:
                problems.append(f"{who}, which is not installed")
                fixes.append(_pip(ctx, f"{req.name}{req.specifier}"))
                continue
            conflict = _accepted(ctx, name, req)
            if conflict is not None:
                accepted.append(f"accepted: {who}; {dep.version} is installed — {conflict.why}")
            else:
                problems.append(f"{who}, but {dep.version} is installed")
                fixes.append(_pip(ctx, f"{req.name}{req.specifier}"))
    if problems:
        return fail(*problems, *accepted, fix="\n".join(dict.fromkeys(fixes)))
    head = f"no conflicts among {len(installed)} installed distributions"
    return ok(head + (f" ({len(accepted)} accepted by the profile)" if accepted else ""), *accepted)
