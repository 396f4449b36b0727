"""``ckpt check``: is a distributed checkpoint complete? Files, sizes, storage entries, tensors, Megatron's files.

:func:`check` reads ``.metadata`` (never running its pickle), then checks every storage entry's file
(present, a plain file inside the folder, at least ``offset + length`` bytes; no two entries sharing
bytes, no entry that belongs to no item, no ``.distcp`` file that no entry names), every tensor
(:mod:`ascendfix.checkpoint.geometry`; every chunk has an entry) and, for a Megatron checkpoint,
``metadata.json`` and ``common.pt`` (:mod:`ascendfix.checkpoint.megatron`). ``quick`` (``run``'s
preflight) keeps the files, sizes and the metadata's presence and leaves out the tensors' geometry
and reading ``common.pt``.
"""

from __future__ import annotations

import os
import stat
from itertools import groupby
from operator import add, lt
from pathlib import Path

from ascendfix.checkpoint import geometry, layout, megatron, pickles
from ascendfix.checkpoint.megatron import ModelShape
from ascendfix.checkpoint.report import CheckReport, Problem
from ascendfix.errors import UsageError

DATA_SUFFIX = ".distcp"
_SHOWN = 3


def check(folder: Path, model: ModelShape | None = None, quick: bool = False) -> CheckReport:
    """Check the checkpoint in ``folder``; ``model``: the HF config's layer and expert counts, to check too.

    Raises UsageError when ``folder`` is not a folder; everything wrong inside it is a :class:`Problem`.
    """
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder (give the checkpoint's folder, the one holding .metadata)")
    with pickles.no_collection():
        return _check(folder, model, quick)


def _check(folder: Path, model: ModelShape | None, quick: bool) -> CheckReport:
    problems = megatron.layout_problems(folder, megatron_expected=model is not None, quick=quick)
    try:
        metadata = layout.read(folder)
    except FileNotFoundError:
        problems.insert(0, Problem("missing-file", "file", layout.METADATA, _NO_METADATA))
        return CheckReport(str(folder), 0, 0, 0, 0, problems)
    except (OSError, pickles.UnsafePickle, pickles.Unreadable, layout.Malformed) as e:
        kind = "unsafe-pickle" if isinstance(e, pickles.UnsafePickle) else "unreadable"
        problems.insert(0, Problem(kind, "file", layout.METADATA, str(e)))
        return CheckReport(str(folder), 0, 0, 0, 0, problems)
    tensor_problems, readable = _tensors(metadata, with_geometry=not quick)
    file_problems, files, size = _files(folder, metadata.entries)
    problems += tensor_problems + file_problems
    if model is not None:
        problems += megatron.config_problems(readable, model)
    chunks = sum(len(t.offsets) for t in metadata.tensors)
    return CheckReport(str(folder), len(metadata.tensors), chunks, files, size, problems)


_NO_METADATA = "no .metadata: the save did not finish (rank 0 writes it last), or this is not a DCP checkpoint"


def _tensors(metadata: layout.Layout, with_geometry: bool) -> tuple[list[Problem], list[layout.Tensor]]:
    """Each tensor's problems (geometry unless not ``with_geometry``; every chunk stored once), and the
    tensors whose chunks are int offsets and sizes of their rank (the others are a problem)."""
    problems, readable = [], []
    stored = _stored_offsets(metadata.entries)
    for tensor in metadata.tensors:
        name = tensor.name
        if with_geometry:
            found = geometry.check(tensor.shape, tensor.offsets, tensor.sizes)
        else:
            found = None if geometry.boxes(tensor.shape, tensor.offsets, tensor.sizes) is None else []
        if found is None:
            problems.append(Problem("malformed", "tensor", name, "its chunks are not int offsets and sizes"))
            continue
        problems += [Problem(f.kind, "tensor", name, f.detail) for f in found]
        problems += _stored_once(name, tensor.offsets, stored.pop(name, []))
        readable.append(tensor)
    for name in metadata.blobs:
        problems += _stored_once(name, [None], stored.pop(name, []))
    for name, offsets in stored.items():
        problems.append(Problem("orphan", "tensor", name, f"{_entries_word(len(offsets))} for no item of the metadata"))
    return problems, readable


def _stored_offsets(entries: layout.Entries) -> dict[str, list]:
    """Item name -> the offsets of its storage entries (None for a bytes item); a rank's entries of one
    tensor come together, so this walks runs of one name, not entries."""
    stored: dict[str, list] = {}
    at = 0
    for fqn, run in groupby(entries.fqns):
        count = len(list(run))
        stored.setdefault(fqn, []).extend(entries.offsets[at : at + count])
        at += count
    return stored


def _stored_once(name: str, chunks: list, offsets: list) -> list[Problem]:
    """The item's chunks (their offsets, or [None]) each have exactly one storage entry (``offsets``: the entries')."""
    wanted = set(chunks)
    have = wanted if offsets == chunks else set(offsets)  # entries written in the chunks' order: one set
    if have == wanted and len(offsets) == len(have):
        return []
    problems = []
    missing = wanted - have
    if missing:
        shown = ", ".join("(bytes item)" if o is None else str(list(o)) for o in sorted(missing, key=str)[:_SHOWN])
        more = f" (and {len(missing) - _SHOWN} more)" if len(missing) > _SHOWN else ""
        problems.append(Problem("no-storage", "tensor", name, f"no storage entry for chunk(s) at {shown}{more}"))
    if len(offsets) > len(have):
        twice = len(offsets) - len(have)
        problems.append(Problem("duplicate", "tensor", name, f"{twice} chunk(s) with more than one storage entry"))
    extra = have - wanted
    if extra:
        problems.append(Problem("orphan", "tensor", name, f"{_entries_word(len(extra))} for no chunk of the tensor"))
    return problems


def _files(folder: Path, entries: layout.Entries) -> tuple[list[Problem], int, int]:
    """Each entry's file: inside the folder, a plain file, long enough; no shared bytes; no stray data file."""
    problems = []
    by_file: dict[str, tuple[list, list]] = {}  # file -> (starts, ends) of its entries
    ends = list(map(add, entries.starts, entries.lengths))
    at = 0
    for path, run in groupby(entries.paths):  # a rank's entries come together: one run per file, mostly
        count = len(list(run))
        starts, stops = by_file.setdefault(path, ([], []))
        starts += entries.starts[at : at + count]
        stops += ends[at : at + count]
        at += count
    total = 0
    for path in sorted(by_file):
        starts, stops = by_file[path]
        if not _contained(path):
            problems.append(Problem("unsafe-path", "file", path, "a storage entry names a file outside the folder"))
            continue
        try:
            info = os.lstat(folder / path)
        except OSError:
            detail = f"missing; it holds {_entries_word(len(starts))}"
            problems.append(Problem("missing-file", "file", path, detail))
            continue
        if not stat.S_ISREG(info.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a plain file"
            problems.append(Problem("unsafe-path", "file", path, f"{what}: not followed"))
            continue
        total += info.st_size
        end = max(stops)
        if info.st_size < end:
            short = sum(1 for e in stops if e > info.st_size)
            detail = f"{info.st_size:,} bytes, but its entries reach byte {end:,}: truncated ({short} entries cut)"
            problems.append(Problem("truncated", "file", path, detail))
        if starts != sorted(starts):  # a writer's entries come in file order: then no sort is needed
            starts, stops = map(list, zip(*sorted(zip(starts, stops, strict=True)), strict=True))
        shared = sum(map(lt, starts[1:], stops))
        if shared:
            detail = f"{shared} storage entr{'y shares' if shared == 1 else 'ies share'} bytes with the one before"
            problems.append(Problem("duplicate", "file", path, detail))
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    for name in sorted(n for n in names if n.endswith(DATA_SUFFIX) and n not in by_file):
        problems.append(Problem("orphan", "file", name, "no storage entry names this data file (an older save?)"))
    return problems, len(by_file), total


def _entries_word(count: int) -> str:
    return f"{count} storage {'entry' if count == 1 else 'entries'}"


def _contained(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and "\0" not in path and not path.startswith("/") and ".." not in parts and "\\" not in path
