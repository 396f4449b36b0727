"""The patch engine: plan -> verify -> write atomically -> journal; revert; recover.

Every operation first evaluates each file of each patch into a ``FileStatus`` (pure:
read, hash, and parse only when the hash does not already tell). ``apply`` plans all
files in memory and refuses before writing anything if any applicable file is missing,
unparsable, or does not match; then, under a lock on every package root, it backs up
the originals, journals, writes each file atomically and records what it wrote.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from ascendfix.errors import RefusedError, UsageError
from ascendfix.patching import hand_edits, journal
from ascendfix.patching.journal import PlannedWrite, Record, Store, digest
from ascendfix.patching.proof import Prove, prover, restorer, undo_patch
from ascendfix.profile.records import Patch, PatchFile, Profile, Variant
from ascendfix.site import Site, Target, distinct_folders, reinstall_spec
from ascendfix.states import Action, ReasonCode, State
from ascendfix.transforms.base import Outcome, TransformError, marker


class FileStatus(NamedTuple):
    """One file of a patch, as found on disk."""

    path: str
    sha256: str | None
    state: State
    reason: str = ""
    absolute: Path | None = None
    preimage: str | None = None  # label of the known original this file is, if any
    variant: str | None = None  # the variant this file holds, when applied
    code: bytes | None = None  # what is on disk
    reason_code: ReasonCode | None = None  # why it is drifted or partial
    guide: str | None = None  # the guide's section whose hand edit the file holds
    hint: str = ""  # the fix a hand edit calls for (else the engine's, by reason_code)


class PatchStatus(NamedTuple):
    """A patch's state, aggregated over its files, and what apply would write for it."""

    id: str
    state: State
    reason: str
    files: tuple[FileStatus, ...]
    warnings: tuple[str, ...] = ()
    action: Action | None = None
    variant: str | None = None
    writes: tuple[PlannedWrite, ...] = ()
    reason_code: ReasonCode | None = None
    hint: str = ""  # the command that fixes it
    guide: str | None = None  # hand-edited: the guide's section whose edit the files hold

    def to_json(self) -> dict:
        """The JSON contract: id, state, reason, files[path, sha256, state]; plus variant, action, reason_code
        and hint when there is one."""
        data = {
            "id": self.id,
            "state": self.state,
            "reason": self.reason,
            "variant": self.variant,
            "files": [{"path": f.path, "sha256": f.sha256, "state": f.state} for f in self.files],
        }
        if self.reason_code:
            data["reason_code"] = self.reason_code
            data["hint"] = self.hint
        elif self.hint:
            data["hint"] = self.hint
        if self.guide:
            data["guide"] = self.guide
        if self.action:
            data["action"] = self.action
        if self.warnings:
            data["warnings"] = list(self.warnings)
        return data


class Selection(NamedTuple):
    """What one command acts on: a profile's patches for a device, and where their packages are."""

    profile: Profile
    device: str | None
    patches: tuple[Patch, ...]
    targets: dict[str, Target]
    variants: dict[str, str]  # --variant: the user's explicit choice

    def variant(self, patch: Patch) -> Variant:
        """The variant to apply for ``patch`` where it is not applied yet (``--variant``, else the profile's)."""
        return self.profile.variant(patch.id, self.variants)

    def roots(self) -> list[Path]:
        """The located package roots, each distinct folder once (two packages in one site-packages share one)."""
        return distinct_folders([t.root for t in self.targets.values() if t.root is not None])


def select(site: Site, only: tuple[str, ...] = ()) -> Selection:
    """The patches of the site's profile to consider (all of them, or ``only``) and their located packages."""
    profile = site.profile
    unknown = [pid for pid in only if pid not in profile.patches]
    if unknown:
        known = ", ".join(profile.patches)
        raise UsageError(f"--only {unknown[0]}: not a patch of profile {profile.name} (its patches: {known})")
    known = sorted({p.package for p in profile.patches.values()})
    stray = sorted(set(site.roots) - set(known))
    if stray:
        raise UsageError(
            f"--root {stray[0]}=...: not a package of profile {profile.name} (its packages: {', '.join(known)})"
        )
    patches = tuple(p for pid, p in profile.patches.items() if not only or pid in only)
    packages = {p.package for p in patches} | set(site.roots)  # a --root's journal counts even when --only skips it
    return Selection(profile, site.device, patches, site.locate(packages), dict(site.variants))


