"""Where each file of each selected patch stands, and what apply would write for it: pure.

A file is read and hashed; it is parsed only when the hash alone cannot tell (a record of what
ascendfix wrote, or a known original). The variant a file holds is the user's choice until they
ask for another with ``--variant``: only an explicit ``--variant`` switches it. One
:class:`Evaluation` reads a selection: each package root's state folder opened once, and the proof
of backups built once, for every file it looks at.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from ascendfix.errors import RefusedError
from ascendfix.patching import hand_edits
from ascendfix.patching.journal import PlannedWrite, Record, Store, digest
from ascendfix.patching.proof import Prove, prover
from ascendfix.profile.records import Patch, PatchFile, Profile, Variant
from ascendfix.site import Target, distinct_folders, reinstall_spec
from ascendfix.states import Action, ReasonCode, State
from ascendfix.transforms.base import MARKER_PREFIX, Outcome, TransformError, marker
from ascendfix.tuples import NamedTuple


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
        data: dict[str, Any] = {
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


class Plan(NamedTuple):
    """What a command would write: each patch's status and, by package root, the writes that carry it out.

    ``problems``: why apply must refuse the whole plan (then nothing is written).
    """

    statuses: list[PatchStatus]
    writes: dict[Path, list[PlannedWrite]]
    problems: tuple[str, ...] = ()


Evaluated = tuple[FileStatus, "PlannedWrite | None"]


class _File(NamedTuple):
    """One file being evaluated: its patch, where it lives, what ascendfix recorded of it, the variant asked."""

    patch: Patch
    pfile: PatchFile
    target: Target
    root: Path
    store: Store
    record: Record | None
    chosen: Variant
    asked: bool  # --variant names this patch

    @property
    def checkout(self) -> Path | None:
        return self.root if self.target.is_checkout else None


class Evaluation:
    """One reading of a selection: each package's state folder and records opened once, the proof built once."""

    def __init__(self, selection: Selection, writes: bool = True):
        """``writes``: plan what apply would write; without it (status) a known original is not-applied from its
        hash alone, and nothing is parsed."""
        self.selection, self.writes = selection, writes
        by_root: dict[Path, Store] = {}
        self.stores = {
            name: by_root.setdefault(t.root, Store(t.root)) for name, t in selection.targets.items() if t.root
        }

    @cached_property
    def records(self) -> dict[str, dict[str, Record]]:
        """What each package's state folder records, by file."""
        return {name: store.records() for name, store in self.stores.items()}

    @cached_property
    def prove(self) -> Prove:
        """Whether bytes from a backup may be written over a file, as the profile can prove."""
        return prover(self.selection.profile)

    def plan(self) -> Plan:
        """Each selected patch's state on disk (device-filtered: others are not-applicable), and its writes by root."""
        selection, statuses = self.selection, []
        writes: dict[Path, list[PlannedWrite]] = {}
        for patch in selection.patches:
            target = selection.targets[patch.package]
            if selection.device is not None and patch not in selection.profile.patches_for(selection.device):
                statuses.append(self._off_device(patch, target))
                continue
            evaluated = [self._file(patch, f, target) for f in patch.files]
            status = _aggregate(patch, evaluated, target, self.stores, self._pinned(patch.package))
            if status.writes and target.root is not None:
                writes.setdefault(target.root, []).extend(status.writes)
            statuses.append(status)
        return Plan(statuses, writes)

    def _pinned(self, package: str) -> str | None:
        """The version the profile pins for ``package`` (what a reinstall must name when no dist-info says)."""
        component = self.selection.profile.component(package)
        return component.version if component is not None and component.version else None

    def _file(self, patch: Patch, pfile: PatchFile, target: Target) -> Evaluated:
        """Where one file stands, and what apply would write."""
        store = self.stores.get(patch.package)
        code = _read(patch, pfile, target, store)
        if isinstance(code, FileStatus) or store is None or target.root is None:
            assert isinstance(code, FileStatus)  # a package without a root is read as not found
            return code, None
        record = self.records[patch.package].get(pfile.path)
        chosen = self.selection.variant(patch)
        f = _File(patch, pfile, target, target.root, store, record, chosen, patch.id in self.selection.variants)
        sha = digest(code)
        base = FileStatus(
            pfile.path,
            sha,
            State.DRIFTED,
            absolute=f.root / pfile.path,
            preimage=pfile.preimage_label(sha),
            code=code,
            reason_code=ReasonCode.UNSUPPORTED_UPSTREAM,
        )
        done = self._recorded(f, base) or self._by_hand(f, base)
        if done is None and base.preimage is not None and not self.writes:  # upstream's bytes: nothing of ours
            return base._replace(state=State.NOT_APPLIED, reason_code=None), None
        return done if done is not None else self._by_transform(f, base)

    def _recorded(self, f: _File, base: FileStatus) -> Evaluated | None:
        """A file that is byte for byte what ascendfix wrote for this patch: applied, or to be switched."""
        record = f.record
        if record is None or record.patch != f.patch.id or base.sha256 != record.patched_sha256:
            return None
        if f.pfile.preimage_label(record.original_sha256) is None and _could_hold_a_hand_edit(f.patch, record.variant):
            found = hand_edits.find(f.patch, f.pfile, base.code or b"", f.checkout)
            if found is not None:  # written over a hand edit (an older ascendfix): the hand edit still decides
                return self._hand_edited(f, base, found)
        if not f.asked or record.variant == f.chosen.name:
            return base._replace(state=State.APPLIED, variant=record.variant, reason_code=None), None
        original = f.store.load_backup(f.pfile.path, record.original_sha256)
        if original is not None and self.prove(f.pfile.path, original):
            return self._switch(f, base, record.variant, original)
        return None

    def _by_hand(self, f: _File, base: FileStatus) -> Evaluated | None:
        """A file that holds the guide's hand edit of this patch (not a known original)."""
        if base.preimage is not None or not f.patch.hand_edits:
            return None
        found = hand_edits.find(f.patch, f.pfile, base.code or b"", f.checkout)
        return None if found is None else self._hand_edited(f, base, found)

    def _by_transform(self, f: _File, base: FileStatus) -> Evaluated:
        """What the chosen variant's transform finds in the file: applied, another variant, or to be applied."""
        code, rel = base.code or b"", f.pfile.path
        outcome: Outcome | None = None
        try:
            outcome = f.chosen.build().apply(code, f.patch.id)
            state, reason = sites_state(outcome, f.pfile.sites, rel, f.patch.id)
        except TransformError as e:
            state, reason = State.DRIFTED, f"{rel}: {e}"
        if state == State.APPLIED:
            if f.record is not None and base.sha256 != f.record.patched_sha256:
                reason = f"{rel} changed since ascendfix wrote it"
                return base._replace(reason=reason, reason_code=ReasonCode.CHANGED_SINCE_APPLIED), None
            skipped = _returns_first(code, f.chosen, rel)
            if skipped is not None:
                return skipped(base), None
            note = "marked by ascendfix (no record in .ascendfix)" if not f.record else ""
            return base._replace(state=State.APPLIED, variant=f.chosen.name, reason=note, reason_code=None), None
        held = _held_variant(f.patch, code, f.pfile.sites, tried=f.chosen)
        if held is not None:
            skipped = _returns_first(code, held[0], rel)
            if skipped is not None:
                return skipped(base), None
            if f.asked and held[0] is not f.chosen:
                return self._switch(f, base, held[0].name, held[1])
            return base._replace(state=State.APPLIED, variant=held[0].name, reason_code=None), None
        if state == State.NOT_APPLIED and outcome is not None:
            planned = PlannedWrite(
                rel, outcome.code, self._record(f, code, outcome.code), original=code, expected_sha256=base.sha256
            )
            return base._replace(state=State.NOT_APPLIED, reason_code=None), planned
        if state == State.PARTIAL:
            return base._replace(state=State.PARTIAL, reason=reason, reason_code=ReasonCode.PARTIALLY_PATCHED), None
        return base._replace(reason=reason), None

    def _hand_edited(self, f: _File, base: FileStatus, found: hand_edits.Found) -> Evaluated:
        """A file that holds the guide's hand edit: adopted (the chosen variant applied to its proven upstream
        original, which becomes the backup) when the edit is complete and proven, else why it is refused."""
        if found.state != State.HAND_EDITED or found.original is None:
            status = base._replace(state=found.state, reason=found.reason, reason_code=found.reason_code)
            return status._replace(hint=found.hint), None
        outcome = None
        try:
            outcome = f.chosen.build().apply(found.original, f.patch.id)
            state, reason = sites_state(outcome, f.pfile.sites, f.pfile.path, f.patch.id)
        except TransformError as e:
            state, reason = State.DRIFTED, f"{f.pfile.path}: {e}"
        if state != State.NOT_APPLIED or outcome is None:
            return base._replace(reason=f"{found.reason}; but {f.chosen.name} does not apply to it: {reason}"), None
        record = self._record(f, found.original, outcome.code)
        planned = PlannedWrite(f.pfile.path, outcome.code, record, original=found.original, expected_sha256=base.sha256)
        adopted = base._replace(state=State.HAND_EDITED, reason=found.reason, preimage=found.label, reason_code=None)
        return adopted._replace(guide=found.edit.guide, hint=found.hint), planned

    def _switch(self, f: _File, base: FileStatus, held: str, original: bytes) -> Evaluated:
        """A file that holds variant ``held`` while another is asked for: apply will switch it in one write."""
        chosen = f.chosen
        try:
            outcome = chosen.build().apply(original, f.patch.id)
        except TransformError as e:
            return _cannot_switch(base, held, f"cannot switch to {chosen.name}: {e}"), None
        if outcome.pending != f.pfile.sites:
            mismatch = f"the original behind variant {held} does not match variant {chosen.name}"
            return _cannot_switch(base, held, mismatch), None
        reason = f"holds variant {held}; {chosen.name} is asked for (apply switches)"
        record = self._record(f, original, outcome.code)
        planned = PlannedWrite(base.path, outcome.code, record, original=original, expected_sha256=base.sha256)
        return base._replace(state=State.APPLIED, variant=held, reason=reason, reason_code=None), planned

    def _record(self, f: _File, original: bytes, written: bytes) -> Record:
        return Record.of(f.patch.id, f.chosen.name, original, written, self.selection.profile.name)

    def _off_device(self, patch: Patch, target: Target) -> PatchStatus:
        """A patch this device does not take: not-applicable, unless its marker is in a file (drifted)."""
        devices = [d for d, dev in self.selection.profile.devices.items() if patch.id in dev.patches]
        reason = f"not used on {self.selection.device} (the profile applies it on {', '.join(devices) or 'no device'})"
        store = self.stores.get(patch.package)
        files, present = [], []
        for f in patch.files:
            code = _read_or_empty(store, f.path)
            if store is not None and marker(patch.id).encode() in code:
                present.append(f.path)
                files.append(FileStatus(f.path, digest(code), State.DRIFTED, absolute=store.root / f.path))
            else:
                files.append(FileStatus(f.path, None, State.NOT_APPLICABLE))
        if not present:
            return PatchStatus(patch.id, State.NOT_APPLICABLE, reason, tuple(files))
        reason = f"applied in {', '.join(present)} but {reason}: ascendfix revert --only {patch.id}"
        off = ReasonCode.APPLIED_OFF_DEVICE
        hint = _hint(off, patch, target, present[0])
        return PatchStatus(patch.id, State.DRIFTED, reason, tuple(files), reason_code=off, hint=hint)


