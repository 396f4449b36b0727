"""A realistic fake verl job and its train.sh, and the environment ``ascendfix`` runs it in (conftest's ``job``)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

from tests.verl_lines import run_steps, step_line

ROOT = Path(__file__).resolve().parent.parent

FAKE_JOB = textwrap.dedent(
    """
    import json, os, signal, sys, time
    mode, status, steps = sys.argv[1], int(sys.argv[2]), json.loads(open(sys.argv[3]).read())
    state = os.environ["FAKE_STATE"]
    names = ["HCCL_CONNECT_TIMEOUT", "TASK_QUEUE_ENABLE", "PYTHONUNBUFFERED", "HCCL_SOCKET_IFNAME", "API_TOKEN"]
    record = {"env": {n: os.environ.get(n) for n in names}, "argv": sys.argv[4:], "pgid": os.getpgid(0),
              "nofile": __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[0]}
    with open(state + ".json", "w") as f:
        json.dump(record, f)

    def on_term(signum, frame):
        open(state + ".signal", "w").write(signal.Signals(signum).name)
        if mode == "obey":
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    prefix = "\\x1b[36m(TaskRunner pid=%d)\\x1b[0m " % os.getpid()
    print(prefix + "Total training steps: %d" % len(steps))
    print("(WorkerDict pid=12) warming up", file=sys.stderr)
    for n, line in enumerate(steps, 1):
        print(prefix + line)
        if n % 2 == 0:
            print(prefix + line + " [repeated 2x across cluster]")
    sys.stdout.flush()
    if mode in ("obey", "ignore"):
        open(state + ".ready", "w").write("1")
        for _ in range(600):
            time.sleep(0.05)
    sys.exit(status)
    """
)


def write_job(tmp_path: Path) -> Path:
    """Write the fake job and its train.sh into ``tmp_path``; return the folder.

    train.sh runs the fake job as the DAPO recipe's main (recipe/dapo/main_dapo.py), so run holds it to
    the rules about verl's overrides."""
    (tmp_path / "fake_job.py").write_text(FAKE_JOB)
    (tmp_path / "recipe" / "dapo").mkdir(parents=True)
    (tmp_path / "recipe" / "dapo" / "main_dapo.py").write_text(FAKE_JOB)
    steps = [step_line(n, v) for n, v in enumerate(run_steps(6, validate_every=5), 1)]
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    script = tmp_path / "train.sh"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/bash
            set -e
            MODE=${{MODE:-exit}}
            BATCH=128
            {sys.executable} {tmp_path}/recipe/dapo/main_dapo.py $MODE ${{STATUS:-0}} {tmp_path}/steps.json \\
                trainer.device=${{DEVICE:-npu}} \\
                data.train_batch_size=$BATCH \\
                actor_rollout_ref.rollout.n=16 \\
                algorithm.filter_groups.enable=${{FILTER:-False}} \\
                "$@"
            """
        )
    )
    return tmp_path


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment `ascendfix` runs the fake job in: the test's own, less the profile's variables, plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in ("HCCL_CONNECT_TIMEOUT", "TASK_QUEUE_ENABLE")}
    env.update(PYTHONPATH=str(ROOT), FAKE_STATE=str(tmp_path / "state"), COLUMNS="200", **extra)
    return env
