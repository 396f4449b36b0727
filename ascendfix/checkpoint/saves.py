"""Every save layout ``ckpt check`` knows, in the order :func:`~ascendfix.checkpoint.verl.locate` tries them.

A layout says where its checkpoint lies in verl's ``actor`` folder (``inside``), whether a folder given
directly is one (``is_one``), and how it is checked (``check``). Kinds are stable: they are what
``locate`` answers and what a test names.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ascendfix.tuples import NamedTuple

if TYPE_CHECKING:
    from ascendfix.checkpoint.megatron import ModelShape
    from ascendfix.checkpoint.report import CheckReport

DIST, HF = "dist_ckpt", "huggingface"
_CHECKPOINT_FILES = (".metadata", "metadata.json", "common.pt")


class Layout(NamedTuple):
    """One registered save layout."""

    kind: str
    title: str
    inside: Callable[[Path], Path | None]  # its checkpoint folder in an actor folder, else None
    is_one: Callable[[Path], bool]  # a folder given directly is a checkpoint of this layout
    check: Callable[[Path, ModelShape | None, bool, bool, frozenset[str] | None], CheckReport]
    reads_config: bool  # the HF config beside the save gives the model's shape to check against


def _dcp_inside(actor: Path) -> Path | None:
    return actor / DIST if is_dir(actor / DIST) else None


def _dcp_is(folder: Path) -> bool:
    names = listing(folder)
    return (
        folder.name == DIST
        or any(os.path.lexists(folder / n) for n in _CHECKPOINT_FILES)
        or any(n.endswith(".distcp") for n in names)
    )


def _dcp_check(
    folder: Path, model: ModelShape | None, quick: bool, prove: bool, share: frozenset[str] | None
) -> CheckReport:
    from ascendfix.checkpoint import check

    return check.check(folder, model, quick, prove, share)


def _mbridge_inside(actor: Path) -> Path | None:
    hf = actor / HF
    return hf if is_dir(hf) and any(n.endswith(".safetensors") for n in listing(hf)) else None


def _never(folder: Path) -> bool:
    return False


def _mbridge_check(
    folder: Path, model: ModelShape | None, quick: bool, prove: bool, share: frozenset[str] | None
) -> CheckReport:
    from ascendfix.checkpoint import safetensors

    return safetensors.check(folder)


LAYOUTS: dict[str, Layout] = {
    layout.kind: layout
    for layout in (
        Layout("dcp", "torch.distributed.checkpoint (Megatron's dist_ckpt)", _dcp_inside, _dcp_is, _dcp_check, True),
        Layout("mbridge", "HF safetensors (mbridge, no DCP)", _mbridge_inside, _never, _mbridge_check, False),
    )
}
DEFAULT = "dcp"  # a folder no layout recognises is checked as this one (its check names what is missing)


def is_dir(path: Path) -> bool:
    """A folder, not reached through a link."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def listing(folder: Path) -> list[str]:
    """The names in ``folder`` (none when it cannot be read)."""
    try:
        return os.listdir(folder)
    except OSError:
        return []
