"""Exact, fast replacements for torch's pairwise checkpoint overlap scans (the fast-validate variants).

The ``fast-overlap-scan`` transform copies the ``_ascendfix_*`` functions a stock scan needs
(its helper below and every ``_ascendfix_*`` function that helper uses) into the torch module,
right before the function it patches, and calls the helper once before the stock scan's outer
loop. The stock loop itself stays in place; its candidate list is narrowed to what the helper
returns::

    _ascendfix_overlaps = <helper>(<args>)
    for j in (range(i + 1, len(shards)) if _ascendfix_overlaps is None else _ascendfix_overlaps[i]):

Each helper returns, for every position of the stock loop, the candidates the stock inner loop
visits that really overlap, in the stock visiting order. The stock loop body still runs its own
overlap test, warnings, messages, ``return`` and error list on them, so whatever torch reports, in
whatever order, is reported the same. The candidates are made as the stock loop reaches them, never
every pair at once: a scan that stops at the first overlap stops there too, and one that reports every
overlap holds one box's at a time (N identical boxes cost what they cost stock torch); a sweep that
would compare more than a few boxes per box (counted first, in O(n log n), none compared) gives way
to the stock scan, so no layout costs more than stock torch plus that count. A helper returns None (the stock
scan runs unchanged) when the boxes are not plain ints of one length, so odd inputs raise exactly where
torch raises them.

Only this file's functions are inserted; ``REPLACES`` is read by the transform, never inserted.
The inserted code uses nothing but builtins and the stdlib's heapq, itertools and operator, imported
inside the functions that use them.
Keep every docstring on one line: the transform marks each inserted line with a trailing comment.
"""

# The stock functions the helpers go into. Key: ``ascendfix.transforms.fast_overlap.fingerprint``
# of the stock function and the module functions it calls (formatting and comments do not count),
# so any change in torch's version of them is refused. ``loop`` is the scan's outer loop header,
# ``index`` its position variable; ``narrow_outer`` also narrows the outer loop to the positions
# that have an overlap (a sweep, whose outer loop does nothing else).
REPLACES = {
    # _internals._find_nd_overlapping_shards, pairwise: every i, every j > i; returns the first (i, j)
    # torch 2.5.0, 2.5.1, 2.6.0 (typing.List annotations)
    "e55657925f2ac7340bc53af48e33a33b4a48bfa3bc4968d2c96efe70a81a4b49": {
        "loop": "for i in range(len(shards))",
        "helper": "_ascendfix_shards_overlapping_later",
        "args": "shards, sharded_dims",
        "index": "i",
        "narrow_outer": False,
    },
    # torch 2.7.0, 2.7.1, 2.8.0, 2.9.0, 2.9.1
    "f0235046d2ddb7841563cdf73429e2e9ec8a231c64c7fbdef7ab20a721bb949c": {
        "loop": "for i in range(len(shards))",
        "helper": "_ascendfix_shards_overlapping_later",
        "args": "shards, sharded_dims",
        "index": "i",
        "narrow_outer": False,
    },
    # _internals._find_nd_overlapping_shards, sort-and-sweep; returns the first overlap met
    # torch 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1
    "a9d2d3b09b6979aa10355f89ad5e49d029188534d4ca2422ccf5b8c56ebd4fc2": {
        "loop": "for idx in sorted_indices",
        "helper": "_ascendfix_shards_overlapping_in_sweep",
        "args": "shards, sorted_indices, sweep_dim",
        "index": "idx",
        "narrow_outer": True,
    },
    # default_planner._validate_global_plan -> bool, pairwise: per chunk, bounds, then every later chunk
    # torch 2.5.0, 2.5.1, 2.6.0 (typing.List annotations)
    "3ab1d40d7aea886934f00fe9d40e5c55a446f9ec5328f533b811eacfbf73e6fe": {
        "loop": "for chunk_idx, chunk0 in enumerate(value.chunks)",
        "helper": "_ascendfix_chunks_overlapping_later",
        "args": "value.chunks",
        "index": "chunk_idx",
        "narrow_outer": False,
    },
    # torch 2.7.0, 2.7.1, 2.8.0
    "6cbcf9ce2892c2369ae5012c4dfdc3d38f58dd549510ea5dcf671d4c567df858": {
        "loop": "for chunk_idx, chunk0 in enumerate(value.chunks)",
        "helper": "_ascendfix_chunks_overlapping_later",
        "args": "value.chunks",
        "index": "chunk_idx",
        "narrow_outer": False,
    },
    # torch 2.9.0, 2.9.1 (the volume check only when the plan has more than one rank)
    "dfc0889bea04d13a53a871e23ac1c6d46420bb460d01abd0192db3a293fbb9dd": {
        "loop": "for chunk_idx, chunk0 in enumerate(value.chunks)",
        "helper": "_ascendfix_chunks_overlapping_later",
        "args": "value.chunks",
        "index": "chunk_idx",
        "narrow_outer": False,
    },
    # default_planner._validate_global_plan -> bool, sort-and-sweep, every overlap
    # torch 2.10.0, 2.11.0
    "75a226a4595a8bb0069e5d4d164eac080b372a2a40184824ef97d53a337f07de": {
        "loop": "for idx in sorted_indices",
        "helper": "_ascendfix_chunks_overlapping_in_sweep",
        "args": "chunks, sorted_indices, sweep_dim",
        "index": "idx",
        "narrow_outer": True,
    },
    # default_planner._validate_global_plan -> list[str], sort-and-sweep, every overlap
    # torch 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1
    "0fa604cd89ca007ef78de2187306f86defa0e95857bc02e80ec265f4e7bb9cbd": {
        "loop": "for idx in sorted_indices",
        "helper": "_ascendfix_chunks_overlapping_in_sweep",
        "args": "chunks, sorted_indices, sweep_dim",
        "index": "idx",
        "narrow_outer": True,
    },
}


