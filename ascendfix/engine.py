"""The patch engine: plan -> verify -> write atomically -> journal; revert; recover.

Every operation first evaluates each file of each patch into a ``FileStatus`` (pure:
read, hash, and parse only when the hash does not already tell). ``apply`` plans all
files in memory and refuses before writing anything if any applicable file is missing,
unparsable, or does not match; then, under a lock on every package root, it backs up
the originals, journals, writes each file atomically and records what it wrote.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ascendfix.errors import RefusedError, UsageError
from ascendfix.fsutil import drop_bytecode, locked, sha256_bytes, write_atomic
from ascendfix.journal import Record, Store
from ascendfix.locate import Target, locate
from ascendfix.manifest import Patch, PatchFile, Profile, Variant
from ascendfix.transforms.base import Outcome, TransformError, marker

APPLIED, NOT_APPLIED, NOT_APPLICABLE = "applied", "not-applied", "not-applicable"
DRIFTED, PARTIAL = "drifted", "partial"


@dataclass(frozen=True)
class FileStatus:
    """One file of a patch, as found on disk."""

    path: str
    sha256: str | None
    state: str
    reason: str = ""
    absolute: Path | None = None
    preimage: str | None = None  # label of the known original this file is, if any
    variant: str | None = None  # the variant this file holds, when applied
    new_code: bytes | None = field(default=None, repr=False)  # what apply would write
    old_code: bytes | None = field(default=None, repr=False)  # what is on disk
    original: bytes | None = field(default=None, repr=False)  # the unpatched file, when apply will write


@dataclass(frozen=True)
class PatchStatus:
    """A patch's state, aggregated over its files."""

    id: str
    state: str
    reason: str
    files: tuple[FileStatus, ...]
    warnings: tuple[str, ...] = ()
    action: str = ""
    variant: str | None = None

    def as_json(self) -> dict:
        """The JSON contract: id, state, reason, files[path, sha256, state]; plus variant and action."""
        data = {
            "id": self.id,
            "state": self.state,
            "reason": self.reason,
            "variant": self.variant,
            "files": [{"path": f.path, "sha256": f.sha256, "state": f.state} for f in self.files],
        }
        if self.action:
            data["action"] = self.action
        if self.warnings:
            data["warnings"] = list(self.warnings)
        return data


@dataclass(frozen=True)
class Selection:
    """What one command acts on: a profile's patches for a device, and where their packages are."""

    profile: Profile
    device: str | None
    patches: tuple[Patch, ...]
    targets: dict[str, Target]
    variants: dict[str, str] = field(default_factory=dict)

    def variant(self, patch: Patch) -> Variant:
        """The variant to apply for ``patch`` (``--variant``, else the profile's choice)."""
        return self.profile.variant(patch.id, self.variants)


def select(
    profile: Profile,
    device: str | None,
    only: tuple[str, ...] = (),
    python: str | None = None,
    roots: dict[str, Path] | None = None,
    variants: dict[str, str] | None = None,
) -> Selection:
    """The patches of ``profile`` to consider (all of them, or ``only``) and their located packages."""
    unknown = [pid for pid in only if pid not in profile.patches]
    if unknown:
        known = ", ".join(profile.patches)
        raise UsageError(f"--only {unknown[0]}: not a patch of profile {profile.name} (its patches: {known})")
    if device is not None and device not in profile.devices:
        raise UsageError(f"--device {device}: profile {profile.name} defines only {', '.join(profile.devices)}")
    known = sorted({p.package for p in profile.patches.values()})
    stray = sorted(set(roots or {}) - set(known))
    if stray:
        raise UsageError(
            f"--root {stray[0]}=...: not a package of profile {profile.name} (its packages: {', '.join(known)})"
        )
    patches = tuple(p for pid, p in profile.patches.items() if not only or pid in only)
    packages = sorted({p.package for p in patches})
    return Selection(profile, device, patches, locate(packages, python, roots), dict(variants or {}))


def _held_variant(patch: Patch, chosen: Variant, code: bytes, want: int) -> tuple[Variant, bytes] | None:
    """The other variant a file fully holds, and the file's original recovered through its inverse."""
    if marker(patch.id).encode() not in code:
        return None
    for other in patch.variants:
        if other is chosen:
            continue
        try:
            held = other.build().apply(code, patch.id)
            if held.done == want and held.pending == 0:
                return other, other.build().revert(code, patch.id).code
        except TransformError:
            continue
    return None


