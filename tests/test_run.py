"""`ascendfix run` / `env` on a realistic fake job: env handling, signals, exit codes, log files, summary."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ascendfix.job import launch, redact
from ascendfix.job.metrics import StepParser
from ascendfix.profile import jobenv, manifest
from ascendfix.site import Site

from tests.fake_job import cli_env
from tests.stack import fake_preflight
from tests.verl_lines import RAY_PREFIX

ROOT = Path(__file__).resolve().parent.parent
STEP_LINE = re.compile(r"\x1b\[0m step:\d+ - ")


def test_run_streams_output_writes_logs_and_returns_the_exit_status(job, run_cli):
    proc = run_cli(
        job, "run", "--device", "npu", "--no-preflight", "--log-dir", "logs", "--json-metrics", "m.jsonl",
        "train.sh", "trainer.total_epochs=1", STATUS="3", HCCL_CONNECT_TIMEOUT="99", API_TOKEN="s3cret",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert len(STEP_LINE.findall(proc.stdout)) == 9  # 6 lines + 3 repeated, passed through unchanged
    assert RAY_PREFIX + "Total training steps: 6" in proc.stdout.replace(f"pid={_pid(proc.stdout)}", "pid=11069")
    assert "(WorkerDict pid=12) warming up" in proc.stderr
    log = (job / "logs" / "train.log").read_text()
    assert len(STEP_LINE.findall(log)) == 9 and "warming up" in log
    state = json.loads((job / "state.json").read_text())
    # the user's value wins, the profile fills the rest, PYTHONUNBUFFERED is set, the unset site var stays unset
    assert state["env"] == {
        "HCCL_CONNECT_TIMEOUT": "99",
        "TASK_QUEUE_ENABLE": "2",
        "PYTHONUNBUFFERED": "1",
        "HCCL_SOCKET_IFNAME": None,
        "API_TOKEN": "s3cret",
    }
    assert state["argv"] == [
        "trainer.device=npu",
        "data.train_batch_size=128",
        "actor_rollout_ref.rollout.n=16",
        "algorithm.filter_groups.enable=False",
        "trainer.total_epochs=1",
    ]
    assert state["pgid"] != os.getpgid(0)
    assert "HCCL_CONNECT_TIMEOUT=99 (yours) wins over the profile's 3600" in proc.stderr
    assert "HCCL_SOCKET_IFNAME must be set per site" in proc.stderr
    record = json.loads((job / "logs" / "run.json").read_text())
    assert record["exit_status"] == 3 and record["steps"] == 6 and record["device"] == "npu"
    assert record["command"][:2] == ["bash", "train.sh"]
    assert "API_TOKEN" not in record["environment"] and "s3cret" not in json.dumps(record)  # not the job's own
    assert record["environment"]["HCCL_CONNECT_TIMEOUT"] == "99" and record["environment"]["PYTHONUNBUFFERED"] == "1"
    env = {e["name"]: e for e in record["env"]}
    assert env["HCCL_CONNECT_TIMEOUT"]["source"] == "user" and env["TASK_QUEUE_ENABLE"]["source"] == "profile"
    assert env["HCCL_SOCKET_IFNAME"]["source"] == "missing"
    assert record["overrides"]["actor_rollout_ref.rollout.n"] == "16"
    assert record["ulimit_nofile"]["wanted"] == 32768 and state["nofile"] == record["ulimit_nofile"]["after"]
    metrics_lines = [json.loads(line) for line in (job / "m.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics_lines] == [1, 2, 3, 4, 5, 6]
    # summary: steady steps are 2, 3, 4, 6 (1 is warm-up, 5 validated); see tests/verl_lines.run_steps
    assert "6 steady" not in proc.stderr and "4 steady" in proc.stderr
    assert "0.284 → 0.340" in proc.stderr  # reward first (the guide's step 1) → last (0.28 + 0.01 × 6)
    assert "exit status 3" in proc.stderr


def _pid(stdout: str) -> str:
    return stdout.split("(TaskRunner pid=", 1)[1].split(")", 1)[0]


def test_run_summary_numbers_match_hand_computed_values(job, run_cli):
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "--log-dir", "logs", "train.sh")
    assert proc.returncode == 0, proc.stderr
    # steady steps 2, 3, 4, 6: step time = 1400 + 10 (n % 3) + 800 + 5 (n % 2) + 400
    # = 2620, 2605, 2610, 2600 → median (2605 + 2610) / 2 = 2607.50
    assert "2607.50 s" in proc.stderr
    # e2e per step = (2,800,000 + 1000 n) / (t × 128): 8.3552, 8.4061, 8.3931, 8.4315 → median 8.3996
    assert "e2e 8.400" in proc.stderr and "(world 128)" in proc.stderr


def wait_for(path: Path, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_are_forwarded_and_the_job_status_returned(job, signum, status, ascendfix_popen):
    proc = ascendfix_popen(
        "run",
        "--device",
        "cuda",
        "--no-preflight",
        "--log-dir",
        "logs",
        "train.sh",
        env=cli_env(job, MODE="obey", DEVICE="cuda"),
        clean_env=True,
        cwd=job,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(job / "state.ready")
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert (job / "state.signal").read_text() == signum.name
    assert proc.returncode == status, stderr
    record = json.loads((job / "logs" / "run.json").read_text())
    assert record["forwarded"] == signum.name and record["killed"] is False and record["exit_status"] == status
    assert "6 steps" not in stderr and "steps seen" in stderr  # the summary still comes on Ctrl-C


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(job, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STATE", str(job / "state"))
    (tmp_path / "logs").mkdir()
    timer = threading.Thread(target=lambda: (wait_for(job / "state.ready"), os.kill(os.getpid(), signal.SIGTERM)))
    timer.start()
    parser = StepParser()
    argv = [sys.executable, str(job / "fake_job.py"), "ignore", "0", str(job / "steps.json")]
    result = launch.launch(argv, dict(os.environ), tmp_path / "logs", parser, grace_s=0.5)
    timer.join()
    assert (job / "state.signal").read_text() == "SIGTERM"
    assert (result.exit_status, result.forwarded, result.killed) == (137, "SIGTERM", True)
    assert sorted(parser.steps) == [1, 2, 3, 4, 5, 6]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_run_refuses_a_missing_command_and_an_unknown_device(job, run_cli):
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "--log-dir", "logs", "no-such-command-xyz")
    assert proc.returncode == 2 and "no-such-command-xyz: command not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_preflight_refuses_dapo_patch_with_filter_groups(job, monkeypatch):
    from ascendfix.job import preflight

    profile = manifest.load_profile("verl-796871d")
    fake_preflight(monkeypatch)  # doctor passes, every patch applied
    argv = ["bash", str(job / "train.sh")]
    ok = preflight.run_preflight(Site(profile, "npu", environ={}), argv)
    assert ok.problems == []
    bad = preflight.run_preflight(Site(profile, "npu", environ={"FILTER": "True"}), argv)
    [problem] = bad.problems
    assert "verl-dapo-no-interleave" in problem.message and "algorithm.filter_groups.enable=True" in problem.message


def test_env_prints_exports_that_bash_can_eval(tmp_path, run_cli):
    proc = run_cli(tmp_path, "env", "--profile", "verl-796871d", "--device", "npu")
    assert proc.returncode == 0, proc.stderr
    assert "export HCCL_CONNECT_TIMEOUT=3600" in proc.stdout and "export HCCL_ASYNC_ERROR_HANDLING=0" in proc.stdout
    assert "# HCCL_SOCKET_IFNAME must be set per site" in proc.stdout
    show = 'eval "$1" && echo "${PYTORCH_NPU_ALLOC_CONF-unset}|$LD_LIBRARY_PATH|$(ulimit -n)"'
    driver = "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver"
    for before, after in [(None, driver), ("/opt/cann/lib64", f"{driver}:/opt/cann/lib64")]:
        env = {"PATH": os.environ["PATH"], **({"LD_LIBRARY_PATH": before} if before else {})}
        shell = subprocess.run(["bash", "-c", show, "_", proc.stdout], capture_output=True, text=True, env=env)
        values = shell.stdout.strip().split("|")
        assert values[:2] == ["unset", after]  # prepended, never replaced; no empty entry when it was empty
    as_json = json.loads(run_cli(tmp_path, "env", "--device", "cuda", "--shell", "json").stdout)
    assert as_json["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and "HCCL_CONNECT_TIMEOUT" not in as_json["env"]
    assert {v["name"] for v in as_json["site_specific"]} == {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}
    assert as_json["ulimit_nofile"] is None  # the guide's H100 script (3.4) sets no limit
    npu = json.loads(run_cli(tmp_path, "env", "--device", "npu", "--shell", "json").stdout)
    assert npu["prepend"] == ["LD_LIBRARY_PATH"] and npu["ulimit_nofile"] == 32768


def test_secrets_are_redacted_in_the_command_and_environment():
    argv = ["train.sh", "WANDB_API_KEY=abc", "trainer.project_name=x", "HF_TOKEN=t", "--password", "pw", "--token=t2"]
    assert redact.redact_argv([*argv, "bash -c 'x --api-key k2'", "db=postgres://u:pw@db/x"]) == [
        "train.sh",
        "WANDB_API_KEY=<redacted>",
        "trainer.project_name=x",
        "HF_TOKEN=<redacted>",
        "--password",
        "<redacted>",
        "--token=<redacted>",
        "bash -c 'x --api-key <redacted>",
        "db=postgres://<redacted>@db/x",
    ]
    env = {
        "AWS_SECRET_ACCESS_KEY": "k",
        "MY_PASSWORD": "p",
        "HCCL_EXEC_TIMEOUT": "3600",
        "RAY_REDIS_PASSWORD": "r",
        "HF_TOKEN": "h",
        "HTTPS_PROXY": "http://a:pw@proxy:3128",
        "LD_LIBRARY_PATH": "/usr/local/Ascend/driver/lib64",
        "TOKENIZERS_PARALLELISM": "false",
    }
    assert redact.job_variables(env, own=["HTTPS_PROXY"]) == {
        "HCCL_EXEC_TIMEOUT": "3600",
        "HF_TOKEN": "<redacted>",
        "HTTPS_PROXY": "http://<redacted>@proxy:3128",
        "LD_LIBRARY_PATH": "/usr/local/Ascend/driver/lib64",
        "RAY_REDIS_PASSWORD": "<redacted>",
    }
    overrides = {"trainer.wandb_api_key": "w", "actor_rollout_ref.rollout.max_num_batched_tokens": "8192"}
    assert redact.redact_overrides(overrides) == {**overrides, "trainer.wandb_api_key": "<redacted>"}
    names = ("OPENAI_KEY", "GITHUB_PAT", "SENTRY_DSN", "DB_CONNECTION_STRING", "GCP_CREDENTIALS", "PGPASSWORD")
    assert all(redact.secret_name(n) for n in names)
    assert not any(redact.secret_name(n) for n in ("PATH", "ppo_max_token_len_per_gpu", "HCCL_CONNECT_TIMEOUT"))


SECRETS = {
    "OPENAI_KEY": "sk-openai",
    "GITHUB_PAT": "ghp-pat",
    "SENTRY_DSN": "https://key@sentry.example/1",
    "DATABASE_URL": "postgres://u:pg-pw@db/x",
    "HTTPS_PROXY": "http://a:proxy-pw@proxy:3128",
    "RAY_REDIS_PASSWORD": "ray-pw",
    "HCCL_SOCKET_IFNAME": "eth0",
}


def test_run_json_holds_the_jobs_variables_and_no_secret_and_is_private(job, run_cli):
    text = (job / "train.sh").read_text().replace('"$@"', 'trainer.wandb_api_key=from-script "$@"')
    (job / "train.sh").write_text(text)
    proc = run_cli(
        job, "run", "--device", "npu", "--no-preflight", "train.sh", "trainer.hf_token=cli-tok", "+db.url=mysql://r:db-pw@h",
        "--password", "pass-value", **SECRETS,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (folder,) = (job / "ascendfix-runs").iterdir()
    text = (folder / "run.json").read_text()
    secrets = ("sk-openai", "ghp-pat", "pg-pw", "proxy-pw", "ray-pw", "from-script", "cli-tok", "db-pw", "pass-value")
    for secret in secrets:
        assert secret not in text and secret not in proc.stderr, secret
    record = json.loads(text)
    environment = record["environment"]
    assert "OPENAI_KEY" not in environment and "DATABASE_URL" not in environment  # not the job's own
    assert environment["RAY_REDIS_PASSWORD"] == "<redacted>" and environment["HCCL_SOCKET_IFNAME"] == "eth0"
    assert environment["HCCL_EXEC_TIMEOUT"] == "3600"
    assert record["overrides"]["trainer.wandb_api_key"] == "<redacted>"
    assert record["overrides"]["db.url"] == "mysql://<redacted>@h"
    assert record["command"][-2:] == ["--password", "<redacted>"]
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert oct((folder / "run.json").stat().st_mode & 0o777) == "0o600"
    assert oct((folder / "train.log").stat().st_mode & 0o777) == "0o600"


def test_run_follows_no_symlink_planted_in_its_log_folder(job, tmp_path, run_cli):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (job / "logs").mkdir()
    for name in ("train.log", "run.json.tmp"):
        (job / "logs" / name).symlink_to(victim)
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "--log-dir", "logs", "train.sh")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert victim.read_text() == "untouched\n"
    line = "error: logs/train.log: is a symbolic link: ascendfix does not write through links; remove it"
    assert proc.stderr.strip().splitlines()[-1] == line  # it said "Too many levels of symbolic links"
    assert sorted(p.name for p in (job / "logs").iterdir()) == ["run.json.tmp", "train.log"]  # nothing written
    assert not (job / "state.json").exists()  # the job never ran


def test_json_metrics_into_a_missing_folder_is_one_line_before_the_job_starts(job, run_cli):
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "--json-metrics", "no/such/m.jsonl", "train.sh")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --json-metrics no/such/m.jsonl: no such folder no/such; create it first"
    assert not (job / "state.json").exists() and not (job / "ascendfix-runs").exists()


def test_json_metrics_refuses_a_link_like_runs_other_files(job, run_cli):
    """It truncated and wrote through a symlink, though run's own log files refuse links."""
    victim = job / "victim.txt"
    victim.write_text("untouched\n")
    (job / "m.jsonl").symlink_to(victim)
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "--json-metrics", "m.jsonl", "train.sh")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = "error: --json-metrics m.jsonl: is a symbolic link: ascendfix does not write through links; "
    line += "give a plain file's path"
    assert proc.stderr.strip().splitlines()[-1] == line
    assert victim.read_text() == "untouched\n" and not (job / "ascendfix-runs").exists()


