"""verl's save layout: from any folder of it to the checkpoint folder verl loads (verl 796871d).

verl saves to ``{trainer.default_local_dir}/global_step_N/actor/``: ``dist_ckpt/`` (the DCP/Megatron
folder), ``huggingface/`` (the HF config and tokenizer; with mbridge the weights, as safetensors,
and no ``dist_ckpt/``) and ``transformer_config.json``. ``default_local_dir`` holds
``latest_checkpointed_iteration.txt`` (the step ``resume_mode: auto`` loads on relaunch).
:func:`locate` accepts any of those folders, or the ``dist_ckpt`` folder itself, and says which
folder it means.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ascendfix.checkpoint.report import Problem
from ascendfix.checkpoint.saves import DEFAULT, DIST, HF, LAYOUTS, is_dir, listing
from ascendfix.tuples import NamedTuple

if TYPE_CHECKING:
    from ascendfix.checkpoint.megatron import ModelShape
    from ascendfix.checkpoint.report import CheckReport

ITERATION_FILE = "latest_checkpointed_iteration.txt"
ACTOR = "actor"
STEP_PREFIX = "global_step_"
NONE = "none"  # no checkpoint to check: the problems say why
_MAX_ITERATION_BYTES = 64


class Located(NamedTuple):
    """What :func:`locate` found: the folder to check, its kind, the HF config beside it, problems on the way.

    ``kind``: a layout of :data:`~ascendfix.checkpoint.saves.LAYOUTS` (``dcp``, ``mbridge``) or ``none`` (nothing
    to check: ``problems`` say why); ``via``: the iteration file that named it, when one did.
    """

    folder: Path
    kind: str
    config: Path | None
    problems: list[Problem]
    via: str = ""


def locate(given: Path) -> Located:
    """The checkpoint ``given`` (default_local_dir, global_step_N, global_step_N/actor or dist_ckpt) stands for."""
    for layout in LAYOUTS.values():
        if layout.is_one(given):
            return Located(given, layout.kind, _config(given.parent), [])
    found = _in_actor(given)
    if found is not None:
        return found
    if is_dir(given / ACTOR):
        return locate_actor(given / ACTOR)
    if os.path.lexists(given / ITERATION_FILE):
        return _follow(given)
    steps = sorted(n for n in listing(given) if n.startswith(STEP_PREFIX))
    if steps:
        detail = f"no {ITERATION_FILE}: verl resumes from none of its {len(steps)} {STEP_PREFIX}* folders"
        return Located(given, NONE, None, [Problem("missing-file", "file", ITERATION_FILE, detail)])
    return Located(given, DEFAULT, None, [])


def locate_actor(actor: Path) -> Located:
    """An ``actor`` folder: the first layout whose save is in it (its ``dist_ckpt``; with mbridge its
    ``huggingface`` safetensors)."""
    found = _in_actor(actor)
    if found is not None:
        return found
    detail = f"neither {DIST}/ nor {HF}/ safetensors: the save did not finish (or saved no model)"
    return Located(actor, NONE, None, [Problem("incomplete", "file", ACTOR, detail)])


def _in_actor(actor: Path) -> Located | None:
    for layout in LAYOUTS.values():
        folder = layout.inside(actor)
        if folder is not None:
            return Located(folder, layout.kind, _config(actor), [])
    return None


def _follow(top: Path) -> Located:
    """default_local_dir: the save its iteration file names."""
    step = _read_iteration(top / ITERATION_FILE)
    if isinstance(step, Problem):
        return Located(top, "none", None, [step])
    name = f"{STEP_PREFIX}{step}"
    actor = top / name / ACTOR
    if not is_dir(top / name) or not is_dir(actor):
        missing = name if not is_dir(top / name) else f"{name}/{ACTOR}"
        detail = f"names step {step}, but {missing} is not there: verl's resume would fail (or start over)"
        return Located(top, "none", None, [Problem("missing-save", "file", ITERATION_FILE, detail)])
    found = locate_actor(actor)
    problems = [p._replace(subject=f"{name}/{p.subject}") for p in found.problems]
    return found._replace(problems=problems, via=f"{ITERATION_FILE} names step {step}")


def _read_iteration(path: Path) -> int | Problem:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return Problem("unreadable", "file", ITERATION_FILE, f"cannot open it ({e.strerror}; a link is not followed)")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Problem("unreadable", "file", ITERATION_FILE, "not a plain file")
        text = os.read(fd, _MAX_ITERATION_BYTES + 1)
    finally:
        os.close(fd)
    value = text.strip()
    if len(text) > _MAX_ITERATION_BYTES or not value.isdigit() or len(value) > 18:
        return Problem("unreadable", "file", ITERATION_FILE, "not a step number (verl writes one integer)")
    return int(value)


def _config(actor: Path) -> Path | None:
    config = actor / HF / "config.json"
    return config if os.path.isfile(config) and not os.path.islink(config) else None


def check_save(
    given: Path,
    model: ModelShape | None = None,
    config_given: bool = False,
    quick: bool = False,
    prove: bool = False,
    share: frozenset[str] | None = None,
) -> CheckReport:
    """``ckpt check``: the checkpoint ``given`` stands for (:func:`locate`), checked (``prove``: its bytes too,
    those of the data files in ``share`` only when it is given);
    the HF config beside the save is read for ``model`` when none was given. Returns the CheckReport (its
    ``checkpoint``: the folder checked)."""
    from ascendfix.checkpoint.report import CheckReport

    found = locate(given)
    if found.kind == NONE:
        return CheckReport(str(found.folder), 0, 0, 0, 0, found.problems)
    if model is None and not config_given:
        model = config_model(found)
    return in_save(found, LAYOUTS[found.kind].check(found.folder, model, quick, prove, share))


def config_model(found: Located) -> ModelShape | None:
    """The model's shape from the HF config beside the save ``found``, when its layout checks one; else None."""
    from ascendfix.checkpoint import megatron

    if found.config is None or found.kind == NONE or not LAYOUTS[found.kind].reads_config:
        return None
    return megatron.read_config(found.config)


def in_save(found: Located, report: CheckReport) -> CheckReport:
    """``report`` of the checkpoint ``found`` stands for, with the problems met on the way to it."""
    problems = found.problems + report.problems
    if found.via and report.problems:
        detail = f"{found.via}, a save with the problems below: verl would resume from it (and fail, or train on them)"
        problems.insert(0, Problem("incomplete-save", "file", ITERATION_FILE, detail))
    return report._replace(problems=problems)
