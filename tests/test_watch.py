"""``ascendfix watch`` on real Ray jobs: a rank blocked outside any collective, a rank stopped by SIGSTOP,
a busy long tail, a clean job, each with the others in a real gloo ``all_reduce`` (an hour's timeout).

The cluster (one head) runs in a private network namespace of the module's own, with its own
RAY_TMPDIR; the job is tests/watch_job.py, its ranks named as verl names them and called rank by rank.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from ascendfix.cluster.watch import rules

from tests import cli
from tests.cluster import REPO, LocalCluster, Netns, ray_of_this_interpreter, team_profile
from tests.machine import write_executable

STALL_KEYS = {"schema", "ok", "event", "method", "since", "culprits", "waiting"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    pytest.importorskip("ray", reason="ray is not installed: pip install 'ascendfix[ray]'")
    pytest.importorskip("torch", reason="the job runs real torch.distributed collectives: pip install torch")
    base = tmp_path_factory.mktemp("watch")
    netns = Netns()
    bin_dir = ray_of_this_interpreter(base)  # its npu-smi prints base/npu-smi.out: 8 idle NPUs, no process
    calls = base / "npu-smi.calls"  # each run of it, for a test to count
    stand_in = f'#!/bin/sh\necho "$*" >> "{calls}"\n[ "$1" = info ] && cat "{base}/npu-smi.out"\n'
    write_executable(bin_dir / "npu-smi", stand_in)
    c = LocalCluster(base, team_profile(base), bin_dir, netns)
    try:
        c.start("head", cpus=1)
        c.wait_for_head()
        yield c
    finally:
        left = c.stop()
        netns.close()
        assert not left, f"Ray processes still running after SIGTERM to ray start --block: {left}"


class Lines:
    """A process's stdout, read line by line on a thread of its own."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, seconds: float) -> bool:
        """Until a line holds ``text`` (True), or the process ended or the time passed (False)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return True
            if self.proc.poll() is not None:
                self.thread.join(5)
                return any(text in line for line in self.lines)
            time.sleep(0.5)
        return False

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.lines if line.startswith("{")]


def start_job(c: LocalCluster, fault: str, port: int, steps: int = 5) -> tuple[subprocess.Popen, Lines]:
    argv = [*c.netns.prefix, sys.executable, "-m", "tests.watch_job", c.address, fault, str(steps)]
    env = {**c.env, "WATCH_JOB_PORT": str(port)}
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, Lines(proc)


def start_watch(c: LocalCluster, *flags: str) -> tuple[subprocess.Popen, Lines]:
    proc = cli.start(
        "watch", "--address", c.address, *flags, prefix=c.netns.prefix, env=c.env, clean_env=True,
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    return proc, Lines(proc)


def end(proc: subprocess.Popen, pids: tuple[int, ...] = ()) -> None:
    """Kill the job's driver (Ray then ends its actors) and any rank left stopped."""
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    if proc.poll() is None:
        proc.kill()
    proc.wait(60)


def stall_of(watch: Lines) -> dict:
    stalls = [e for e in watch.events() if e["event"] == "stall"]
    assert len(stalls) == 1, watch.lines
    assert set(stalls[0]) == STALL_KEYS
    return stalls[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "port", "shows"),
    [("block", 29611, "Event.wait (threading.py"), ("stop", 29621, "(process stopped: state T")],
)
def test_a_stalled_rank_is_named_with_its_stack_while_the_others_wait_in_all_reduce(cluster, fault, port, shows):
    watch, watched = start_watch(cluster, "--json")  # before the job: it waits for the first
    assert watched.wait_for('"started"', 120), watched.lines
    job, out = start_job(cluster, fault, port)
    named = watched.wait_for('"stall"', 240)
    stall = stall_of(watched) if named else {}
    end(job, tuple(c["pid"] for c in stall.get("culprits", ())))
    watch.wait(120)
    assert named, (watched.lines, out.lines)
    assert watch.returncode == 1, watched.lines
    assert stall["method"] == "update"
    [culprit] = stall["culprits"]
    assert culprit["actor"] == "a1b2c3WorkerDict_0:1" and culprit["node_ip"] == "127.0.0.1" and culprit["node_id"]
    assert shows in culprit["stack"] and "WorkerDict.update (tests/watch_job.py" in culprit["stack"]
    assert sorted(w["actor"] for w in stall["waiting"]) == ["a1b2c3WorkerDict_0:0", "a1b2c3WorkerDict_0:2"]
    assert all(w["stack"].startswith("all_reduce (torch/distributed/") for w in stall["waiting"])
    # the nodes' npu-smi lists none of the ranks: the NPU evidence is absent, and said so
    assert culprit["npu"] == {"error": "npu-smi info lists no process with this pid"}, culprit
    assert any(line.startswith("step 2 done") for line in out.lines)  # learned from two steps, then named
    kinds = [e["event"] for e in watched.events()]
    assert kinds[:2] == ["started", "job"] and kinds[-2:] == ["job", "ended"]


