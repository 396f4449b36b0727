"""Start-up as a user's shell pays it: `ascendfix` from an installed venv, against that venv's ``python -c pass``.

What is measured is what a user runs: a venv made with ``python -m venv`` holding only ascendfix and its
own dependencies, ascendfix installed into it by ``pip install <checkout>`` (a wheel, not an editable
install: pip compiles every module's bytecode at install time, and does so with
``PYTHONDONTWRITEBYTECODE=1`` set too; the script checks that it did), and the venv's ``ascendfix``
console script run from a folder outside the checkout, in this shell's own environment, unchanged
(``PYTHONDONTWRITEBYTECODE`` and all). The venv is kept under ``~/.cache/ascendfix-bench/``
(``ASCENDFIX_BENCH_CACHE``), one per Python and ``pyproject.toml``; the checkout is installed into it
again at every run, so the figures are the checkout's. Each command is timed right after a bare
``python -c pass`` of the same venv, pair by pair, in rounds (these machines are noisy; a ratio
measured side by side holds where seconds drift); the figure is the median of each pair's ratio.

The commands: ``status`` on a tree not yet patched (a fresh node's first command), a cold ``apply`` of
the whole profile, a no-op ``apply``, ``status`` on the patched tree, and ``doctor`` (the venv holds no
stack: a bare machine), and beside them the floors under their figures: the imports alone of the
three libraries doctor cannot start without, of click (every command's command line), and of click
and libcst (what a cold apply edits with). The trees are the verl 0.5.0 wheel and the two torch 2.7.1 checkpoint files
(downloaded from PyPI into the test cache, never committed); the wheel's ray_trainer.py has 796871d's
sites in other bytes, so the profile used here lists it as a known original (as the tests do).

Targets (ratio to ``python -c pass``): no-op apply and status <= 5x, status on a tree not yet patched
<= 10x, cold apply <= 30x, doctor <= 12x.

Why this reads higher than the figures ``benchmarks/apply.py`` once printed (2.1-2.5x for status):
that script ran the commands with the interpreter that ran it, the checkout on ``PYTHONPATH``, and
``PYTHONDONTWRITEBYTECODE`` taken out of the environment. The interpreter was the machine's own, whose
site-packages holds ``.pth`` files that run at every start-up (here one imports certifi, and with it
``importlib.resources``, ``pathlib`` and ``re``): its ``python -c pass`` took 0.048 s where a clean
venv's takes 0.015 s. That inflates the ratio's denominator, and it shrinks the numerator's own share
too, because the modules those ``.pth`` files load are then already loaded for ascendfix. A user's venv
has neither. ``--old`` times status and no-op apply that way too, beside these, to show it.
(Bytecode was not the difference: pip compiles it at install. It is where the checkout is installed
editable and ``PYTHONDONTWRITEBYTECODE`` is set, as on a developer's machine: no ``.pyc`` is ever
written there, and every run compiles every module again.)

    python benchmarks/startup.py [--runs N] [--old]
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
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
    "doctor (bare machine)": 12.0,
}
# What doctor cannot start without: click parses its command line, importlib.metadata lists the installed
# distributions (its probe), packaging checks their requirements (pip check's job): their imports alone, in
# the same venv, are the floor under doctor's figure.
DOCTOR_LIBRARIES = "import click, importlib.metadata, packaging.requirements"
# The floors under the other commands: every command parses its command line with click, and a cold apply
# edits with libcst; their imports alone, in the same venv.
FLOORS = {"click's import only": "import click", "click + libcst imports only": "import click, libcst"}


def bench_cache() -> Path:
    """Where the benchmark's venvs live, outside the checkout."""
    return Path(os.environ.get("ASCENDFIX_BENCH_CACHE", Path.home() / ".cache" / "ascendfix-bench"))


def installed_venv() -> Path:
    """A venv holding the checkout as ``pip install <checkout>`` installs it (not editable), and its dependencies.

    The venv (and the dependencies in it) is made once per Python and ``pyproject.toml``; the checkout itself is
    installed again each time, so what runs is the checkout as it is now. pip compiles the bytecode at install
    (``PYTHONDONTWRITEBYTECODE`` does not stop it); where a module was left without, it is compiled as pip would.
    """
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    venv = bench_cache() / f"venv-py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([*pip, str(REPO)], check=True)
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(REPO)], check=True)
    package = (
        Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        / "ascendfix"
    )
    missing = [p for p in package.rglob("*.py") if not _bytecode(p).exists()]
    if missing:
        print(f"(pip left {len(missing)} modules without bytecode: compiled here as pip would)")
        compileall.compile_dir(str(package), quiet=2, force=True)
    return venv


def _bytecode(source: Path) -> Path:
    """Where the interpreter looks for ``source``'s bytecode (the venv's Python is this script's)."""
    tag = sys.implementation.cache_tag
    return source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"