def _held_variant(patch: Patch, code: bytes, want: int, tried: Variant) -> tuple[Variant, bytes] | None:
    """The variant other than ``tried`` (already tried) a marked file fully holds, and the file's original
    recovered through its inverse."""
    if marker(patch.id).encode() not in code:
        return None
    for variant in patch.variants:
        if variant is tried:
            continue
        try:
            held = variant.build().apply(code, patch.id)
            if held.done == want and held.pending == 0:
                return variant, variant.build().revert(code, patch.id).code
        except TransformError:
            continue
    return None


Evaluated = tuple[FileStatus, "PlannedWrite | None"]


def _evaluate_file(
    selection: Selection, patch: Patch, pfile: PatchFile, target: Target, records: dict[str, Record], store: Store
) -> Evaluated:
    """Where one file stands, and what apply would write. Parses only when the hash alone cannot tell.

    The variant a file holds is the user's choice until they ask for another with ``--variant``:
    only an explicit ``--variant`` switches it.
    """
    if target.root is None:
        reason = f"{patch.package} {target.how}"
        return FileStatus(pfile.path, None, State.DRIFTED, reason, reason_code=ReasonCode.PACKAGE_NOT_FOUND), None
    if pfile.only_in_checkout and not target.is_checkout:
        reason = (
            f"{pfile.path} ships only in a {patch.package} source checkout; {patch.package} here is "
            f"{target.how} at {target.root} (pass --root {patch.package}=CHECKOUT)"
        )
        return FileStatus(pfile.path, None, State.NOT_APPLICABLE, reason), None
    path = target.root / pfile.path
    try:
        code = store.read(pfile.path)
    except RefusedError as e:  # a link, a folder, a file too large to be a source file
        return FileStatus(pfile.path, None, State.DRIFTED, str(e), path, reason_code=ReasonCode.UNREADABLE), None
    except OSError as e:
        reason = f"{path}: cannot read: {e.strerror}"
        return FileStatus(pfile.path, None, State.DRIFTED, reason, path, reason_code=ReasonCode.UNREADABLE), None
    if code is None:
        reason_code = ReasonCode.WRONG_ROOT if target.given else ReasonCode.FILE_MISSING
        return FileStatus(pfile.path, None, State.DRIFTED, f"{path} is missing", path, reason_code=reason_code), None
    sha = digest(code)
    label = pfile.preimage_label(sha)
    base = FileStatus(
        pfile.path,
        sha,
        State.DRIFTED,
        absolute=path,
        preimage=label,
        code=code,
        reason_code=ReasonCode.UNSUPPORTED_UPSTREAM,
    )
    chosen, asked = selection.variant(patch), patch.id in selection.variants
    want = pfile.sites
    record = records.get(pfile.path)
    checkout = target.root if target.is_checkout else None
    if record is not None and record.patch == patch.id and sha == record.patched_sha256:
        held_by_hand = pfile.preimage_label(record.original_sha256) is None and patch.hand_edits
        found = hand_edits.find(patch, pfile, code, checkout) if held_by_hand else None
        if found is not None:  # written over a hand edit (an older ascendfix): the hand edit still decides
            return _hand_edited(selection, patch, pfile, base, found, chosen)
        if not asked or record.variant == chosen.name:
            return base._replace(state=State.APPLIED, variant=record.variant, reason_code=None), None
        original = store.load_backup(pfile.path, record.original_sha256)
        if original is not None and prover(selection.profile)(pfile.path, original):
            return _switch(base, selection.profile, patch, chosen, record.variant, original, want)
    found = hand_edits.find(patch, pfile, code, checkout) if label is None and patch.hand_edits else None
    if found is not None:
        return _hand_edited(selection, patch, pfile, base, found, chosen)
    try:
        outcome = chosen.build().apply(code, patch.id)
        state, reason = sites_state(outcome, want, pfile.path, patch.id)
    except TransformError as e:
        outcome, problem, state = None, e, None
    if state == State.APPLIED:
        if record is not None and sha != record.patched_sha256:
            reason = f"{pfile.path} changed since ascendfix wrote it"
            return base._replace(reason=reason, reason_code=ReasonCode.CHANGED_SINCE_APPLIED), None
        note = "marked by ascendfix (no record in .ascendfix)" if not record else ""
        return base._replace(state=State.APPLIED, variant=chosen.name, reason=note, reason_code=None), None
    held = _held_variant(patch, code, want, tried=chosen)
    if held is not None:
        if asked and held[0] is not chosen:
            return _switch(base, selection.profile, patch, chosen, held[0].name, held[1], want)
        return base._replace(state=State.APPLIED, variant=held[0].name, reason_code=None), None
    if outcome is None:
        return base._replace(reason=f"{pfile.path}: {problem}"), None
    if state == State.NOT_APPLIED:
        record = _record(selection.profile, patch, chosen, code, outcome.code)
        planned = PlannedWrite(pfile.path, outcome.code, record, original=code, expected_sha256=sha)
        return base._replace(state=State.NOT_APPLIED, reason_code=None), planned
    if state == State.PARTIAL:
        return base._replace(state=State.PARTIAL, reason=reason, reason_code=ReasonCode.PARTIALLY_PATCHED), None
    return base._replace(reason=reason), None


