"""The ``sub-quadratic-scan`` drop probe: does a torch release's own overlap check grow slower than n²?

The torch patches can be dropped once torch's own checkpoint overlap check is sub-quadratic on the
layout that makes it slow: a Megatron MoE expert weight, one chunk per layer, expert and gate/up
half (benchmarks/dcp_validation.py). The probe runs the release's stock function (its source as
read from the wheel, never imported: the few torch types it touches are small stand-ins here, and
annotations are dropped) on that layout at two sizes, 4x apart, and counts the work it does: every
comparison and addition on a chunk's offsets and sizes (the layout's numbers are an int subclass
that counts them). Counting, not timing, makes the verdict the same on every machine: a pairwise
check does about 16x the work for 4x the chunks, a sort and sweep about 4.5x.

The release is untrusted (whatever the configured index serves), so nothing of it runs in
ascendfix's process: the file is parsed here (``ast``, never run) and the functions the check needs
run in a child (:func:`_serve`, a fresh ``python -I -S -B``) that first leaves the network (a network
namespace of its own, where the kernel lets it), drops root for ``nobody``, and lowers its limits: no
byte written to any file, no new process, :data:`CPU_SECONDS` of CPU, :data:`MEMORY` bytes, a few
descriptors. The code runs with a whitelist of builtins (no ``open``, ``exec``, ``eval``,
``getattr``…) and of stdlib modules it may import; the parent stops the child after
:data:`SECONDS`. Its answer is two counts, read as JSON.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The file each probed check lives in, and its entry point.
ENTRIES = {
    "torch/distributed/_shard/sharding_spec/_internals.py": "validate_non_overlapping_shards_metadata",
    "torch/distributed/checkpoint/default_planner.py": "_validate_global_plan",
}
SMALL, LARGE = 2, 8  # layers of the expert layout: 512 and 2,048 chunks
QUADRATIC = 8.0  # growth for 4x the chunks at or above which the check counts as quadratic
SECONDS = 120  # the child's wall time: torch 2.7's pairwise checks take about 10 s on the large layout
CPU_SECONDS = 100
MEMORY = 1 << 30
# What the release's code may import: the stdlib modules torch's checks use, nothing that reaches files,
# processes or the network.
MODULES = frozenset(
    {"functools", "operator", "itertools", "math", "bisect", "heapq", "collections", "typing", "dataclasses", "abc"}
)
_BUILTINS = (
    "abs all any bool dict enumerate filter float frozenset hash int isinstance issubclass iter len list map max "
    "min next range reversed set slice sorted str sum tuple zip print repr round divmod object "
    "Exception ValueError TypeError KeyError IndexError AssertionError RuntimeError NotImplementedError "
    "StopIteration ZeroDivisionError ArithmeticError LookupError True False None"
).split()
_NOBODY = 65534


_WORK = [0]  # operations on the layout's numbers since the last reset


def _counting(name: str) -> Callable[[int, Any], Any]:
    """``int``'s operator ``name``, counting each call (its result as overriding operators give it: Any)."""
    base = getattr(int, name)

    def op(self: int, other: Any) -> Any:
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


def _program(source: bytes, entry: str) -> str:
    """``entry`` and the module functions it calls (transitively), with the module's non-torch imports, as
    source text: parsed, never run here."""
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
    return ast.unparse(ast.Module(body=body, type_ignores=[]))