@pytest.mark.slow
def test_a_busy_long_tail_is_no_stall_and_the_watch_ends_with_the_job(cluster):
    watch, watched = start_watch(cluster, "--json")
    assert watched.wait_for('"started"', 120), watched.lines
    job, out = start_job(cluster, "busy", 29631, steps=4)
    job.wait(300)
    watch.wait(60)
    assert job.returncode == 0, out.lines
    assert watch.returncode == 0, watched.lines
    kinds = {e["event"] for e in watched.events()}
    assert kinds == {"started", "job", "budget", "ended"}, watched.lines
    [ended] = [e for e in watched.events() if e["event"] == "ended"]
    assert ended == {**ended, "jobs": 1, "stalls": 0}


@pytest.mark.slow
def test_a_clean_job_watched_from_its_middle_names_nothing_and_ends_with_it(cluster):
    job, out = start_job(cluster, "none", 29641, steps=6)
    assert out.wait_for("step 1 done", 180), out.lines
    watch, watched = start_watch(cluster)  # for a person
    job.wait(300)
    watch.wait(60)
    assert job.returncode == 0, out.lines
    assert watch.returncode == 0, watched.lines
    text = "".join(watched.lines)
    assert "STALL" not in text and "job " in text and "running" in text
    assert "learned generate" in text and text.rstrip().endswith("1 job(s) followed, 0 stall(s) named")


def test_no_cluster_at_the_address_is_one_line_and_exit_2(ascendfix_cli):
    proc = ascendfix_cli("watch", "--address", "127.0.0.1:9", "--json")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "127.0.0.1:9" in proc.stderr and "Traceback" not in proc.stderr


def test_a_probe_without_ptrace_says_so_and_still_reads_the_rank(tmp_path):
    from ascendfix.cluster.watch import probe

    if os.geteuid() != 0 or shutil.which("setpriv") is None or probe.pyspy() is None:
        pytest.skip(
            "needs root, setpriv (util-linux) and py-spy: a rank of another user, a probe without CAP_SYS_PTRACE"
        )
    code = "import time\nwhile True: time.sleep(1)"
    rank = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code])
    try:
        time.sleep(1)
        pids = f"[{rank.pid}]"
        ask = f"import json; from ascendfix.cluster.watch import probe; print(json.dumps(probe.sample({pids}, {pids})))"
        drop = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-sys_ptrace"]
        seen = subprocess.run([*drop, sys.executable, "-c", ask], capture_output=True, text=True, cwd=REPO, timeout=60)
        answer = json.loads(seen.stdout)["pids"][str(rank.pid)]
    finally:
        rank.kill()
        rank.wait()
    assert answer["state"] == "S" and answer["ticks"] >= 0 and "stack" not in answer
    assert (
        answer["stack_error"].startswith("py-spy: ptrace is not permitted here")
        and "CAP_SYS_PTRACE" in answer["stack_error"]
    )


# --- the rules on their own: what a poll's samples mean ----------------------------------------------

GROUP = "pfxWorkerDict"


def _ranks(n: int) -> list[rules.Rank]:
    return [rules.Rank(100 + r, "10.0.0.1", "n" * 56, f"{GROUP}_0:{r}", "01000000", "WorkerDict") for r in range(n)]


