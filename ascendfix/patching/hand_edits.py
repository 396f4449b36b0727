"""The guide's hand edits as known states: recognise one in a file, and prove the upstream original behind it.

A patch file names the guide's own edit of its sites (``[[hand_edits]]``: the section, its text, and
a transform whose forward is that edit, without a marker). A file holds such an edit when the form's
inverse finds every site edited, the original it gives back is a known preimage of the file, and the
form's forward on that original reproduces the file byte for byte. Anything short of that is named:
an edit at some sites only, or the edit and something else (with what else differs).
"""

from __future__ import annotations

from pathlib import Path

from ascendfix.patching.journal import digest
from ascendfix.profile.records import HandEdit, Patch, PatchFile
from ascendfix.states import ReasonCode, State
from ascendfix.transforms.base import HandEditError, TransformError, marker
from ascendfix.tuples import NamedTuple

EXCERPT_CHANGES = 3  # the most changes a refusal quotes


class Found(NamedTuple):
    """What a file's hand edit makes of it: hand-edited (with its original), partial or drifted (why)."""

    edit: HandEdit
    state: State
    reason: str
    original: bytes | None = None  # the known upstream bytes behind a complete hand edit
    label: str | None = None  # that original's preimage label
    reason_code: ReasonCode | None = None
    hint: str = ""


def find(patch: Patch, pfile: PatchFile, code: bytes, checkout: Path | None = None) -> Found | None:
    """The guide's hand edit of ``pfile`` that ``code`` holds, or None when no form finds an edited site.

    ``checkout``: the git checkout that holds the file, where upstream's bytes can be read to name what
    else differs. The first complete, proven hand edit wins; else the first form that found one. A
    refusal's ``hint`` is empty where the engine's fix for its ``reason_code`` applies.
    """
    found = []
    for edit in patch.hand_edits:
        result = _match(patch, pfile, edit, code, checkout)
        if result is not None and result.state == State.HAND_EDITED:
            return result
        if result is not None:
            found.append(result)
    return found[0] if found else None


def adoptable(patch: Patch, pfile: PatchFile, code: bytes) -> bool:
    """Whether ``code`` is exactly one of the guide's hand edits of a known original of ``pfile``."""
    result = find(patch, pfile, code)
    return result is not None and result.state == State.HAND_EDITED


def _match(patch: Patch, pfile: PatchFile, edit: HandEdit, code: bytes, checkout: Path | None) -> Found | None:
    form = edit.form.build()
    rel, section = pfile.path, f"the guide's {edit.guide}"
    try:
        back = form.revert(code, patch.id)
    except HandEditError as e:  # the function returns first, but not as the guide's edit can be adopted
        reason = f"{rel}: {e.problem}; not {section} hand edit as ascendfix can adopt it"
        hint = f"in {rel}: {e.fix}; then ascendfix apply" if e.fix else ""
        return Found(edit, State.DRIFTED, reason, reason_code=ReasonCode.HAND_EDIT_AND_MORE, hint=hint)
    except TransformError:
        return None
    if back.done == 0:
        return None
    edited = _lines(changed_lines(back.code, code))
    if marker(patch.id).encode() in code:
        reason = (
            f"{rel} holds ascendfix's {patch.id} and {section} hand edit ({edited}), which still decides what the "
            "code does"
        )
        hint = f"delete {edited} of {rel} (the hand edit): ascendfix's patch is then applied as it wrote it"
        return Found(edit, State.DRIFTED, reason, reason_code=ReasonCode.HAND_EDIT_AND_MORE, hint=hint)
    if back.pending or back.done != pfile.sites:
        return _partial(patch, pfile, edit, code, back.done, back.pending, edited)
    original = back.code
    try:
        again = None if form.reproduces(original, code, patch.id) else form.apply(original, patch.id).code
    except TransformError:
        again = b""
    if again is not None:
        what = f"it differs at {differences(again, code)}" if again else "its inverse cannot be proven"
        reason = f"{rel}: {edited} look like {section} hand edit, but not its text ({edit.text!r}): {what}"
        return Found(edit, State.DRIFTED, reason, reason_code=ReasonCode.HAND_EDIT_AND_MORE)
    label = pfile.preimage_label(digest(original))
    if label is None:
        return _and_more(patch, pfile, edit, code, original, edited, checkout)
    reason = (
        f"hand-edited ({section}): {rel} {edited}, over {label}; apply adopts it (revert then gives the upstream "
        "bytes back)"
    )
    return Found(edit, State.HAND_EDITED, reason, original=original, label=label, hint="ascendfix apply")


