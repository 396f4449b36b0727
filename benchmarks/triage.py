"""Triage a generated Ray session logs directory side by side with `ascendfix report` on the same logs.

The directory is report's benchmark folder (verl step lines among Ray, vllm and torch noise), with
a multi-node HCCL failure appended to a few workers' files: one node's port goes down, the others
time out on it. Target: triage's throughput close to report's (ratio printed), in constant memory.
Also timed: two worst cases, a log where every line mentions an error in passing (each one passes
the pre-filter and is parsed, none is a failure), and one of short exception lines below a
traceback (each one is a finding).

    python benchmarks/triage.py [--size-mb 512] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.report import PIECE, generate, parse  # noqa: E402

# noise that the pre-filter picks but no fingerprint names: lines that say Error/ERROR in passing
HARMLESS = (
    "(WorkerDict pid=48213, ip=10.0.0.12) WARNING 08-05 14:02:20 [utils.py:88] retrying after ConnectionError\n"
    "[2025-08-05 14:02:21,102 W 48213 48301] core_worker.cc:1022: ERROR count 0 in the last interval\n"
)
# short exceptions, each below its own traceback: every third line is a finding
SHORT = "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nKeyError: 'actor'\n"
PORT_DOWN = (
    "[rank7]: RuntimeError: EJ0002: [PID: {pid}] 2025-08-05-14:09:31.202.787 The network port is down.\n"
    "[rank7]: [ERROR] 2025-08-05-14:09:31 (PID:{pid}, Device:7, RankID:7) ERR02200 DIST call hccl api failed.\n"
)
TIMED_OUT = (
    "[rank{rank}]: RuntimeError: InnerRunOpApi: HcclAllreduce, error code is 6\n"
    "[rank{rank}]: [ERROR] 2025-08-05-14:11:31 (PID:{pid}, Device:0, RankID:{rank}) ERR01100 OPS call acl api failed.\n"
    "[rank{rank}]: EI0006: [PID: {pid}] 2025-08-05-14:11:31.{ms:03d}.000 Getting socket times out. Reason: x\n"
)

TRIAGE = """
import resource, sys, time
from pathlib import Path
from ascendfix.job import triage
start = time.perf_counter()
result = triage.triage(Path(sys.argv[1]))
took = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(took, rss, result.later, result.files, result.first.code if result.first else "-")
"""


def add_failure(logs: Path) -> None:
    """Append harmless Error mentions everywhere, one port down on rank 7 and timeouts on 15 other ranks."""
    workers = sorted(logs.glob("worker-*.err"))
    for i, path in enumerate(workers):
        with open(path, "a") as f:
            f.write(HARMLESS)
            pid = int(path.stem.rsplit("-", 1)[1])
            if i == 3:
                f.write(PORT_DOWN.format(pid=pid))
            elif i < 16:
                f.write(TIMED_OUT.format(rank=i, pid=pid, ms=i * 7))


def run_triage(path: Path) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", TRIAGE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout
    return out.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("--dir", type=Path, help="where to generate (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated folder")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ascendfix-bench-", dir=args.dir))
    try:
        size, _steps = generate(base, args.size_mb)
        logs = base / "session_latest" / "logs"
        add_failure(logs)
        slice_dir = base / "slice"
        slice_dir.mkdir()
        for f in sorted(logs.glob("worker-*"))[:8]:
            shutil.copy(f, slice_dir)
        subprocess.run(f"cat {logs}/* > /dev/null", shell=True, check=True)  # both read from the page cache
        report_s, report_rss, *_ = parse(logs)
        start = time.perf_counter()
        took, rss, later, files, code = run_triage(logs)
        wall = time.perf_counter() - start
        _, slice_rss, *_ = run_triage(slice_dir)
        worst = base / "worst"
        worst.mkdir()
        (worst / "train.log").write_text(HARMLESS * (8 * PIECE // len(HARMLESS)))
        worst_s, *_ = run_triage(worst)
        (worst / "train.log").write_text(SHORT * (8 * PIECE // len(SHORT)))
        short_s, *_ = run_triage(worst)
        mb = size / PIECE
        slice_mb = sum(f.stat().st_size for f in slice_dir.iterdir()) / PIECE
        print(f"generated {mb:.0f} MB in {files} files, a port down on rank 7 and 15 ranks timing out after it")
        print(f"ascendfix report (metrics) : {report_s:6.2f} s  {mb / report_s:8.1f} MB/s  ", end="")
        print(f"peak RSS {report_rss:.0f} MB")
        print(f"ascendfix triage           : {float(took):6.2f} s  {mb / float(took):8.1f} MB/s  ", end="")
        print(f"peak RSS {rss} MB (first: {code}, {later} later; {wall:.2f} s with start-up)")
        print(f"throughput ratio triage/report: {report_s / float(took):.2f} (target: close to 1)")
        print(f"triage peak RSS: {rss} MB on {mb:.0f} MB, {slice_rss} MB on a {slice_mb:.0f} MB slice")
        print(f"worst case, every line a candidate: {8 / float(worst_s):.1f} MB/s")
        print(f"worst case, every line a short exception (a finding): {8 / float(short_s):.1f} MB/s")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
