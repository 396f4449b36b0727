"""A built-in demo workspace: the main job end to end, without Ascend hardware.

The files are ascendfix's own (not upstream code): small modules shaped like the upstream files the
bundled patches edit (``patches/standins/``), so every patch finds its sites, laid out as a verl source
checkout and a torch site-packages folder.

The demo depends on nothing of the machine's: its job starts no Ray, so it runs with
``RAY_ADDRESS`` unset and ``RAY_TMPDIR`` in its own workspace, which is where Ray (and
``run``'s cluster gate) look for a cluster started on this machine: a Ray cluster the
machine runs is neither asked about nor reached.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ascendfix import resources

# The stand-ins: for each package, a root holding one small file per file a bundled patch edits, shaped like
# upstream's so the patch finds its sites (tests/test_demo.py holds every bundled patch file to one), and the
# files that make the root a package (``__init__.py``) or a source checkout (``pyproject.toml``).
STANDINS = "standins"


def standins(package: str) -> Path:
    """The folder of ``package``'s stand-in root (``patches/standins/<package>``)."""
    return resources.data_dir("patches") / STANDINS / package


# A stand-in for the guide's train.sh: it prints what verl's TaskRunner prints through Ray
# (ANSI prefix, `step:N - key:value` lines), step 1 with the guide's own figures.
TRAIN_SH = rb"""#!/usr/bin/env bash
# Demo stand-in for the guide's train.sh: the same kind of Hydra overrides, a simulated verl job.
set -euo pipefail
exec python3 "$(dirname "$0")/fake_verl.py" \
    algorithm.adv_estimator=grpo \
    data.train_batch_size=128 \
    actor_rollout_ref.rollout.n=16 \
    trainer.val_before_train=False \
    trainer.total_training_steps=6 \
    trainer.n_gpus_per_node=8 trainer.nnodes=16 "$@"
"""

FAKE_VERL = rb"""import sys
import time

PREFIX = "\x1b[36m(TaskRunner pid=11069)\x1b[0m "
total = [a.split("=", 1)[1] for a in sys.argv if a.startswith("trainer.total_training_steps=")]
steps = int(total[0]) if total else 6
for n in range(1, steps + 1):
    response, prompt = (1329.1552734375, 84.298828125) if n == 1 else (1300.0 + 7 * n, 84.3)
    gen, update = (1523.87, 842.91) if n == 1 else (1400.0 + 10 * (n % 3), 800.0 + 5 * (n % 2))
    step_time = 2814.45 if n == 1 else gen + update + 400.0
    tokens = (response + prompt) * 2048
    values = [
        ("training/global_step", n),
        ("critic/score/mean", 0.28 + 0.02 * n),
        ("critic/rewards/mean", 0.28 + 0.02 * n),
        ("response_length/mean", response),
        ("prompt_length/mean", prompt),
        ("timing_s/gen", gen),
        ("timing_s/reshard", 21.5),
        ("timing_s/old_log_prob", 201.33),
        ("timing_s/ref", 187.62),
        ("timing_s/update_actor", update),
        ("timing_s/step", step_time),
        ("perf/total_num_tokens", int(tokens)),
        ("perf/time_per_step", step_time),
        ("perf/throughput", tokens / (step_time * 128)),
    ]
    print(PREFIX + " - ".join(["step:%d" % n] + ["%s:%r" % kv for kv in values]), flush=True)
    time.sleep(0.3)
"""


# The demo's torch files are stand-ins, and fast-validate accepts only the torch versions its
# template was written for (it refuses anything else): the demo takes the torch patches' skip variant.
PROFILE_TOML = b"""# The demo's profile: verl-796871d, with the guide's `skip` variant of the torch patches,
# because the demo's torch files are stand-ins that fast-validate (rightly) does not recognise.
extends = "verl-796871d"
name = "verl-796871d-demo"

[variants]
torch-shard-overlap-check = "skip"
torch-global-plan-check = "skip"
"""


@dataclass(frozen=True)
class Workspace:
    """Where the demo's package roots are."""

    folder: Path
    verl: Path
    torch: Path

    def roots(self) -> dict[str, Path]:
        """The ``--root`` mapping for the engine."""
        return {"verl": self.verl, "torch": self.torch}

    @property
    def profile(self) -> Path:
        """The demo's profile file."""
        return self.folder / "profile.toml"

    @property
    def train_sh(self) -> Path:
        """The demo job script."""
        return self.folder / "train.sh"


