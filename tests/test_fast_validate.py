"""fast-validate: the patched torch checkpoint validators behave exactly like the stock ones.

The stock and patched functions are the real bodies from the torch wheels, 2.5.0 to 2.14.1 (see
tests/torch_standins.py); the hypothesis properties run on one release per distinct body
(``upstream.EQUIVALENCE_VERSIONS``). ``ASCENDFIX_EQUIVALENCE_EXAMPLES`` sets the examples per
property (benchmarks/dcp_validation.py --equivalence runs 10,000); CI runs a fixed, derandomized set.
Where torch itself is installed (a CPU build is enough), the same properties also run on its real
modules and types, stock against patched; without torch those two tests skip.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ascendfix.resources import data_dir
from ascendfix.transforms import registry
from ascendfix.transforms.base import TransformError, marker
from ascendfix.transforms.fast_overlap import FastOverlapScan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import upstream
from tests.torch_standins import (
    PLAN_FUNCTIONS,
    SHARD_FUNCTIONS,
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    Recorder,
    ShardMetadata,
    Size,
    TensorStorageMetadata,
    load,
    outcome,
)

pytestmark = pytest.mark.upstream

VERSIONS = list(upstream.TORCH_WHEELS)
PAIRWISE = [v for v in VERSIONS if tuple(map(int, v.split("."))) < (2, 10)]  # before torch's sort-and-sweep
TEMPLATE = "templates/fast_overlap.py"
SHARD = FastOverlapScan("_find_nd_overlapping_shards", TEMPLATE)
PLAN = FastOverlapScan("_validate_global_plan", TEMPLATE)
CASES = [(SHARD, upstream.SHARD_INTERNALS), (PLAN, upstream.DEFAULT_PLANNER)]
EXAMPLES = int(os.environ.get("ASCENDFIX_EQUIVALENCE_EXAMPLES", "250"))
EQUIVALENCE = settings(
    max_examples=EXAMPLES,
    derandomize=EXAMPLES <= 1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _source(version: str, path: str) -> bytes:
    return (upstream.torch_tree(version) / path).read_bytes()


# the template's own; none (its fast path from the first position); a switch mid-scan; none, and every layout that
# is not a grid answered by the planar search, or by each box's fewest dimension where every size is positive
# (whatever its sweeps would cost, however many pairs it finds)
BUDGETS = (None, -1, 3, "planar", "fewest", "tight")
INTERLEAVED = ("_ascendfix_pairwise", "_ascendfix_sweeping")  # the helpers that hand out stock's candidates first
# _ascendfix_swept's thresholds, so it always takes the planar search; each box's fewest dimension (else, planar)
PLANAR = {"few": -(2**40), "fewest": 2**40, "planar": -(2**40), "cap": 2**40}
FEWEST = {**PLANAR, "fewest": 0}
TIGHT = {**PLANAR, "planar": 2**40}  # no sweep, no search: stock's candidates, filtered


def with_budget(namespace: dict, budget: int | str | None) -> dict:
    """``namespace`` with the stock-candidate budget of its interleaving helper set to ``budget`` (None: its own;
    "planar", "fewest", "tight": none, and that search, or stock's candidates filtered, wherever the boxes are not a
    grid)."""
    if budget in ("planar", "fewest", "tight"):
        forced = {"planar": PLANAR, "fewest": FEWEST, "tight": TIGHT}[budget]
        namespace["_ascendfix_swept"] = functools.partial(namespace["_ascendfix_swept"], **forced)
        budget = -1
    if budget is not None:
        for name in set(INTERLEAVED) & set(namespace):
            namespace[name] = functools.partial(namespace[name], budget=budget)
    return namespace


def _load_pair(version: str) -> tuple[str, dict]:
    """(version, {path: ((stock, logger), (patched, logger))}) for both modules of one torch release; the patched
    namespace's stock-candidate budget is the template's own. ``loaded[(path, budget)]``: the patched one at each
    of :data:`BUDGETS`, so the properties check the stock prefix, the fast path, a switch and the planar search."""
    loaded = {}
    for transform, path, names in (
        (SHARD, upstream.SHARD_INTERNALS, SHARD_FUNCTIONS),
        (PLAN, upstream.DEFAULT_PLANNER, PLAN_FUNCTIONS),
    ):
        stock = _source(version, path)
        patched = transform.apply(stock, "torch-check").code
        loaded[path] = (load(stock, names), load(patched, names))
        for budget in BUDGETS:
            namespace, logger = load(patched, names)
            loaded[(path, budget)] = (with_budget(namespace, budget), logger)
    return version, loaded


@pytest.fixture(scope="module", params=upstream.EQUIVALENCE_VERSIONS)
def pair(request):
    """(stock, patched) namespaces of both modules of one release per distinct body, each with its logger."""
    return _load_pair(request.param)


@pytest.fixture(scope="module", params=VERSIONS)
def any_pair(request):
    """The same for every torch release fast-validate knows."""
    return _load_pair(request.param)


# --- layouts ---------------------------------------------------------------------------------


def _grid(draw, shape):
    """Chunks that tile ``shape`` (a few pieces per dimension)."""
    per_dim = []
    for size in shape:
        cuts = draw(st.lists(st.integers(1, max(size - 1, 1)), max_size=3 if len(shape) <= 2 else 2, unique=True))
        points = [0, *sorted(c for c in cuts if 0 < c < size), size]
        per_dim.append([(a, b - a) for a, b in zip(points, points[1:], strict=False)])
    boxes = [((), ())]
    for ranges in per_dim:
        boxes = [(o + (a,), s + (n,)) for o, s in boxes for a, n in ranges]
    return [(list(o), list(s)) for o, s in boxes]


@st.composite
def staircases(draw, ndim: int):
    """One to three staircases ([(offsets, sizes)]): steps of one along every dimension, each step long along one
    dimension and one wide along the others (all active at once along it), placed apart, touching or crossing."""
    boxes = []
    for _ in range(draw(st.integers(1, 3))):
        along, steps, base = draw(st.integers(0, ndim - 1)), draw(st.integers(1, 6)), draw(st.integers(0, 12))
        length = draw(st.integers(1, 6))
        for i in range(steps):
            sizes = [length if d == along else 1 for d in range(ndim)]
            boxes.append(([base + i] * ndim, sizes))
    return draw(st.permutations(boxes))


@st.composite
def layouts(draw, lowest: int):
    """(tensor shape, [(offsets, sizes)]) in 1-4 dims: tilings with gaps, duplicates, shifts,
    zero and (when ``lowest`` < 0) negative values, stray boxes, and now and then a box of another rank."""
    ndim = draw(st.integers(1, 4))
    shape = [draw(st.integers(0, 6)) for _ in range(ndim)]
    value = st.integers(lowest, 7)
    box = st.tuples(st.lists(value, min_size=ndim, max_size=ndim), st.lists(value, min_size=ndim, max_size=ndim))
    kind = draw(st.sampled_from(["grid", "boxes", "staircases"]))
    if kind == "grid":
        boxes = _grid(draw, shape)
    elif kind == "boxes":
        boxes = [(list(o), list(s)) for o, s in draw(st.lists(box, min_size=1, max_size=12))]
    else:
        boxes = draw(staircases(ndim))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["drop", "duplicate", "shift", "resize", "add", "rank"]))
        k = draw(st.integers(0, len(boxes) - 1)) if boxes else 0
        d = draw(st.integers(0, ndim - 1))
        if op == "drop" and len(boxes) > 1:
            boxes.pop(k)
        elif op == "duplicate" and boxes:
            boxes.insert(draw(st.integers(0, len(boxes))), (list(boxes[k][0]), list(boxes[k][1])))
        elif op == "shift" and boxes and d < len(boxes[k][0]):  # a box of another rank may lack d
            boxes[k][0][d] = max(lowest, boxes[k][0][d] + draw(st.sampled_from([-2, -1, 1, 2])))
        elif op == "resize" and boxes and d < len(boxes[k][1]):
            boxes[k][1][d] = draw(st.integers(max(lowest, -1), 4))
        elif op == "add":
            o, s = draw(box)
            boxes.append((list(o), list(s)))
        elif op == "rank" and boxes and draw(st.integers(0, 4)) == 0:
            o, s = boxes[k]
            boxes[k] = (o[:-1], s[:-1]) if draw(st.booleans()) else (o + [0], s + [1])
    return shape, boxes


@st.composite
def plans(draw):
    """(global_plan, Metadata) with a few tensors, a bytes entry and a 0-dim tensor now and then."""
    entries = {}
    for n in range(draw(st.integers(1, 3))):
        shape, boxes = draw(layouts(lowest=-2))
        chunks = [ChunkStorageMetadata(Size(o), Size(s)) for o, s in boxes]
        entries[f"w{n}"] = TensorStorageMetadata(Size(shape), chunks)
    if draw(st.booleans()):
        entries["extra"] = draw(
            st.sampled_from(
                [BytesStorageMetadata(), TensorStorageMetadata(Size([]), [ChunkStorageMetadata(Size([]), Size([]))])]
            )
        )
    return [object()] * draw(st.integers(1, 2)), Metadata(entries)


# --- equivalence -----------------------------------------------------------------------------


@given(layout=layouts(lowest=0))
@EQUIVALENCE
def test_shard_validation_is_unchanged(pair, layout):
    _, loaded = pair
    (stock, stock_log), _ = loaded[upstream.SHARD_INTERNALS]
    _, boxes = layout
    shards = [ShardMetadata(o, s) for o, s in boxes]
    name = "validate_non_overlapping_shards_metadata"
    expected = outcome(stock[name], stock_log, shards)
    for budget in BUDGETS:
        patched, patched_log = loaded[(upstream.SHARD_INTERNALS, budget)]
        assert outcome(patched[name], patched_log, shards) == expected, budget


@given(layout=layouts(lowest=0))
@EQUIVALENCE
def test_nd_scan_reports_the_same_pair(pair, layout):
    _, loaded = pair
    (stock, stock_log), _ = loaded[upstream.SHARD_INTERNALS]
    shape, boxes = layout
    shards = [ShardMetadata(o, s) for o, s in boxes]
    sharded_dims = list(range(len(shape)))  # every dimension, also those the caller would not pass
    name = "_find_nd_overlapping_shards"
    expected = outcome(stock[name], stock_log, shards, sharded_dims)
    for budget in BUDGETS:
        patched, patched_log = loaded[(upstream.SHARD_INTERNALS, budget)]
        assert outcome(patched[name], patched_log, shards, sharded_dims) == expected, budget


@given(plan=plans())
@EQUIVALENCE
def test_plan_validation_is_unchanged(pair, plan):
    _, loaded = pair
    (stock, stock_log), _ = loaded[upstream.DEFAULT_PLANNER]
    name = "_validate_global_plan"
    expected = outcome(stock[name], stock_log, *plan)
    for budget in BUDGETS:
        patched, patched_log = loaded[(upstream.DEFAULT_PLANNER, budget)]
        assert outcome(patched[name], patched_log, *plan) == expected, budget


def _experts(layers: int) -> list[tuple[list[int], list[int]]]:
    """A Megatron expert weight as the checkpoint lists it: one chunk per layer, expert and gate/up half."""
    return [
        ([layer, e, h * 1536, 0], [1, 1, 1536, 4096]) for e in range(128) for layer in range(layers) for h in (0, 1)
    ]


DAMAGE = {
    "clean": lambda boxes: boxes,
    "duplicate": lambda boxes: boxes + [boxes[300]],  # a chunk saved twice: still a grid
    "misaligned": lambda boxes: [*boxes[:5], ([0, 2, 1000, 0], [1, 1, 1536, 4096]), *boxes[5:]],  # a sweep
    "zero-size": lambda boxes: [*boxes, ([1, 7, 100, 0], [1, 1, 0, 4096])],  # inside another chunk
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_realistic_layouts_with_damage(any_pair, damage):
    """The expert tensor of the benchmark, 2 layers deep, clean and damaged: the same answer at scale."""
    _, loaded = any_pair
    boxes = DAMAGE[damage](_experts(2))
    shape = Size([2, 128, 3072, 4096])
    (stock, stock_log), (patched, patched_log) = loaded[upstream.SHARD_INTERNALS]
    shards = [ShardMetadata(o, s) for o, s in boxes]
    name = "validate_non_overlapping_shards_metadata"
    assert outcome(patched[name], patched_log, shards) == outcome(stock[name], stock_log, shards)
    (stock, stock_log), (patched, patched_log) = loaded[upstream.DEFAULT_PLANNER]
    chunks = [ChunkStorageMetadata(Size(o), Size(s)) for o, s in boxes]
    plan = ([object()] * 2, Metadata({"experts": TensorStorageMetadata(shape, chunks)}))
    expected = outcome(stock[PLAN.function], stock_log, *plan)
    assert outcome(patched[PLAN.function], patched_log, *plan) == expected
    assert bool(expected[2]) == (damage != "clean")  # damage is reported, a clean layout is not


def _built(patched: dict, version: str, chunks: list, sweep_dim: int = 1):
    """The plan helper's fast answer for ``chunks`` (what it switches to once stock's candidates total its budget):
    the later list (pairwise torch) or the {idx: earlier} dict (sweeping torch); a filter of stock's candidates
    where no sweep or search is cheap enough."""
    boxes = patched["_ascendfix_boxes"]([c.offsets for c in chunks], [c.sizes for c in chunks], None)
    if version in PAIRWISE:
        later = patched["_ascendfix_later"](boxes, chunks)
        return later if callable(later) else [list(c) for c in later]
    return patched["_ascendfix_in_sweep_order"](boxes, list(range(len(chunks))), sweep_dim)


def test_helpers_take_the_fast_path(any_pair):
    """The equivalence above is not won by falling back: int boxes get an answer, grid or not."""
    version, loaded = any_pair
    (_, _), (patched, _) = loaded[upstream.DEFAULT_PLANNER]
    grid = [ChunkStorageMetadata(Size([r, c]), Size([2, 3])) for r in (0, 2) for c in (0, 3, 6)]
    ragged = [*grid, ChunkStorageMetadata(Size([1, 1]), Size([1, 3])), ChunkStorageMetadata(Size([1, 4]), Size([0, 0]))]
    if version in PAIRWISE:
        assert _built(patched, version, grid + grid[:1]) == [[grid[0]], [], [], [], [], [], []]
        later = _built(patched, version, ragged)
        assert later[0] == [ragged[6]] and later[1] == [ragged[6], ragged[7]]
    else:
        assert _built(patched, version, grid) == {}
        assert _built(patched, version, ragged) == {6: [(3, 0), (6, 1)], 7: [(6, 1)]}
    assert patched["_ascendfix_boxes"]([[0, 1.0]], [[1, 1]], None) is None  # not ints: stock scan runs


def _stairs(n: int) -> list:
    """n disjoint chunks, not a grid, all active at once along dimension 0 (a staircase); none along dimension 1."""
    return [ChunkStorageMetadata(Size([i, i]), Size([n, 1])) for i in range(n)]


def _double_stairs(n: int) -> list:
    """Two staircases, one active along each dimension, disjoint from each other: every sweep compares n^2 / 2."""
    turned = [ChunkStorageMetadata(Size([3 * n + j, 3 * n + j]), Size([1, n])) for j in range(n)]
    return [*_stairs(n), *turned]


def test_the_sweep_takes_the_dimension_where_it_compares_the_fewest(any_pair):
    """A staircase makes a sweep over dimension 0 quadratic (what torch's own sweep and the old template picked);
    over dimension 1 it compares nothing: the fast answer sweeps there, so the layout costs O(n log n)."""
    version, loaded = any_pair
    (_, _), (patched, _) = loaded[upstream.DEFAULT_PLANNER]
    n = 200
    boxes = [(tuple(c.offsets), tuple(c.sizes)) for c in _stairs(n)]
    assert [patched["_ascendfix_sweep_cost"](boxes, d) for d in (0, 1)] == [n * (n - 1) // 2, 0]
    overlapping = [*_stairs(n), ChunkStorageMetadata(Size([0, 0]), Size([1, 1]))]
    found = _built(patched, version, overlapping, sweep_dim=0)
    if version in PAIRWISE:
        assert found[0] == [overlapping[-1]] and not any(found[1:])
    else:
        assert found == {n: [(n, 0)]}


def _crowds(m: int) -> list:
    """Three crowds of m chunks in 3-D, placed apart: crowd g is a staircase one wide along dimension g and m long
    along the other two, so its chunks are disjoint but every two overlap in both other dimensions: every sweep and
    every pair of dimensions meets m^2 / 2 pairs of one crowd."""
    chunks = []
    for g in range(3):
        for i in range(m):
            start = 10 * m * g + i
            chunks.append(ChunkStorageMetadata(Size([start] * 3), Size([1 if d == g else m for d in range(3)])))
    return chunks


def _interlocked(m: int) -> list:
    """Three crowds as in :func:`_crowds`, but each crowd's steps lie within the next crowd's length along that
    dimension (the crowds apart in another one): no two chunks overlap, yet every chunk overlaps m or more in every
    dimension, every sweep meets 2 m^2 pairs and every pair of dimensions a crowd's m^2 / 2."""
    lengths = {0: {1: 5 * m, 2: 0}, 1: {0: 0, 2: 5 * m}, 2: {0: 5 * m, 1: 0}}  # crowd g's start along d != g
    return [
        ChunkStorageMetadata(
            Size([i if d == g else lengths[g][d] for d in range(3)]), Size([1 if d == g else m for d in range(3)])
        )
        for g in range(3)
        for i in range(m)
    ]


def _as_boxes(chunks: list) -> list:
    return [(tuple(c.offsets), tuple(c.sizes)) for c in chunks]


def test_two_staircases_are_answered_by_a_search(any_pair):
    """Two staircases, one active along each dimension: every sweep compares n^2 / 8 (the sweep used to give way to
    torch's scan there). Each chunk is one wide in one dimension, and searches it (the planar search, over the two
    dimensions, finds the same: none, and with an overlap planted, exactly that pair)."""
    version, loaded = any_pair
    (_, _), (patched, _) = loaded[upstream.DEFAULT_PLANNER]
    n = 1100  # past the few hundred per chunk where the planar search starts
    boxes = _as_boxes(_double_stairs(n))
    assert [patched["_ascendfix_sweep_cost"](boxes, d) for d in (0, 1)] == [n * (n - 1) // 2] * 2
    assert patched["_ascendfix_planar"](boxes, 0, 1, 0) == set()
    assert sum(_fewest(patched["_ascendfix_tallies"](boxes, 2))) == 2 * n  # each chunk meets only itself
    found = _built(patched, version, _double_stairs(n), sweep_dim=0)
    assert found is not None and not any(found)
    planted = [*_double_stairs(n), ChunkStorageMetadata(Size([5, 5]), Size([1, 1]))]  # inside the 5th step
    for forced in ({}, PLANAR):
        patched["_ascendfix_swept"] = functools.partial(_swept_of(patched), **forced)
        found = _built(patched, version, planted, sweep_dim=0)
        if version in PAIRWISE:
            assert found[5] == [planted[-1]] and sum(map(len, found)) == 1
        else:
            assert found == {2 * n: [(5 + n, 5)]}
    patched["_ascendfix_swept"] = _swept_of(patched)
    assert _built(patched, version, _double_stairs(8), sweep_dim=0) is not None  # a few active at once: swept


def _fewest(tallies: list) -> list[int]:
    """Each box's fewest overlapping boxes in any one dimension (itself included), from the template's tallies."""
    return list(map(min, zip(*tallies, strict=True)))


def _swept_of(patched: dict):
    """The namespace's own ``_ascendfix_swept`` (under any partial a test put over it)."""
    swept = patched["_ascendfix_swept"]
    return swept.func if isinstance(swept, functools.partial) else swept


def test_three_crowds_are_answered_by_each_chunks_fewest_dimension(any_pair):
    """Three crowds in 3-D: every sweep and every two dimensions' search meet a quadratic number of pairs, but each
    chunk is one wide in its crowd's dimension and overlaps only itself there: searching that dimension answers the
    layout in O(n log n): nothing, and with an overlap planted, exactly that pair."""
    version, loaded = any_pair
    (_, _), (patched, _) = loaded[upstream.DEFAULT_PLANNER]
    m = 500
    boxes = _as_boxes(_crowds(m))
    tallies = patched["_ascendfix_tallies"](boxes, 3)
    assert [(sum(t) - 3 * m) // 2 for t in tallies] == [m * (m - 1)] * 3  # every sweep's comparisons
    assert [patched["_ascendfix_sweep_cost"](boxes, d) for d in range(3)] == [m * (m - 1)] * 3
    assert _fewest(tallies) == [1] * 3 * m
    assert _built(patched, version, _crowds(m), sweep_dim=0) in ({}, [[]] * 3 * m)
    planted = [*_crowds(m), ChunkStorageMetadata(Size([10 * m + 7] * 3), Size([1, 1, 1]))]  # on crowd 1's 8th step
    found = _built(patched, version, planted, sweep_dim=0)
    if version in PAIRWISE:
        assert found[m + 7] == [planted[-1]] and sum(map(len, found)) == 1
    else:
        assert found == {3 * m: [(11 * m + 7, m + 7)]}  # its end along the sweep: m long there


def test_a_layout_no_sweep_nor_search_helps_is_stocks_candidates_filtered(any_pair):
    """Three interlocked crowds: no two chunks overlap, but every sweep, every two dimensions' search and every
    chunk's fewest dimension meet a quadratic number of pairs. The planar search stops once it has counted a 128th
    of the cheapest sweep's comparisons (counted before any pair is kept); then torch's loop keeps its own candidates
    (a pairwise scan's later chunks, a sweep's active list), each position's filtered as it is asked for, compared
    dimension by dimension in one pass each: here none is left for torch's own test."""
    version, loaded = any_pair
    (_, _), (patched, _) = loaded[upstream.DEFAULT_PLANNER]
    assert _brute_pairs(_as_boxes(_interlocked(40))) == set()
    m = 500
    boxes = _as_boxes(_interlocked(m))
    tallies = patched["_ascendfix_tallies"](boxes, 3)
    cost = min((sum(t) - 3 * m) // 2 for t in tallies)
    assert cost >= 2 * m * m - m and min(_fewest(tallies)) >= m
    assert patched["_ascendfix_planar"](boxes, 0, 1, cost // 128) is None
    assert patched["_ascendfix_swept"](boxes) is None
    assert len(patched["_ascendfix_planar"](boxes, 0, 1, 4 * m * m)) == m * (m - 1) // 2  # crowd 2's pairs, kept
    keep = _built(patched, version, _interlocked(m), sweep_dim=0)
    assert callable(keep)
    assert [keep(k, range(3 * m)) for k in (0, m, 2 * m)] == [[0], [m], [2 * m]]  # each meets only itself
    planted = [*boxes, ((0, 5 * m, 0), (1, 1, 1))]  # on crowd 0's first step
    assert patched["_ascendfix_tight"](planted)(3 * m, range(3 * m + 1)) == [0, 3 * m]


def _brute_pairs(boxes: list) -> set:
    """Every overlapping pair (i < j), compared one by one."""
    return {
        (i, j)
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if all(a < c + d and c < a + b for a, b, c, d in zip(*boxes[i], *boxes[j], strict=True))
    }


@st.composite
def _int_boxes(draw):
    """[(offsets, sizes)] of 2-4 dims as int tuples: staircases (perhaps shifted, resized or doubled) or any boxes,
    zero and negative sizes included."""
    ndim = draw(st.integers(2, 4))
    if draw(st.booleans()):
        boxes = draw(staircases(ndim))
    else:
        value = st.lists(st.integers(-2, 9), min_size=ndim, max_size=ndim)
        boxes = draw(st.lists(st.tuples(value, value), min_size=0, max_size=14))
    boxes = [(list(o), list(s)) for o, s in boxes]
    for _ in range(draw(st.integers(0, 3))):
        if boxes:
            k, d = draw(st.integers(0, len(boxes) - 1)), draw(st.integers(0, ndim - 1))
            boxes[k][draw(st.integers(0, 1))][d] += draw(st.integers(-2, 2))
            if draw(st.booleans()):
                boxes.append(boxes[k])
    return [(tuple(o), tuple(s)) for o, s in boxes]


@given(boxes=_int_boxes(), dims=st.permutations(range(4)))
@EQUIVALENCE
def test_planar_search_finds_exactly_the_overlapping_pairs(boxes, dims):
    """Whatever the boxes (staircases or not, degenerate sizes too) and whichever two dimensions: every pair
    overlapping in both is found (exactly those where no size is below one), and the answer built from it, after
    the check in every dimension, is every overlapping pair."""
    from ascendfix.checkpoint import geometry

    template = geometry.template()
    ndim = len(boxes[0][0]) if boxes else 2
    d, e = [k for k in dims if k < ndim][:2]
    found = template._ascendfix_planar(boxes, d, e, 2**40)
    both = _brute_pairs([((o[d], o[e]), (s[d], s[e])) for o, s in boxes])
    assert found >= both
    if all(min(s) > 0 for _, s in boxes):
        assert found == both
    if boxes:
        assert sorted(template._ascendfix_swept(boxes, **PLANAR)) == sorted(_brute_pairs(boxes))


@given(boxes=_int_boxes())
@EQUIVALENCE
def test_each_box_searching_its_fewest_dimension_finds_exactly_the_overlapping_pairs(boxes):
    """Whatever the boxes: each box's tally in each dimension is the number overlapping it there (itself too), a
    sweep's comparisons are half their sum but the boxes themselves, and each box searching the dimension where it
    tallies fewest finds every overlapping pair; where a size is not positive that search is not taken."""
    from ascendfix.checkpoint import geometry

    template = geometry.template()
    if not boxes:
        return
    ndim = len(boxes[0][0])
    expected = sorted(_brute_pairs(boxes))
    if all(min(s) > 0 for _, s in boxes):
        tallies = template._ascendfix_tallies(boxes, ndim)
        for d in range(ndim):
            flat = [((o[d],), (s[d],)) for o, s in boxes]
            assert tallies[d] == [sum(1 for other in flat if _brute_pairs([box, other])) for box in flat]
            assert (sum(tallies[d]) - len(boxes)) // 2 == template._ascendfix_sweep_cost(boxes, d)
        assert sorted(template._ascendfix_least(boxes, tallies, _fewest(tallies))) == expected
    forced = template._ascendfix_swept(boxes, **FEWEST)
    assert forced is None or sorted(forced) == expected


def _walk(answer, version: str, positions: int) -> list[tuple[int, list]]:
    """(how many, the first four) of the first ``positions`` candidate lists of a plan helper's answer, asked for
    as torch's loop asks for them: one position's at a time."""
    if version in PAIRWISE:
        return [(len(found), found[:4]) for found in (list(answer[i]) for i in range(positions))]
    walked = []
    for idx in answer:
        found = list(answer[idx])
        walked.append((len(found), found[:4]))
        if len(walked) == positions:
            break
    return walked


EARLY = 4000


def _early_overlaps(count: int) -> dict[str, list[tuple[list[int], list[int]]]]:
    """Layouts whose first overlap stock torch meets at once: not grids, and (but for ``crowded``) their sweep is
    quadratic (disjoint chunks all active along the sweep's dimension), so the fast path would give way to stock."""
    stairs = [([i, i], [count, 1]) for i in range(count)]
    crowded = [([0, 0], [4, 4])] * count + [([2, 2], [4, 4])]  # identical chunks and one misaligned: no grid
    return {
        "overlap last": [*stairs, ([0, 0], [1, 1])],
        "overlap first": [([0, 0], [1, 1]), *stairs],
        "crowded": crowded,
    }


@pytest.mark.parametrize("layout", ["overlap last", "overlap first", "crowded"])
def test_an_early_overlap_is_found_by_stocks_own_scan_before_anything_is_built(any_pair, layout):
    """Where stock torch stops at a first overlap right away, the patched check stops there too, with the same
    ValueError (naming the same pair), and never builds its boxes over all chunks: its first candidates are stock's
    own, handed out until they total a few per chunk (benchmarks/dcp_validation.py times it: --adversarial)."""
    version, loaded = any_pair
    (stock, stock_log), (patched, patched_log) = loaded[upstream.SHARD_INTERNALS]
    shards = [ShardMetadata(o, s) for o, s in _early_overlaps(EARLY)[layout]]
    name = "validate_non_overlapping_shards_metadata"
    expected = outcome(stock[name], stock_log, shards)
    assert expected[0] == "raised" and expected[1].startswith("ValueError: Shards ")
    built = []
    boxes = patched["_ascendfix_boxes"]
    patched["_ascendfix_boxes"] = lambda *args: built.append(len(args[0])) or boxes(*args)
    try:
        assert outcome(patched[name], patched_log, shards) == expected
    finally:
        patched["_ascendfix_boxes"] = boxes
    assert built == []


def test_an_overlap_past_the_budget_is_the_same_and_the_fast_path_is_taken(any_pair):
    """Where stock's candidates run past the budget before the first overlap, the fast answer takes over from
    that position on: the same ValueError, from the boxes built once."""
    version, loaded = any_pair
    (stock, stock_log), (patched, patched_log) = loaded[upstream.SHARD_INTERNALS]
    n = 300
    grid = [([r, c], [1, 1]) for r in (0, 1) for c in range(n)]  # a grid, all of a row active in torch's sweep
    shards = [ShardMetadata(o, s) for o, s in [*grid, ([1, n - 1], [1, 1])]]  # the last box saved twice
    name = "validate_non_overlapping_shards_metadata"
    expected = outcome(stock[name], stock_log, shards)
    assert expected[1] == f"ValueError: Shards {shards[-2]} and {shards[-1]} overlap"
    built = []
    boxes = patched["_ascendfix_boxes"]
    patched["_ascendfix_boxes"] = lambda *args: built.append(len(args[0])) or boxes(*args)
    try:
        assert outcome(patched[name], patched_log, shards) == expected
    finally:
        patched["_ascendfix_boxes"] = boxes
    assert built == [len(shards)]


# --- the transform on the real files ---------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("transform", "path"), CASES, ids=["shards", "plan"])
def test_apply_is_idempotent_marked_and_reverts_exactly(version, transform, path):
    stock = _source(version, path)
    applied = transform.apply(stock, "torch-check")
    assert (applied.pending, applied.done) == (1, 0)
    compile(applied.code, path, "exec")
    again = transform.apply(applied.code, "torch-check")
    assert (again.code, again.pending, again.done) == (applied.code, 0, 1)
    reverted = transform.revert(applied.code, "torch-check")
    assert (reverted.code, reverted.pending, reverted.done) == (stock, 0, 1)
    assert transform.revert(stock, "torch-check").code == stock
    diff = difflib.ndiff(stock.decode().splitlines(), applied.code.decode().splitlines())
    added = [line[2:] for line in diff if line.startswith("+ ") and line[2:].strip()]
    assert added and all(line.endswith(marker("torch-check")) for line in added)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("transform", "path"), CASES, ids=["shards", "plan"])
def test_a_changed_scan_is_refused(version, transform, path):
    stock = _source(version, path).decode()
    # the overlap test now counts touching boxes: a torch this template was not written for
    changed = stock.replace("_offsets[i] >= shard2", "_offsets[i] > shard2").replace(
        "box0.offsets[i] >= box1", "box0.offsets[i] > box1"
    )
    if version in PAIRWISE and transform is SHARD:
        changed = stock.replace("interval_i[0] > interval_j[1]", "interval_i[0] >= interval_j[1]")
    assert changed != stock
    with pytest.raises(TransformError, match="use the skip variant"):
        transform.apply(changed.encode(), "torch-check")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_partly_applied_file_is_refused(version):
    applied = PLAN.apply(_source(version, upstream.DEFAULT_PLANNER), "torch-check").code.decode()
    without_call = "\n".join(line for line in applied.splitlines() if "_ascendfix_overlaps = " not in line)
    with pytest.raises(TransformError, match="only part of this patch"):
        PLAN.apply(without_call.encode(), "torch-check")
    with pytest.raises(TransformError, match="only part of this patch"):
        PLAN.revert(without_call.encode(), "torch-check")


def test_a_file_without_the_function_has_no_site():
    source = b"def other():\n    return 1\n"
    assert (PLAN.apply(source, "x").pending, PLAN.apply(source, "x").done) == (0, 0)


def test_registered_with_its_parameters():
    cls = registry.get("fast-overlap-scan")
    assert cls is FastOverlapScan
    assert registry.check_params(cls, {"function": "_validate_global_plan", "template": TEMPLATE}) is None


def test_template_is_self_contained_python39():
    """Inserted code parses as Python 3.9 (torch 2.7.1's oldest) and uses only builtins, some stdlib and itself."""
    text = (data_dir("patches") / TEMPLATE).read_text()
    tree = ast.parse(text, feature_version=(3, 9))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert functions and all(name.startswith("_ascendfix_") for name in functions)
    stdlib = {"bisect", "heapq", "itertools", "operator", "sys"}
    allowed = set(dir(builtins)) | functions
    for func in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        imports = [n for n in ast.walk(func) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert {n.module if isinstance(n, ast.ImportFrom) else a.name for n in imports for a in n.names} <= stdlib
        bound = {a.asname or a.name for n in imports for a in n.names}
        bound |= {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
        bound |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        bound |= {n.name for n in ast.walk(func) if isinstance(n, ast.FunctionDef | ast.ClassDef)}  # nested defs
        free = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound
        assert free <= allowed, (func.name, free - allowed)


PROBES = """
boxes = [((0, 0), (2, 3)), ((2, 0), (2, 3)), ((0, 0), (2, 3))]
ragged = [((0, 0), (2, 3)), ((1, 1), (1, 3)), ((1, 2), (0, 0)), ((-1, 2), (-2, 5))]
print(list(_ascendfix_overlapping_pairs(boxes)), sorted(_ascendfix_overlapping_pairs(ragged)))
print(_ascendfix_boxes([[0, 1], (2, 3)], [[1, 1], (1, 1)], None), _ascendfix_boxes([[0, 1]], [[1, 1.0]], None))
print(_ascendfix_boxes([[0, 1, 2]], [[1, 1, 1]], [0, 2]), _ascendfix_boxes([[0, 1, 2]], [[1, 1, 1]], [1]))
later = _ascendfix_later(boxes, range(3))
print([list(c) for c in later], {k: list(v) for k, v in _ascendfix_in_sweep_order(boxes, [1, 0, 2], 1).items()})
print([list(c) for c in _ascendfix_later(ragged, range(4))], _ascendfix_in_sweep_order(ragged, [3, 2, 1, 0], 1))
stairs = [((i, i), (6, 1)) for i in range(6)] + [((20 + j, 20 + j), (1, 6)) for j in range(6)] + [((2, 2), (1, 1))]
forced = {"few": -99, "fewest": 2**40, "planar": -99}
print(sorted(_ascendfix_swept(stairs, cap=99, **forced)), _ascendfix_swept(stairs, cap=0, **forced))
print(sorted(_ascendfix_swept(stairs, few=-99, fewest=0)))
"""


def _python39() -> str | None:
    candidates = [shutil.which("python3.9"), *map(str, Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))]
    for path in filter(None, candidates):
        if subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            return path
    return None


@pytest.mark.skipif(_python39() is None, reason="no python3.9 on this machine")
def test_template_runs_on_python39():
    """torch 2.7.1 still supports Python 3.9: the inserted functions give the same answers there."""
    program = (data_dir("patches") / TEMPLATE).read_text() + PROBES
    old = subprocess.run([_python39(), "-c", program], capture_output=True, text=True, timeout=60)
    new = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert old.returncode == 0, old.stderr
    assert old.stdout == new.stdout
    assert new.stdout.startswith("[(0, 2)] [(0, 1), (0, 2)]\n")  # a zero-size box strictly inside counts
    # two staircases and a box in one step, by the planar search, and by each box's fewest dimension
    assert new.stdout.endswith("[(2, 12)] None\n[(2, 12)]\n")


# --- through the engine, as `ascendfix apply --variant ...=fast-validate` does it ---------------


@pytest.mark.parametrize("version", VERSIONS)
def test_engine_applies_switches_and_reverts_the_variants(copy_tree, version):
    from ascendfix.patching import engine
    from ascendfix.profile import manifest
    from ascendfix.site import Site

    profile = manifest.load_profile("verl-796871d")
    ids = ("torch-shard-overlap-check", "torch-global-plan-check")
    root = copy_tree(upstream.torch_tree(version))
    before = {p: (root / p).read_bytes() for p in (upstream.SHARD_INTERNALS, upstream.DEFAULT_PLANNER)}

    def select(variant):
        return engine.select(Site(profile, "npu", roots={"torch": root}, variants=dict.fromkeys(ids, variant)), ids)

    assert {(s.state, s.variant) for s in engine.apply(select("fast-validate"))} == {("applied", "fast-validate")}
    planner = (root / upstream.DEFAULT_PLANNER).read_bytes()
    assert b"_ascendfix_overlaps = _ascendfix_chunks_overlapping" in planner
    stock, _ = load(before[upstream.DEFAULT_PLANNER], PLAN_FUNCTIONS)
    patched, _ = load(planner, PLAN_FUNCTIONS)
    assert stock["_validate_global_plan"]([0, 1], Metadata({})) == patched["_validate_global_plan"](
        [0, 1], Metadata({})
    )
    assert {s.variant for s in engine.status(select("fast-validate"))} == {"fast-validate"}
    assert {(s.state, s.variant) for s in engine.apply(select("skip"))} == {("applied", "skip")}
    assert b"_ascendfix_" not in (root / upstream.DEFAULT_PLANNER).read_bytes()
    engine.revert(select("skip"))
    assert {p: (root / p).read_bytes() for p in before} == before


# --- with real torch, where it is installed (a CPU torch runs this; the suite does not need it) ---


@pytest.fixture(scope="module")
def real_torch():
    """The installed torch's two validators, stock (imported) and patched (the same file, transformed
    and executed as a module beside it), logging (where they log) into one recorder."""
    import importlib
    import importlib.util

    torch = pytest.importorskip("torch")
    pairs = {}
    for transform, module_name, name in (
        (SHARD, "torch.distributed._shard.sharding_spec._internals", "validate_non_overlapping_shards_metadata"),
        (PLAN, "torch.distributed.checkpoint.default_planner", "_validate_global_plan"),
    ):
        stock = importlib.import_module(module_name)
        patched_code = transform.apply(Path(stock.__file__).read_bytes(), "torch-check").code
        assert b"_ascendfix_overlaps = " in patched_code, f"torch {torch.__version__} is not one fast-validate knows"
        patched = importlib.util.module_from_spec(importlib.util.spec_from_loader(f"{module_name}_patched", None))
        exec(compile(patched_code, stock.__file__, "exec"), patched.__dict__)
        pairs[name] = (stock, patched)
    recorder = Recorder()
    saved = {name: stock.logger for name, (stock, _) in pairs.items() if hasattr(stock, "logger")}
    for name in saved:
        pairs[name][0].logger = pairs[name][1].logger = recorder
    yield torch, pairs, recorder
    for name, logger in saved.items():
        pairs[name][0].logger = logger


@given(layout=layouts(lowest=0))
@EQUIVALENCE
def test_real_torch_shard_validation_is_unchanged(real_torch, layout):
    from hypothesis import assume

    torch, pairs, recorder = real_torch
    from torch.distributed._shard.metadata import ShardMetadata as RealShardMetadata

    try:
        shards = [RealShardMetadata(o, s, "rank:0/cpu") for o, s in layout[1]]
    except (ValueError, AssertionError):  # real ShardMetadata refuses some boxes before validation sees them
        assume(False)
    name = "validate_non_overlapping_shards_metadata"
    stock, patched = pairs[name]
    assert outcome(getattr(patched, name), recorder, shards) == outcome(getattr(stock, name), recorder, shards)


@given(plan=plans())
@EQUIVALENCE
def test_real_torch_plan_validation_is_unchanged(real_torch, plan):
    torch, pairs, recorder = real_torch
    from torch.distributed.checkpoint import metadata as real

    def convert(entry):
        if isinstance(entry, BytesStorageMetadata):
            return real.BytesStorageMetadata()
        chunks = [real.ChunkStorageMetadata(torch.Size(c.offsets), torch.Size(c.sizes)) for c in entry.chunks]
        return real.TensorStorageMetadata(real.TensorProperties(dtype=torch.float32), torch.Size(entry.size), chunks)

    global_plan, metadata = plan
    args = (global_plan, real.Metadata({k: convert(v) for k, v in metadata.state_dict_metadata.items()}))
    stock, patched = pairs["_validate_global_plan"]
    expected = outcome(stock._validate_global_plan, recorder, *args)
    assert outcome(patched._validate_global_plan, recorder, *args) == expected


# --- N identical shards: the defect the check exists for costs what it costs stock torch -------------

IDENTICAL = 8000


def _peak(func, *args) -> tuple[object, int]:
    """``func(*args)``'s outcome (its answer, or the exception's type and message) and its peak traced memory."""
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            answer = func(*args)
        except ValueError as e:
            answer = (type(e), str(e))
        return answer, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("version", VERSIONS)
def test_identical_shards_stop_at_the_first_overlap_in_stock_memory(version):
    """8,000 shards over one box (and one beside it, so both dimensions count as sharded): stock torch raises at
    once; the patched check raises the same, in about the memory stock needs (the pairs are made lazily, never
    all 32 million of them)."""
    stock_source = _source(version, upstream.SHARD_INTERNALS)
    (stock, _), (patched, _) = (
        load(stock_source, SHARD_FUNCTIONS),
        load(SHARD.apply(stock_source, "t").code, SHARD_FUNCTIONS),
    )
    shards = [*(ShardMetadata([0, 0], [4, 4]) for _ in range(IDENTICAL - 1)), ShardMetadata([4, 4], [4, 4])]
    name = "validate_non_overlapping_shards_metadata"
    expected, stock_peak = _peak(stock[name], shards)
    answer, peak = _peak(patched[name], shards)
    assert answer == expected and expected[0] is ValueError
    assert peak < stock_peak + 1000 * IDENTICAL, (peak, stock_peak)  # boxes and groups: O(N), not O(N^2)


@pytest.mark.parametrize("version", VERSIONS)
def test_identical_chunks_hold_one_chunks_overlaps_at_a_time(version):
    """A plan of 8,000 chunks over one box: torch reports every pair, so the helper's answer must be made as the
    stock loop walks it; building it costs O(N) memory, and walking it gives every pair in torch's order (stock's
    own candidates first, then the fast path's from the position where they pass the budget)."""
    (patched, _) = load(PLAN.apply(_source(version, upstream.DEFAULT_PLANNER), "t").code, PLAN_FUNCTIONS)
    chunks = [ChunkStorageMetadata(Size([0, 0]), Size([4, 4])) for _ in range(IDENTICAL)]
    if version in PAIRWISE:
        helper, args = patched["_ascendfix_chunks_overlapping_later"], (chunks,)
    else:
        helper, args = patched["_ascendfix_chunks_overlapping_in_sweep"], (chunks, list(range(IDENTICAL)), 0)
    answer, peak = _peak(helper, *args)
    assert peak < 1000 * IDENTICAL, peak
    positions = 2000  # the budget (8 per chunk) is spent within the first few hundred
    walked, walk_peak = _peak(_walk, answer, version, positions)
    assert walk_peak < 1000 * IDENTICAL, walk_peak  # one position's candidates at a time
    if version in PAIRWISE:  # position i: every later chunk
        assert [n for n, _ in walked] == [IDENTICAL - 1 - i for i in range(positions)]
        assert walked[0][1] == chunks[1:5] and walked[-1][1] == chunks[positions : positions + 4]
    else:  # the sweep's position k: the k chunks before it, by (end, index)
        assert [n for n, _ in walked] == list(range(positions))
        assert walked[3][1] == [(4, 0), (4, 1), (4, 2)] and walked[-1][1] == [(4, 0), (4, 1), (4, 2), (4, 3)]


def test_ckpt_check_names_the_first_overlaps_of_24064_identical_chunks_in_linear_memory():
    """The expert tensor's chunk count, all over one box: a finding naming three pairs, never all 289 million."""
    from ascendfix.checkpoint import geometry

    shape = (4, 4)
    chunks = geometry.boxes(shape, [(0, 0)] * 24064, [(4, 4)] * 24064)
    found, peak = _peak(geometry.findings, shape, chunks)
    assert [f.kind for f in found] == ["overlap"] and found[0].detail.endswith("(and more pairs)")
    assert peak < 1000 * 24064, peak
