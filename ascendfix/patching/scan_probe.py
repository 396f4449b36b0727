"""The ``sub-quadratic-scan`` drop probe: does a torch release's own overlap check grow slower than n²?

The torch patches can be dropped once torch's own checkpoint overlap check is sub-quadratic on the
layout that makes it slow: a Megatron MoE expert weight, one chunk per layer, expert and gate/up
half (benchmarks/dcp_validation.py). The probe runs the release's stock function (its source as
read from the wheel, never imported: the few torch types it touches are small stand-ins here, and
annotations are dropped) on that layout at two sizes, 4x apart, and counts the work it does: every
comparison and addition on a chunk's offsets and sizes (the layout's numbers are an int subclass
that counts them). Counting, not timing, makes the verdict the same on every machine: a pairwise
check does about 16x the work for 4x the chunks, a sort and sweep about 4.5x.
"""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass

# The file each probed check lives in, and its entry point.
ENTRIES = {
    "torch/distributed/_shard/sharding_spec/_internals.py": "validate_non_overlapping_shards_metadata",
    "torch/distributed/checkpoint/default_planner.py": "_validate_global_plan",
}
SMALL, LARGE = 2, 8  # layers of the expert layout: 512 and 2,048 chunks
QUADRATIC = 8.0  # growth for 4x the chunks at or above which the check counts as quadratic


_WORK = [0]  # operations on the layout's numbers since the last reset


def _counting(name: str):
    base = getattr(int, name)

    def op(self, other):
        _WORK[0] += 1
        result = base(self, other)
        return Counted(result) if type(result) is int else result  # sums stay counted

    return op


class Counted(int):
    """An offset or size of the probe's layout: each comparison or addition with it counts as work."""

    __slots__ = ()
    __hash__ = int.__hash__
    __add__, __radd__, __sub__, __rsub__ = map(_counting, ("__add__", "__radd__", "__sub__", "__rsub__"))
    __lt__, __le__, __gt__, __ge__ = map(_counting, ("__lt__", "__le__", "__gt__", "__ge__"))
    __eq__, __ne__ = map(_counting, ("__eq__", "__ne__"))


class Size(tuple):
    """Stand-in for torch.Size."""


@dataclass
class ShardMetadata:
    """Stand-in for torch's ShardMetadata."""

    shard_offsets: list
    shard_sizes: list
    placement: object = None


@dataclass
class ChunkStorageMetadata:
    """Stand-in for torch's ChunkStorageMetadata."""

    offsets: Size
    sizes: Size


@dataclass
class TensorStorageMetadata:
    """Stand-in for torch's TensorStorageMetadata."""

    size: Size
    chunks: list
    properties: object = None


@dataclass
class BytesStorageMetadata:
    """Stand-in for torch's BytesStorageMetadata."""


@dataclass
class Metadata:
    """Stand-in for torch's checkpoint Metadata."""

    state_dict_metadata: dict
    planner_data: object = None


class _Quiet:
    """Stand-in for a module's logger."""

    def warning(self, *args, **kwargs):
        """Drop the message."""


@dataclass(frozen=True)
class Measurement:
    """How the check's work (operations on offsets and sizes) grew when the layout grew 4x."""

    function: str
    small: int
    large: int

    @property
    def growth(self) -> float:
        """large / small."""
        return self.large / max(self.small, 1)

    @property
    def sub_quadratic(self) -> bool:
        """Whether the growth is below what a quadratic check shows."""
        return self.growth < QUADRATIC


def _strip_annotations(node: ast.FunctionDef) -> ast.FunctionDef:
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
        elif isinstance(n, ast.arg):
            n.annotation = None
    return node


def _functions(source: bytes, entry: str) -> dict:
    """``entry`` and the module functions it calls (transitively), executed with stand-ins."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if entry not in defs:
        raise ValueError(f"no function {entry}()")
    needed, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        todo += [
            n.func.id
            for n in ast.walk(defs[name])
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defs
        ]
    imports: list[ast.stmt] = [
        n
        for n in tree.body
        if isinstance(n, ast.Import)
        and all(a.name.split(".")[0] != "torch" for a in n.names)
        or isinstance(n, ast.ImportFrom)
        and n.level == 0
        and (n.module or "").split(".")[0] not in ("torch", "__future__")
    ]
    body = imports + [_strip_annotations(defs[name]) for name in defs if name in needed]
    namespace = {
        "torch": types.SimpleNamespace(Size=Size),
        "ShardMetadata": ShardMetadata,
        "ChunkStorageMetadata": ChunkStorageMetadata,
        "TensorStorageMetadata": TensorStorageMetadata,
        "BytesStorageMetadata": BytesStorageMetadata,
        "Metadata": Metadata,
        "logger": _Quiet(),
        "__name__": "ascendfix_scan_probe",
    }
    exec(compile(ast.Module(body=body, type_ignores=[]), "<torch module>", "exec"), namespace)
    return namespace


def _experts(layers: int) -> list[tuple[list[int], list[int]]]:
    c = Counted
    return [
        ([c(layer), c(e), c(h * 1536), c(0)], [c(1), c(1), c(1536), c(4096)])
        for e in range(128)
        for layer in range(layers)
        for h in (0, 1)
    ]


def _arguments(entry: str, layers: int) -> tuple:
    boxes = _experts(layers)
    if entry == "validate_non_overlapping_shards_metadata":
        return ([ShardMetadata(o, s) for o, s in boxes],)
    chunks = [ChunkStorageMetadata(Size(o), Size(s)) for o, s in boxes]
    tensor = TensorStorageMetadata(Size(map(Counted, [layers, 128, 3072, 4096])), chunks)
    return [object(), object()], Metadata({"experts": tensor})


def measure(path: str, source: bytes) -> Measurement:
    """Count the work of the stock check in ``source`` (the file at ``path``) on the expert layout at two sizes.

    Raises ValueError when the file has no check this probe knows or the check fails on the layout.
    """
    entry = ENTRIES.get(path)
    if entry is None:
        raise ValueError(f"{path} has no overlap check this probe knows")
    try:
        func = _functions(source, entry)[entry]
    except (SyntaxError, NameError, ImportError) as e:
        raise ValueError(f"cannot run {entry}() without torch: {e}") from None
    return Measurement(entry, _work(func, _arguments(entry, SMALL)), _work(func, _arguments(entry, LARGE)))


def _work(func, args: tuple) -> int:
    """How many operations on the layout's numbers one call of ``func`` makes."""
    _WORK[0] = 0
    try:
        func(*args)
    except Exception as e:  # a check that fails on a clean layout cannot be judged
        raise ValueError(f"{func.__name__}() fails on the expert layout: {type(e).__name__}: {e}") from None
    return _WORK[0]