def _evaluate_file(
    patch: Patch, chosen: Variant, pfile: PatchFile, target: Target, records: dict[str, Record], store: Store | None
) -> FileStatus:
    """Where one file stands. Parses only when the hash alone cannot tell."""
    if target.root is None:
        return FileStatus(pfile.path, None, DRIFTED, f"{patch.package} {target.how}")
    if pfile.only_in_checkout and not target.is_checkout:
        reason = (
            f"{pfile.path} ships only in a {patch.package} source checkout; {patch.package} here is "
            f"{target.how} at {target.root} (pass --root {patch.package}=CHECKOUT)"
        )
        return FileStatus(pfile.path, None, NOT_APPLICABLE, reason)
    path = target.root / pfile.path
    try:
        code = path.read_bytes()
    except FileNotFoundError:
        return FileStatus(pfile.path, None, DRIFTED, f"{path} is missing", path)
    except OSError as e:
        return FileStatus(pfile.path, None, DRIFTED, f"{path}: cannot read: {e.strerror}", path)
    digest = sha256_bytes(code)
    base = FileStatus(pfile.path, digest, "", absolute=path, preimage=pfile.preimage_label(digest), old_code=code)
    want = pfile.sites
    record = records.get(pfile.path)
    if record is not None and record.patch == patch.id and digest == record.patched_sha256:
        if record.variant == chosen.name:
            return replace(base, state=APPLIED, variant=chosen.name)
        original = store.load_backup(pfile.path, record.original_sha256) if store else None
        if original is not None:
            return _switch(base, patch, chosen, record.variant, original, want)
    try:
        outcome = chosen.build().apply(code, patch.id)
    except TransformError as e:
        held = _held_variant(patch, chosen, code, want)
        if held is not None:  # the chosen variant cannot read the patched file, but maybe its original
            return _switch(base, patch, chosen, held[0].name, held[1], want)
        return replace(base, state=DRIFTED, reason=f"{pfile.path}: {e}")
    if outcome.done == want and outcome.pending == 0:
        if record is not None and digest != record.patched_sha256:
            return replace(base, state=DRIFTED, reason=f"{pfile.path} changed since ascendfix wrote it")
        note = "marked by ascendfix (no record in .ascendfix)" if not record else ""
        return replace(base, state=APPLIED, variant=chosen.name, reason=note)
    held = _held_variant(patch, chosen, code, want)
    if held is not None:
        return _switch(base, patch, chosen, held[0].name, held[1], want)
    if outcome.pending == want and outcome.done == 0:
        return replace(base, state=NOT_APPLIED, new_code=outcome.code, original=code)
    if outcome.pending + outcome.done == want:
        return replace(base, state=PARTIAL, reason=f"{pfile.path}: {outcome.done} of {want} sites patched")
    found = outcome.pending + outcome.done
    return replace(base, state=DRIFTED, reason=f"{pfile.path}: expected {want} site(s) for {patch.id}, found {found}")


def _switch(base: FileStatus, patch: Patch, chosen: Variant, held: str, original: bytes, want: int) -> FileStatus:
    """A file that holds variant ``held`` while ``chosen`` is asked for: apply will switch it in one write."""
    try:
        outcome = chosen.build().apply(original, patch.id)
    except TransformError as e:
        return replace(base, state=DRIFTED, variant=held, reason=f"{base.path}: cannot switch to {chosen.name}: {e}")
    if outcome.pending != want:
        reason = f"{base.path}: the original behind variant {held} does not match variant {chosen.name}"
        return replace(base, state=DRIFTED, variant=held, reason=reason)
    reason = f"holds variant {held}; {chosen.name} is asked for (apply switches)"
    return replace(base, state=APPLIED, variant=held, reason=reason, new_code=outcome.code, original=original)


