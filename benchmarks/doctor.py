"""doctor on this machine, side by side with ``python -m torch.utils.collect_env`` and ``pip check``.

Usage: python benchmarks/doctor.py [--profile NAME] [--repeat N] [--python PATH]

With ``--python`` (e.g. a venv holding ``pip install torch==2.13.0``), doctor also runs
against that interpreter, and collect_env and pip check run in it too.

Each tool runs N times in this one run; the table shows the median wall time and the
ratio to doctor's. Target: the whole doctor (no --python) in < 0.5 s on a 2-core CI
machine. ``collect_env`` needs torch in the interpreter: where it is missing the row
says so and shows how long the failing attempt took.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ascendfix.doctor import context, runner  # noqa: E402
from ascendfix.profile import manifest  # noqa: E402
from ascendfix.profile.device import ASCEND_HOME  # noqa: E402
from ascendfix.site import Site  # noqa: E402

TARGET_S = 0.5


def timed(fn, repeat: int) -> tuple[float, object]:
    times, last = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        last = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), last


def subprocess_run(cmd: list[str]):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return lambda: subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="verl-796871d")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--python", help="also time doctor --python PATH (one probe subprocess)")
    args = parser.parse_args()
    profile = manifest.load_profile(args.profile)
    device, why = context.choose_device(profile, ASCEND_HOME)

    def in_process(python=None):
        return runner.run(context.Context(Site(profile, device, python), why))

    rows = []
    t, report = timed(in_process, args.repeat)
    summary = report.summary
    rows.append(("doctor, in-process (checks only)", t, f"{summary}"))
    slowest = []
    for check in report.checks:
        ctx = context.Context(Site(profile, device), why)
        ctx.probe()
        start = time.perf_counter()
        runner.run(ctx, [check.id])
        slowest.append((time.perf_counter() - start, check.id))
    t_cli, result = timed(
        subprocess_run([sys.executable, "-m", "ascendfix", "doctor", "--profile", args.profile]), args.repeat
    )
    rows.append(("ascendfix doctor (CLI, whole process)", t_cli, f"exit {result.returncode}"))
    if args.python:
        t_py, report_py = timed(lambda: in_process(args.python), args.repeat)
        rows.append(("doctor --python (in-process, one probe subprocess)", t_py, f"{report_py.summary}"))
        cmd = [sys.executable, "-m", "ascendfix", "doctor", "--profile", args.profile, "--python", args.python]
        t_pycli, result = timed(subprocess_run(cmd), args.repeat)
        rows.append(("ascendfix doctor --python (CLI, whole process)", t_pycli, f"exit {result.returncode}"))
    t_start, _ = timed(subprocess_run([sys.executable, "-c", "pass"]), args.repeat)
    rows.append(("python -c pass (interpreter start, for scale)", t_start, ""))
    target = args.python or sys.executable
    t_env, result = timed(subprocess_run([target, "-m", "torch.utils.collect_env"]), args.repeat)
    note = "ok" if result.returncode == 0 else f"FAILED here: {(result.stderr.strip().splitlines() or ['?'])[-1][:60]}"
    rows.append(("python -m torch.utils.collect_env", t_env, note))
    t_pip, result = timed(subprocess_run([sys.executable, "-m", "pip", "--python", target, "check"]), args.repeat)
    rows.append(("python -m pip check", t_pip, f"exit {result.returncode}"))

    print(f"{os.cpu_count()} CPU(s), Python {sys.version.split()[0]}, profile {args.profile}, device {device}")
    print(f"collect_env and pip check run in {args.python or sys.executable}")
    print(f"median of {args.repeat} runs each\n")
    print(f"{'tool':52} {'median s':>9} {'x doctor CLI':>13}  note")
    for name, seconds, note in rows:
        print(f"{name:52} {seconds:9.3f} {seconds / t_cli:13.2f}  {note}")
    print("\nslowest checks alone (probe already done):")
    for seconds, cid in sorted(slowest, reverse=True)[:4]:
        print(f"  {cid:10} {seconds * 1000:7.1f} ms")
    verdict = "met" if t_cli < TARGET_S else "MISSED"
    print(f"\ntarget: whole doctor (CLI, no --python) < {TARGET_S} s: {t_cli:.3f} s, {verdict}")


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
