"""Revert's plan: each patched file's original, from its backup when the file is still what ascendfix
wrote, else through the patch's inverse transform; a file changed since is reported and left alone.

Without ``--only`` the records of patches the profile does not have (another profile applied them)
go back from their backups too, when the profile can prove them.
"""

from __future__ import annotations

from pathlib import Path

from ascendfix.errors import RefusedError
from ascendfix.patching.evaluate import Evaluation, FileStatus, PatchStatus, Plan
from ascendfix.patching.journal import PlannedWrite, Record, Store, digest
from ascendfix.patching.proof import Prove, undo_patch
from ascendfix.profile.records import Patch, Profile
from ascendfix.site import Target
from ascendfix.states import Action, State
from ascendfix.transforms.base import marker


def plan(ev: Evaluation) -> Plan:
    """What reverting the evaluation's selection writes, by package root; refused patches write nothing."""
    selection = ev.selection
    statuses: list[PatchStatus] = []
    writes: dict[Path, list[PlannedWrite]] = {}

    def add(status: PatchStatus, root: Path) -> None:
        statuses.append(status)
        if status.writes and status.action != Action.REFUSED:
            writes.setdefault(root, []).extend(status.writes)

    for patch in selection.patches:
        target = selection.targets[patch.package]
        if target.root is None:
            reason = f"{patch.package} {target.how}: nothing to revert there"
            statuses.append(PatchStatus(patch.id, State.NOT_APPLICABLE, reason, (), action=Action.SKIPPED))
            continue
        records = ev.records[patch.package]
        add(_revert_patch(patch, target, ev.stores[patch.package], records, ev.prove), target.root)
    if len(selection.patches) == len(selection.profile.patches):  # not --only: everything recorded goes
        by_root = {store.root: name for name, store in ev.stores.items()}  # one site-packages: its records once
        for root, name in by_root.items():
            found = _foreign(selection.profile, ev.stores[name], ev.records[name], ev.prove)
            for status in found:
                add(status, root)
    return Plan(statuses, writes)


def _foreign(profile: Profile, store: Store, records: dict[str, Record], prove: Prove) -> list[PatchStatus]:
    """Records of patches the named profile does not have (another profile applied them): back from the backup."""
    by_patch: dict[str, list[tuple[str, Record]]] = {}
    for rel, record in records.items():
        if record.patch not in profile.patches:
            by_patch.setdefault(record.patch, []).append((rel, record))
    results = []
    for pid, files in by_patch.items():
        whose = f"applied by profile {files[0][1].profile}" if files[0][1].profile else "recorded by ascendfix"
        statuses, writes, problems = [], [], []
        for rel, record in files:
            path = store.root / rel
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
        reason = f"{whose}, not a patch of {profile.name}"
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


def _revert_patch(patch: Patch, target: Target, store: Store, records: dict[str, Record], prove: Prove) -> PatchStatus:
    """What reverting ``patch`` writes: each file's original (backup, else through the markers)."""
    files, notes, writes = [], [], []
    for pfile in patch.files:
        path = store.root / pfile.path
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
        elif marker(patch.id).encode() not in code:  # nothing of ascendfix's in it (whatever else is)
            files.append(FileStatus(pfile.path, sha, State.NOT_APPLIED))
            continue
        outcome, problem = undo_patch(patch, code)
        if outcome is None:
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
