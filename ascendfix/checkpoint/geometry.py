"""Each tensor's chunks: inside its bounds, no two overlapping, together covering it exactly.

The overlap scan is the fast-validate template's own (``patches/templates/fast_overlap.py``, which a
transform inserts into torch): that file is loaded here as a module, and its ``_ascendfix_boxes`` and
``_ascendfix_overlapping_pairs`` run on the chunks, so torch's patched checks and this one are one
implementation: a hash lookup when the chunks form a grid, else a sweep. With every chunk in bounds
and none overlapping, the chunks cover the tensor exactly when their volumes add up to its volume.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Sequence
from itertools import chain, islice, product
from operator import add

from ascendfix.resources import data_dir
from ascendfix.tuples import NamedTuple

TEMPLATE = "templates/fast_overlap.py"
_SHOWN = 3  # overlapping pairs named per tensor
MAX_RANK = 64  # a tensor's dimensions: a checkpoint's have a few
MAX_EXTENT = 1 << 63  # a dimension, offset or size: torch's int64
MAX_COMPARISONS = 1 << 21  # box comparisons the overlap sweep may make for one tensor (a few seconds)


class ChunkProblem(NamedTuple):
    """A tensor's problem: ``kind`` (out-of-bounds, overlap, gap, malformed) and what it is."""

    kind: str
    detail: str


@functools.cache
def template():
    """The fast-validate template, loaded as a module (it imports nothing outside the stdlib)."""
    import importlib.util

    path = data_dir("patches") / TEMPLATE
    spec = importlib.util.spec_from_file_location("ascendfix_fast_overlap_template", path)
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def boxes(shape: tuple, offsets: list, sizes: list) -> list | None:
    """The chunks as ``[(offsets, sizes)]``, or None unless every offset and size is an int tuple of the tensor's rank.

    The boxes the template's ``_ascendfix_boxes`` would make (without the dimension picking torch's callers need).
    """
    columns = _columns(len(shape), offsets, sizes)
    return None if columns is None else list(zip(offsets, sizes, strict=True))


def malformed(shape: tuple, offsets: list, sizes: list) -> str:
    """Why a tensor's shape and chunks cannot be checked, "" when they can: more than :data:`MAX_RANK` dimensions,
    a value outside int64, chunks that are not int tuples of the shape's rank. Nothing is multiplied before this
    holds, so no product is ever larger than 63 bits times :data:`MAX_RANK`."""
    if len(shape) > MAX_RANK:
        return f"its shape has {len(shape):,} dimensions; a tensor has at most {MAX_RANK}"
    if not all(0 <= n < MAX_EXTENT for n in shape):
        return "its shape has a dimension outside 0 to 2**63"
    columns = _columns(len(shape), offsets, sizes)
    if columns is None:
        return "its chunks are not int offsets and sizes"
    if not all(-MAX_EXTENT < min(c) and max(c) < MAX_EXTENT for c in chain(*columns) if c):
        return "a chunk's offset or size outside int64"
    return ""


def check(shape: tuple, offsets: list, sizes: list) -> list[ChunkProblem] | None:
    """:func:`findings` of the chunks ``offsets`` and ``sizes``, or None where :func:`boxes` is None."""
    columns = _columns(len(shape), offsets, sizes)
    if columns is None:
        return None
    return _findings(shape, list(zip(offsets, sizes, strict=True)), sizes, *columns)


def findings(shape: tuple, chunks: list) -> list[ChunkProblem]:
    """Bounds, overlap and exact cover of ``chunks`` (from :func:`boxes`) over a tensor of ``shape``."""
    if not chunks:
        return _findings(shape, chunks, [], [], [])
    starts, sizes = zip(*chunks, strict=True)
    return _findings(shape, chunks, sizes, list(zip(*starts, strict=True)), list(zip(*sizes, strict=True)))


def _columns(rank: int, offsets: list, sizes: list) -> tuple[list, list] | None:
    """The offsets' and the sizes' values one tuple per dimension, or None unless all are int tuples of ``rank``."""
    if (set(map(type, offsets)) | set(map(type, sizes))) - {tuple}:
        return None
    if not offsets and not sizes:
        return [()] * rank, [()] * rank
    try:
        starts, lengths = list(zip(*offsets, strict=True)), list(zip(*sizes, strict=True))
    except ValueError:  # tuples of more than one length
        return None
    if len(offsets) != len(sizes) or {len(offsets[0]), len(sizes[0])} != {rank}:
        return None
    if list(map(type, chain.from_iterable(starts + lengths))).count(int) != 2 * rank * len(offsets):
        return None
    return starts, lengths