def _feed(det: rules.Detector, t: float, states: list[tuple[str, int, tuple[str, ...] | None]]) -> list[dict]:
    """One poll: each rank's (title, ticks, stack when asked for)."""
    samples = {}
    for rank, (title, ticks, stack) in zip(_ranks(len(states)), states, strict=True):
        give = stack if rank.pid in det.wants() else None
        samples[rank.pid] = (rank, rules.Sample(title, "S", ticks, "futex_wait_queue", give))
    return det.observe(t, samples)


def test_the_title_names_the_method_and_the_name_the_group():
    assert rules.method_of("ray::WorkerDict.actor_rollout_update_actor") == "actor_rollout_update_actor"
    assert rules.method_of("ray::WorkerDict") is None and rules.method_of("python3 x.py") is None
    assert rules.group_of("a1b2WorkerDict_3:7", "WorkerDict") == "a1b2WorkerDict"
    assert rules.group_of("", "TaskRunner") == "TaskRunner"
    assert rules.in_collective(("all_reduce (torch/distributed/distributed_c10d.py:3252)", "update (x.py:1)"))
    assert not rules.in_collective(("Event.wait (threading.py:629)", "update (x.py:1)"))
    waiting = ("Worker.get_objects (ray/_private/worker.py:1)", "get (ray/_private/worker.py:2)", "step (x.py:3)")
    assert rules.waits_on_ray(waiting) and not rules.waits_on_ray(waiting[2:]) and not rules.waits_on_ray(None)


def test_a_rank_whose_cpu_moves_keeps_the_call_alive_however_long():
    det, t, ticks = rules.Detector(), 0.0, 0
    wait = ("all_reduce (torch/distributed/distributed_c10d.py:1)",)
    for _ in range(1000):  # an hour and more of a long tail
        t, ticks = t + 2, ticks + 150
        assert not _feed(
            det, t, [("ray::WorkerDict.update", 5, wait), ("ray::WorkerDict.update", ticks, ("f (x.py:1)",))]
        )
    assert len(det.calls) == 1 and not det.budgets


def test_a_quiet_call_whose_stack_moves_is_no_stall():
    det, t = rules.Detector(), 0.0
    for step in range(200):  # past the bound of a method not learned yet
        t += 2
        stack = (f"poll (io.py:{step})",)  # a rank reading slowly: no CPU, but somewhere new each time
        assert not _feed(det, t, [("ray::WorkerDict.load", 5, stack), ("ray::WorkerDict.load", 5, stack)])


def test_the_bound_is_learned_from_completed_calls():
    det = rules.Detector(poll_s=2.0)
    assert det.bound("update") == rules.CAP_S  # nothing learned yet
    t, events = 0.0, []
    for _ in range(30):  # a 60 s call that is quiet for 10 s in its middle
        t += 2
        busy = 0 if 20 <= t <= 30 else t * 100
        events += _feed(det, t, [("ray::WorkerDict.update", int(busy), ("f (x.py:1)",))])
    events += _feed(det, t + 2, [("ray::WorkerDict", int(t * 100), None)])
    assert [e["event"] for e in events] == ["budget"]
    assert events[0]["method"] == "update" and events[0]["usual_s"] == pytest.approx(58, abs=2)
    assert det.bound("update") == pytest.approx(rules.QUIET_FACTOR * 12, abs=6)
    assert det.bound("generate") == det.bound("update")  # a method not seen yet borrows the largest