def _hand_edited(
    selection: Selection, patch: Patch, pfile: PatchFile, base: FileStatus, found: hand_edits.Found, chosen: Variant
) -> Evaluated:
    """A file that holds the guide's hand edit: adopted (the chosen variant applied to its proven upstream
    original, which becomes the backup) when the edit is complete and proven, else why it is refused."""
    if found.state != State.HAND_EDITED or found.original is None:
        status = base._replace(state=found.state, reason=found.reason, reason_code=found.reason_code)
        return status._replace(hint=found.hint), None
    try:
        outcome = chosen.build().apply(found.original, patch.id)
        state, reason = sites_state(outcome, pfile.sites, pfile.path, patch.id)
    except TransformError as e:
        state, reason = None, f"{pfile.path}: {e}"
    if state != State.NOT_APPLIED:
        return base._replace(reason=f"{found.reason}; but {chosen.name} does not apply to it: {reason}"), None
    record = _record(selection.profile, patch, chosen, found.original, outcome.code)
    planned = PlannedWrite(pfile.path, outcome.code, record, original=found.original, expected_sha256=base.sha256)
    adopted = base._replace(state=State.HAND_EDITED, reason=found.reason, preimage=found.label, reason_code=None)
    return adopted._replace(guide=found.edit.guide, hint=found.hint), planned


def sites_state(outcome: Outcome, want: int, rel: str, patch_id: str) -> tuple[State, str]:
    """What a transform's outcome says of a file that must hold ``want`` sites: applied, not-applied,
    partial (some done, the rest pending) or drifted (another number of sites), with the reason."""
    found = outcome.pending + outcome.done
    if outcome.done == want and outcome.pending == 0:
        return State.APPLIED, ""
    if outcome.pending == want and outcome.done == 0:
        return State.NOT_APPLIED, ""
    if found == want:
        return State.PARTIAL, f"{rel}: {outcome.done} of {want} sites patched"
    return State.DRIFTED, f"{rel}: expected {want} site(s) for {patch_id}, found {found}"


def _record(profile: Profile, patch: Patch, variant: Variant, original: bytes, written: bytes) -> Record:
    return Record.of(patch.id, variant.name, original, written, profile.name)