def _aggregate(patch: Patch, files: list[FileStatus]) -> PatchStatus:
    states = {f.state for f in files}
    reasons = "; ".join(dict.fromkeys(f.reason for f in files if f.reason))
    if states == {NOT_APPLICABLE}:
        state = NOT_APPLICABLE
    elif DRIFTED in states:
        state = DRIFTED
    elif PARTIAL in states or states - {NOT_APPLICABLE} == {APPLIED, NOT_APPLIED}:
        state = PARTIAL
    else:
        (state,) = states - {NOT_APPLICABLE}
    variants = {f.variant for f in files if f.variant}
    return PatchStatus(patch.id, state, reasons, tuple(files), variant=variants.pop() if len(variants) == 1 else None)


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
        chosen = selection.variant(patch)
        files = [_evaluate_file(patch, chosen, f, target, recs, store) for f in patch.files]
        statuses.append(_aggregate(patch, files))
    return statuses


def _off_device(selection: Selection, patch: Patch) -> PatchStatus:
    """A patch this device does not take: not-applicable, unless its marker is in a file (drifted)."""
    reason = f"not used on {selection.device} (the profile applies it on {_devices_of(selection, patch)})"
    target = selection.targets.get(patch.package)
    files, present = [], []
    for f in patch.files:
        path = target.root / f.path if target and target.root else None
        code = path.read_bytes() if path is not None and path.is_file() else b""
        if marker(patch.id).encode() in code:
            present.append(f.path)
            files.append(FileStatus(f.path, sha256_bytes(code), DRIFTED, absolute=path))
        else:
            files.append(FileStatus(f.path, None, NOT_APPLICABLE))
    if present:
        reason = f"applied in {', '.join(present)} but {reason}: ascendfix revert --only {patch.id}"
        return PatchStatus(patch.id, DRIFTED, reason, tuple(files))
    return PatchStatus(patch.id, NOT_APPLICABLE, reason, tuple(files))


def _devices_of(selection: Selection, patch: Patch) -> str:
    devices = [d for d, dev in selection.profile.devices.items() if patch.id in dev.patches]
    return ", ".join(devices) or "no device"


def status(selection: Selection) -> list[PatchStatus]:
    """Patch states after finishing or rolling back any interrupted run."""
    recover(selection)
    return evaluate(selection)


def recover(selection: Selection) -> list[str]:
    """Finish an interrupted revert / roll back an interrupted apply, in every root. Returns what was done."""
    done = []
    for target in selection.targets.values():
        if target.root is None or not (target.root / ".ascendfix" / "journal.json").exists():
            continue
        with locked([target.root]):
            done += _recover_root(Store(target.root))
    return done


def _recover_root(store: Store) -> list[str]:
    """Roll back an interrupted apply to exactly what was there; finish an interrupted revert."""
    pending = store.pending()
    if pending is None:
        return []
    op, files, previous = pending
    records = store.records()
    notes = []
    for rel, rec in files.items():
        path = store.root / rel
        written = path.is_file() and sha256_bytes(path.read_bytes()) == rec.patched_sha256
        if op == "apply":
            before = store.load_undo(rel)
            if written and before is not None:
                write_atomic(path.resolve(), before)
                drop_bytecode(path.resolve())
                notes.append(f"{rel}: rolled back (an interrupted apply)")
            if previous.get(rel) is not None:
                records[rel] = previous[rel]
                continue
        else:
            original = store.load_backup(rel, rec.original_sha256)
            if written and original is not None:
                write_atomic(path.resolve(), original)
                drop_bytecode(path.resolve())
                notes.append(f"{rel}: restored the original (an interrupted revert)")
        records.pop(rel, None)
        store.drop_backup(rel)
    store.save_records(records)
    store.end()
    return notes


def apply(selection: Selection, strict: bool = False, dry_run: bool = False) -> list[PatchStatus]:
    """Apply every selected patch that concerns this device, all or nothing.

    Raises RefusedError (nothing written) when any applicable file is missing, does not
    match its transform, is partially patched, or (with ``strict``) is not a known original.
    """
    if not dry_run:
        recover(selection)
    roots = [t.root for t in selection.targets.values() if t.root is not None]
    with locked(roots) if not dry_run else contextlib.nullcontext():
        statuses = _plan(selection, evaluate(selection), strict)
        if dry_run:
            return [replace(s, action="would-apply" if any(f.new_code for f in s.files) else "") for s in statuses]
        _write(selection, statuses)
    return [_applied(selection, s) for s in statuses]