@pytest.mark.slow
def test_run_watches_the_job_and_on_stall_abort_ends_it_and_triage_names_the_same_rank(
    cluster, tmp_path, ascendfix_cli
):
    args = ["run", "--device", "cuda", "--no-preflight", "--on-stall", "abort", "--log-dir", tmp_path / "runs"]
    env = {**cluster.env, "WATCH_JOB_PORT": "29651"}
    proc = cli.run(
        *args, sys.executable, "-m", "tests.watch_job", cluster.address, "block",
        prefix=cluster.netns.prefix, env=env, clean_env=True, cwd=REPO, timeout=400,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stderr
    record = json.loads((tmp_path / "runs" / "run.json").read_text())
    assert record["watch"] == {"address": cluster.address, "on_stall": "abort"}
    [stall] = record["stalls"]
    assert set(stall) == STALL_KEYS and [c["actor"] for c in stall["culprits"]] == ["a1b2c3WorkerDict_0:1"]
    assert record["aborted"] and record["forwarded"] == "SIGTERM"
    assert "STALL" in proc.stderr and "culprit" in proc.stderr and "a1b2c3WorkerDict_0:1" in proc.stderr
    first = ascendfix_cli("triage", tmp_path / "runs", "--json")  # the run's folder names the same rank
    assert first.returncode == 1, first.stderr
    named = json.loads(first.stdout)["first"]
    assert named["code"] == "WATCH_STALL" and "a1b2c3WorkerDict_0:1" in named["message"], named
    assert named["pid"] == stall["culprits"][0]["pid"] and named["node"] == "127.0.0.1"


@pytest.mark.slow
def test_run_beside_a_command_that_is_no_ray_job_stops_its_watch_and_no_watch_starts_none(cluster, tmp_path):
    base = ["run", "--device", "cuda", "--no-preflight"]
    # the watched command runs long enough for its watch to start; with no watch there is nothing to wait for
    for flags, folder, command in (((), "watched", "sleep 8; echo done"), (("--no-watch",), "unwatched", "echo done")):
        proc = cli.run(
            *base, *flags, "--log-dir", tmp_path / folder, "sh", "-c", command,
            prefix=cluster.netns.prefix, env=cluster.env, clean_env=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    watched = json.loads((tmp_path / "watched" / "run.json").read_text())
    assert watched["watch"] == {"address": cluster.address, "on_stall": "report"} and watched["stalls"] == []
    assert "watch" not in json.loads((tmp_path / "unwatched" / "run.json").read_text())


# --- NPU use: npu-smi's AICore % --------------------------------------------------------------------

# ``npu-smi info`` as the driver prints it on an Atlas 800T A2 (910B): two rows per NPU, then the
# process table. Fields and layout: Huawei's npu-smi reference, "查询基本信息" (npu-smi 25.2.0,
# https://www.hiascend.com/document/detail/zh/Atlas%20200I%20A2/2520/re/npu/npusmi_007.html) and its
# field list (AICore(%), Process id, Process name, Process memory(MB):
# https://hiascend.com/document/detail/zh/Atlas%20300I%20Pro%20Inference%20Card/Atlas%20300I%20Pro%20Inference%20Card/300Ipro_015.html);
# the 910B rows as an 8 x 910B2 node prints them (vllm-ascend's issue logs); driver 26.0.rc1 adds
# a "Process id in container" column (Triton-Ascend's FAQ, "How to Confirm Chip Type").
RULE = "+---------------------------+---------------+----------------------------------------------------+"
EQ = RULE.replace("-", "=")


def npu_info(aicore: list[int], procs: dict[int, int]) -> str:
    """``npu-smi info`` of len(aicore) 910B2 NPUs, each at its AICore %, running ``procs`` (pid -> NPU)."""
    lines = [
        "+------------------------------------------------------------------------------------------------+",
        "| npu-smi 25.2.0                   Version: 25.2.0                                               |",
        RULE,
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
        EQ,
    ]
    for npu, pct in enumerate(aicore):
        lines.append(f"| {npu:<5} {'910B2':<19} | {'OK':<13} | {90.9:<11} {49:<17} {'0    / 0':<15}      |")
        use = f"{pct:<11} {'0    / 0':<17} {'60232/ 65536':<15}"
        lines.append(f"| {0:<25} | 0000:{0x82 + npu:02X}:00.0  | {use}      |")
        lines.append(EQ)
    head = "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"
    lines += [RULE, head, EQ]
    for npu in range(len(aicore)):
        mine = [pid for pid, on in procs.items() if on == npu]
        for pid in mine:
            lines.append(f"| {npu:<7} {0:<17} | {pid:<13} | {'python':<24} | {56293:<23} |")
        if not mine:
            lines.append(f"| No running processes found in NPU {npu:<61}|")
        lines.append(EQ)
    return "\n".join(lines) + "\n"


IN_CONTAINER = """\
+------------------------------------------------------------------------------------------------------------------+
| npu-smi 26.0.rc1                            Version: 26.0.rc1                                                    |
+---------------------------+---------------+----------------------------------------------------------------------+
| NPU   Name                | Health        | Power(W)             Temp(C)                 Hugepages-Usage(page)   |
| Chip                      | Bus-Id        | AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)           |
+===========================+===============+======================================================================+
| 0     910B4               | OK            | 82.6                 32                      0    / 0                |
| 0                         | 0000:C1:00.0  | 0                    0    / 0                2871 / 32768            |
+===========================+===============+======================================================================+
| 1     910B4               | OK            | 95.1                 40                      0    / 0                |
| 0                         | 0000:C2:00.0  | 73                   0    / 0                30871/ 32768            |
+===========================+===============+======================================================================+
+---------------------------+---------------+----------------------------------------------------------------------+
| NPU     Chip              | Process id    | Process name       | Process memory(MB)    | Process id in container |
+===========================+===============+======================================================================+
| No running processes found in NPU 0                                                                              |
+===========================+===============+======================================================================+
| 1       0                 | 3233241       | python             | 28000                 | 412                     |
+===========================+===============+======================================================================+
"""

# npu-smi 25.2.0 on an Atlas 200I A2 ("Chip Device" rows, Bus-Id NA): the reference's own example (npusmi_007 above)
ONE_CHIP = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 25.2.0                                       Version: 25.2.0                                   |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 0       xxx                   | OK              | 10.4          66                15    / 15           |
| 0       0                     | NA              | 0            957   / 10810                           |
+===============================+=================+======================================================+
"""


def test_npu_smi_info_gives_each_chips_aicore_and_each_processs_chip():
    from ascendfix.cluster.watch import probe

    assert probe.parse_npu_info(npu_info([0, 85, 0], {501: 0, 502: 1, 503: 2})) == (
        {(0, 0): 0, (1, 0): 85, (2, 0): 0},
        {501: (0, 0), 502: (1, 0), 503: (2, 0)},
    )
    # in a container, the pid this namespace sees is the one in its own column
    assert probe.parse_npu_info(IN_CONTAINER) == ({(0, 0): 0, (1, 0): 73}, {412: (1, 0)})
    assert probe.parse_npu_info(ONE_CHIP) == ({(0, 0): 0}, {})
    assert probe.parse_npu_info("") == ({}, {})
    assert probe.parse_npu_info("| 0 | x |\n| NPU Chip | Process id |\n| 0 0 | NA |\n|||\n") == ({}, {})


def test_npu_use_reads_the_stand_in_on_path_and_says_why_when_it_cannot(tmp_path, monkeypatch):
    from ascendfix.cluster.watch import probe

    me, other = os.getpid(), os.getppid()
    table = tmp_path / "table"
    table.write_text(npu_info([0, 0, 0, 0, 0, 37], {me: 5}))
    tools = tmp_path / "bin"
    write_executable(tools / "npu-smi", f'#!/bin/sh\n[ "$1" = info ] && cat "{table}"\n')
    assert probe.npu_use([me, other], path=str(tools)) == {
        me: {"id": 5, "chip": 0, "aicore_pct": 37},
        other: {"error": "npu-smi info lists no process with this pid"},
    }
    assert probe.npu_use([me], path=str(tmp_path)) == {me: {"error": "npu-smi is not on this node's PATH"}}
    monkeypatch.setattr(probe, "NPU_SMI_TIMEOUT_S", 0.5)
    write_executable(tools / "npu-smi", "#!/bin/sh\nsleep 600 & sleep 600\n")  # hung, a child holding the pipe
    assert probe.npu_use([me], path=str(tools)) == {me: {"error": "npu-smi info took over 0.5 s"}}
    monkeypatch.setattr(probe, "NPU_SMI_MAX", 4096)
    write_executable(tools / "npu-smi", "#!/bin/sh\nexec yes '| 0 0 | 1 |'\n")  # endless output: read 4 kB
    assert probe.npu_use([me], path=str(tools)) == {me: {"error": "npu-smi info lists no process with this pid"}}


def test_a_rank_whose_npu_computes_keeps_a_quiet_host_call_alive_and_is_named_once_its_npu_idles():
    det, t = rules.Detector(), 0.0
    wait = ("all_reduce (torch/distributed/distributed_c10d.py:1)", "update (x.py:2)")
    held = ("synchronize (torch_npu/npu/utils.py:1)", "update (x.py:3)")  # the host waits on its NPU

    def poll(busy_pct: int) -> list[dict]:
        samples = {}
        for rank, stack, pct in zip(_ranks(2), (wait, held), (0, busy_pct), strict=True):
            npu = {"id": rank.pid - 100, "chip": 0, "aicore_pct": pct} if rank.pid in det.wants_npu() else None
            give = stack if rank.pid in det.wants() else None
            samples[rank.pid] = (rank, rules.Sample("ray::WorkerDict.update", "S", 5, "", give, npu=npu))
        return det.observe(t, samples)

    asked = 0
    for _ in range(300):  # ten minutes of no CPU on any rank, the NPU of rank 1 at 60 %
        t += 2
        assert not poll(60)
        asked += bool(det.wants_npu())
    assert asked > 290  # once quiet, the NPUs are read every poll while they are what moves
    events = []
    for _ in range(200):
        t += 2
        events += poll(0)
    [stall] = events
    [culprit] = stall["culprits"]
    assert culprit["actor"] == f"{GROUP}_0:1" and culprit["npu"] == {"id": 1, "chip": 0, "aicore_pct": 0}
    assert [w["npu"] for w in stall["waiting"]] == [{"id": 0, "chip": 0, "aicore_pct": 0}]


@pytest.mark.slow
def test_npu_use_keeps_a_blocked_host_alive_while_its_npu_computes_and_names_it_with_aicore_once_idle(cluster):
    table, calls = cluster.logs / "npu-smi.out", cluster.logs / "npu-smi.calls"
    idle = table.read_text()
    watch, watched = start_watch(cluster, "--json")
    job, out = start_job(cluster, "block", 29661)
    culprits: tuple[int, ...] = ()
    try:
        assert watched.wait_for('"started"', 120) and out.wait_for("rank pids:", 180), (watched.lines, out.lines)
        pids = [int(p) for p in next(x for x in out.lines if x.startswith("rank pids:")).split()[2:]]
        ranks = {pid: npu for npu, pid in enumerate(pids)}
        table.write_text(npu_info([0, 85, 0, 0, 0, 0, 0, 0], ranks))  # rank 1's NPU computes
        assert out.wait_for("step 2 done", 180), out.lines
        calls.write_text("")
        deadline = time.monotonic() + 240  # rank 1's host blocks at step 3: the NPU is read each poll
        while len(calls.read_text().splitlines()) < 15 and time.monotonic() < deadline and watch.poll() is None:
            time.sleep(1)
        assert len(calls.read_text().splitlines()) >= 15, watched.lines
        assert not [e for e in watched.events() if e["event"] == "stall"], watched.lines
        table.write_text(npu_info([0] * 8, ranks))  # its NPU idles too: nothing progresses
        named = watched.wait_for('"stall"', 240)
        stall = stall_of(watched) if named else {}
        culprits = tuple(c["pid"] for c in stall.get("culprits", ()))
    finally:
        table.write_text(idle)
        end(job, culprits)
        watch.wait(120)
    assert named, (watched.lines, out.lines)
    assert watch.returncode == 1
    [culprit] = stall["culprits"]
    assert culprit["actor"] == "a1b2c3WorkerDict_0:1" and culprit["pid"] == pids[1]
    assert culprit["npu"] == {"id": 1, "chip": 0, "aicore_pct": 0}
    assert sorted((w["actor"], w["npu"]["id"], w["npu"]["aicore_pct"]) for w in stall["waiting"]) == [
        ("a1b2c3WorkerDict_0:0", 0, 0),
        ("a1b2c3WorkerDict_0:2", 2, 0),
    ]