def build(folder: Path, checkout: bool = True) -> Workspace:
    """Write the demo verl checkout (or a site-packages layout) and torch folder under ``folder``: every file
    new (an existing one, or a link in its place, is refused with FileExistsError), no folder a link."""
    workspace = Workspace(folder, folder / ("verl-checkout" if checkout else "verl-site"), folder / "site-packages")
    for package, root in workspace.roots().items():
        source = standins(package)
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            rel = path.relative_to(source)
            if not checkout and rel.parts[0] != package:  # installed, a package has only its own folder
                continue
            _write_new(folder, f"{root.name}/{rel}", path.read_bytes())
    _write_new(folder, workspace.profile.name, PROFILE_TOML)
    _write_new(folder, workspace.train_sh.name, TRAIN_SH, 0o755)
    _write_new(folder, "fake_verl.py", FAKE_VERL)
    return workspace


def _write_new(folder: Path, rel: str, data: bytes, mode: int = 0o644) -> None:
    """Create ``folder/rel`` with ``data``: never over a file, never through a link (its folders below ``folder``
    made, none a link)."""
    path = folder / rel
    for parent in [folder, *reversed(path.relative_to(folder).parents[:-1])]:
        where = parent if parent == folder else folder / parent
        try:
            os.mkdir(where)
        except FileExistsError:
            if os.path.islink(where) or not os.path.isdir(where):
                raise FileExistsError(f"{where} is a symbolic link or not a folder") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), mode)
        f.write(data)


@dataclass(frozen=True)
class DemoStep:
    """One step of the demo as the CLI shows it: a title, the command it stands for, and what it produced."""

    title: str
    command: str = ""
    notes: tuple[str, ...] = ()
    statuses: list = field(default_factory=list)  # evaluate.PatchStatus, for status/apply/revert steps
    diff: str = ""
    figures: dict | None = None  # the guide's throughput of step 1, for the report step
    output: str = ""  # what `ascendfix run` said (its stderr: hints, summary), shown after the job's own output
    failed: str | None = None  # why the step failed; the demo stops there (after reverting)


def isolated_env(environ: Mapping[str, str], workspace: Path) -> dict[str, str]:
    """``environ`` without the machine's Ray cluster: no ``RAY_ADDRESS``, ``RAY_TMPDIR`` in the workspace."""
    env = {k: v for k, v in environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(workspace / "ray-tmp")
    return env


def failure(said: str, status: int) -> str:
    """Why ``ascendfix run`` failed, from what it said: its problems and errors, else its exit status."""
    lines = [line.strip() for line in said.splitlines() if line.startswith(("problem", "error:"))]
    return "; ".join(lines) or f"ascendfix run exited {status}"


def steps(workspace: Workspace) -> Iterator[DemoStep]:
    """Status, diff, apply, apply again, the job under ``ascendfix run``, its report, revert.

    A generator: each step runs when the previous one has been shown (the job's own output
    reaches the terminal between the "run" step and the "report" step).
    """
    from ascendfix.job import metrics, report
    from ascendfix.patching import engine
    from ascendfix.profile import manifest
    from ascendfix.site import Site

    prof = manifest.load_profile(str(workspace.profile))
    selection = engine.select(Site(prof, "npu", roots=workspace.roots()))
    yield DemoStep(
        "status before",
        "ascendfix status --profile profile.toml --device npu --root ...",
        (
            "profile.toml extends verl-796871d; its torch files are stand-ins, so the torch patches",
            "take the skip variant (fast-validate accepts only the real torch releases it knows)",
        ),
        statuses=engine.status(selection),
    )
    yield DemoStep("diff", "what apply will change", diff=engine.diff(engine.plan(selection)))
    yield DemoStep(
        "apply", "atomic, journaled; the demo files are not known upstream originals", statuses=engine.apply(selection)
    )
    yield DemoStep("apply again", "idempotent: nothing to do", statuses=engine.apply(selection))
    log_dir = workspace.folder / "run"
    yield DemoStep(
        "run the job",
        "ascendfix run --no-preflight --profile profile.toml --device npu --root ... train.sh",
        ("preflight is skipped: this machine has no Ascend stack for doctor to pass",),
    )
    job = [sys.executable, "-m", "ascendfix", "run", "--no-preflight", "--profile", str(workspace.profile)]
    job += ["--device", "npu", *(f"--root={pkg}={folder}" for pkg, folder in workspace.roots().items())]
    done = subprocess.run(
        [*job, "--log-dir", str(log_dir), str(workspace.train_sh)],
        cwd=workspace.folder,
        env=isolated_env(os.environ, workspace.folder),
        stderr=subprocess.PIPE,
        check=False,
    )
    said = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        yield DemoStep("", output=said, failed=failure(said, done.returncode))
    else:
        yield DemoStep("", output=said)
        run_data = report.load_run(log_dir / "train.log")
        yield DemoStep("report", f"ascendfix report {log_dir}", figures=metrics.throughput(run_data.series.steps[0]))
    yield DemoStep(
        "revert", "byte for byte", statuses=engine.revert(engine.select(Site(prof, roots=workspace.roots())))
    )
