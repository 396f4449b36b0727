"""The patch engine: select → plan → verify → hand the plan to the journal; status; revert.

:func:`plan` is a value, pure: each patch's state (:mod:`~ascendfix.patching.evaluate`) and, by
package root, the writes apply would make, with the problems that refuse it (a file that cannot
be applied cleanly, a folder that cannot be written, a result that does not compile). ``diff``
and ``--dry-run`` show a plan; :func:`apply` makes the same plan under the journal's session
(locks, recovery) and gives it to the journal's one write transaction.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ascendfix.errors import RefusedError, UsageError
from ascendfix.patching import journal
from ascendfix.patching.evaluate import Evaluation, PatchStatus, Plan, Selection
from ascendfix.patching.proof import restorer
from ascendfix.site import Site
from ascendfix.states import Action, State

if TYPE_CHECKING:
    from contextlib import AbstractContextManager


def select(site: Site, only: tuple[str, ...] = ()) -> Selection:
    """The patches of the site's profile to consider (all of them, or ``only``) and their located packages."""
    profile = site.profile
    unknown = [pid for pid in only if pid not in profile.patches]
    if unknown:
        known = ", ".join(profile.patches)
        raise UsageError(f"--only {unknown[0]}: not a patch of profile {profile.name} (its patches: {known})")
    packages = sorted({p.package for p in profile.patches.values()})
    stray = sorted(set(site.roots) - set(packages))
    if stray:
        raise UsageError(
            f"--root {stray[0]}=...: not a package of profile {profile.name} (its packages: {', '.join(packages)})"
        )
    patches = tuple(p for pid, p in profile.patches.items() if not only or pid in only)
    wanted = {p.package for p in patches} | set(site.roots)  # a --root's journal counts even when --only skips it
    return Selection(profile, site.device, patches, site.locate(wanted), dict(site.variants))


def status(selection: Selection, on_wait: journal.OnWait | None = None) -> list[PatchStatus]:
    """Patch states after finishing any interrupted run (``on_wait``: told when another process holds a lock)."""
    return status_and_recovery(selection, on_wait)[0]


def status_and_recovery(
    selection: Selection, on_wait: journal.OnWait | None = None
) -> tuple[list[PatchStatus], list[str]]:
    """Patch states, read under every root's lock after finishing any interrupted run, and what that wrote."""
    with journal.reading(selection.roots(), restorer(selection.profile), on_wait) as recovered:
        return Evaluation(selection, writes=False).plan().statuses, recovered


def plan(selection: Selection, strict: bool = False) -> Plan:
    """What apply would write, and why it must refuse (``strict``: a file that is not a known original too).

    Reads only: nothing is locked, recovered or written.
    """
    found = Evaluation(selection).plan()
    problems = [f"{s.id}: {s.state}: {s.reason}" for s in found.statuses if s.state in (State.DRIFTED, State.PARTIAL)]
    statuses = []
    for s in found.statuses:
        unknown = [f.path for f in s.files if f.state == State.NOT_APPLIED and f.preimage is None]
        warnings = s.warnings + tuple(
            f"{path}: not a known original of {s.id}; its sites matched exactly" for path in unknown
        )
        caveat = selection.profile.patches[s.id].caveat
        if caveat and s.state in (State.NOT_APPLIED, State.HAND_EDITED):
            warnings += (" ".join(caveat.split()),)
        if strict and unknown:
            problems.append(f"{s.id}: {unknown[0]} is not a known original (sha256 differs) and --strict is set")
        statuses.append(s._replace(warnings=warnings))
    for root, writes in found.writes.items():
        problems += _unwritable(root, writes, statuses)
    return Plan(statuses, found.writes, tuple(problems))


