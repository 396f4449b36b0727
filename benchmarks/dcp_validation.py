"""Checkpoint validation speed on Qwen3-235B-A22B, stock torch vs skip vs fast-validate, in one run.

The functions timed are the real bodies from the torch wheels (downloaded into the test cache,
never committed), run with stand-ins for the torch types (tests/torch_standins.py):
``validate_non_overlapping_shards_metadata`` (every load) and ``_validate_global_plan`` (every
save), stock 2.7.1 (the A2's torch, pairwise), stock 2.10.0 (torch's own sort-and-sweep, which
sweeps the largest dimension), stock 2.14.1 (newest; the same sweep, returning list[str]), the
guide's ``skip`` and ascendfix's ``fast-validate`` on all three.

The layout is Megatron's distributed checkpoint of Qwen3-235B-A22B on 128 NPUs, TP4 PP8 EP4
(expert TP 1): 94 layers stacked on a leading axis, PP stages of 12,12,12,12,12,12,11,11 layers;
hidden 4096, 64 query / 4 key-value heads of 128, 128 experts of moe_intermediate 1536, vocab
151936. The expert fc1 weight is the guide's 94 x 128 x 2 = 24,064-chunk tensor (one chunk per
layer, expert and gate/up half); chunks are listed in rank order, as the global plan lists them.
Stock torch runs once per tensor (minutes on the expert tensors); skip and fast-validate take
the best of three. Whole checkpoint = the sum over its tensors (both functions work per tensor).

Targets: fast-validate < 1 s for the whole checkpoint; >= 1000x stock 2.7.1 on the expert tensor.
The ratio columns are measured side by side in this run: stock 2.7.1 / fast and stock 2.10.0 / fast.

    python benchmarks/dcp_validation.py [--layers N] [--identical N] [--equivalence EXAMPLES]

``--identical N`` (default 24,064) also loads N shards that all cover one box (and one beside them),
the defect the check exists for: stock torch raises at once, and fast-validate must too, in about its
time and memory (seconds and peak traced MiB, side by side).

``--adversarial N`` (default 4,000) also times non-grid layouts of N chunks: where stock torch's load check
stops at a first overlap at once (a staircase of disjoint chunks, all active at once along torch's sweep
dimension, with an overlapping chunk last or first; N identical chunks and one misaligned); the staircase
alone and (for the save check, which reports every overlap) with that overlap, quadratic for torch's own
scans; two staircases, one along each dimension, and three crowds in 3-D, quadratic for any sweep (and the
crowds for any two dimensions: fast-validate has each chunk search the dimension where it overlaps fewest);
and three interlocked crowds, where every chunk overlaps a third of them in every dimension, quadratic for all
of these. fast-validate must never be slower than stock there: its first candidates are stock's own, so an
early overlap is met as stock meets it and nothing is built; where no sweep or search helps, torch's scan
keeps its candidates, filtered one dimension at a time before torch's own test. The run ends with stock / fast
side by side, per torch version, for those layouts and for the big grid ones (the expert tensors, the whole
checkpoint).

Times are this process's CPU time (``time.process_time``), each run's after the garbage of the runs before it is
collected: the figures hold on a machine others share.

``--equivalence 10000`` also runs the hypothesis equivalence properties of
tests/test_fast_validate.py with that many examples per function and torch version.
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ascendfix.transforms import registry  # noqa: E402
from tests import upstream  # noqa: E402
from tests.torch_standins import (  # noqa: E402
    PLAN_FUNCTIONS,
    SHARD_FUNCTIONS,
    ChunkStorageMetadata,
    Metadata,
    ShardMetadata,
    Size,
    TensorStorageMetadata,
    load,
    outcome,
)

TEMPLATE = "templates/fast_overlap.py"
VERSIONS = ("2.7.1", "2.10.0", "2.14.1")  # the A2's torch, torch's own sweep, the newest
SHARDS, PLAN = "validate_non_overlapping_shards_metadata", "_validate_global_plan"
TP, PP, EP, WORLD = 4, 8, 4, 128
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, MOE_FFN, VOCAB = 4096, 64, 4, 128, 128, 1536, 151936


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    boxes: list[tuple[tuple[int, ...], tuple[int, ...]]]  # (offsets, sizes), in global plan order


def stages(layers: int) -> list[range]:
    """Layers per PP stage: as even as possible, the larger stages first."""
    sizes = [layers // PP + (s < layers % PP) for s in range(PP)]
    starts = [sum(sizes[:s]) for s in range(PP)]
    return [range(a, a + n) for a, n in zip(starts, sizes, strict=True)]


def qwen3_235b(layers: int) -> list[Tensor]:
    """The checkpoint's tensors and their chunks, rank by rank."""
    qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    tensors = []

    def stacked(name, shape, split_dim=None):  # one chunk per layer (and TP rank when split)
        parts = TP if split_dim is not None else 1
        boxes = []
        for stage in stages(layers):
            for tp in range(parts):
                for layer in stage:
                    offsets, sizes = [layer, *[0] * len(shape)], [1, *shape]
                    if split_dim is not None:
                        sizes[1 + split_dim] = shape[split_dim] // TP
                        offsets[1 + split_dim] = tp * sizes[1 + split_dim]
                    boxes.append((tuple(offsets), tuple(sizes)))
        tensors.append(Tensor(f"decoder.layers.{name}", (layers, *shape), boxes))

    def experts(name, rows, cols, halves):  # one chunk per layer, expert and half; EP rank owns 32 experts
        boxes = []
        for stage in stages(layers):
            for ep in range(EP):
                for layer in stage:
                    for expert in range(ep * EXPERTS // EP, (ep + 1) * EXPERTS // EP):
                        for half in range(halves):
                            boxes.append(((layer, expert, half * rows // halves, 0), (1, 1, rows // halves, cols)))
        tensors.append(Tensor(f"decoder.layers.mlp.experts.experts.{name}", (layers, EXPERTS, rows, cols), boxes))

    def vocab(name):
        rows = VOCAB // TP
        boxes = [((tp * rows, 0), (rows, HIDDEN)) for tp in range(TP)]
        tensors.append(Tensor(name, (VOCAB, HIDDEN), boxes))

    vocab("embedding.word_embeddings.weight")
    stacked("self_attention.linear_qkv.layer_norm_weight", (HIDDEN,))
    stacked("self_attention.linear_qkv.weight", (qkv, HIDDEN), split_dim=0)
    stacked("self_attention.q_layernorm.weight", (HEAD_DIM,))
    stacked("self_attention.k_layernorm.weight", (HEAD_DIM,))
    stacked("self_attention.linear_proj.weight", (HIDDEN, HEADS * HEAD_DIM), split_dim=1)
    stacked("pre_mlp_layernorm.weight", (HIDDEN,))
    stacked("mlp.router.weight", (EXPERTS, HIDDEN))
    experts("linear_fc1.weight", 2 * MOE_FFN, HIDDEN, halves=2)
    experts("linear_fc2.weight", HIDDEN, MOE_FFN, halves=1)
    tensors.append(Tensor("decoder.final_layernorm.weight", (HIDDEN,), [((0,), (HIDDEN,))]))
    vocab("output_layer.weight")
    return tensors


def variants() -> dict[str, dict[str, tuple]]:
    """name -> {function: (callable, logger)} for every column of the table."""
    columns = {}
    for version in VERSIONS:
        root = upstream.torch_tree(version)
        shard_src = (root / upstream.SHARD_INTERNALS).read_bytes()
        plan_src = (root / upstream.DEFAULT_PLANNER).read_bytes()
        fast_shards = registry.build(
            "fast-overlap-scan", {"function": "_find_nd_overlapping_shards", "template": TEMPLATE}
        )
        fast_plan = registry.build("fast-overlap-scan", {"function": PLAN, "template": TEMPLATE})
        sources = {
            f"stock {version}": (shard_src, plan_src),
            f"fast {version}": (fast_shards.apply(shard_src, "x").code, fast_plan.apply(plan_src, "x").code),
        }
        if version == "2.7.1":
            skip_shards = registry.build("return-early", {"function": SHARDS})
            skip_plan = registry.build("return-early", {"function": PLAN})
            sources["skip 2.7.1"] = (skip_shards.apply(shard_src, "x").code, skip_plan.apply(plan_src, "x").code)
        for name, (shards, plan) in sources.items():
            shard_ns, shard_log = load(shards, SHARD_FUNCTIONS)
            plan_ns, plan_log = load(plan, PLAN_FUNCTIONS)
            columns[name] = {SHARDS: (shard_ns[SHARDS], shard_log), PLAN: (plan_ns[PLAN], plan_log)}
    order = [f"stock {v}" for v in VERSIONS] + ["skip 2.7.1"] + [f"fast {v}" for v in VERSIONS]
    return {name: columns[name] for name in order}


def arguments(function: str, tensor: Tensor) -> tuple:
    if function == SHARDS:
        return ([ShardMetadata(list(o), list(s)) for o, s in tensor.boxes],)
    chunks = [ChunkStorageMetadata(Size(o), Size(s)) for o, s in tensor.boxes]
    return [object()] * WORLD, Metadata({tensor.name: TensorStorageMetadata(Size(tensor.shape), chunks)})


CLOCK = time.process_time  # CPU time of this process: what others running on the machine do not change


def speedups(times: dict[str, float]) -> str:
    """The two ratio columns: stock 2.7.1 / fast 2.7.1 and stock 2.10.0 / fast 2.10.0."""
    return " ".join(f"{times[f'stock {v}'] / times[f'fast {v}']:10.0f}x" for v in VERSIONS[:2])


def clocked(func, logger, args) -> tuple[float, tuple]:
    """CPU seconds of one run and its outcome, the garbage of earlier runs collected first (so a run does not pay
    for the collection another run's garbage brings on; its own garbage it pays for)."""
    gc.collect()
    start = CLOCK()
    result = outcome(func, logger, *args)
    return CLOCK() - start, result


def timed(func, logger, args, runs: int) -> tuple[float, tuple]:
    best, result = float("inf"), None
    for _ in range(runs):
        seconds, result = clocked(func, logger, args)
        best = min(best, seconds)
    return best, result


def identical(columns: dict, count: int) -> None:
    """N shards over one box: each column's seconds and peak traced memory, stock and fast side by side."""
    import tracemalloc

    one_box = [ShardMetadata([0, 0], [4, 4]) for _ in range(count - 1)]
    args_ = ([*one_box, ShardMetadata([4, 4], [4, 4])],)  # one beside them: both dimensions are sharded
    print(f"\n{SHARDS}, {count} identical shards: seconds, peak MiB")
    for version in VERSIONS:
        row = []
        for name in (f"stock {version}", f"fast {version}"):
            seconds, result = timed(*columns[name][SHARDS], args_, 3)
            tracemalloc.start()
            outcome(*columns[name][SHARDS], *args_)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            row.append(f"{name} {seconds:9.4f} s {peak:8.1f} MiB ({result[0]})")
        print("  " + "   ".join(row))


def adversarial_layouts(count: int) -> dict[str, tuple[tuple[str, ...], tuple[int, ...], list]]:
    """label -> (the functions timed on it, the tensor's shape, its boxes): non-grid layouts of ``count`` chunks."""
    stairs = [((i, i), (count, 1)) for i in range(count)]  # disjoint, all active along dimension 0, none along 1
    half = count // 2  # two staircases, one active along each dimension: every sweep is quadratic
    double = [((i, i), (half, 1)) for i in range(half)] + [((3 * half + j,) * 2, (1, half)) for j in range(half)]
    crowded = [((0, 0), (4, 4))] * count + [((2, 2), (4, 4))]  # identical chunks and one misaligned: no grid
    third = count // 3  # three crowds in 3-D: crowd g one wide along dimension g, all active along the other two
    crowds = [
        ((10 * third * g + i,) * 3, tuple(1 if d == g else third for d in range(3)))
        for g in range(3)
        for i in range(third)
    ]
    # interlocked: as crowds, but crowd g's steps lie within crowd g+1's length along g (the crowds apart along
    # another dimension): no overlap, yet every chunk overlaps a third of them or more in every dimension
    starts = {0: {1: 5 * third, 2: 0}, 1: {0: 0, 2: 5 * third}, 2: {0: 5 * third, 1: 0}}
    interlocked = [
        (tuple(i if d == g else starts[g][d] for d in range(3)), tuple(1 if d == g else third for d in range(3)))
        for g in range(3)
        for i in range(third)
    ]
    shape = (2 * count, count)
    return {
        "early: staircase, overlap last": ((SHARDS,), shape, [*stairs, ((0, 0), (1, 1))]),
        "early: staircase, overlap first": ((SHARDS,), shape, [((0, 0), (1, 1)), *stairs]),
        "early: identical + misaligned": ((SHARDS,), shape, crowded),
        "staircase": ((SHARDS, PLAN), shape, stairs),
        "staircase + overlap": ((PLAN,), shape, [*stairs, ((0, 0), (1, 1))]),  # the save check reports all
        "two staircases": ((SHARDS, PLAN), (4 * half, 5 * half), double),
        "three crowds, 3-D": ((SHARDS, PLAN), (30 * third,) * 3, crowds),
        "quadratic: interlocked crowds, 3-D": ((SHARDS, PLAN), (6 * third,) * 3, interlocked),
    }


def paired(stock: tuple, fast: tuple, args: tuple, runs: int) -> tuple[float, tuple, float, tuple]:
    """Best of ``runs`` for stock and fast, run in turns (stock, fast, stock, ...), so both see the same machine."""
    best = [float("inf"), float("inf")]
    results: list = [None, None]
    for _ in range(runs):
        for k, (func, logger) in enumerate((stock, fast)):
            seconds, results[k] = clocked(func, logger, args)
            best[k] = min(best[k], seconds)
    return best[0], results[0], best[1], results[1]


def adversarial(columns: dict, count: int, ratios: dict) -> None:
    """The adversarial layouts: each function's stock and fast seconds and stock / fast, per torch version."""
    print(f"\nadversarial non-grid layouts, {count} chunks: CPU seconds, in turns (best of 31, 3 where stock's scan")
    print("  runs on both sides, one where fast-validate is far ahead)")
    for label, (functions, shape, boxes) in adversarial_layouts(count).items():
        runs = 31 if label.startswith("early") else 3 if label.startswith("quadratic") else 1
        for function in functions:
            args_ = arguments(function, Tensor("staircase", shape, boxes))
            row = []
            for version in VERSIONS:
                stock, stock_result, fast, fast_result = paired(
                    columns[f"stock {version}"][function], columns[f"fast {version}"][function], args_, runs
                )
                if fast_result != stock_result:
                    raise SystemExit(f"{label}: fast {version} differs from stock: {fast_result} {stock_result}")
                ratios.setdefault((function, label), {})[version] = stock / fast
                row.append(f"{version} {stock:8.4f} {fast:8.4f} {stock / fast:7.2f}x")
            print(f"  {function[:24]:24} {label:32} " + "   ".join(row))


def given_up(columns: dict, count: int) -> None:
    """Interlocked crowds: what fast-validate builds before it filters stock's candidates there (its boxes, grid test,
    counts, the two-dimension search it stops, the filter's columns), timed alone; and its whole answer for two
    staircases and for three crowds."""
    layouts = adversarial_layouts(count)
    for label, given in (
        ("interlocked crowds", "quadratic: interlocked crowds, 3-D"),
        ("two staircases", "two staircases"),
        ("three crowds", "three crowds, 3-D"),
    ):
        _made(columns, label, layouts[given][2])


def _made(columns: dict, label: str, boxes: list) -> None:
    """The plan helper's fast answer for ``boxes``, built alone: CPU seconds per torch version."""
    chunks = [ChunkStorageMetadata(Size(o), Size(s)) for o, s in boxes]
    row = []
    for version in VERSIONS:
        helpers = columns[f"fast {version}"][PLAN][0].__globals__  # the patched module's namespace
        best = float("inf")
        for _ in range(3):
            start = CLOCK()
            made = helpers["_ascendfix_boxes"]([c.offsets for c in chunks], [c.sizes for c in chunks], None)
            if "_ascendfix_later" in helpers:
                answer = helpers["_ascendfix_later"](made, chunks)
            else:
                answer = helpers["_ascendfix_in_sweep_order"](made, list(range(len(chunks))), 0)
            best = min(best, CLOCK() - start)
        if callable(answer) != (label == "interlocked crowds"):
            raise SystemExit(f"{label}: fast {version} {'filtered' if callable(answer) else 'answered'}")
        row.append(f"{version} {best:.4f} s")
    what = "builds to filter stock's candidates" if label == "interlocked crowds" else "takes to answer them"
    print(f"  {label}, what fast-validate {what}: {'   '.join(row)}")


def side_by_side(ratios: dict) -> None:
    """stock / fast per torch version: the adversarial layouts and the big grid ones, one table."""
    print("\nstock / fast, side by side (>= 1: fast-validate is not slower)")
    print(f"  {'function':24} {'layout':40} " + " ".join(f"{v:>9}" for v in VERSIONS))
    for (function, label), by_version in ratios.items():
        print(f"  {function[:24]:24} {label[:40]:40} " + " ".join(f"{by_version[v]:8.2f}x" for v in VERSIONS))


def equivalence(examples: int) -> None:
    env = {**os.environ, "ASCENDFIX_EQUIVALENCE_EXAMPLES": str(examples), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fast_validate.py"]
    cmd += ["-k", "unchanged or same_pair"]
    print(f"\nequivalence, {examples} examples per function and torch version: {shlex.join(cmd[2:])}")
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr.strip()[-2000:])
    if result.returncode != 0:
        print(result.stdout[-4000:])
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=94, help="model depth (94 is Qwen3-235B-A22B)")
    parser.add_argument("--identical", type=int, default=24064, help="shards over one box for the defect's row")
    parser.add_argument("--adversarial", type=int, default=4000, help="chunks of the adversarial non-grid layout")
    parser.add_argument("--equivalence", type=int, metavar="EXAMPLES", help="also run the equivalence properties")
    args = parser.parse_args()
    sys.__stdout__.reconfigure(line_buffering=True)  # rows as they are measured (also under recorded())
    tensors = qwen3_235b(args.layers)
    columns = variants()
    names = list(columns)
    ratios: dict[tuple[str, str], dict[str, float]] = {}
    total_chunks = sum(len(t.boxes) for t in tensors)
    print(f"Qwen3-235B-A22B, {args.layers} layers, TP{TP} PP{PP} EP{EP}: {len(tensors)} tensors, {total_chunks} chunks")
    for function in (SHARDS, PLAN):
        print(f"\n{function}: CPU seconds (stock: one run; skip, fast: best of 3)")
        heads = f" {'2.7.1/fast':>11} {'2.10.0/fast':>11}"
        print(f"{'tensor':58} {'chunks':>6} " + " ".join(f"{n:>12}" for n in names) + heads)
        whole = dict.fromkeys(names, 0.0)
        for tensor in sorted(tensors, key=lambda t: -len(t.boxes)):
            args_ = arguments(function, tensor)
            times, results = {}, {}
            for name, funcs in columns.items():
                times[name], results[name] = timed(*funcs[function], args_, 1 if name.startswith("stock") else 3)
                whole[name] += times[name]
            for version in VERSIONS:
                if results[f"fast {version}"] != results[f"stock {version}"]:
                    raise SystemExit(f"{tensor.name}: fast {version} differs from stock: {results}")
            row = " ".join(f"{times[n]:12.5f}" for n in names)
            print(f"{tensor.name[-58:]:58} {len(tensor.boxes):6} {row} {speedups(times)}")
            if ".experts." in tensor.name:  # the expert tensors: the big grid layouts
                label = f"grid: experts {tensor.name.split('.')[-2]} ({len(tensor.boxes)} chunks)"
                ratios[(function, label)] = {v: times[f"stock {v}"] / times[f"fast {v}"] for v in VERSIONS}
        row = " ".join(f"{whole[n]:12.4f}" for n in names)
        print(f"{'whole checkpoint':58} {total_chunks:6} {row} {speedups(whole)}")
        ratios[(function, f"grid: whole checkpoint ({total_chunks} chunks)")] = {
            v: whole[f"stock {v}"] / whole[f"fast {v}"] for v in VERSIONS
        }
        for version in VERSIONS[1:]:
            speedup = whole[f"stock {version}"] / whole[f"fast {version}"]
            print(f"  fast-validate vs stock {version} on the whole checkpoint: {speedup:.0f}x; results identical")
    identical(columns, args.identical)
    adversarial(columns, args.adversarial, ratios)
    given_up(columns, args.adversarial)
    side_by_side(ratios)
    if args.equivalence:
        equivalence(args.equivalence)


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
