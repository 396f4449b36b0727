"""Tell ascendfix's own edits (and the guide's hand edits, which apply adopts) from anyone else's: undo them in
memory and compare."""

from __future__ import annotations

from collections.abc import Callable

from ascendfix.patching import hand_edits
from ascendfix.patching.proof import reproduced
from ascendfix.profile.records import Profile
from ascendfix.states import State
from ascendfix.transforms.base import MARKER_PREFIX, marker


def without_patches(profile: Profile, path: str, code: bytes) -> tuple[bytes, list[str]]:
    """``code`` of the file at ``path`` (relative to its package's folder) with every
    profile patch that edits it reverted (whichever variant it holds), and the ids of
    the patches that were in it. A patch counts only when its variant, applied to what is
    left, writes the file back byte for byte (anything else in its marked lines is not ours)."""
    if MARKER_PREFIX.encode() not in code:
        return code, []
    found = []
    for patch in profile.patches.values():
        if marker(patch.id).encode() not in code or path not in {f.path for f in patch.files}:
            continue
        held = reproduced(patch, code)
        if held is not None:
            code = held[0]
            found.append(patch.id)
    return code, found


def hand_edited(profile: Profile, path: str, code: bytes, is_original: Callable[[bytes], bool]) -> str | None:
    """The guide's section whose hand edit ``code`` (the file at ``path``) is, over an original that
    ``is_original`` accepts (its RECORD's hash) and that ``apply`` adopts; None when it is not one."""
    for patch in profile.patches.values():
        for pfile in patch.files:
            if pfile.path != path or not patch.hand_edits:
                continue
            found = hand_edits.find(patch, pfile, code)
            if (
                found is not None
                and found.state == State.HAND_EDITED
                and found.original is not None
                and is_original(found.original)
            ):
                return found.edit.guide
    return None