def _switch(
    base: FileStatus, profile: Profile, patch: Patch, chosen: Variant, held: str, original: bytes, want: int
) -> Evaluated:
    """A file that holds variant ``held`` while ``chosen`` is asked for: apply will switch it in one write."""
    try:
        outcome = chosen.build().apply(original, patch.id)
    except TransformError as e:
        reason = f"{base.path}: cannot switch to {chosen.name}: {e}"
        return base._replace(variant=held, reason=reason, reason_code=ReasonCode.CANNOT_SWITCH), None
    if outcome.pending != want:
        reason = f"{base.path}: the original behind variant {held} does not match variant {chosen.name}"
        return base._replace(variant=held, reason=reason, reason_code=ReasonCode.CANNOT_SWITCH), None
    reason = f"holds variant {held}; {chosen.name} is asked for (apply switches)"
    record = _record(profile, patch, chosen, original, outcome.code)
    planned = PlannedWrite(base.path, outcome.code, record, original=original, expected_sha256=base.sha256)
    return base._replace(state=State.APPLIED, variant=held, reason=reason, reason_code=None), planned


def _hint(code: ReasonCode, patch: Patch, target: Target | None, rel: str) -> str:
    """The command that fixes a file that is drifted or partial for ``code``."""
    root = target.root if target is not None else None
    if code == ReasonCode.PACKAGE_NOT_FOUND:
        return f"pass --root {patch.package}=DIR (the folder holding {patch.package}/), or --python of its interpreter"
    if code == ReasonCode.WRONG_ROOT:
        return f"check --root {patch.package}={root}: that folder should hold {rel}"
    if code == ReasonCode.APPLIED_OFF_DEVICE:
        return f"ascendfix revert --only {patch.id}"
    if code == ReasonCode.CANNOT_SWITCH:
        return f"keep the variant it holds (drop --variant {patch.id}=...), or revert and apply again"
    if target is not None and target.is_checkout and root is not None:
        return f"git -C {root} diff -- {rel}  # then: git -C {root} checkout -- {rel}; ascendfix apply"
    if code == ReasonCode.UNSUPPORTED_UPSTREAM:
        return f"this {patch.package} release is not one {patch.id} knows: pin the profile's version, or drop the patch"
    return f"pip install --force-reinstall --no-deps {reinstall_spec(patch.package, root)}; then ascendfix apply"


def _aggregate(patch: Patch, evaluated: list[Evaluated], target: Target | None = None) -> PatchStatus:
    files = [f for f, _ in evaluated]
    states = {f.state for f in files}
    reasons = "; ".join(dict.fromkeys(f.reason for f in files if f.reason))
    if states == {State.NOT_APPLICABLE}:
        state = State.NOT_APPLICABLE
    elif State.DRIFTED in states:
        state = State.DRIFTED
    elif State.PARTIAL in states:
        state = State.PARTIAL
    elif State.HAND_EDITED in states:  # apply adopts the hand-edited files and patches the rest
        state = State.HAND_EDITED
    elif states - {State.NOT_APPLICABLE} == {State.APPLIED, State.NOT_APPLIED}:
        state = State.PARTIAL
    else:
        (state,) = states - {State.NOT_APPLICABLE}
    variants = {f.variant for f in files if f.variant}
    writes = tuple(w for _, w in evaluated if w is not None)
    root = target.root if target is not None else None
    leftovers = [str(t) for t in Store(root).leftovers([f.path for f in files if f.absolute])] if root else []
    warnings = tuple(f"{t}: left by a killed write; the next apply or revert removes it" for t in leftovers)
    variant = variants.pop() if len(variants) == 1 else None
    bad = next((f for f in files if f.reason_code and f.state in (State.DRIFTED, State.PARTIAL)), None)
    code = bad.reason_code if bad is not None and state in (State.DRIFTED, State.PARTIAL) else None
    hint = (bad.hint or _hint(code, patch, target, bad.path)) if code else ""
    by_hand = next((f for f in files if f.guide), None) if state == State.HAND_EDITED else None
    if by_hand is not None:
        hint = by_hand.hint
    return PatchStatus(
        patch.id,
        state,
        reasons,
        tuple(files),
        warnings,
        variant=variant,
        writes=writes,
        reason_code=code,
        hint=hint,
        guide=by_hand.guide if by_hand else None,
    )