class _Absent:
    """A module (or a name in it) the probe does not give the release: any use of it fails."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> _Absent:
        return _Absent(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self._name} is not available to the probe")


def _functions(program: str) -> dict:
    """Inside the jailed child: ``program`` run with the stand-ins, whitelisted builtins and imports."""
    import builtins

    def imports(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "sys" and not level:  # torch's sweeps start from sys.maxsize: that, and nothing else of sys
            return types.SimpleNamespace(maxsize=sys.maxsize)
        if level or name.split(".")[0] not in MODULES:
            return _Absent(name)  # the module's other imports (os, logging…): nothing the check may use
        return builtins.__import__(name, globals, locals, fromlist, level)

    allowed = {name: getattr(builtins, name) for name in _BUILTINS}
    namespace = {
        "__builtins__": {**allowed, "__import__": imports, "__build_class__": builtins.__build_class__},
        "torch": types.SimpleNamespace(Size=Size),
        "ShardMetadata": ShardMetadata,
        "ChunkStorageMetadata": ChunkStorageMetadata,
        "TensorStorageMetadata": TensorStorageMetadata,
        "BytesStorageMetadata": BytesStorageMetadata,
        "Metadata": Metadata,
        "logger": _Quiet(),
        "__name__": "ascendfix_scan_probe",
    }
    exec(compile(program, "<torch module>", "exec"), namespace)
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
        program = _program(source, entry)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ValueError(f"cannot read {entry}() from {path}: {str(e)[:200]}") from None
    request = json.dumps({"program": program, "entry": entry})
    boot = f"import sys; sys.path.insert(0, {_HERE!r}); import {_MODULE_NAME}; {_MODULE_NAME}._serve()"
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-B", "-c", boot],
            input=request,
            capture_output=True,
            text=True,
            timeout=SECONDS,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
            cwd="/",
        )
    except subprocess.TimeoutExpired:
        raise ValueError(f"{entry}() ran past {SECONDS} s on the expert layout: stopped") from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ValueError(f"{entry}() could not be measured (its probe exited {done.returncode})") from None
    if "error" in answer:
        raise ValueError(str(answer["error"])[:300])
    return Measurement(entry, int(answer["small"]), int(answer["large"]))


_HERE = os.path.dirname(os.path.abspath(__file__))
_MODULE_NAME = os.path.splitext(os.path.basename(__file__))[0]  # imported alone: not its package's __init__


def _serve() -> None:
    """Inside the child (``python -I -S -B``): read the program on stdin, jail, measure, answer JSON on stdout."""
    request = json.loads(sys.stdin.read())
    entry = request["entry"]
    for name in MODULES:  # imported before the descriptors are cut
        __import__(name)
    _jail()
    answer: dict[str, object]
    try:
        func = _functions(request["program"])[entry]
        answer = {"small": _work(func, _arguments(entry, SMALL)), "large": _work(func, _arguments(entry, LARGE))}
    except ValueError as e:
        answer = {"error": str(e)}
    except (SyntaxError, NameError, ImportError) as e:
        answer = {"error": f"cannot run {entry}() without torch: {e}"}
    except BaseException as e:  # noqa: BLE001 - whatever the release's code raised is its verdict
        answer = {"error": f"{entry}() cannot be measured: {type(e).__name__}"}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()
    os._exit(0)


def _jail() -> None:
    """Leave the network, drop root, and lower the limits (see the module doc); what the kernel refuses is skipped,
    except the limits, which are always set."""
    import ctypes
    import resource

    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(clone_newnet if os.geteuid() == 0 else clone_newnet | clone_newuser) != 0:
            pass  # no namespaces here (a container without the capability): the other bounds still hold
    except (OSError, AttributeError):
        pass
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(_NOBODY)
        os.setuid(_NOBODY)
    for limit, value in (
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NPROC, 0),
        (resource.RLIMIT_CPU, CPU_SECONDS),
        (resource.RLIMIT_AS, MEMORY),
        (resource.RLIMIT_NOFILE, 8),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))


def _work(func: Callable[..., object], args: tuple) -> int:
    """How many operations on the layout's numbers one call of ``func`` makes."""
    _WORK[0] = 0
    try:
        func(*args)
    except Exception as e:  # a check that fails on a clean layout cannot be judged
        raise ValueError(f"{func.__name__}() fails on the expert layout: {type(e).__name__}: {e}") from None
    return _WORK[0]
