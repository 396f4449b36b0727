"""``ckpt check``: is a distributed checkpoint complete? Files, sizes, storage entries, tensors, Megatron's files.

:func:`check` reads ``.metadata`` (never running its pickle), then checks every storage entry's file
(present, a plain file inside the folder, at least ``offset + length`` bytes; no two entries sharing
bytes, no entry that belongs to no item; a ``.distcp`` that no entry names is a warning), every tensor
(:mod:`ascendfix.checkpoint.geometry`; every chunk has an entry) and, for a Megatron checkpoint,
``metadata.json`` and ``common.pt`` (:mod:`ascendfix.checkpoint.megatron`). ``quick`` (``run``'s
preflight) keeps the files, sizes and the metadata's presence and leaves out the tensors' geometry
and reading ``common.pt``.
"""

from __future__ import annotations

import base64
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from operator import add, lt
from pathlib import Path

from ascendfix.checkpoint import bounded, frames, geometry, layout, leftovers, megatron, pickles, proof
from ascendfix.checkpoint.megatron import ModelShape
from ascendfix.checkpoint.report import CheckReport, Problem
from ascendfix.errors import AscendfixError, UsageError
from ascendfix.tuples import NamedTuple

_SHOWN = 3


def check(
    folder: Path,
    model: ModelShape | None = None,
    quick: bool = False,
    prove: bool = False,
    share: frozenset[str] | None = None,
) -> CheckReport:
    """Check the checkpoint in ``folder``; ``model``: the HF config's layer and expert counts, to check too;
    ``prove``: every record's bytes too (``--bytes``, :mod:`ascendfix.checkpoint.proof`), or only those of
    the data files in ``share`` when it is given (``--ray``: this node's share).

    The check runs in a bounded child (:mod:`ascendfix.checkpoint.bounded`): a pickle that kills its
    reader is that file's ``unreadable`` problem. Raises UsageError when ``folder`` is not a folder;
    everything wrong inside it is a :class:`Problem`.
    """
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder (give the checkpoint's folder, the one holding .metadata)")
    shape = None if model is None else [model.layers, model.experts, sorted(model.moe_layers)]
    args = [str(folder), shape, quick, prove, None if share is None else sorted(share)]
    try:
        return CheckReport.from_json(bounded.run(_check_json, args, bounded.MEMORY, layout.METADATA))
    except bounded.Died as e:
        return CheckReport(str(folder), 0, 0, 0, 0, [Problem("unreadable", "file", e.subject, e.detail)])
    except bounded.Failed as e:
        raise (UsageError if e.exit_code == 2 else AscendfixError)(str(e)) from None


def _check_json(folder: str, shape: list | None, quick: bool, prove: bool, share: list | None) -> dict:
    """Inside the bounded child: :func:`checked` of :func:`check`'s arguments as JSON values, its report's JSON."""
    model = None if shape is None else ModelShape(shape[0], shape[1], frozenset(shape[2]))
    return checked(Path(folder), model, quick, prove, None if share is None else frozenset(share))[0].to_json()


class Split(NamedTuple):
    """A save split across the nodes' own disks (``ckpt verify --ray``): what this node checks of it.

    ``metadata``: the save's ``.metadata`` as the node that holds it read it (at most
    :data:`pickles.MAX_PICKLE_BYTES`), parsed here when this folder has none, as that file would be;
    ``files``: the data files this node checks; ``whole``: this node holds the save's own files
    (Megatron's ``metadata.json`` and ``common.pt``, written by rank 0) and checks them; ``held``: the
    data files some node holds."""

    metadata: bytes | None
    files: frozenset[str]
    whole: bool
    held: frozenset[str]

    def as_args(self) -> list:
        """As JSON values (the metadata in base64), for :meth:`from_args` (a bounded child's arguments)."""
        data = None if self.metadata is None else base64.b64encode(self.metadata).decode()
        return [data, sorted(self.files), self.whole, sorted(self.held)]

    @classmethod
    def from_args(cls, value: list) -> Split:
        """The split :meth:`as_args` made."""
        data, files, whole, held = value
        metadata = None if data is None else base64.b64decode(data)
        return cls(metadata, frozenset(files), bool(whole), frozenset(held))


def checked(
    folder: Path,
    model: ModelShape | None = None,
    quick: bool = False,
    prove: bool = False,
    share: frozenset | None = None,
    split: Split | None = None,
) -> tuple[CheckReport, layout.Layout | None]:
    """:func:`check`, run in this process, which must be a bounded child already (``ckpt verify``'s); with the
    ``.metadata`` it read (None when it read none), for the caller to use rather than read again. With
    ``split``, only this node's part of a save split across nodes (:class:`Split`)."""
    whole = split is None or split.whole
    with pickles.no_collection():
        names = _names(folder)
        problems = leftovers.partial_copies(names)
        mixed = leftovers.mixed_save(folder, names)
        problems += mixed
        warnings = tuple(leftovers.stray_mtimes(folder, names, {p.subject for p in mixed}))
        bounded.note(layout.METADATA)
        try:
            metadata = _metadata(folder, split)
        except FileNotFoundError:
            missing = _NO_METADATA if whole else _NOT_SENT
            problems.insert(0, Problem("missing-file", "file", layout.METADATA, missing))
            if whole:
                problems += megatron.layout_problems(folder, megatron_expected=model is not None, quick=quick)
            return CheckReport(str(folder), 0, 0, 0, 0, problems, warnings), None
        except (OSError, pickles.UnsafePickle, pickles.Unreadable, layout.Malformed) as e:
            kind = "unsafe-pickle" if isinstance(e, pickles.UnsafePickle) else "unreadable"
            problems.insert(0, Problem(kind, "file", layout.METADATA, str(e)))
            if whole:
                problems += megatron.layout_problems(folder, megatron_expected=model is not None, quick=quick)
            return CheckReport(str(folder), 0, 0, 0, 0, problems, warnings), None
        expected = model is not None or metadata.megatron
        if whole:
            problems += megatron.layout_problems(folder, megatron_expected=expected, quick=quick)
        bounded.step(layout.METADATA)  # its tensors' geometry: bounded in time like the pickle
        tensor_problems, readable = _tensors(metadata, with_geometry=not quick)
        records = _expected(metadata) if prove else None
        only = None if split is None else split.files
        file_problems, files, size, proven, unproven = _files(folder, metadata.entries, records, share, only)
        problems += tensor_problems + file_problems
        warnings += tuple(leftovers.extra_files(names, set(metadata.entries.paths)))
        if model is not None:
            problems += megatron.config_problems(readable, model)
        chunks = sum(len(t.offsets) for t in metadata.tensors)
        report = CheckReport(
            str(folder), len(metadata.tensors), chunks, files, size, problems, warnings + tuple(unproven)
        )
        return (report._replace(proven_bytes=proven) if prove else report), metadata


def _metadata(folder: Path, split: Split | None) -> layout.Layout:
    """``folder``'s ``.metadata``; in a split save on a node that lacks it, the bytes the split brought, read
    alike (the same cap, the same reader)."""
    if split is None or split.metadata is None or os.path.lexists(folder / layout.METADATA):
        return layout.read(folder)
    if len(split.metadata) > pickles.MAX_PICKLE_BYTES:
        raise pickles.Unreadable(f"more than {pickles.MAX_PICKLE_BYTES:,} bytes")
    return layout.parse(split.metadata)


def _expected(metadata: layout.Layout) -> list[proof.Chunk | None]:
    """What each storage entry's record must hold: its chunk's dtype and sizes, None for a bytes item
    (or an entry of no chunk: an orphan, reported as such)."""
    chunks: dict[tuple[str, tuple | None], proof.Chunk] = {}
    for tensor in metadata.tensors:
        for offsets, sizes in zip(tensor.offsets, tensor.sizes, strict=True):
            chunks[tensor.name, offsets] = proof.Chunk(tensor.dtype, sizes)
    return [chunks.get(key) for key in zip(metadata.entries.fqns, metadata.entries.offsets, strict=True)]


_NO_METADATA = "no .metadata: the save did not finish (rank 0 writes it last), or this is not a DCP checkpoint"
_NOT_SENT = "not on this node, and the node that holds the split save's .metadata sent none (its own report says why)"


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _tensors(metadata: layout.Layout, with_geometry: bool) -> tuple[list[Problem], list[layout.Tensor]]:
    """Each tensor's problems (geometry unless not ``with_geometry``; every chunk stored once), and the
    tensors whose chunks are int offsets and sizes of their rank (the others are a problem)."""
    problems, readable = [], []
    stored = _stored_offsets(metadata.entries)
    for tensor in metadata.tensors:
        name = tensor.name
        malformed = geometry.malformed(tensor.shape, tensor.offsets, tensor.sizes)
        if malformed:
            problems.append(Problem("malformed", "tensor", name, malformed))
            continue
        found = geometry.check(tensor.shape, tensor.offsets, tensor.sizes) if with_geometry else []
        problems += [Problem(f.kind, "tensor", name, f.detail) for f in found or ()]
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


def _files(
    folder: Path,
    entries: layout.Entries,
    expected: list | None = None,
    share: frozenset | None = None,
    only: frozenset | None = None,
) -> tuple[list[Problem], int, int, int, list]:
    """Each entry's file (of the files in ``only``, when given): inside the folder, a plain file, long enough;
    no shared bytes; each entry's zip frame there (:mod:`ascendfix.checkpoint.frames`), and with ``expected``
    (each entry's chunk) its bytes proven (of the files in ``share`` only, when given); the files read in
    parallel.
    Returns the problems, the file count, their bytes, the bytes proven and the warnings of records saved
    without CRC-32s."""
    by_file: dict[str, list[tuple[int, int]]] = {}  # file -> its entries, as runs (first index, count)
    at = 0
    for path, run in groupby(entries.paths):  # a rank's entries come together: one run per file, mostly
        count = len(list(run))
        by_file.setdefault(path, []).append((at, at + count))
        at += count
    paths = sorted(by_file if only is None else set(by_file) & only)
    with ThreadPoolExecutor(min(_READERS, max(1, len(paths)))) as pool:  # reads release the GIL
        found = list(
            pool.map(
                lambda path: _file(
                    folder, path, by_file[path], entries, expected if share is None or path in share else None
                ),
                paths,
            )
        )
    problems = [p for f in found for p in f.problems]
    total = sum(f.size for f in found)
    proven = sum(f.proven for f in found)
    unproven = [w for f in found if f.unproven for w in [_no_crc(f.path, f.unproven)]]
    return problems, len(paths), total, proven, unproven


_READERS = min(8, os.cpu_count() or 1)  # short reads: more threads than cores only trade the GIL


class _File(NamedTuple):
    """One data file's answer: its problems, size, the bytes proven, the records saved without CRC-32s."""

    path: str
    problems: list[Problem]
    size: int = 0
    proven: int = 0
    unproven: int = 0


def _no_crc(path: str, count: int) -> Problem:
    detail = f"{count} record(s) saved without CRC-32s (torch.serialization.set_crc32_options(False)): not proven"
    return Problem("no-crc", "file", path, detail)


def _file(
    folder: Path,
    path: str,
    runs: list[tuple[int, int]],
    entries: layout.Entries,
    expected: list[proof.Chunk | None] | None,
) -> _File:
    """One data file's problems (its entries: the index ``runs``), its size and, with ``expected``, its proof."""
    bounded.step(path)
    try:
        return _checked_file(folder, path, runs, entries, expected)
    except (ValueError, ArithmeticError, LookupError, TypeError) as e:  # this file's problem, never the others'
        return _File(path, [Problem("unreadable", "file", path, f"checking it failed ({type(e).__name__})")])


def _checked_file(
    folder: Path,
    path: str,
    runs: list[tuple[int, int]],
    entries: layout.Entries,
    expected: list[proof.Chunk | None] | None,
) -> _File:
    count = sum(b - a for a, b in runs)
    if not _contained(path):
        return _File(path, [Problem("unsafe-path", "file", path, "a storage entry names a file outside the folder")])
    if "/" in path and _through_link(folder, path):
        return _File(path, [Problem("unsafe-path", "file", path, "a symbolic link in its folders: not followed")])
    try:
        fd = os.open(folder / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return _File(path, [Problem("missing-file", "file", path, f"missing; it holds {_entries_word(count)}")])
    except OSError as e:
        if os.path.islink(folder / path):
            return _File(path, [Problem("unsafe-path", "file", path, "a symbolic link: not followed")])
        return _File(path, [Problem("unreadable", "file", path, f"cannot open it ({e.strerror})")])
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _File(path, [Problem("unsafe-path", "file", path, "not a plain file: not followed")])
        return _frames(fd, path, info.st_size, runs, entries, expected)
    finally:
        os.close(fd)


def _frames(
    fd: int,
    path: str,
    size: int,
    runs: list[tuple[int, int]],
    entries: layout.Entries,
    expected: list[proof.Chunk | None] | None,
) -> _File:
    """The file's sizes, shared bytes and records' frames; with ``expected``, the bytes of those framed well."""
    starts = [s for a, b in runs for s in entries.starts[a:b]] if len(runs) > 1 else entries.starts[slice(*runs[0])]
    lengths = [n for a, b in runs for n in entries.lengths[a:b]] if len(runs) > 1 else entries.lengths[slice(*runs[0])]
    indices: list[int] | range = [i for a, b in runs for i in range(a, b)] if len(runs) > 1 else range(*runs[0])
    if max(starts) >= geometry.MAX_EXTENT or max(lengths) >= geometry.MAX_EXTENT:
        return _File(path, [Problem("malformed", "file", path, "a storage entry's start or length is past 2**63")])
    stops = list(map(add, starts, lengths))
    if starts != sorted(starts):  # a writer's entries come in file order: then no sort is needed
        order = sorted(range(len(starts)), key=starts.__getitem__)
        indices, starts, lengths, stops = ([column[k] for k in order] for column in (indices, starts, lengths, stops))
    problems = []
    end = max(stops)
    if size < end:
        cut = [k for k, e in enumerate(stops) if e > size]
        first = indices[cut[0]]
        offsets = entries.offsets[first]
        chunk = "(bytes item)" if offsets is None else str(list(offsets))
        named = f"the first: {entries.fqns[first]} {chunk}, bytes {starts[cut[0]]:,}-{stops[cut[0]]:,}"
        detail = f"{size:,} bytes, but its entries reach byte {end:,}: truncated ({len(cut)} entries cut; {named})"
        problems.append(Problem("truncated", "file", path, detail, entries.fqns[first], entries.offsets[first]))
        inside = [k for k, e in enumerate(stops) if e <= size]
        indices, starts, lengths, stops = ([column[k] for k in inside] for column in (indices, starts, lengths, stops))
    shared = sum(map(lt, starts[1:], stops))
    if shared:
        detail = f"{shared} storage entr{'y shares' if shared == 1 else 'ies share'} bytes with the one before"
        problems.append(Problem("duplicate", "file", path, detail))
    try:
        bad = frames.frame_problems(fd, starts, lengths)
        problems += record_problems(path, [(indices[b.index], b.what) for b in bad], entries)
        if expected is None:
            return _File(path, problems, size)
        framed = sorted(set(range(len(starts))) - {b.index for b in bad})
        indices, starts, lengths = ([column[k] for k in framed] for column in (indices, starts, lengths))
        found = proof.prove_file(fd, starts, lengths, [expected[i] for i in indices])
    except OSError as e:
        return _File(path, [*problems, Problem("unreadable", "file", path, f"cannot read it ({e.strerror})")], size)
    for kind in sorted({f.kind for f in found.bad}):
        problems += record_problems(
            path, [(indices[f.index], f.what) for f in found.bad if f.kind == kind], entries, kind
        )
    return _File(path, problems, size, found.proven, found.without_crc)


def record_problems(path: str, bad: list[tuple[int, str]], entries: layout.Entries, kind: str = "corrupt") -> list:
    """``bad``: (entry index, what is wrong) in ``path``; the first few named with their item, then a count."""
    problems = []
    for i, what in bad[:_SHOWN]:
        start, length = entries.starts[i], entries.lengths[i]
        fqn, offsets = entries.fqns[i], entries.offsets[i]
        chunk = "(bytes item)" if offsets is None else str(list(offsets))
        detail = f"{fqn} {chunk}, bytes {start:,}-{start + length:,}: {what}"
        problems.append(Problem(kind, "file", path, detail, fqn, offsets))
    if len(bad) > _SHOWN:
        i, what = bad[_SHOWN]
        detail = f"and {len(bad) - _SHOWN} more of its {_entries_word(len(bad))} like that"
        problems.append(Problem(kind, "file", path, detail, entries.fqns[i], entries.offsets[i]))
    return problems


def _through_link(folder: Path, path: str) -> bool:
    """Whether a folder on ``path`` (below ``folder``) is a symbolic link or not a folder."""
    parts = path.split("/")[:-1]
    for n in range(1, len(parts) + 1):
        try:
            if not stat.S_ISDIR(os.lstat(folder.joinpath(*parts[:n])).st_mode):
                return True
        except OSError:
            return False  # missing: the open says so
    return False


def _entries_word(count: int) -> str:
    return f"{count} storage {'entry' if count == 1 else 'entries'}"


def _contained(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and "\0" not in path and not path.startswith("/") and ".." not in parts and "\\" not in path