def evaluate(selection: Selection) -> list[PatchStatus]:
    """Each selected patch's state on disk (device-filtered: others are not-applicable)."""
    stores = {name: Store(t.root) for name, t in selection.targets.items() if t.root is not None}
    records = {name: store.records() for name, store in stores.items()}
    statuses = []
    for patch in selection.patches:
        if selection.device is not None and patch not in selection.profile.patches_for(selection.device):
            statuses.append(_off_device(selection, patch))
            continue
        target = selection.targets[patch.package]
        recs, store = records.get(patch.package, {}), stores.get(patch.package)
        files = [_evaluate_file(selection, patch, f, target, recs, store) for f in patch.files]
        statuses.append(_aggregate(patch, files, target))
    return statuses


def _off_device(selection: Selection, patch: Patch) -> PatchStatus:
    """A patch this device does not take: not-applicable, unless its marker is in a file (drifted)."""
    reason = f"not used on {selection.device} (the profile applies it on {_devices_of(selection, patch)})"
    target = selection.targets.get(patch.package)
    files, present = [], []
    for f in patch.files:
        path = target.root / f.path if target and target.root else None
        code = _read_or_empty(target.root, f.path) if path is not None else b""
        if marker(patch.id).encode() in code:
            present.append(f.path)
            files.append(FileStatus(f.path, digest(code), State.DRIFTED, absolute=path))
        else:
            files.append(FileStatus(f.path, None, State.NOT_APPLICABLE))
    if present:
        reason = f"applied in {', '.join(present)} but {reason}: ascendfix revert --only {patch.id}"
        code = ReasonCode.APPLIED_OFF_DEVICE
        return PatchStatus(
            patch.id, State.DRIFTED, reason, tuple(files), reason_code=code, hint=_hint(code, patch, target, present[0])
        )
    return PatchStatus(patch.id, State.NOT_APPLICABLE, reason, tuple(files))


def _read_or_empty(root: Path, rel: str) -> bytes:
    """The file's bytes, or b"" when it is absent or not a plain file below ``root``."""
    try:
        return Store(root).read(rel) or b""
    except (OSError, RefusedError):
        return b""


def _devices_of(selection: Selection, patch: Patch) -> str:
    devices = [d for d, dev in selection.profile.devices.items() if patch.id in dev.patches]
    return ", ".join(devices) or "no device"


def status(selection: Selection, on_wait: journal.OnWait | None = None) -> list[PatchStatus]:
    """Patch states after finishing any interrupted run (``on_wait``: told when another process holds a lock)."""
    return status_and_recovery(selection, on_wait)[0]


def status_and_recovery(selection: Selection, on_wait: journal.OnWait | None = None) -> tuple[list, list[str]]:
    """Patch states, read under every root's lock after finishing any interrupted run, and what that wrote."""
    with journal.reading(selection.roots(), restorer(selection.profile), on_wait) as recovered:
        return evaluate(selection), recovered


def _session(selection: Selection, on_wait: journal.OnWait | None):
    """The journal's session over the selection's roots, sweeping the temp files beside the patches' files."""
    files: dict[Path, list[str]] = {}
    for patch in selection.patches:
        target = selection.targets.get(patch.package)
        if target is not None and target.root is not None:
            files.setdefault(target.root, []).extend(f.path for f in patch.files)
    return journal.session(selection.roots(), files, restorer(selection.profile), on_wait)