def _findings(
    shape: tuple, chunks: list, sizes: Sequence, start_columns: list, size_columns: list
) -> list[ChunkProblem]:
    """:func:`findings`, given the chunks' sizes and both their columns (one tuple per dimension)."""
    if not chunks:
        return [ChunkProblem("gap", "no chunk at all")] if math.prod(shape) else []
    start_values, size_values = list(map(set, start_columns)), list(map(set, size_columns))  # a few values each
    found = _bounds(shape, chunks, start_columns, size_columns, start_values, size_values)
    if found:
        return found
    solid = chunks
    if any(0 in values for values in size_values):
        solid = [b for b in chunks if all(b[1])]
        sizes = [s for _, s in solid]
    crowd = _crowd(solid)
    if crowd:
        return [ChunkProblem("unchecked", f"overlap not checked: {crowd:,} chunks active at once")]
    pairs = list(islice(template()._ascendfix_overlapping_pairs(solid), _SHOWN + 1))  # made lazily
    if pairs:
        shown = "; ".join(f"{_box(solid[i])} and {_box(solid[j])}" for i, j in pairs[:_SHOWN])
        more = " (and more pairs)" if len(pairs) > _SHOWN else ""
        return [ChunkProblem("overlap", f"chunks overlap: {shown}{more}")]
    if all(len(values) == 1 for values in size_values):  # chunks of one shape (a tensor split evenly)
        covered = len(sizes) * math.prod(sizes[0]) if sizes else 0
    else:
        covered = sum(map(math.prod, sizes))
    total = math.prod(shape)
    if covered != total:
        return [ChunkProblem("gap", f"chunks cover {covered:,} of {total:,} elements: {_first_hole(shape, solid)}")]
    return []


def _crowd(boxes: list) -> int:
    """0 when the template's scan of ``boxes`` is cheap: a grid (a hash lookup), or a sweep that makes at most
    :data:`MAX_COMPARISONS` comparisons; else the most boxes its sweep holds active at once. Counted, never made:
    the sweep's order and dimension, in O(n log n)."""
    if not boxes or template()._ascendfix_groups(boxes) is not None:
        return 0
    ndims = len(boxes[0][0])
    d = max(range(ndims), key=lambda k: len({offsets[k] for offsets, _ in boxes}))  # the template's dimension
    ends: list[int] = []
    comparisons = peak = 0
    for start, end in sorted(((o[d], o[d] + s[d]) for o, s in boxes), key=lambda span: span[0]):
        while ends and ends[0] <= start:
            heapq.heappop(ends)
        comparisons += len(ends)
        if end > start:
            heapq.heappush(ends, end)
            peak = max(peak, len(ends))
    return peak if comparisons > MAX_COMPARISONS else 0


def _bounds(
    shape: tuple, chunks: list, starts: list, sizes: list, start_values: list, size_values: list
) -> list[ChunkProblem]:
    """Chunks reaching outside the tensor (or of a negative size); ``starts``, ``sizes``: one tuple per dimension,
    ``start_values``, ``size_values``: one set of the distinct values per dimension."""
    if all(
        min(size_values[d]) >= 0
        and min(start_values[d]) >= 0
        and (max(start_values[d]) + max(size_values[d]) <= length or max(map(add, starts[d], sizes[d])) <= length)
        for d, length in enumerate(shape)
    ):
        return []
    outside = [b for b in chunks if any(o < 0 or s < 0 or o + s > n for o, s, n in zip(*b, shape, strict=True))]
    shown = ", ".join(_box(b) for b in outside[:_SHOWN])
    more = f" (and {len(outside) - _SHOWN} more)" if len(outside) > _SHOWN else ""
    return [ChunkProblem("out-of-bounds", f"chunks outside the tensor's shape {list(shape)}: {shown}{more}")]


def _box(box: tuple) -> str:
    offsets, sizes = box
    return f"[{', '.join(f'{o}:{o + s}' for o, s in zip(offsets, sizes, strict=True))}]"


def _first_hole(shape: tuple, chunks: list) -> str:
    """Where the first uncovered part lies: an uncovered range of one dimension, or a missing grid cell."""
    ranges = []
    for d, length in enumerate(shape):
        spans = sorted({(o[d], o[d] + s[d]) for o, s in chunks})
        reached = 0
        for start, end in spans:
            if start > reached:
                return f"no chunk covers {reached}:{start} of dimension {d}"
            reached = max(reached, end)
        if reached < length:
            return f"no chunk covers {reached}:{length} of dimension {d}"
        if any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
            return "the chunks do not form a grid"
        ranges.append(spans)
    present = {tuple((a, a + b) for a, b in zip(o, s, strict=True)) for o, s in chunks}
    for cell in product(*ranges):
        if cell not in present:
            return f"no chunk at [{', '.join(f'{a}:{b}' for a, b in cell)}]"
    return "the chunks do not form a grid"