def statuses(selection: Selection) -> list[PatchStatus]:
    """Each selected patch's state on disk, read without a lock or recovery (doctor's view)."""
    return Evaluation(selection, writes=False).plan().statuses


def _read(patch: Patch, pfile: PatchFile, target: Target, store: Store | None) -> FileStatus | bytes:
    """The file's bytes, or why it cannot be evaluated (its package not found, not in this kind of install,
    unreadable, missing)."""
    if target.root is None or store is None:
        reason = f"{patch.package} {target.how}"
        return FileStatus(pfile.path, None, State.DRIFTED, reason, reason_code=ReasonCode.PACKAGE_NOT_FOUND)
    if pfile.only_in_checkout and not target.is_checkout:
        reason = (
            f"{pfile.path} ships only in a {patch.package} source checkout; {patch.package} here is "
            f"{target.how} at {target.root} (pass --root {patch.package}=CHECKOUT)"
        )
        return FileStatus(pfile.path, None, State.NOT_APPLICABLE, reason)
    path = target.root / pfile.path
    try:
        code = store.read(pfile.path)
    except RefusedError as e:  # a link, a folder, a file too large to be a source file
        fix = getattr(e, "fix", "")  # a link's refusal knows what to do
        reason = getattr(e, "problem", str(e)) if fix else str(e)
        return FileStatus(pfile.path, None, State.DRIFTED, reason, path, reason_code=ReasonCode.UNREADABLE, hint=fix)
    except OSError as e:
        reason = f"{path}: cannot read: {e.strerror}"
        return FileStatus(pfile.path, None, State.DRIFTED, reason, path, reason_code=ReasonCode.UNREADABLE)
    if code is None:
        reason_code = ReasonCode.WRONG_ROOT if target.given else ReasonCode.FILE_MISSING
        return FileStatus(pfile.path, None, State.DRIFTED, f"{path} is missing", path, reason_code=reason_code)
    return code