def apply(
    selection: Selection, strict: bool = False, dry_run: bool = False, on_wait: journal.OnWait | None = None
) -> list[PatchStatus]:
    """Apply every selected patch that concerns this device, all or nothing.

    Raises RefusedError (nothing written) when any applicable file is missing, does not
    match its transform, is partially patched, or (with ``strict``) is not a known original;
    a WriteError (everything rolled back) when a write fails.
    """
    if dry_run:
        statuses = _plan(selection, evaluate(selection), strict, dry_run)
        return [s._replace(action=Action.WOULD_APPLY if s.writes else None) for s in statuses]
    with _session(selection, on_wait) as session:
        statuses = _plan(selection, evaluate(selection), strict, dry_run)
        session.write("apply", _by_root(selection, statuses))
    return [_applied(s) for s in statuses]


def _plan(selection: Selection, statuses: list[PatchStatus], strict: bool, dry_run: bool) -> list[PatchStatus]:
    """Refuse the whole run if any applicable patch cannot be applied cleanly; add warnings."""
    problems = [f"{s.id}: {s.state}: {s.reason}" for s in statuses if s.state in (State.DRIFTED, State.PARTIAL)]
    planned = []
    for s in statuses:
        unknown = [f.path for f in s.files if f.state == State.NOT_APPLIED and f.preimage is None]
        warnings = s.warnings + tuple(
            f"{path}: not a known original of {s.id}; its sites matched exactly" for path in unknown
        )
        caveat = selection.profile.patches[s.id].caveat
        if caveat and s.state in (State.NOT_APPLIED, State.HAND_EDITED):
            warnings += (" ".join(caveat.split()),)
        if strict and unknown:
            problems.append(f"{s.id}: {unknown[0]} is not a known original (sha256 differs) and --strict is set")
        target = selection.targets.get(selection.profile.patches[s.id].package)
        for w in s.writes:  # apply's writes always carry data
            path = target.root / w.rel
            folder = path.resolve().parent
            if not os.access(folder, os.W_OK):
                problems.append(f"{s.id}: cannot write to {folder} (run as its owner, or use --root on a copy)")
            try:
                compile(w.data, str(path), "exec", dont_inherit=True)
            except SyntaxError as e:
                problems.append(f"{s.id}: the patched {w.rel} does not compile: {e.msg}")
        planned.append(s._replace(warnings=warnings))
    if problems:
        raise RefusedError(("refused: " if dry_run else "refused, nothing was changed: ") + " | ".join(problems))
    return planned


def _by_root(selection: Selection, statuses: list[PatchStatus]) -> dict[Path, list[PlannedWrite]]:
    """Every planned write of ``statuses``, by the package root it goes to."""
    by_root: dict[Path, list[PlannedWrite]] = {}
    roots = {name: t.root for name, t in selection.targets.items()}
    for s in statuses:
        if not s.writes:
            continue
        patch = selection.profile.patches.get(s.id)
        root = roots[patch.package] if patch else _root_of(selection, s)
        by_root.setdefault(root, []).extend(s.writes)
    return by_root


def _root_of(selection: Selection, status: PatchStatus) -> Path:
    """The root holding a patch the profile does not know (its files' absolute paths tell)."""
    path = status.files[0].absolute
    return next(r for r in selection.roots() if path is not None and path.is_relative_to(r))


def _applied(s: PatchStatus) -> PatchStatus:
    if not s.writes:
        return s._replace(action=Action.UNCHANGED if s.state == State.APPLIED else Action.SKIPPED)
    written = {w.rel: w for w in s.writes}
    variant = s.writes[0].record.variant
    files = tuple(
        f._replace(state=State.APPLIED, variant=variant, sha256=written[f.path].record.patched_sha256, reason="")
        if f.path in written
        else f
        for f in s.files
    )
    action = {State.APPLIED: Action.SWITCHED, State.HAND_EDITED: Action.ADOPTED}.get(s.state, Action.APPLIED)
    return s._replace(state=State.APPLIED, files=files, action=action, variant=variant, reason="", hint="", guide=None)


