"""Patch engine speed, side by side with `git apply` of the equivalent diff, in one run.

Real upstream files (downloaded from PyPI into the test cache, never committed): the verl
0.5.0 wheel and the two torch 2.7.1 checkpoint-validation files. Each figure is the median
of several runs of the real command line (interpreter start-up included), because that is
what a user and the Docker build pay, and each is also given as a ratio to a bare
``python -c pass`` of the same interpreter timed right before it, pair by pair (these
machines are noisy; a ratio measured side by side holds where seconds drift).

Targets (ratio to ``python -c pass``): no-op apply and status <= 5x, status on a tree not yet
patched (a fresh node's first command) <= 10x, cold apply of the whole profile <= 30x, doctor on a
bare machine <= 10x. The wheel's ray_trainer.py has 796871d's sites in other bytes, so the profile
used here lists it as a known original (as the tests do): the tree stands for the pinned checkout.
Beside doctor, the imports of the three
libraries it needs (click, importlib.metadata, packaging's requirement parser) in the same
interpreter: the floor under its figure.

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

TARGETS = {
    "status (unpatched)": 10.0,
    "cold apply": 30.0,
    "no-op apply": 5.0,
    "status": 5.0,
    "doctor (bare machine)": 10.0,
}
# What doctor cannot start without: click parses its command line, importlib.metadata lists the installed
# distributions (its probe), packaging checks their requirements (pip check's job): their imports alone,
# before any of ascendfix's own, are the floor under doctor's figure.
DOCTOR_LIBRARIES = "import click, importlib.metadata, packaging.requirements"


def timed(cmd: list[str], cwd: Path | None = None, ok: tuple[int, ...] = (0,)) -> float:
    # bytecode as an installed package has it: PYTHONDONTWRITEBYTECODE (set on some machines) would
    # make every run compile every module again
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(REPO)
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} failed: {result.stderr.strip()}")
    return elapsed


def bare_node() -> str:
    """The interpreter of a bare machine: a venv holding ascendfix's own dependencies and nothing of the stack
    (the one running this may have the test extra's torch, which doctor would then check), kept in the cache."""
    venv = upstream.cache_dir() / "bench-bare-node"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", str(REPO)], check=True)
    return str(python)


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
        target = ["--profile", str(_profile(work, verl)), "--device", "npu", *roots]
        (work / "no-ascend").mkdir()  # an Ascend root with nothing installed
        bare = ["doctor", "--profile", "verl-796871d", "--ascend-home", str(work / "no-ascend")]
        commands = {
            "status (unpatched)": ([*cli, "status", *target], (1,)),  # not applied: exit 1
            "cold apply": ([*cli, "apply", *target], (0,)),
            "no-op apply": ([*cli, "apply", *target], (0,)),
            "status": ([*cli, "status", *target], (0,)),
            "revert": ([*cli, "revert", *roots], (0,)),
            "doctor (bare machine)": ([bare_node(), "-m", "ascendfix", *bare], (0, 1)),
            "doctor's libraries only": ([bare_node(), "-c", DOCTOR_LIBRARIES], (0,)),
        }
        rows: dict[str, list[float]] = {k: [] for k in commands}
        ratios: dict[str, list[float]] = {k: [] for k in commands}
        diffs: dict[str, list[float]] = {"git apply": [], "git apply -R --check": []}
        for cmd, ok in commands.values():  # warm-up: writes the bytecode, fills the page cache
            timed(cmd, ok=ok)
        timed([*cli, "revert", *roots])
        for _ in range(args.runs):
            for name, (cmd, ok) in commands.items():
                bare_start = timed([cmd[0], "-c", "pass"])  # the same interpreter as the command
                rows[name].append(timed(cmd, ok=ok))
                ratios[name].append(rows[name][-1] / bare_start)
        # The same no-op work in-process, and the interpreter's own start-up: what the CLI figures
        # are made of (the hash fast path parses nothing when nothing changed).
        from ascendfix.patching import engine
        from ascendfix.profile import manifest
        from ascendfix.site import Site

        timed([*cli, "apply", *target])
        site = Site(manifest.load_profile(str(work / "team.toml")), "npu", roots={"verl": verl, "torch": torch})
        selection = engine.select(site)
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
        head = f"{'operation':24} {'median s':>9} {'vs python -c pass':>18} {'target':>8} {'vs git apply':>13}"
        print(f"{head}  (4 applicable patches, 4 files, {args.runs} runs)")
        for name, values in {**rows, **diffs}.items():
            median = statistics.median(values)
            ratio = f"{statistics.median(ratios[name]):17.1f}x" if name in ratios else f"{'':18}"
            target = f"<= {TARGETS[name]:g}x" if name in TARGETS else ""
            print(f"{name:24} {median:9.3f} {ratio} {target:>8} {median / peer:12.1f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _profile(work: Path, verl: Path) -> Path:
    """A profile that extends the bundled one and lists the wheel's ray_trainer.py as a known original."""
    import hashlib

    from ascendfix.resources import data_dir

    (work / "patches").mkdir()
    pid, rel = "verl-grpo-no-interleave", "verl/trainer/ppo/ray_trainer.py"
    sha = hashlib.sha256((verl / rel).read_bytes()).hexdigest()
    known = f'\n[[files.preimages]]\nsha256 = "{sha}"\nlabel = "verl 0.5.0 wheel (this benchmark)"\n'
    (work / "patches" / f"{pid}.toml").write_text((data_dir("patches") / f"{pid}.toml").read_text() + known)
    (work / "team.toml").write_text('extends = "verl-796871d"\nname = "bench"\n')
    return work / "team.toml"


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
