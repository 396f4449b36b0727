"""Tell ascendfix's own edits from anyone else's: undo our patches in memory and compare."""

from __future__ import annotations

from ascendfix.manifest import Profile
from ascendfix.transforms.base import MARKER_PREFIX, TransformError, marker


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
        for variant in patch.variants:
            try:
                outcome = variant.build().revert(code, patch.id)
            except TransformError:
                continue
            if outcome.done:
                code = outcome.code
                found.append(patch.id)
                break
    return code, found