def _cannot_switch(base: FileStatus, held: str, why: str) -> FileStatus:
    return base._replace(variant=held, reason=f"{base.path}: {why}", reason_code=ReasonCode.CANNOT_SWITCH)


def _returns_first(code: bytes, variant: Variant, rel: str) -> Callable[[FileStatus], FileStatus] | None:
    """Where the function ``variant`` patches returns before its first statement runs (a ``return`` that is not
    ascendfix's, after the docstring and any ``pass``): the patch is in the file but never runs, so the file is
    drifted, naming the line; None when it does not."""
    import ast

    function = getattr(variant.build(), "function", None)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    found = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == function]
    if len(found) != 1:
        return None
    body = found[0].body
    doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    first = next((s for s in body[1 if doc else 0 :] if not isinstance(s, ast.Pass)), None)
    lines = code.splitlines()
    if not isinstance(first, ast.Return) or MARKER_PREFIX.encode() in lines[(first.end_lineno or first.lineno) - 1]:
        return None
    reason = f"{rel}: line {first.lineno} returns before {function}() runs, so {variant.name} never runs"
    hint = f"delete line {first.lineno} of {rel}: the patch then runs as ascendfix wrote it"
    return lambda base: base._replace(reason=reason, reason_code=ReasonCode.HAND_EDIT_AND_MORE, hint=hint)


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


