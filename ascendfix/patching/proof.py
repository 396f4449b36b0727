"""What bytes from a state folder may be written back: proof by the forward direction only.

A backup or an undo copy is untrusted. Its bytes are accepted only when they are a known original of
their file (a patch's preimages), or exactly what a variant of a patch writes over a known original,
byte for byte. A transform's inverse only proposes the original: the inverses of ``fast-overlap-scan``
and ``return-early`` delete a marked helper or ``return`` whatever it holds, so "comes back to the same
original" would accept a payload hidden in a marked line. A rollback of an original no patch file knows
gets its bytes recomputed from the file on disk instead, never from the undo copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ascendfix.patching import hand_edits, journal
from ascendfix.patching.journal import digest
from ascendfix.profile.records import Patch, PatchFile, Profile
from ascendfix.states import State
from ascendfix.transforms.base import Outcome, TransformError, marker

Prove = Callable[[str, bytes], "str | None"]
"""``prove(rel, candidate)``: what ``candidate`` is when it may be written over ``rel``, else None."""


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


def _patches_by_file(profile: Profile) -> dict[str, list[tuple[Patch, PatchFile]]]:
    by_rel: dict[str, list[tuple[Patch, PatchFile]]] = {}
    for patch in profile.patches.values():
        for pfile in patch.files:
            by_rel.setdefault(pfile.path, []).append((patch, pfile))
    return by_rel


def reproduced(patch: Patch, code: bytes) -> tuple[bytes, str] | None:
    """The original behind ``code`` and the variant of ``patch`` that writes exactly ``code`` over it: the inverse
    only proposes the original, the forward transform must give ``code`` back byte for byte (an inverse alone
    deletes whatever a marked line holds). None when no variant does."""
    if marker(patch.id).encode() not in code:
        return None
    for variant in patch.variants:
        try:
            transform = variant.build()
            back = transform.revert(code, patch.id)
            if back.done and transform.apply(back.code, patch.id).code == code:
                return back.code, variant.name
        except TransformError:
            continue
    return None


def prover(profile: Profile) -> Prove:
    """``prove(rel, candidate)``: what bytes from a backup or an undo copy are, when ``profile`` can prove them fit
    to write over ``rel``: a known original of that file (a patch's preimages), or exactly what a variant of a
    patch writes over a known original (the forward direction only). None when it cannot."""
    by_rel = _patches_by_file(profile)

    def prove(rel: str, candidate: bytes) -> str | None:
        known = by_rel.get(rel, [])
        sha = digest(candidate)
        for _, pfile in known:
            label = pfile.preimage_label(sha)
            if label:
                return f"its original ({label})"
        for patch, pfile in known:
            found = reproduced(patch, candidate)
            label = pfile.preimage_label(digest(found[0])) if found else None
            if found and label:
                return f"{label} with {patch.id} [{found[1]}]"
        for patch, pfile in known:  # what an adoption replaced: exactly the guide's hand edit of a known original
            edit = hand_edits.find(patch, pfile, candidate) if patch.hand_edits else None
            if edit is not None and edit.state == State.HAND_EDITED:
                return f"{edit.label} with the guide's {edit.edit.guide} hand edit"
        return None

    return prove


def restorer(profile: Profile) -> journal.Restore:
    """How a rollback gets a file's earlier bytes: the undo copy when :func:`prover` proves it, else the same bytes
    recomputed from the file on disk through a patch's transforms (an original this profile does not know)."""
    prove, by_rel = prover(profile), _patches_by_file(profile)

    def restore(rel: str, sha: str, candidate: bytes | None, current: bytes | None) -> tuple[bytes, str] | None:
        what = prove(rel, candidate) if candidate is not None and digest(candidate) == sha else None
        if candidate is not None and what:
            return candidate, f"the undo copy, {what}"
        if current is None:
            return None
        for patch, _ in by_rel.get(rel, []):
            for code, how in _recomputed(patch, current):
                if digest(code) == sha:
                    return code, f"the file on disk {how}"
        return None

    return restore


def _recomputed(patch: Patch, code: bytes) -> Iterator[tuple[bytes, str]]:
    """What ``code`` becomes with ``patch`` undone, then each variant applied to that (or to ``code``)."""
    original = code
    outcome, _problem = undo_patch(patch, code)
    if outcome is not None and outcome.done:
        original = outcome.code
        yield original, f"with {patch.id} undone"
    for variant in patch.variants:
        try:
            yield variant.build().apply(original, patch.id).code, f"with {patch.id} [{variant.name}]"
        except TransformError:
            continue
