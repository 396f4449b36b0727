"""Parse a generated Ray session logs directory side by side with `grep -r "step:" | wc -l`.

Target: ascendfix's parser reaches at least 1/3 of grep's throughput, in constant memory
(its peak RSS on the full directory is close to its peak RSS on a small slice of it). Then one
log that is a single unfinished line (tqdm's \\r bars, ``--line-mb`` of them) against grep on
the same file: linear time and a peak RSS that does not grow with the line.

    python benchmarks/report.py [--size-mb 1024] [--line-mb 200] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.verl_lines import RAY_PREFIX, run_steps, step_line  # noqa: E402

NOISE = [
    "INFO 08-05 14:02:11 [model_runner.py:1203] Graph capturing finished in 21 secs, took 0.53 GiB",
    "(WorkerDict pid=48213) INFO:megatron.core.distributed:Number of buckets for gradient all-reduce: 1",
    "Processed prompts:  37%|███▋      | 757/2048 [04:11<07:08,  3.01it/s, est. speed input: 254.1 toks/s]",
    "(WorkerDict pid=48213, ip=10.0.0.12) [rank12]:[W805 14:02:19] Warning: torch.npu.set_device is deprecated",
    "[2025-08-05 14:02:19,881 I 48213 48301] core_worker.cc:902: Event stats: Global stats: 8213 total (11 active)",
    "(TaskRunner pid=11069) Training Progress:   3%|▎         | 9/300 [6:58:42<225:45:17, 2792.84s/it]",
    "(WorkerDict pid=48213) [Rank 3] global_step: 9 checkpoint saved to /ckpt/global_step_9/actor",
]
PIECE = 1 << 20


def generate(root: Path, size_mb: int, workers: int = 64) -> tuple[int, int]:
    """Write a Ray-like logs directory of about ``size_mb`` MB; returns (bytes, steps)."""
    logs = root / "session_latest" / "logs"
    logs.mkdir(parents=True)
    rng = random.Random(0)
    weights = [20] * (len(NOISE) - 1) + [1]  # checkpoint lines ("global_step: 9") are rare
    noise = "\n".join(rng.choices(NOISE, weights, k=PIECE // 90)).encode() + b"\n"
    steps = max(1, size_mb // 2)
    values = run_steps(min(steps, 50))
    names = [f"worker-{i:04x}a1b2c3d4-01000000-{40000 + i}.{ext}" for i in range(workers) for ext in ("out", "err")]
    files = [logs / name for name in names]
    files += [logs / "raylet.out", logs / "gcs_server.out", logs / "job-driver-raysubmit_9f2a.log"]
    written, step, piece = 0, 0, 0
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(f, "wb")) for f in files]
        while written < size_mb * PIECE:
            handle = handles[piece % len(handles)]
            handle.write(noise)
            written += len(noise)
            piece += 1
            if step < steps and piece % max(1, size_mb // steps) == 0:
                step += 1
                line = step_line(step, values[(step - 1) % len(values)])
                handles[-1].write(f"{RAY_PREFIX}{line}\n".encode())
                handles[0].write(f"{line}\n".encode())
    return sum(f.stat().st_size for f in files), step


def timed(cmd: list[str] | str, shell: bool = False) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, shell=shell, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, out


PARSE = """
import resource, sys, time
from pathlib import Path
from ascendfix.job import metrics
start = time.perf_counter()
parser = metrics.parse_paths([Path(sys.argv[1])])
took = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
s = parser.stats
print(took, rss, len(parser.steps), s.step_lines, s.duplicates, s.skipped, s.files)
"""


def parse(path: Path) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", PARSE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout
    return [float(x) for x in out.split()]


def unfinished_line(base: Path, size_mb: int) -> None:
    """A log of ``size_mb`` MB that never ends its line, then a small one: time and peak RSS against grep."""
    bar = NOISE[2].encode().replace(b"\n", b"") + b"\r"
    for name, mb in (("line-small.log", max(1, size_mb // 8)), ("line.log", size_mb)):
        with open(base / name, "wb") as f:
            block = bar * (PIECE // len(bar))
            for _ in range(mb):
                f.write(block)
    grep_s, _ = timed(f"grep -c 'step:' {base / 'line.log'} || true", shell=True)
    took, rss, *_ = parse(base / "line.log")
    small_took, small_rss, *_ = parse(base / "line-small.log")
    print(f"one unfinished {size_mb} MB line: ascendfix {took:.2f} s ({size_mb / took:.0f} MB/s), grep {grep_s:.2f} s")
    print(f"  ascendfix/grep time ratio {took / grep_s:.2f}; {size_mb // 8} MB took {small_took:.2f} s (linear: ~1/8)")
    print(f"  peak RSS {rss:.0f} MB on {size_mb} MB, {small_rss:.0f} MB on {size_mb // 8} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--line-mb", type=int, default=200, help="size of the one-line (tqdm bars) log")
    ap.add_argument("--dir", type=Path, help="where to generate (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated folder")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ascendfix-bench-", dir=args.dir))
    try:
        size, steps = generate(base, args.size_mb)
        logs = base / "session_latest" / "logs"
        slice_dir = base / "slice"
        slice_dir.mkdir()
        shutil.copy(logs / "job-driver-raysubmit_9f2a.log", slice_dir)
        for f in sorted(logs.glob("worker-*"))[: max(1, 128 // 16)]:
            shutil.copy(f, slice_dir)
        timed(f"cat {logs}/* > /dev/null", shell=True)  # both read from the page cache
        grep_s, grep_out = timed(f"grep -r 'step:' {logs} | wc -l", shell=True)
        took, rss, kept, lines, dups, skipped, files = parse(logs)
        _, slice_rss, *_ = parse(slice_dir)
        slice_mb = sum(f.stat().st_size for f in slice_dir.iterdir()) / PIECE
        mb = size / PIECE
        print(f"generated {mb:.0f} MB in {int(files)} files, {steps} steps (each twice: driver log and worker-*.out)")
        print(f"grep -r 'step:' | wc -l : {grep_s:6.2f} s  {mb / grep_s:8.1f} MB/s  ({grep_out.strip()} lines)")
        print(f"ascendfix metrics       : {took:6.2f} s  {mb / took:8.1f} MB/s  ({int(kept)} steps kept, ", end="")
        print(f"{int(lines)} step lines, {int(dups)} duplicates, {int(skipped)} skipped)")
        print(f"throughput ratio ascendfix/grep: {grep_s / took:.2f} (target >= 0.33)")
        print(f"peak RSS: {rss:.0f} MB on {mb:.0f} MB, {slice_rss:.0f} MB on a {slice_mb:.0f} MB slice")
        unfinished_line(base, args.line_mb)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