def _hint(code: ReasonCode, patch: Patch, target: Target | None, rel: str, pinned: str | None = None) -> str:
    """The command that fixes a file that is drifted or partial for ``code`` (``pinned``: the profile's version of
    the package, for a reinstall where no dist-info names the installed one)."""
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
        version = f" {pinned}" if pinned else "'s version"
        return (
            f"this {patch.package} release is not one {patch.id} knows: pin the profile's{version}, or drop the patch"
        )
    spec = reinstall_spec(patch.package, root)
    if spec == patch.package and pinned:  # never a bare name: pip would take the latest release
        spec = f"{patch.package}=={pinned}"
    return f"pip install --force-reinstall --no-deps {spec}; then ascendfix apply"


def _aggregate(
    patch: Patch, evaluated: list[Evaluated], target: Target, stores: dict[str, Store], pinned: str | None = None
) -> PatchStatus:
    """A patch's state over its files' states, the writes apply would make, and its fix (``pinned``: see _hint)."""
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
    store = stores.get(patch.package)
    leftovers = [str(t) for t in store.leftovers([f.path for f in files if f.absolute])] if store else []
    warnings = tuple(f"{t}: left by a killed write; the next apply or revert removes it" for t in leftovers)
    variant = variants.pop() if len(variants) == 1 else None
    bad = next((f for f in files if f.reason_code and f.state in (State.DRIFTED, State.PARTIAL)), None)
    code = bad.reason_code if bad is not None and state in (State.DRIFTED, State.PARTIAL) else None
    hint = (bad.hint or _hint(code, patch, target, bad.path, pinned)) if code and bad else ""
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


def _read_or_empty(store: Store | None, rel: str) -> bytes:
    """The file's bytes, or b"" when it is absent or not a plain file below its root."""
    if store is None:
        return b""
    try:
        return store.read(rel) or b""
    except (OSError, RefusedError):
        return b""


def _could_hold_a_hand_edit(patch: Patch, written_by: str) -> bool:
    """Whether a file ascendfix patched with variant ``written_by`` can still hold one of the guide's hand edits:
    only one made by another transform than that variant's (a hand ``return`` above the fast-validate helper an
    older ascendfix inserted). A hand edit by the same transform sits on the sites the variant writes, where
    ascendfix never writes over it; there the hash alone decides, and ``status`` parses nothing."""
    own = {variant.transform for variant in patch.variants if variant.name == written_by}
    return any(edit.form.transform not in own for edit in patch.hand_edits)