def timed(cmd: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    """Wall time of ``cmd`` (output captured), refusing an exit status outside ``ok``."""
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {result.returncode}: {result.stderr.strip()}")
    return elapsed


def patched_tree(work: Path) -> tuple[list[str], list[str]]:
    """Copies of the verl and torch trees under ``work``: the ``--root`` options, and those with the profile."""
    verl, torch = work / "verl", work / "torch"
    shutil.copytree(upstream.verl_tree("0.5.0"), verl)
    shutil.copytree(upstream.torch_tree("2.7.1"), torch)
    roots = ["--root", f"verl={verl}", "--root", f"torch={torch}"]
    return roots, ["--profile", str(profile(work, verl)), "--device", "npu", *roots]


def profile(work: Path, verl: Path) -> Path:
    """A profile that extends the bundled one and lists the wheel's ray_trainer.py as a known original."""
    from ascendfix.resources import data_dir

    (work / "patches").mkdir()
    pid, rel = "verl-grpo-no-interleave", "verl/trainer/ppo/ray_trainer.py"
    sha = hashlib.sha256((verl / rel).read_bytes()).hexdigest()
    known = f'\n[[files.preimages]]\nsha256 = "{sha}"\nlabel = "verl 0.5.0 wheel (this benchmark)"\n'
    (work / "patches" / f"{pid}.toml").write_text((data_dir("patches") / f"{pid}.toml").read_text() + known)
    (work / "team.toml").write_text('extends = "verl-796871d"\nname = "bench"\n')
    return work / "team.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--old", action="store_true", help="also time status and no-op apply the old way")
    args = parser.parse_args()
    venv = installed_venv()
    python, ascendfix = str(venv / "bin" / "python"), str(venv / "bin" / "ascendfix")
    env = dict(os.environ)  # the user's own: PYTHONDONTWRITEBYTECODE and all
    shown = {k: v for k, v in env.items() if k.startswith("PYTHON")}
    work = Path(tempfile.mkdtemp(prefix="ascendfix-bench-"))
    try:
        roots, target = patched_tree(work)
        (work / "no-ascend").mkdir()  # an Ascend root with nothing installed
        bare = ["doctor", "--profile", "verl-796871d", "--ascend-home", str(work / "no-ascend")]
        commands: dict[str, tuple[list[str], tuple[int, ...]]] = {
            "status (unpatched)": ([ascendfix, "status", *target], (1,)),  # not applied: exit 1
            "cold apply": ([ascendfix, "apply", *target], (0,)),
            "no-op apply": ([ascendfix, "apply", *target], (0,)),
            "status": ([ascendfix, "status", *target], (0,)),
            "doctor (bare machine)": ([ascendfix, *bare], (0, 1)),
            "doctor's libraries only": ([python, "-c", DOCTOR_LIBRARIES], (0,)),
            **{name: ([python, "-c", imports], (0,)) for name, imports in FLOORS.items()},
        }
        old_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        old_env["PYTHONPATH"] = str(REPO)
        old = [sys.executable, "-m", "ascendfix"]
        olds = {
            "old way: no-op apply": [*old, "apply", *target],
            "old way: status": [*old, "status", *target],
        }
        revert = [ascendfix, "revert", *roots]
        for cmd, ok in commands.values():  # warm-up: the page cache, the parse cache
            timed(cmd, work, env, ok)
        for cmd in olds.values() if args.old else ():
            timed(cmd, work, old_env)  # and the checkout's bytecode, as the old way wrote it
        seconds: dict[str, list[float]] = {"python -c pass": []}
        ratios: dict[str, list[float]] = {}
        for _ in range(args.runs):
            timed(revert, work, env)
            for name, (cmd, ok) in commands.items():
                base = timed([python, "-c", "pass"], work, env)
                seconds["python -c pass"].append(base)
                seconds.setdefault(name, []).append(timed(cmd, work, env, ok))
                ratios.setdefault(name, []).append(seconds[name][-1] / base)
            for name, cmd in olds.items() if args.old else ():
                base = timed([sys.executable, "-c", "pass"], work, old_env)
                seconds.setdefault("old way: python -c pass", []).append(base)
                seconds.setdefault(name, []).append(timed(cmd, work, old_env))
                ratios.setdefault(name, []).append(seconds[name][-1] / base)
        print(f"venv: {venv} (ascendfix installed from the checkout, not editable); environment: {shown}")
        print(f"{'command':28} {'median s':>9} {'vs python -c pass':>18} {'target':>8}  ({args.runs} rounds)")
        for name, values in seconds.items():
            ratio = f"{statistics.median(ratios[name]):17.1f}x" if name in ratios else f"{'':18}"
            target = f"<= {TARGETS[name]:g}x" if name in TARGETS else ""
            over = "  over" if name in TARGETS and statistics.median(ratios[name]) > TARGETS[name] else ""
            print(f"{name:28} {statistics.median(values):9.3f} {ratio} {target:>8}{over}")
        if args.old:
            print(
                f"old way: {sys.executable} with PYTHONPATH={REPO} and PYTHONDONTWRITEBYTECODE taken out, "
                "against its own python -c pass"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
