"""Tell ascendfix's own edits from anyone else's: undo our patches in memory and compare."""

from __future__ import annotations

from ascendfix.patching.engine import undo_patch
from ascendfix.profile.records import Profile
from ascendfix.transforms.base import MARKER_PREFIX, marker


def without_patches(profile: Profile, path: str, code: bytes) -> tuple[bytes, list[str]]:
    """``code`` of the file at ``path`` (relative to its package's folder) with every
    profile patch that edits it reverted (whichever variant it holds), and the ids of
    the patches that were in it."""
    if MARKER_PREFIX.encode() not in code:
        return code, []
    found = []
    for patch in profile.patches.values():
        if marker(patch.id).encode() not in code or path not in {f.path for f in patch.files}:
            continue
        outcome, _problem = undo_patch(patch, code)
        if outcome is not None and outcome.done:
            code = outcome.code
            found.append(patch.id)
    return code, found
