"""One job through a real local Ray cluster: the driver's prefixed lines and the session's worker-*.out."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap

import pytest
from ascendfix.job import report

from tests.cluster import Netns, ray_temp_dir

DRIVER = textwrap.dedent(
    """
    import sys, time
    import ray
    from tests.verl_lines import run_steps, step_line

    @ray.remote(num_cpus=0)
    class TaskRunner:  # the name verl's main_ppo gives its driver actor
        def run(self, lines):
            print("Total training steps: %d" % len(lines), flush=True)
            for line in lines:
                print(line, flush=True)
            return len(lines)

    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])
    lines = [step_line(n, v) for n, v in enumerate(run_steps(4), 1)]
    print("ran", ray.get(TaskRunner.remote().run.remote(lines)))
    time.sleep(1)  # let the log monitor forward the last lines
    ray.shutdown()
    sys.exit(5)
    """
)


@pytest.mark.slow
def test_a_real_ray_job_is_parsed_live_and_from_the_session_logs(tmp_path, request, ascendfix_cli):
    pytest.importorskip("ray")
    (tmp_path / "driver.py").write_text(DRIVER)
    ray_dir = ray_temp_dir()  # its own: Ray's socket paths must stay under 107 bytes
    request.addfinalizer(lambda: shutil.rmtree(ray_dir, ignore_errors=True))
    netns = Netns()  # a private network namespace: nothing the job binds is the host's
    request.addfinalizer(netns.close)
    args = ["run", "--device", "cuda", "--no-preflight", "--log-dir", "logs", "--json-metrics", "m.jsonl"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAY_AUTH_MODE": "disabled"}
    proc = ascendfix_cli(
        *args, sys.executable, "driver.py", ray_dir, prefix=netns.prefix, cwd=tmp_path, env=env, clean_env=True
    )
    assert proc.returncode == 5, proc.stderr
    assert "\x1b[36m(TaskRunner pid=" in proc.stdout  # Ray's own prefix, passed through unchanged
    assert [json.loads(line)["step"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    live = report.report_data(report.load_run(tmp_path / "logs" / "train.log"))
    session = report.report_data(report.load_run(ray_dir / "session_latest" / "logs"))
    for data in (live, session):
        assert data["steps_seen"] == 4 and data["total_steps"] == 4 and data["parse"]["skipped"] == 0
        assert data["reward_mean"]["first"] == pytest.approx(0.2841796875)
    assert session["throughput"] == pytest.approx(live["throughput"])