def _ascendfix_boxes(offsets, sizes, dims):
    """[(offsets, sizes)] as int tuples over ``dims`` (all, of one length, when None); else None."""
    from itertools import chain
    from operator import itemgetter

    if not all(issubclass(kind, (list, tuple)) for kind in set(map(type, offsets)) | set(map(type, sizes))):
        return None
    lengths = set(map(len, offsets)) | set(map(len, sizes))
    if dims is None:
        if len(lengths) > 1:
            return None
        dims = range(lengths.pop() if lengths else 0)
    elif lengths and min(lengths) <= max(dims, default=-1):
        return None
    pick = itemgetter(*dims) if len(dims) > 1 else lambda values: tuple(values[d] for d in dims)
    offsets, sizes = list(map(pick, offsets)), list(map(pick, sizes))
    if not set(map(type, chain(chain.from_iterable(offsets), chain.from_iterable(sizes)))) <= {int}:
        return None
    return list(zip(offsets, sizes))


def _ascendfix_is_grid(offsets, sizes, ndims):
    """Whether every size is positive and, in each dimension, the distinct ranges are disjoint."""
    if sizes.count(sizes[0]) == len(sizes):  # chunks of one shape (a tensor split evenly): no column of sizes to read
        lengths = [{length} for length in sizes[0]]
    else:
        sizes = list(zip(*sizes))
        lengths = [set(column) for column in sizes]
    offsets = list(zip(*offsets))
    for d in range(ndims):
        if min(lengths[d]) <= 0:
            return False
        if len(lengths[d]) == 1:  # one size in d: its ranges are its distinct starts
            length = min(lengths[d])
            ranges = [(start, length) for start in sorted(set(offsets[d]))]
        else:
            ranges = sorted(set(zip(offsets[d], sizes[d])))
        if any(ranges[k][0] + ranges[k][1] > ranges[k + 1][0] for k in range(len(ranges) - 1)):
            return False
    return True


def _ascendfix_sweep(boxes, ndims):
    """Yield the overlapping pairs, as a sweep over the dimension with the most distinct offsets meets them."""
    import heapq

    d = max(range(ndims), key=lambda k: len({offsets[k] for offsets, _ in boxes}))
    ends = []  # (end in d, index) of the active boxes: those reaching past the current start
    active = set()
    for j in sorted(range(len(boxes)), key=lambda i: boxes[i][0][d]):
        offsets_j, sizes_j = boxes[j]
        start = offsets_j[d]
        while ends and ends[0][0] <= start:
            active.discard(heapq.heappop(ends)[1])
        for i in active:
            offsets_i, sizes_i = boxes[i]
            if all(
                offsets_i[k] < offsets_j[k] + sizes_j[k] and offsets_j[k] < offsets_i[k] + sizes_i[k]
                for k in range(ndims)
            ):
                yield (i, j) if i < j else (j, i)
        if start + sizes_j[d] > start:  # one that ends at or before its start overlaps no later box in d
            heapq.heappush(ends, (start + sizes_j[d], j))
            active.add(j)


def _ascendfix_groups(boxes):
    """On a grid, the ascending index lists (two or more) of identical boxes: every overlap; else None."""
    ndims = len(boxes[0][0]) if boxes else 0
    if ndims == 0:  # boxes without a dimension all overlap
        return [list(range(len(boxes)))] if len(boxes) > 1 else []
    offsets, sizes = zip(*boxes)
    if not _ascendfix_is_grid(offsets, sizes, ndims):
        return None
    # A grid: boxes overlap in a dimension only when their ranges there are the same one, and a range is
    # known by its start (two positive ranges with one start overlap): boxes overlap when their offsets match.
    if len(set(offsets)) == len(boxes):
        return []
    same = {}
    for i, box in enumerate(boxes):
        same.setdefault(box, []).append(i)
    return [g for g in same.values() if len(g) > 1]