def test_env_resolution_sources():
    profile = manifest.load_profile("verl-796871d")
    settings = {
        s.name: s for s in jobenv.resolve_env(profile, "npu", {"HCCL_SOCKET_IFNAME": "eth0", "TASK_QUEUE_ENABLE": "2"})
    }
    assert settings["HCCL_SOCKET_IFNAME"].source == "user" and settings["HCCL_SOCKET_IFNAME"].value == "eth0"
    assert settings["TASK_QUEUE_ENABLE"].source == "user"  # set explicitly, even to the same value
    assert settings["GLOO_SOCKET_IFNAME"].source == "missing" and settings["GLOO_SOCKET_IFNAME"].value is None
    assert settings["PYTHONUNBUFFERED"].source == "ascendfix"
    env = jobenv.job_environment(settings.values(), {"PATH": "/bin"})
    assert "GLOO_SOCKET_IFNAME" not in env and env["HCCL_EXEC_TIMEOUT"] == "3600" and env["PATH"] == "/bin"
    driver = "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver"
    assert env["LD_LIBRARY_PATH"] == driver
    user = {"LD_LIBRARY_PATH": "/opt/cann/lib64"}
    job = jobenv.job_environment(jobenv.resolve_env(profile, "npu", user), user)
    assert job["LD_LIBRARY_PATH"] == f"{driver}:/opt/cann/lib64"  # the user's entries stay, behind the driver's
    already = {"LD_LIBRARY_PATH": f"/x:{driver}"}
    [ld] = [s for s in jobenv.resolve_env(profile, "npu", already) if s.name == "LD_LIBRARY_PATH"]
    assert (ld.value, ld.source) == (f"/x:{driver}", "user")  # every entry already there: left as the user set it