def revert(selection: Selection, on_wait: journal.OnWait | None = None) -> list[PatchStatus]:
    """Restore every patched file of the selection, byte for byte, in one transaction.

    From the backup when the file is still what ascendfix wrote; through the inverse
    transform when the state folder is gone but the markers are there. A file changed
    since ascendfix wrote it is reported and left alone (its patch is ``refused``). A package
    that is not installed holds nothing to revert; finding none of them is a RefusedError.
    """
    if selection.patches and not selection.roots():
        found = "; ".join(sorted({t.how for t in selection.targets.values()}))
        raise RefusedError(f"revert: none of the profile's packages was found ({found}); nothing to revert")
    prove = prover(selection.profile)
    with _session(selection, on_wait) as session:
        stores = {name: Store(t.root) for name, t in selection.targets.items() if t.root is not None}
        results = []
        for patch in selection.patches:
            target = selection.targets[patch.package]
            if target.root is None:
                reason = f"{patch.package} {target.how}: nothing to revert there"
                results.append(PatchStatus(patch.id, State.NOT_APPLICABLE, reason, (), action=Action.SKIPPED))
                continue
            results.append(_plan_revert(patch, target, stores[patch.package], prove))
        if len(selection.patches) == len(selection.profile.patches):  # not --only: everything recorded goes
            by_root = {store.root: name for name, store in stores.items()}  # one site-packages: its records once
            for name in by_root.values():
                results += _plan_revert_foreign(selection, selection.targets[name], stores[name])
        session.write("revert", _by_root(selection, [s for s in results if s.action != Action.REFUSED]))
    return [s._replace(writes=()) for s in results]


def _plan_revert_foreign(selection: Selection, target: Target, store: Store) -> list[PatchStatus]:
    """Records of patches the named profile does not have (another profile applied them): back from the backup."""
    by_patch: dict[str, list[tuple[str, Record]]] = {}
    for rel, record in store.records().items():
        if record.patch not in selection.profile.patches:
            by_patch.setdefault(record.patch, []).append((rel, record))
    results = []
    for pid, files in by_patch.items():
        whose = f"applied by profile {files[0][1].profile}" if files[0][1].profile else "recorded by ascendfix"
        statuses, writes, problems = [], [], []
        prove = prover(selection.profile)
        for rel, record in files:
            path = target.root / rel
            try:
                code = store.read(rel)
            except (OSError, RefusedError) as e:
                problems.append(f"{rel}: {getattr(e, 'strerror', None) or e}; not touched")
                continue
            original = store.load_backup(rel, record.original_sha256)
            if code is not None and digest(code) == record.patched_sha256 and original is not None:
                if prove(rel, original):
                    writes.append(PlannedWrite(rel, original, None, expected_sha256=digest(code)))
                else:
                    again = f"ascendfix revert --profile {record.profile}" if record.profile else "its own profile"
                    problems.append(
                        f"{rel}: its backup is not a known original this profile can prove; not touched "
                        f"(revert it with {again})"
                    )
            elif code is None or marker(pid).encode() not in code:
                writes.append(PlannedWrite(rel, None, None))  # replaced since: only the record goes
            else:
                problems.append(f"{rel} changed since ascendfix wrote it, or its backup is gone; not touched")
            statuses.append(FileStatus(rel, record.original_sha256, State.NOT_APPLIED, absolute=path))
        reason = f"{whose}, not a patch of {selection.profile.name}"
        if problems:
            results.append(
                PatchStatus(
                    pid, State.DRIFTED, f"{reason}: {'; '.join(problems)}", tuple(statuses), action=Action.REFUSED
                )
            )
            continue
        action = Action.REVERTED if any(w.data is not None for w in writes) else Action.UNCHANGED
        results.append(
            PatchStatus(pid, State.NOT_APPLIED, reason, tuple(statuses), action=action, writes=tuple(writes))
        )
    return results