def _partial(
    patch: Patch, pfile: PatchFile, edit: HandEdit, code: bytes, done: int, pending: int, edited: str
) -> Found:
    """Some sites hand-edited, others not (or a number of sites the patch does not expect)."""
    section = f"the guide's {edit.guide}"
    try:
        rest = _lines(changed_lines(code, edit.form.build().apply(code, patch.id).code))
    except TransformError:
        rest = "the rest"
    found = done + pending
    if found != pfile.sites:
        reason = f"{pfile.path}: {section} hand edit at {edited}; expected {pfile.sites} site(s), found {found}"
        return Found(edit, State.DRIFTED, reason, reason_code=ReasonCode.UNSUPPORTED_UPSTREAM)
    reason = (
        f"{pfile.path}: {section} hand edit at {done} of {pfile.sites} sites ({edited}; not at {rest}): "
        f"{patch.id} changes its sites together or not at all"
    )
    hint = f"edit {rest} as {section} says, or restore the file; then ascendfix apply"
    return Found(edit, State.PARTIAL, reason, reason_code=ReasonCode.PARTIAL_HAND_EDIT, hint=hint)


def _and_more(
    patch: Patch, pfile: PatchFile, edit: HandEdit, code: bytes, original: bytes, edited: str, checkout: Path | None
) -> Found:
    """The hand edit and something else: what else differs, from upstream's bytes where they can be read."""
    section = f"the guide's {edit.guide}"
    crlf = pfile.preimage_label(digest(original.replace(b"\r\n", b"\n"))) if b"\r\n" in original else None
    if crlf is not None:
        reason = (
            f"{pfile.path} holds {section} hand edit ({edited}), saved with CRLF line endings: with LF line endings "
            f"it would be {crlf}'s, so no line differs but the line endings"
        )
        hint = f"convert {pfile.path} to LF line endings (dos2unix, or sed -i 's/\\r$//'); then ascendfix apply"
        return Found(edit, State.DRIFTED, reason, reason_code=ReasonCode.HAND_EDIT_AND_MORE, hint=hint)
    known = "; ".join(label for _, label in pfile.preimages) or "none listed"
    upstream = _from_git(checkout, pfile) if checkout is not None else None
    expected = _forward(patch, edit, upstream) if upstream is not None else None
    if expected is not None and upstream is not None:
        label = pfile.preimage_label(digest(upstream))
        what = f"against the guide's edit of git HEAD ({label}) it differs at {differences(expected, code)}"
    else:
        what = (
            f"with the hand edit undone it is still not a known original (sha256 {digest(original)[:12]}; "
            f"known: {known}), so something other than {edited} differs from upstream's (a line changed, added or "
            "deleted)"
        )
    reason = f"{pfile.path} holds {section} hand edit ({edited}) and something else: {what}"
    return Found(edit, State.DRIFTED, reason, reason_code=ReasonCode.HAND_EDIT_AND_MORE)


def _forward(patch: Patch, edit: HandEdit, original: bytes) -> bytes | None:
    try:
        return edit.form.build().apply(original, patch.id).code
    except TransformError:
        return None


def _from_git(checkout: Path, pfile: PatchFile) -> bytes | None:
    """The file as the checkout's HEAD has it, when that is a known original (else None)."""
    import subprocess

    try:
        result = subprocess.run(
            ["git", "-C", str(checkout), "show", f"HEAD:./{pfile.path}"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0 or pfile.preimage_label(digest(result.stdout)) is None:
        return None
    return result.stdout


def changed_lines(before: bytes, after: bytes) -> list[int]:
    """The numbers (1-based) of the lines of ``after`` that are not in ``before``, or where a removal was."""
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    lines: list[int] = []
    for tag, _, _, j1, j2 in _opcodes(old, new):
        if tag != "equal":
            lines.extend(range(j1 + 1, j2 + 1) if j2 > j1 else [j1 + 1])
    return lines


def _opcodes(old: list, new: list) -> list:
    """difflib's edit script from ``old`` to ``new`` (imported here: only a file that differs needs it)."""
    import difflib

    return difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()


def _lines(numbers: list[int]) -> str:
    if not numbers:
        return "no line"
    word = "line" if len(numbers) == 1 else "lines"
    return f"{word} {', '.join(map(str, numbers))}"


def differences(before: bytes, after: bytes) -> str:
    """Where ``after`` differs from ``before``, on one line: ``line N: 'old' -> 'new'`` (numbers of ``after``),
    the first few changes, each side cut to a readable length."""
    old = before.decode("utf-8", "replace").splitlines()
    new = after.decode("utf-8", "replace").splitlines()
    changes = [op for op in _opcodes(old, new) if op[0] != "equal"]
    if not changes:
        return "no line: only the line endings differ" if before != after else "no line"
    parts = []
    for _, i1, i2, j1, j2 in changes[:EXCERPT_CHANGES]:
        where = f"line {j1 + 1}" if j2 - j1 <= 1 else f"lines {j1 + 1}-{j2}"
        parts.append(f"{where}: {_quote(old[i1:i2])} -> {_quote(new[j1:j2])}")
    more = f" (and {len(changes) - EXCERPT_CHANGES} more change(s))" if len(changes) > EXCERPT_CHANGES else ""
    return "; ".join(parts) + more


def _quote(lines: list[str]) -> str:
    if not lines:
        return "(nothing)"
    text = " / ".join(line.strip() for line in lines)
    return repr(text if len(text) <= 100 else text[:97] + "...")
