"""Patch engine speed, side by side with `git apply` of the equivalent diff, in one run.

Real upstream files (downloaded from PyPI into the test cache, never committed): the verl
0.5.0 wheel and the two torch 2.7.1 checkpoint-validation files. Each command-line figure is the
median of several runs of the real command (interpreter start-up included) from the venv
``benchmarks/startup.py`` installs the checkout into (not editable, this shell's environment), and
is given as a ratio to ``git apply`` of the same edits; the engine's own no-op work is also timed
in-process. The wheel's ray_trainer.py has 796871d's sites in other bytes, so the profile used here
lists it as a known original (as the tests do): the tree stands for the pinned checkout.

Start-up (each command as a ratio to a bare ``python -c pass``, and its targets) is
``benchmarks/startup.py``'s: this script once measured it with the checkout on ``PYTHONPATH`` and the
machine's own interpreter, which read 2-3 times lower than what a user's shell pays (why: that
script's docstring).

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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from startup import installed_venv, patched_tree, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ascendfix = str(installed_venv() / "bin" / "ascendfix")
    env = dict(os.environ)
    work = Path(tempfile.mkdtemp(prefix="ascendfix-bench-"))
    try:
        roots, target = patched_tree(work)
        verl, torch = work / "verl", work / "torch"
        commands = {
            "cold apply": [ascendfix, "apply", *target],
            "no-op apply": [ascendfix, "apply", *target],
            "status": [ascendfix, "status", *target],
            "revert": [ascendfix, "revert", *roots],
        }
        rows: dict[str, list[float]] = {k: [] for k in commands}
        diffs: dict[str, list[float]] = {"git apply": [], "git apply -R --check": []}
        for cmd in commands.values():  # warm-up: fills the page cache and the parse cache
            timed(cmd, work, env)
        for _ in range(args.runs):
            for name, cmd in commands.items():
                rows[name].append(timed(cmd, work, env))
        # The same no-op work in-process: what the command-line figures are made of besides start-up
        # (the hash fast path parses nothing when nothing changed).
        from ascendfix.patching import engine
        from ascendfix.profile import manifest
        from ascendfix.site import Site

        timed(commands["cold apply"], work, env)
        site = Site(manifest.load_profile(str(work / "team.toml")), "npu", roots={"verl": verl, "torch": torch})
        selection = engine.select(site)
        rows["no-op apply, in-process"] = [_clock(lambda: engine.apply(selection)) for _ in range(args.runs)]
        rows["status, in-process"] = [_clock(lambda: engine.status(selection)) for _ in range(args.runs)]
        timed(commands["revert"], work, env)
        # The peer: the same edits as a plain diff, applied and checked by git.
        diff = subprocess.run([ascendfix, "diff", *target], capture_output=True, text=True, env=env).stdout
        for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
            (work / name).write_text(
                "".join(chunk for chunk in _split(diff) if (tree / chunk.split("\n", 1)[0][len("--- a/") :]).exists())
            )
        for _ in range(args.runs):
            t = 0.0
            for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
                t += timed(["git", "apply", "--unsafe-paths", str(work / name)], tree, env)
            diffs["git apply"].append(t)
            t = 0.0
            for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
                t += timed(["git", "apply", "-R", "--check", str(work / name)], tree, env)
            diffs["git apply -R --check"].append(t)
            for tree, name in ((verl, "verl.diff"), (torch, "torch.diff")):
                timed(["git", "apply", "-R", str(work / name)], tree, env)
        peer = statistics.median(diffs["git apply"])
        head = f"{'operation':24} {'median s':>9} {'vs git apply':>13}"
        print(f"{head}  (4 applicable patches, 4 files, {args.runs} runs)")
        for name, values in {**rows, **diffs}.items():
            median = statistics.median(values)
            print(f"{name:24} {median:9.3f} {median / peer:12.1f}x")
        print("(start-up against python -c pass, and its targets: benchmarks/startup.py)")
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
    from recorded import recorded

    recorded(__file__, main)