def test_run_train_sh_by_its_bare_name_as_the_readme_types_it(job, run_cli):
    (job / "train.sh").chmod(0o755)
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "--log-dir", "logs", "train.sh")
    assert proc.returncode == 0, proc.stderr
    assert "command not found" not in proc.stderr
    assert json.loads((job / "logs" / "run.json").read_text())["command"][0] == "./train.sh"
    assert len(STEP_LINE.findall(proc.stdout)) >= 6


def test_a_file_that_is_not_executable_says_how_to_run_it(job, run_cli):
    (job / "job.py").write_text("print('hi')\n")
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "--log-dir", "logs", "job.py")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: job.py: not executable (chmod +x job.py, or run: ascendfix run bash job.py)"


def test_two_runs_in_the_same_second_get_their_own_log_folders(job, ascendfix_popen):
    (job / "train.sh").chmod(0o755)
    procs = [
        ascendfix_popen(
            "run",
            "--device",
            "npu",
            "--no-preflight",
            "train.sh",
            env=cli_env(job),
            clean_env=True,
            cwd=job,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    folders = sorted((job / "ascendfix-runs").iterdir())
    assert len(folders) == 3
    for folder in folders:
        record = json.loads((folder / "run.json").read_text())
        assert record["log_dir"] == str(folder.relative_to(job)) and record["steps"] == 6
        assert len(STEP_LINE.findall((folder / "train.log").read_text())) == 9  # its own job's lines only


def test_no_preflight_still_refuses_settings_that_break_the_run(job, tmp_path, monkeypatch):
    from ascendfix.job import preflight

    fake_preflight(monkeypatch, doctor=["CANN toolkit: no Ascend stack found"])
    profile = manifest.load_profile("verl-796871d")
    argv = ["bash", str(job / "train.sh")]
    quick = preflight.run_preflight(Site(profile, "npu", environ={"FILTER": "True"}), argv, full=False)
    assert [p.source for p in quick.problems] == ["rules"]  # no doctor; the DAPO refusal stays
    assert "verl-dapo-no-interleave" in quick.problems[0].message
    assert preflight.run_preflight(Site(profile, "npu", environ={"FILTER": "False"}), argv, full=False).problems == []


def test_run_takes_root_python_and_variant_for_its_preflight(tmp_path, run_cli):
    from tests.stack import make_stack

    stack = make_stack(tmp_path / "stack")
    script = tmp_path / "job.sh"
    script.write_text("echo launched\n")
    apply = ["apply", "--device", "npu", *stack.root_args(), "--variant", "torch-global-plan-check=skip"]
    assert run_cli(tmp_path, *apply).returncode == 0
    run = ["run", "--device", "npu", "--log-dir", "logs"]
    blind = run_cli(tmp_path, *run, "bash", str(script))
    assert any(line.startswith("problem (patches)") for line in blind.stderr.splitlines())
    variant = ["--variant", "torch-global-plan-check=skip"]
    seeing = run_cli(tmp_path, *run, *stack.root_args(), *variant, "bash", str(script))
    problems = [line for line in seeing.stderr.splitlines() if line.startswith("problem")]
    assert problems and all(line.startswith("problem (doctor)") for line in problems)  # no Ascend stack here
    assert seeing.returncode == 1 and "launched" not in seeing.stdout


def test_the_first_ctrl_c_says_what_run_is_doing(job, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STATE", str(job / "state"))
    (tmp_path / "logs").mkdir()
    timer = threading.Thread(target=lambda: (wait_for(job / "state.ready"), os.kill(os.getpid(), signal.SIGINT)))
    timer.start()
    said = []
    argv = [sys.executable, str(job / "fake_job.py"), "ignore", "0", str(job / "steps.json")]
    result = launch.launch(argv, dict(os.environ), tmp_path / "logs", StepParser(), grace_s=0.5, notify=said.append)
    timer.join()
    assert result.killed and said[0].startswith("ascendfix: SIGINT forwarded to the job's process group")
    assert "waiting up to 0.5 s" in said[0] and "Ctrl-C again to kill it now" in said[0]


def test_a_missing_script_is_refused_before_any_log_folder_exists(tmp_path, run_cli):
    proc = run_cli(tmp_path, "run", "--device", "npu", "nosuch.sh")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == "error: nosuch.sh: command not found"
    assert not (tmp_path / "ascendfix-runs").exists()
    proc = run_cli(tmp_path, "run", "--device", "npu", "--log-dir", "logs", "./scripts/nosuch.sh")
    assert proc.returncode == 2 and not (tmp_path / "logs").exists()


# a job printing a 2 kB line a step, 60 steps (120 kB: more than a 64 kB log disk holds), then a last line
CHATTY_JOB = """\
import sys
for step in range(1, 61):
    print(f"step:{step} - actor/loss:0.5 " + "x" * 2000, flush=True)
print("the job finished", flush=True)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def full_disk(tmp_path):
    """A 64 kB tmpfs at ``tmp_path/disk`` (root only), unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode(errors='replace').strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.parametrize("status", [0, 3])
def test_a_full_log_disk_harms_neither_the_job_nor_its_exit_status(tmp_path, full_disk, run_cli, status):
    """ascendfix died of ENOSPC writing train.log: the job lost its pipe mid-run and run exited 1."""
    (tmp_path / "job.py").write_text(CHATTY_JOB)
    args = ["run", "--device", "npu", "--no-preflight", "--log-dir", "disk/run", sys.executable, "job.py", status]
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr
    assert len(re.findall(r"^step:\d+ ", proc.stdout, re.M)) == 60 and "the job finished" in proc.stdout
    said = [line for line in proc.stderr.splitlines() if "cannot write" in line]
    log = full_disk / "run" / "train.log"
    assert said[0] == (
        "ascendfix: disk/run/train.log: cannot write: No space left on device; the job's output is no "
        "longer kept there (it still goes to the terminal)"
    ), said
    assert said[1:] == [
        "ascendfix: disk/run/run.json: cannot write: No space left on device; the run is not recorded there"
    ]
    assert f"exit status {status}" in proc.stderr
    assert "the job finished" not in log.read_text()
    assert "exit_status" not in json.loads((full_disk / "run" / "run.json").read_text())  # the record before the job
    assert sorted(p.name for p in (full_disk / "run").iterdir()) == ["run.json", "train.log"]  # no temp file left


def test_a_folder_given_as_the_script_is_refused_before_any_log_folder_exists(job, run_cli):
    """It said "not executable (chmod +x it ...)" and left a run folder with run.json and an empty train.log."""
    (job / "scripts").mkdir()
    for given in (str(job / "scripts"), "scripts"):
        proc = run_cli(job, "run", "--device", "npu", "--no-preflight", given)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == f"error: {given}: is a folder: give the training script"
        assert not (job / "ascendfix-runs").exists() and not (job / "state.json").exists()