def _plan(selection: Selection, statuses: list[PatchStatus], strict: bool) -> list[PatchStatus]:
    """Refuse the whole run if any applicable patch cannot be applied cleanly; add warnings."""
    problems = [f"{s.id}: {s.state}: {s.reason}" for s in statuses if s.state in (DRIFTED, PARTIAL)]
    planned = []
    for s in statuses:
        unknown = [f.path for f in s.files if f.state == NOT_APPLIED and f.preimage is None]
        warnings = tuple(f"{path}: not a known original of {s.id}; its sites matched exactly" for path in unknown)
        caveat = selection.profile.patches[s.id].caveat
        if caveat and s.state == NOT_APPLIED:
            warnings += (" ".join(caveat.split()),)
        if strict and unknown:
            problems.append(f"{s.id}: {unknown[0]} is not a known original (sha256 differs) and --strict is set")
        for f in s.files:
            if f.new_code is not None:
                folder = f.absolute.resolve().parent
                if not os.access(folder, os.W_OK):
                    problems.append(f"{s.id}: cannot write to {folder} (run as its owner, or use --root on a copy)")
                try:
                    compile(f.new_code, str(f.absolute), "exec", dont_inherit=True)
                except SyntaxError as e:
                    problems.append(f"{s.id}: the patched {f.path} does not compile: {e.msg}")
        planned.append(replace(s, warnings=warnings))
    if problems:
        raise RefusedError("refused, nothing was changed: " + " | ".join(problems))
    return planned


def _write(selection: Selection, statuses: list[PatchStatus]) -> None:
    """Back up, journal, write atomically, record; one root at a time."""
    by_root: dict[Path, list[tuple[str, FileStatus]]] = {}
    for s in statuses:
        patch = selection.profile.patches[s.id]
        root = selection.targets[patch.package].root
        variant = selection.variant(patch).name
        for f in s.files:
            if f.new_code is not None:
                by_root.setdefault(root, []).append((s.id, variant, f))
    for root, files in by_root.items():
        store = Store(root)
        records = store.records()
        planned = {
            f.path: Record(pid, variant, sha256_bytes(f.original), sha256_bytes(f.new_code))
            for pid, variant, f in files
        }
        for _pid, _variant, f in files:
            store.save_backup(f.path, f.original)
        store.begin("apply", planned, before={f.path: f.old_code for _pid, _variant, f in files})
        for _pid, _variant, f in files:
            write_atomic(f.absolute.resolve(), f.new_code)
            drop_bytecode(f.absolute.resolve())
        store.save_records({**records, **planned})
        store.end()


def _applied(selection: Selection, s: PatchStatus) -> PatchStatus:
    written = [f for f in s.files if f.new_code is not None]
    if not written:
        return replace(s, action="unchanged" if s.state == APPLIED else "skipped")
    variant = selection.variant(selection.profile.patches[s.id]).name
    files = tuple(
        replace(f, state=APPLIED, variant=variant, sha256=sha256_bytes(f.new_code), reason="")
        if f.new_code is not None
        else f
        for f in s.files
    )
    action = "switched" if s.state == APPLIED else "applied"
    return replace(s, state=APPLIED, files=files, action=action, variant=variant, reason="")


def revert(selection: Selection) -> list[PatchStatus]:
    """Restore every patched file of the selection, byte for byte.

    From the backup when the file is still what ascendfix wrote; through the inverse
    transform when the state folder is gone but the markers are there. A file changed
    since ascendfix wrote it is reported and left alone.
    """
    recover(selection)
    roots = [t.root for t in selection.targets.values() if t.root is not None]
    results = []
    with locked(roots):
        stores = {name: Store(t.root) for name, t in selection.targets.items() if t.root is not None}
        for patch in selection.patches:
            target = selection.targets[patch.package]
            if target.root is None:
                results.append(PatchStatus(patch.id, DRIFTED, f"{patch.package} {target.how}", (), action="skipped"))
                continue
            results.append(_revert_patch(patch, target, stores[patch.package]))
    return results