def _unwritable(root: Path, writes: list[journal.PlannedWrite], statuses: list[PatchStatus]) -> list[str]:
    """Why the writes planned for ``root`` would fail: a folder that cannot be written, a file that does not compile."""
    owner = {w.rel: s.id for s in statuses for w in s.writes}
    problems = []
    for w in writes:  # apply's writes always carry data
        path = root / w.rel
        folder = path.resolve().parent
        if not os.access(folder, os.W_OK):
            problems.append(f"{owner[w.rel]}: cannot write to {folder} (run as its owner, or use --root on a copy)")
        try:
            compile(w.data or b"", str(path), "exec", dont_inherit=True)
        except SyntaxError as e:
            problems.append(f"{owner[w.rel]}: the patched {w.rel} does not compile: {e.msg}")
    return problems


def dry_run(planned: Plan) -> list[PatchStatus]:
    """``apply --dry-run``: the plan's statuses, each with writes ``would-apply``; RefusedError as apply would."""
    if planned.problems:
        raise RefusedError("refused: " + " | ".join(planned.problems))
    return [s._replace(action=Action.WOULD_APPLY if s.writes else None) for s in planned.statuses]


def apply(selection: Selection, strict: bool = False, on_wait: journal.OnWait | None = None) -> list[PatchStatus]:
    """Apply every selected patch that concerns this device, all or nothing.

    Raises RefusedError (nothing written) when the plan has problems (:func:`plan`); a WriteError
    (everything rolled back) when a write fails.
    """
    with _session(selection, on_wait) as session:
        planned = plan(selection, strict)
        if planned.problems:
            raise RefusedError("refused, nothing was changed: " + " | ".join(planned.problems))
        session.write("apply", planned.writes)
    return [_applied(s) for s in planned.statuses]


def _session(selection: Selection, on_wait: journal.OnWait | None) -> AbstractContextManager[journal.Session]:
    """The journal's session over the selection's roots, sweeping the temp files beside the patches' files."""
    files: dict[Path, list[str]] = {}
    for patch in selection.patches:
        target = selection.targets.get(patch.package)
        if target is not None and target.root is not None:
            files.setdefault(target.root, []).extend(f.path for f in patch.files)
    return journal.session(selection.roots(), files, restorer(selection.profile), on_wait)


def _applied(s: PatchStatus) -> PatchStatus:
    if not s.writes:
        return s._replace(action=Action.UNCHANGED if s.state == State.APPLIED else Action.SKIPPED)
    written = {w.rel: w.record for w in s.writes if w.record is not None}  # apply's writes always carry a record
    variant = next(iter(written.values())).variant if written else None
    files = tuple(
        f._replace(state=State.APPLIED, variant=variant, sha256=written[f.path].patched_sha256, reason="")
        if f.path in written
        else f
        for f in s.files
    )
    action = {State.APPLIED: Action.SWITCHED, State.HAND_EDITED: Action.ADOPTED}.get(s.state, Action.APPLIED)
    return s._replace(state=State.APPLIED, files=files, action=action, variant=variant, reason="", hint="", guide=None)


def revert(selection: Selection, on_wait: journal.OnWait | None = None) -> list[PatchStatus]:
    """Restore every patched file of the selection, byte for byte, in one transaction
    (:mod:`~ascendfix.patching.revert` plans it). A package that is not installed holds nothing to
    revert; finding none of them is a RefusedError.
    """
    if selection.patches and not selection.roots():
        found = "; ".join(sorted({t.how for t in selection.targets.values()}))
        raise RefusedError(f"revert: none of the profile's packages was found ({found}); nothing to revert")
    from ascendfix.patching import revert as reverting  # here: status and apply never need it

    with _session(selection, on_wait) as session:
        planned = reverting.plan(Evaluation(selection))
        session.write("revert", planned.writes)
    return [s._replace(writes=()) for s in planned.statuses]


def diff(planned: Plan) -> str:
    """A unified diff of what the plan writes."""
    from difflib import unified_diff

    chunks: list[str] = []
    for s in planned.statuses:
        on_disk = {f.path: f.code or b"" for f in s.files}
        for w in s.writes:
            old = on_disk[w.rel].decode("utf-8", "replace").splitlines(keepends=True)
            new = (w.data or b"").decode("utf-8", "replace").splitlines(keepends=True)
            chunks.extend(unified_diff(old, new, f"a/{w.rel}", f"b/{w.rel}"))
    return "".join(chunks)