def _plan_revert(patch: Patch, target: Target, store: Store, prove: Prove) -> PatchStatus:
    """What reverting ``patch`` writes: each file's original (backup, else through the markers)."""
    records = store.records()
    files, notes, writes = [], [], []
    for pfile in patch.files:
        path = target.root / pfile.path
        try:
            code = store.read(pfile.path)
        except (OSError, RefusedError) as e:
            reason = f"{pfile.path}: {getattr(e, 'strerror', None) or e}; not touched"
            files.append(FileStatus(pfile.path, None, State.DRIFTED, reason))
            notes.append(reason)
            continue
        if code is None:
            state = State.NOT_APPLICABLE if pfile.only_in_checkout and not target.is_checkout else State.NOT_APPLIED
            files.append(FileStatus(pfile.path, None, state))
            continue
        sha = digest(code)
        record = records.get(pfile.path)
        if record is not None and record.patch == patch.id:
            original = store.load_backup(pfile.path, record.original_sha256)
            if original is not None and not prove(pfile.path, original):
                original = None  # not provably the original: undo through the markers instead, or refuse
            if sha == record.patched_sha256 and original is not None:
                writes.append(PlannedWrite(pfile.path, original, None, expected_sha256=sha))
                files.append(FileStatus(pfile.path, record.original_sha256, State.NOT_APPLIED, absolute=path))
                continue
            if sha == record.original_sha256 or marker(patch.id).encode() not in code:
                # already the original, or replaced since (an upgrade): nothing of ours is left
                writes.append(PlannedWrite(pfile.path, None, None))  # only the record goes
                files.append(FileStatus(pfile.path, sha, State.NOT_APPLIED))
                continue
            if sha != record.patched_sha256:
                reason = f"{pfile.path} changed since ascendfix wrote it; not touched (reinstall {patch.package})"
                files.append(FileStatus(pfile.path, sha, State.DRIFTED, reason))
                notes.append(reason)
                continue
            # what ascendfix wrote, but the backup is gone: undo it through the markers below
        outcome, problem = undo_patch(patch, code)
        if problem:
            files.append(FileStatus(pfile.path, sha, State.DRIFTED, f"{pfile.path}: {problem}"))
            notes.append(f"{pfile.path}: {problem}")
            continue
        if outcome.done == 0:
            files.append(FileStatus(pfile.path, sha, State.NOT_APPLIED))
            continue
        try:
            compile(outcome.code, str(path), "exec", dont_inherit=True)
        except SyntaxError as e:
            reason = f"{pfile.path}: the reverted file does not compile"
            files.append(FileStatus(pfile.path, sha, State.DRIFTED, reason))
            notes.append(f"{reason} ({e.msg}); not touched")
            continue
        writes.append(PlannedWrite(pfile.path, outcome.code, None, expected_sha256=sha))
        files.append(FileStatus(pfile.path, digest(outcome.code), State.NOT_APPLIED, absolute=path))
    if notes:
        return PatchStatus(patch.id, State.DRIFTED, "; ".join(notes), tuple(files), action=Action.REFUSED)
    wrote = any(w.data is not None for w in writes)
    state = State.NOT_APPLICABLE if all(f.state == State.NOT_APPLICABLE for f in files) else State.NOT_APPLIED
    action = Action.REVERTED if wrote else Action.UNCHANGED
    return PatchStatus(patch.id, state, "", tuple(files), action=action, writes=tuple(writes))


def diff(statuses: list[PatchStatus]) -> str:
    """A unified diff of what apply would write (from ``apply(..., dry_run=True)``)."""
    from difflib import unified_diff

    chunks = []
    for s in statuses:
        on_disk = {f.path: f.code or b"" for f in s.files}
        for w in s.writes:
            old = on_disk[w.rel].decode("utf-8", "replace").splitlines(keepends=True)
            new = w.data.decode("utf-8", "replace").splitlines(keepends=True)
            chunks.extend(unified_diff(old, new, f"a/{w.rel}", f"b/{w.rel}"))
    return "".join(chunks)