def _revert_patch(patch: Patch, target: Target, store: Store) -> PatchStatus:
    records = store.records()
    files, notes, touched = [], [], {}
    for pfile in patch.files:
        path = target.root / pfile.path
        if not path.is_file():
            state = NOT_APPLICABLE if pfile.only_in_checkout and not target.is_checkout else NOT_APPLIED
            files.append(FileStatus(pfile.path, None, state))
            continue
        code = path.read_bytes()
        digest = sha256_bytes(code)
        record = records.get(pfile.path)
        if record is not None and record.patch == patch.id:
            if digest == record.original_sha256:
                touched[pfile.path] = (None, record)
                files.append(FileStatus(pfile.path, digest, NOT_APPLIED))
                continue
            original = store.load_backup(pfile.path, record.original_sha256)
            if digest == record.patched_sha256 and original is not None:
                touched[pfile.path] = (original, record)
                files.append(FileStatus(pfile.path, record.original_sha256, NOT_APPLIED, absolute=path))
                continue
            if marker(patch.id).encode() not in code:  # replaced since (an upgrade): nothing of ours is left
                touched[pfile.path] = (None, record)
                files.append(FileStatus(pfile.path, digest, NOT_APPLIED))
                continue
            if digest != record.patched_sha256:
                reason = f"{pfile.path} changed since ascendfix wrote it; not touched (reinstall {patch.package})"
                files.append(FileStatus(pfile.path, digest, DRIFTED, reason))
                notes.append(reason)
                continue
            # what ascendfix wrote, but the backup is gone: undo it through the markers below
        outcome, problem = undo_patch(patch, code)
        if problem:
            files.append(FileStatus(pfile.path, digest, DRIFTED, f"{pfile.path}: {problem}"))
            notes.append(f"{pfile.path}: {problem}")
            continue
        if outcome.done == 0:
            files.append(FileStatus(pfile.path, digest, NOT_APPLIED))
            continue
        try:
            compile(outcome.code, str(path), "exec", dont_inherit=True)
        except SyntaxError as e:
            files.append(FileStatus(pfile.path, digest, DRIFTED, f"{pfile.path}: the reverted file does not compile"))
            notes.append(f"{pfile.path}: the reverted file does not compile ({e.msg}); not touched")
            continue
        store.save_backup(pfile.path, outcome.code)  # lets recovery finish an interrupted revert
        touched[pfile.path] = (outcome.code, Record(patch.id, "", sha256_bytes(outcome.code), digest))
        files.append(FileStatus(pfile.path, sha256_bytes(outcome.code), NOT_APPLIED, absolute=path))
    if notes:
        return PatchStatus(patch.id, DRIFTED, "; ".join(notes), tuple(files), action="refused")
    writes = {rel: rec for rel, (data, rec) in touched.items()}
    if writes:
        store.begin("revert", writes)
        for rel, (data, _rec) in touched.items():
            if data is not None:
                write_atomic((target.root / rel).resolve(), data)
                drop_bytecode((target.root / rel).resolve())
            store.drop_backup(rel)
            records.pop(rel, None)
        store.save_records(records)
        store.end()
    wrote = any(data is not None for data, _ in touched.values())
    state = NOT_APPLICABLE if all(f.state == NOT_APPLICABLE for f in files) else NOT_APPLIED
    return PatchStatus(patch.id, state, "", tuple(files), action="reverted" if wrote else "unchanged")


def undo_patch(patch: Patch, code: bytes) -> tuple[Outcome | None, str | None]:
    """Undo whichever variant of ``patch`` marked ``code``: (outcome, None) or (None, problem)."""
    problem = None
    for variant in patch.variants:
        try:
            outcome = variant.build().revert(code, patch.id)
        except TransformError as e:
            problem = str(e)
            continue
        if outcome.done:
            return outcome, None
    return (None, problem) if problem else (Outcome(code, 0, 0), None)


def diff(statuses: list[PatchStatus]) -> str:
    """A unified diff of what apply would write (from ``apply(..., dry_run=True)``)."""
    chunks = []
    for s in statuses:
        for f in s.files:
            if f.new_code is None:
                continue
            old = f.old_code.decode("utf-8", "replace").splitlines(keepends=True)
            new = f.new_code.decode("utf-8", "replace").splitlines(keepends=True)
            chunks.extend(difflib.unified_diff(old, new, f"a/{f.path}", f"b/{f.path}"))
    return "".join(chunks)
