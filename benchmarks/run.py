"""A job's output straight to a pipe, side by side with the same job under `ascendfix run`.

`run` copies every byte to the terminal and to train.log and parses the step lines as they
pass; the job should not get slower. Two jobs, each alone and under `run`, both draining
into a pipe, each timing itself from its first write to its last (so `run`'s start-up
does not count): a flood (as fast as Python prints: the ceiling of what `run` passes
through) and a paced job printing 10 MB/s (far more than a verl job prints), which must
take the same time under `run` as alone.

    python benchmarks/run.py [--mb 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

JOB = """
import sys, time
sys.path.insert(0, {root!r})
from tests.verl_lines import RAY_PREFIX, run_steps, step_line
steps = [RAY_PREFIX + step_line(n, v) + "\\n" for n, v in enumerate(run_steps(50), 1)]
noise = "(WorkerDict pid=48213) INFO 08-05 14:02:11 [model_runner.py:1203] Graph capturing finished in 21 secs\\n"
out, size, n, start = sys.stdout, 0, 0, time.monotonic()
while size < {mb} * 2**20:
    block = noise * 1000 + steps[n % 50].replace("step:%d " % (n % 50 + 1), "step:%d " % (n + 1), 1)
    out.write(block)
    out.flush()
    size += len(block)
    n += 1
    if {rate}:
        time.sleep(max(0.0, size / ({rate} * 2**20) - (time.monotonic() - start)))
open(sys.argv[1], "w").write(str(time.monotonic() - start))
"""


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env) as proc:
        while proc.stdout.read(1 << 16):
            pass
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed with {proc.returncode}")
    return time.perf_counter() - start


def compare(tmp: str, mb: int, rate: int, env: dict[str, str]) -> tuple[float, float]:
    """How long the job itself took to print everything (its own clock), alone and under ``ascendfix run``."""
    job, clock = Path(tmp) / "job.py", Path(tmp) / "elapsed"
    job.write_text(JOB.format(root=str(ROOT), mb=mb, rate=rate))
    run = [sys.executable, "-m", "ascendfix", "run", "--device", "cuda", "--no-preflight", "--log-dir", tmp]
    timed([sys.executable, str(job), str(clock)], env)
    alone = float(clock.read_text())
    timed([*run, sys.executable, str(job), str(clock)], env)
    return alone, float(clock.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=200, help="how much output the flood job prints")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory(prefix="ascendfix-bench-") as tmp:
        alone, wrapped = compare(tmp, args.mb, 0, env)
        paced_alone, paced_wrapped = compare(tmp, 30, 10, env)
    print(f"flood {args.mb} MB, alone : {alone:6.2f} s {args.mb / alone:7.1f} MB/s")
    print(f"flood, under run      : {wrapped:6.2f} s {args.mb / wrapped:7.1f} MB/s (the pass-through ceiling)")
    print(f"paced 30 MB at 10 MB/s: alone {paced_alone:.2f} s, under run {paced_wrapped:.2f} s")
    print(f"paced ratio run/alone : {paced_wrapped / paced_alone:.2f} (target: 1.00, no slowdown)")


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
