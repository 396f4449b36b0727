"""Exact, fast replacements for torch's pairwise checkpoint overlap scans (the fast-validate variants).

The ``fast-overlap-scan`` transform copies the ``_ascendfix_*`` functions a stock scan needs
(its helper below and every ``_ascendfix_*`` function that helper uses) into the torch module,
right before the function it patches, and calls the helper once before the stock scan's outer
loop. The stock loop itself stays in place; its candidate list is narrowed to what the helper
returns::

    _ascendfix_overlaps = <helper>(<args>)
    for j in (range(i + 1, len(shards)) if _ascendfix_overlaps is None else _ascendfix_overlaps[i]):

Each helper returns, for every position of the stock loop, the candidates the stock inner loop
visits, in the stock visiting order, answered as the loop asks for each position in turn. The stock
loop body still runs its own overlap test, warnings, messages, ``return`` and error list on them, so
whatever torch reports, in whatever order, is reported the same. The first positions get stock's own
candidates (a pairwise scan's later items; a sweep's active list, replayed from the same offsets)
until they total 8 per box (building the fast answer costs somewhat more): a scan that stops at an
early overlap, or is cheap throughout, costs about what it costs stock torch and builds nothing.
From the position where they pass that budget on, the candidates are the ones that really overlap (a
grid's identical boxes, else a sweep), built once and made as the stock loop reaches them, never
every pair at once: one that reports every overlap holds one box's at a time (N identical boxes cost
what they cost stock torch). The sweep goes over the dimension where it compares the fewest boxes
(counted first, in O(n log n) per dimension, none compared). Where even that one would compare
many per box (two staircases, one along each dimension; three crowds in 3-D, each one wide along
its own dimension: disjoint boxes all active at once in every dimension), each box searches the
dimension where the fewest boxes overlap it (counted with the sweep's count; those starting within
it by bisection, those reaching past its start in a tree), when that totals a small fraction of the
sweep's comparisons. Else, where every sweep would compare hundreds per box, the pairs overlapping
in its two cheapest dimensions are searched, in O(n log^2 n) (a corner in a rectangle: a range
tree; an edge crossing an edge: a sweep), and every pair found is checked in every dimension.
Where they too are many (a crowd in every two dimensions) the search stops once it has counted a
128th of that sweep's comparisons, before keeping any, and stock's candidates stay, each position's
filtered as the loop asks for it (a comprehension per dimension, cheaper than torch's test per pair,
which then runs on what is left): such a layout costs stock torch's scan, at a fraction of its cost
per pair, plus that bounded attempt. Boxes that are not plain ints of one length keep stock's
candidates unfiltered: odd inputs raise exactly where torch raises them.

Only this file's functions are inserted; ``REPLACES`` is read by the transform, never inserted.
The inserted code uses nothing but builtins and the stdlib's bisect, heapq, itertools, operator and sys,
imported inside the functions that use them.
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


def _ascendfix_sweep(boxes, ndims, d=None):
    """Yield the overlapping pairs, as a sweep over d (else the dimension with the most distinct offsets) meets them."""
    import heapq

    if d is None:
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


def _ascendfix_sweep_cost(boxes, d):
    """The comparisons a sweep over d would make (the active boxes at each start), counted in O(n log n), none made."""
    import heapq

    ends = []
    cost = 0
    for start, end in sorted((offsets[d], offsets[d] + sizes[d]) for offsets, sizes in boxes):
        while ends and ends[0] <= start:
            heapq.heappop(ends)
        cost += len(ends)
        if end > start:
            heapq.heappush(ends, end)
    return cost


def _ascendfix_crossings(starts, ends, found, cap):
    """Add to found the pairs where one's lower edge crosses the other's left edge (d, e); the cap left, < 0 past it."""
    from bisect import bisect_left, insort

    count = len(starts)
    events = []  # (place in d, 0: a lower edge ends, 1: a lower edge starts, 2: a left edge, box), swept over d
    for k, ((x, y), (x_end, y_end)) in enumerate(zip(starts, ends)):
        if x_end > x:
            events.append((x, 1, k))
            events.append((x_end, 0, k))
        if y_end > y:
            events.append((x, 2, k))
    events.sort()
    met = []
    edges = []  # start in e * count + box, of the lower edges the sweep is on: one int sorts as (start, box)
    for _, kind, k in events:
        if kind == 0:
            del edges[bisect_left(edges, starts[k][1] * count + k)]
        elif kind == 1:
            insort(edges, starts[k][1] * count + k)
        else:
            low = bisect_left(edges, starts[k][1] * count)
            high = bisect_left(edges, ends[k][1] * count, low)
            cap -= high - low
            if cap < 0:
                return cap
            met.append((edges[low:high], k))
    for keys, k in met:  # added once the cap is known to hold: a crowd costs counting, not adding
        _ascendfix_meets(keys, k, count, found)
    return cap


def _ascendfix_corners(starts, ends, found, cap):
    """Add to found the pairs where one's lower corner lies in the other's rectangle (d, e); the cap left, as above."""
    from bisect import bisect_left
    from itertools import chain

    count = len(starts)
    order = sorted(range(count), key=starts.__getitem__)
    xs = [starts[k][0] for k in order]
    size = 1
    while size < count:
        size *= 2
    # A range tree: the corners in d's order at its leaves, each node's sorted by e (start in e * count + box).
    tree = [[] for _ in range(size)] + [[starts[k][1] * count + k] for k in order] + [[]] * (size - count)
    for v in range(size - 1, 0, -1):
        tree[v] = sorted(tree[2 * v] + tree[2 * v + 1])
    met = []
    step = int(count**0.5) or 1  # boxes far apart in the list first: a crowd anywhere in it meets the cap at once
    for a in chain.from_iterable(range(first, count, step) for first in range(step)):
        (x, y), (x_end, y_end) = starts[a], ends[a]
        if x_end <= x or y_end <= y:
            continue
        low, high = bisect_left(xs, x) + size, bisect_left(xs, x_end) + size
        nodes = []  # the nodes that together hold the corners from x to x_end in d
        while low < high:
            if low & 1:
                nodes.append(tree[low])
                low += 1
            if high & 1:
                high -= 1
                nodes.append(tree[high])
            low, high = low // 2, high // 2
        for node in nodes:
            first = bisect_left(node, y * count)
            last = bisect_left(node, y_end * count, first)
            cap -= last - first
            if cap < 0:
                return cap
            met.append((node, first, last, a))
    for node, first, last, a in met:  # as in _ascendfix_crossings
        _ascendfix_meets(node[first:last], a, count, found)
    return cap


def _ascendfix_meets(keys, k, count, found):
    """Add to found the pair of box k and each box of keys (start * count + box), but k itself, as (lower, higher)."""
    for b in keys:
        b %= count
        if b != k:
            found.add((b, k) if b < k else (k, b))


def _ascendfix_planar(boxes, d, e, cap):
    """The pairs (i < j) whose ranges in d and in e overlap (more where a size is not positive); None past cap found."""
    # Two ranges overlap only when one starts within the other (a.start <= b.start < a.end), so two boxes overlapping
    # in d and e have a lower corner in the other's rectangle, or a lower edge crossing the other's left edge.
    starts = [(offsets[d], offsets[e]) for offsets, _ in boxes]
    ends = [(offsets[d] + sizes[d], offsets[e] + sizes[e]) for offsets, sizes in boxes]
    found = set()
    cap += 2 * len(boxes)  # each box with positive sizes meets itself once in each search
    cap = _ascendfix_corners(starts, ends, found, cap)  # where a crowd meets its cap, it meets it here, at once
    if cap < 0 or _ascendfix_crossings(starts, ends, found, cap) < 0:
        return None
    return found


def _ascendfix_tallies(boxes, ndims):
    """Per dimension, per box, the boxes overlapping it there (itself too; every size positive), by bisection."""
    from bisect import bisect_left, bisect_right
    from itertools import repeat
    from operator import sub

    tallies = []
    for d in range(ndims):
        starts = [offsets[d] for offsets, _ in boxes]
        ends = [offsets[d] + sizes[d] for offsets, sizes in boxes]
        # a overlaps b in d when a starts before b ends and ends after b starts; one that ends at or before b's start
        # also starts before b's end (sizes are positive), so the second count is a part of the first
        before_end = map(bisect_left, repeat(sorted(starts)), ends)
        tallies.append(list(map(sub, before_end, map(bisect_right, repeat(sorted(ends)), starts))))
    return tallies


def _ascendfix_least(boxes, tallies, fewest):
    """The overlapping pairs (i < j), each box searching the dimension where the fewest boxes overlap it (tallies)."""
    from bisect import bisect_left

    count, ndims = len(boxes), len(tallies)
    ends = [tuple(o + s for o, s in zip(offsets, sizes)) for offsets, sizes in boxes]
    searching = {}  # dimension -> the boxes searching it: the first of each box's fewest
    for b, d in enumerate(map(tuple.index, zip(*tallies), fewest)):
        searching.setdefault(d, []).append(b)
    found = set()
    for d, searchers in searching.items():
        order = sorted(range(count), key=lambda k: boxes[k][0][d])
        starts = [boxes[k][0][d] for k in order]
        size = 1
        while size < count:
            size *= 2
        # the latest end in d below each node of a tree over the boxes in start order
        top = [0] * size + [ends[k][d] for k in order] + [starts[0]] * (size - count)
        for v in range(size - 1, 0, -1):
            top[v] = max(top[2 * v], top[2 * v + 1])
        for b in searchers:
            start, end = boxes[b][0][d], ends[b][d]
            low = bisect_left(starts, start)
            high = bisect_left(starts, end, low)
            others = order[low:high]  # those starting within b in d
            left = tallies[d][b] - (high - low)  # and those starting before b that reach past its start
            nodes = []
            first, last = size, low + size
            while first < last:  # the tree's nodes over the boxes starting before b
                if first & 1:
                    nodes.append(first)
                    first += 1
                if last & 1:
                    last -= 1
                    nodes.append(last)
                first, last = first // 2, last // 2
            while left and nodes:
                v = nodes.pop()
                if top[v] > start:
                    if v >= size:
                        others.append(order[v - size])
                        left -= 1
                    else:
                        nodes += (2 * v, 2 * v + 1)
            offsets_b, ends_b = boxes[b][0], ends[b]
            for a in others:
                if a != b and all(boxes[a][0][k] < ends_b[k] and offsets_b[k] < ends[a][k] for k in range(ndims)):
                    found.add((a, b) if a < b else (b, a))
    return list(found)


def _ascendfix_swept(boxes, few=4, fewest=4, planar=128, cap=None):
    """The overlapping pairs, by a sweep or a search (see the comments); None where none is cheap enough."""
    # A sweep over the cheapest dimension where it compares at most `few` boxes per box. Else, where every size is
    # positive, each box may search the dimension where the fewest boxes overlap it (a bisection for those starting
    # within it, a tree for those reaching past its start), when that is at most a `fewest`th of the cheapest
    # sweep's comparisons (a box's search costs some 3 comparisons' time). Where every sweep would compare more than
    # `planar` per box (torch's scan too), the pairs overlapping in the two cheapest dimensions, searched in
    # O(n log^2 n) (some 30 comparisons' time per box), when they are at most `cap` (1/128 of that sweep's
    # comparisons). Else torch's own scan finds them: an attempt costs a fraction of what that scan compares.
    count, ndims = len(boxes), len(boxes[0][0])
    positive = ndims > 0 and min(min(sizes) for _, sizes in boxes) > 0
    if positive:  # a sweep over d compares each pair overlapping in d once: each box's tally there but itself, halved
        tallies = _ascendfix_tallies(boxes, ndims)
        costs = sorted(((sum(tally) - count) // 2, k) for k, tally in enumerate(tallies))
    else:
        costs = sorted((_ascendfix_sweep_cost(boxes, k), k) for k in range(ndims))
    cost, d = costs[0]
    if cost <= few * count + 64:
        return list(_ascendfix_sweep(boxes, ndims, d))
    if positive:
        least = list(map(min, zip(*tallies)))
        if fewest * (sum(least) + 3 * count) <= cost:
            return _ascendfix_least(boxes, tallies, least)
    if ndims < 2 or cost <= planar * count + 64:  # the planar search costs about 30 comparisons per box
        return None
    found = _ascendfix_planar(boxes, d, costs[1][1], cost // 128 if cap is None else cap)
    if found is None:
        return None
    return [
        (i, j)
        for i, j in found
        if all(
            boxes[i][0][k] < boxes[j][0][k] + boxes[j][1][k] and boxes[j][0][k] < boxes[i][0][k] + boxes[i][1][k]
            for k in range(ndims)
        )
    ]


def _ascendfix_tight(boxes):
    """keep(k, others): the boxes of others (indices) overlapping box k, in their order, one dimension at a time."""
    columns = [
        ([offsets[d] for offsets, _ in boxes], [offsets[d] + sizes[d] for offsets, sizes in boxes])
        for d in range(len(boxes[0][0]))
    ]

    def keep(k, others):
        for starts, ends in columns:  # torch's test: neither starts at or past the other's end, in each dimension
            start, end = starts[k], ends[k]
            others = [j for j in others if starts[j] < end and start < ends[j]]
            if not others:
                break
        return others

    return keep


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
        if pairs is None:  # stock's candidates, filtered as they are asked for
            return _ascendfix_tight(boxes)
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
        if pairs is None:  # as in _ascendfix_later
            return _ascendfix_tight(boxes)
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


def _ascendfix_pairwise(items, build, budget=None, _kind=[]):  # noqa: B006 (_kind: the class, made once)
    """Pairwise candidates per i, asked in turn: stock's items[i + 1:] up to budget in all, then build()'s."""
    count = len(items)
    if budget is None:  # under what build() costs: a scan that stops early costs what it costs stock torch
        budget = 8 * count + 64
    if count * (count - 1) // 2 <= budget:  # every one of stock's candidates fits: stock's scan, nothing added
        return None
    if not _kind:  # a class statement costs more than a small scan: one class, made on the first call

        class _AscendfixLater(dict):
            """later[i] for i = 0, 1, ... in order, made when asked: stock's candidates, then build()'s."""

            def __missing__(self, i):
                if not self.built:
                    self.spent += self.count - 1 - i
                    if self.spent <= self.budget:
                        return self.items[i + 1 :]
                    self.built, self.later = True, self.build()
                if self.later is None:  # stock's to the end
                    return self.items[i + 1 :]
                if callable(self.later):  # stock's, filtered
                    return [self.items[j] for j in self.later(i, range(i + 1, self.count))]
                return self.later[i]

        _kind.append(_AscendfixLater)
    later = _kind[0]()
    later.items, later.count, later.build, later.budget = items, count, build, budget
    later.spent, later.built, later.later = 0, False, None
    return later


def _ascendfix_sweeping(sorted_indices, span, build, budget=None, _kind=[]):  # noqa: B006 (as in _ascendfix_pairwise)
    """A sweep's positions and candidates, walked in turn: stock's active list up to budget, then build()'s."""
    count = len(sorted_indices)
    if budget is None:  # as in _ascendfix_pairwise
        budget = 8 * count + 64
    if count * (count - 1) // 2 <= budget:
        return None
    if not _kind:
        import sys
        from bisect import bisect_right, insort

        class _AscendfixSweep(dict):
            """Iterated: the positions to visit; self[idx] for each in turn: its candidates, made when asked."""

            def __iter__(self):
                for k, idx in enumerate(self.order):
                    if not self.built and self.spent > self.budget:
                        self.built, self.earlier = True, self.build()
                        if self.earlier is not None and not callable(self.earlier):  # else stock's to the end
                            done = set(self.order[:k])
                            yield from (b for b in self.earlier if b not in done)
                            return
                    yield idx

            def __missing__(self, idx):
                if self.earlier is not None and not callable(self.earlier):
                    return self.earlier[idx]
                # stock's active list, replayed: span(idx) is the (start, end) torch reads for idx
                if self.last is not None:
                    insort(self.active, self.last)
                start, end = self.span(idx)
                del self.active[: bisect_right(self.active, (start, sys.maxsize))]
                self.last = (end, idx)
                self.spent += len(self.active)
                if self.earlier is None:  # stock's (before the build, or for odd input)
                    return self.active
                return [(self.span(j)[1], j) for j in self.earlier(idx, [j for _, j in self.active])]  # filtered

        _kind.append(_AscendfixSweep)
    sweep = _kind[0]()
    sweep.order, sweep.span, sweep.build, sweep.budget = sorted_indices, span, build, budget
    sweep.active, sweep.last, sweep.spent, sweep.built, sweep.earlier = [], None, 0, False, None
    return sweep