def _ascendfix_sweep_cost(boxes, ndims):
    """The box comparisons the sweep would make (the active boxes at each start), counted in O(n log n), none made."""
    import heapq

    d = max(range(ndims), key=lambda k: len({offsets[k] for offsets, _ in boxes}))
    ends = []
    cost = 0
    for start, end in sorted((offsets[d], offsets[d] + sizes[d]) for offsets, sizes in boxes):
        while ends and ends[0] <= start:
            heapq.heappop(ends)
        cost += len(ends)
        if end > start:
            heapq.heappush(ends, end)
    return cost


def _ascendfix_swept(boxes):
    """The sweep's pairs, or None when it would compare more than a few boxes per box (then the stock scan runs)."""
    if _ascendfix_sweep_cost(boxes, len(boxes[0][0])) > 4 * len(boxes) + 64:
        return None
    return list(_ascendfix_sweep(boxes, len(boxes[0][0])))


def _ascendfix_overlapping_pairs(boxes):
    """Yield every (i, j), i < j, with a.off < b.off + b.size and b.off < a.off + a.size in each dimension."""
    groups = _ascendfix_groups(boxes)
    if groups is None:
        yield from _ascendfix_sweep(boxes, len(boxes[0][0]))
        return
    for g in groups:
        for a in range(len(g) - 1):
            for b in range(a + 1, len(g)):
                yield g[a], g[b]


def _ascendfix_later(boxes, items):
    """Per position i, the items[j] of the overlapping j > i, ascending (pairwise order), made as the scan reaches i."""
    from itertools import islice

    later = [()] * len(boxes)
    groups = _ascendfix_groups(boxes)
    if groups is None:
        pairs = _ascendfix_swept(boxes)
        if pairs is None:
            return None
        for i, j in sorted(pairs):
            if not later[i]:
                later[i] = []
            later[i].append(items[j])
        return later
    for g in groups:
        for a in range(len(g) - 1):
            later[g[a]] = map(items.__getitem__, islice(g, a + 1, None))
    return later


def _ascendfix_in_sweep_order(boxes, sorted_indices, sweep_dim):
    """{idx: [(end, other_idx)]} in sweep order: each position's overlapping earlier ones by (end, index), lazily."""
    from itertools import islice, repeat

    position = {idx: p for p, idx in enumerate(sorted_indices)}
    groups = _ascendfix_groups(boxes)
    earlier = {}
    if groups is None:
        pairs = _ascendfix_swept(boxes)
        if pairs is None:
            return None
        for i, j in pairs:
            a, b = (i, j) if position[i] < position[j] else (j, i)
            earlier.setdefault(b, []).append((boxes[a][0][sweep_dim] + boxes[a][1][sweep_dim], a))
        return {b: sorted(earlier[b]) for b in sorted(earlier, key=position.__getitem__)}
    for g in groups:  # identical boxes: one end in the sweep's dimension, so the earlier ones go by index
        members = sorted(g, key=position.__getitem__)
        end = boxes[g[0]][0][sweep_dim] + boxes[g[0]][1][sweep_dim]
        in_order = members == g  # the sweep keeps identical boxes in index order: each one's are a prefix of g
        for k in range(1, len(members)):
            earlier[members[k]] = zip(repeat(end), islice(g, k)) if in_order else sorted((end, a) for a in members[:k])
    return {b: earlier[b] for b in sorted(earlier, key=position.__getitem__)}


def _ascendfix_shards_overlapping_later(shards, sharded_dims):
    """Pairwise _find_nd_overlapping_shards: per shard, the later shards overlapping it in the sharded dims."""
    boxes = _ascendfix_boxes([s.shard_offsets for s in shards], [s.shard_sizes for s in shards], sharded_dims)
    if boxes is None:
        return None
    return _ascendfix_later(boxes, range(len(shards)))


def _ascendfix_shards_overlapping_in_sweep(shards, sorted_indices, sweep_dim):
    """Sweeping _find_nd_overlapping_shards: per shard in sweep order, the active shards overlapping it."""
    boxes = _ascendfix_boxes([s.shard_offsets for s in shards], [s.shard_sizes for s in shards], None)
    if boxes is None:
        return None
    return _ascendfix_in_sweep_order(boxes, sorted_indices, sweep_dim)


def _ascendfix_chunks_overlapping_later(chunks):
    """Pairwise _validate_global_plan: per chunk, the later chunks overlapping it."""
    boxes = _ascendfix_boxes([c.offsets for c in chunks], [c.sizes for c in chunks], None)
    if boxes is None:
        return None
    return _ascendfix_later(boxes, chunks)


def _ascendfix_chunks_overlapping_in_sweep(chunks, sorted_indices, sweep_dim):
    """Sweeping _validate_global_plan: per chunk in sweep order, the active chunks overlapping it."""
    boxes = _ascendfix_boxes([c.offsets for c in chunks], [c.sizes for c in chunks], None)
    if boxes is None:
        return None
    return _ascendfix_in_sweep_order(boxes, sorted_indices, sweep_dim)
