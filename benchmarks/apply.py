"""Patch engine speed, side by side with `git apply` of the equivalent diff, in one run.

Real upstream files (downloaded from PyPI into the test cache, never committed): the verl
0.5.0 wheel and the two torch 2.7.1 checkpoint-validation files. Each figure is the median
of several runs of the real command line (interpreter start-up included), because that is
what a user and the Docker build pay.

Targets on the 2-core CI machine: cold apply < 1 s; no-op apply and status < 0.25 s.

    python benchmarks/apply.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import upstream  # noqa: E402


def timed(cmd: list[str], cwd: Path | None = None) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {result.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ascendfix-bench-"))
    try:
        verl = work / "verl"
        torch = work / "torch"
        shutil.copytree(upstream.verl_tree("0.5.0"), verl)
        shutil.copytree(upstream.torch_tree("2.7.1"), torch)
        cli = [sys.executable, "-m", "ascendfix"]
        roots = ["--root", f"verl={verl}", "--root", f"torch={torch}"]
        target = ["--profile", "verl-796871d", "--device", "npu", *roots]
        rows: dict[str, list[float]] = {k: [] for k in ("cold apply", "no-op apply", "status", "revert")}
        diffs: dict[str, list[float]] = {"git apply": [], "git apply -R --check": []}
        for _ in range(args.runs):
            rows["cold apply"].append(timed([*cli, "apply", *target]))
            rows["no-op apply"].append(timed([*cli, "apply", *target]))
            rows["status"].append(timed([*cli, "status", *target]))
            rows["revert"].append(timed([*cli, "revert", *roots]))
        # The same no-op work in-process, and the interpreter's own start-up: what the CLI figures
        # are made of (the hash fast path parses nothing when nothing changed).
        from ascendfix import engine, manifest

        timed([*cli, "apply", *target])
        selection = engine.select(manifest.load_profile("verl-796871d"), "npu", roots={"verl": verl, "torch": torch})
        rows["no-op apply, in-process"] = [_clock(lambda: engine.apply(selection)) for _ in range(args.runs)]
        rows["status, in-process"] = [_clock(lambda: engine.status(selection)) for _ in range(args.runs)]
        rows["python -c pass (floor)"] = [timed([sys.executable, "-c", "pass"]) for _ in range(args.runs)]
        timed([*cli, "revert", *roots])
        # The peer: the same edits as a plain diff, applied and checked by git.
        diff = subprocess.run([*cli, "diff", *target], capture_output=True, text=True, env={**os.environ}).stdout
        for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
            (work / name).write_text(
                "".join(chunk for chunk in _split(diff) if (tree / chunk.split("\n", 1)[0][len("--- a/") :]).exists())
            )
        for _ in range(args.runs):
            t = 0.0
            for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
                t += timed(["git", "apply", "--unsafe-paths", str(work / name)], cwd=tree)
            diffs["git apply"].append(t)
            t = 0.0
            for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
                t += timed(["git", "apply", "-R", "--check", str(work / name)], cwd=tree)
            diffs["git apply -R --check"].append(t)
            for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
                timed(["git", "apply", "-R", str(work / name)], cwd=tree)
        peer = statistics.median(diffs["git apply"])
        print(
            f"{'operation':24} {'median s':>9} {'vs git apply':>13}  (4 applicable patches, 4 files, {args.runs} runs)"
        )
        for name, values in {**rows, **diffs}.items():
            median = statistics.median(values)
            print(f"{name:24} {median:9.3f} {median / peer:12.1f}x")
        cold, noop, stat = (statistics.median(rows[k]) for k in ("cold apply", "no-op apply", "status"))
        print(f"targets: cold apply < 1 s: {cold:.2f} s; no-op apply < 0.25 s: {noop:.2f} s;", end=" ")
        print(f"status < 0.25 s: {stat:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _clock(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _split(diff: str) -> list[str]:
    """A unified diff cut into one chunk per file (each starting at its '--- a/' line)."""
    chunks, current = [], []
    for line in diff.splitlines(keepends=True):
        if line.startswith("--- a/") and current:
            chunks.append("".join(current))
            current = []
        current.append(line)
    if current:
        chunks.append("".join(current))
    return chunks


if __name__ == "__main__":
    main()