def _ascendfix_shards_overlapping_later(shards, sharded_dims):
    """Pairwise _find_nd_overlapping_shards: per shard, the later shards overlapping it in the sharded dims."""

    def build():
        boxes = _ascendfix_boxes([s.shard_offsets for s in shards], [s.shard_sizes for s in shards], sharded_dims)
        return None if boxes is None else _ascendfix_later(boxes, range(len(shards)))

    return _ascendfix_pairwise(range(len(shards)), build)


def _ascendfix_shards_overlapping_in_sweep(shards, sorted_indices, sweep_dim):
    """Sweeping _find_nd_overlapping_shards: per shard in sweep order, the active shards overlapping it."""

    def span(idx):
        start = shards[idx].shard_offsets[sweep_dim]
        return start, start + shards[idx].shard_sizes[sweep_dim]

    def build():
        boxes = _ascendfix_boxes([s.shard_offsets for s in shards], [s.shard_sizes for s in shards], None)
        return None if boxes is None else _ascendfix_in_sweep_order(boxes, sorted_indices, sweep_dim)

    return _ascendfix_sweeping(sorted_indices, span, build)


def _ascendfix_chunks_overlapping_later(chunks):
    """Pairwise _validate_global_plan: per chunk, the later chunks overlapping it."""

    def build():
        boxes = _ascendfix_boxes([c.offsets for c in chunks], [c.sizes for c in chunks], None)
        return None if boxes is None else _ascendfix_later(boxes, chunks)

    return _ascendfix_pairwise(chunks, build)


def _ascendfix_chunks_overlapping_in_sweep(chunks, sorted_indices, sweep_dim):
    """Sweeping _validate_global_plan: per chunk in sweep order, the active chunks overlapping it."""

    def span(idx):
        start = chunks[idx].offsets[sweep_dim]
        return start, start + chunks[idx].sizes[sweep_dim]

    def build():
        boxes = _ascendfix_boxes([c.offsets for c in chunks], [c.sizes for c in chunks], None)
        return None if boxes is None else _ascendfix_in_sweep_order(boxes, sorted_indices, sweep_dim)

    return _ascendfix_sweeping(sorted_indices, span, build)
