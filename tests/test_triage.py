"""`ascendfix triage` on log folders written here in HCCL's, torch's and Ray's own formats.

The lines follow the shapes CANN, torch_npu, torch and Ray print (as reported in vllm-ascend#486,
#1815, #3162, #1955 and Ray's docs); their values are made up.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from datetime import datetime
from pathlib import Path

import pytest
from ascendfix import cli
from ascendfix.job import triage
from ascendfix.job.triage import scan as triage_scan
from click.testing import CliRunner

from tests import triage_fixtures as fixtures

CYAN, RESET = "\x1b[36m", "\x1b[0m"


def invoke(*args: str):
    return CliRunner().invoke(cli.main, list(args))


def write(path: Path, text: str | bytes, mtime: datetime | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    if mtime is not None:
        os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return path


def port_down(rank: int, pid: int, stamp: str) -> str:
    """torch_npu's exception for a port that is down, as a rank's stderr prints it."""
    return (
        f"[rank{rank}]: Traceback (most recent call last):\n"
        f'[rank{rank}]:   File "/opt/verl/verl/workers/fsdp_workers.py", line 612, in init_model\n'
        f"[rank{rank}]:     self.actor_module = self._build_model()\n"
        f"[rank{rank}]: RuntimeError: EJ0002: [PID: {pid}] {stamp} The network port is down.\n"
        f"[rank{rank}]:         Solution: Check the network port status of the NPU.\n"
        f"[rank{rank}]: [ERROR] {stamp[:19]} (PID:{pid}, Device:{rank % 8}, RankID:{rank}) "
        "ERR02200 DIST call hccl api failed.\n"
    )


def socket_timeout(rank: int, pid: int, stamp: str) -> str:
    """A rank whose peer never connected: RuntimeError, ERR01100, then EI0006 (the shape of vllm-ascend#486)."""
    return (
        f"[rank{rank}]: Traceback (most recent call last):\n"
        f'[rank{rank}]:   File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", '
        "line 2501, in all_reduce\n"
        f"[rank{rank}]:     work = group.allreduce([tensor], opts)\n"
        f"[rank{rank}]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function "
        "error: HcclAllreduce, error code is 6\n"
        f"[rank{rank}]: [ERROR] {stamp[:19]} (PID:{pid}, Device:{rank % 8}, RankID:{rank}) "
        "ERR01100 OPS call acl api failed.\n"
        f"[rank{rank}]: EI0006: [PID: {pid}] {stamp} Getting socket times out. Reason: Remote Rank did not "
        "send the data in time. Please check the reason for the rank being stuck\n"
        f"[rank{rank}]:         Solution: 1. Check the rank service processes with other errors or no errors "
        "in the cluster.\n"
    )


def ray_line(stamp: str, pid: int, text: str, level: str = "I") -> str:
    return f"[{stamp} {level} {pid} {pid + 7}] core_worker.cc:902: {text}\n"


def session(root: Path) -> Path:
    """A Ray session's logs gathered from three nodes: rank 7's port goes down, ranks 1 and 9 time out on it."""
    logs = root / "session_latest" / "logs"
    head = "2025-04-08 18:05:00,100"
    # the head node's own worker: rank 1 times out two minutes after rank 7's port went down
    write(
        logs / "worker-5a4e3f01-01000000-1001.err",
        ray_line(head, 1001, "Event stats: Global stats: 812 total (11 active)")
        + socket_timeout(1, 1001, "2025-04-08-18:09:20.444.436"),
    )
    write(logs / "worker-5a4e3f01-01000000-1001.out", "Training Progress:   3%|▎  | 9/300\n")
    # node 10.0.0.4, gathered into its own folder: rank 7 is the first to fail
    write(
        logs / "10.0.0.4" / "worker-77aa01bc-01000000-3007.err",
        ray_line("2025-04-08 18:06:59,001", 3007, "Constructing CoreWorkerProcess. pid: 3007")
        + port_down(7, 3007, "2025-04-08-18:07:19.902.311"),
    )
    write(logs / "10.0.0.4" / "worker-77aa01bc-01000000-3007.out", "")
    # the driver log: node 10.0.0.3's rank 9 times out too, streamed with Ray's coloured prefix
    prefix = f"{CYAN}(WorkerDict pid=2009, ip=10.0.0.3){RESET} "
    driver = "".join(
        prefix + line + "\n" for line in socket_timeout(9, 2009, "2025-04-08-18:09:21.010.000").splitlines()
    )
    write(logs / "job-driver-raysubmit_9f2a.log", ray_line(head, 900, "driver up") + driver)
    write(logs / "raylet.out", ray_line(head, 800, "NodeManager server started"))
    return logs


def run_json(logdir: Path) -> tuple[int, dict]:
    result = invoke("triage", str(logdir), "--json")
    return result.exit_code, json.loads(result.stdout)


# --- the first failure, named ---------------------------------------------------------------------


def test_a_multinode_session_names_the_port_that_went_down_first(tmp_path):
    code, data = run_json(session(tmp_path))
    assert code == 1
    keys = ["schema", "ok", "logs", "first", "later", "consequences", "by_code", "skipped", "clock_skew", "discounted"]
    assert list(data) == keys and data["ok"] is False
    first = data["first"]
    assert set(first) == {"time", "file", "line", "node", "pid", "rank", "code", "message", "cause", "fix"}
    assert first["code"] == "EJ0002" and first["node"] == "10.0.0.4" and first["pid"] == 3007 and first["rank"] == 7
    assert first["time"] == "2025-04-08T18:07:19.902311"
    assert first["file"] == "10.0.0.4/worker-77aa01bc-01000000-3007.err" and first["line"] == 5
    assert "The network port is down" in first["message"]
    ej0002 = next(fp for fp in triage.fingerprints() if fp.code == "EJ0002")
    assert (first["cause"], first["fix"]) == (ej0002.cause, ej0002.fix)
    # rank 7: RuntimeError+EJ0002 on one line, ERR02200; ranks 1 and 9: RuntimeError, ERR01100, EI0006 each
    assert data["by_code"] == {"EI0006": 2, "ERR01100": 2, "RuntimeError": 2, "EJ0002": 1, "ERR02200": 1}
    assert data["later"] == 6
    # what followed, by name: each other rank's earliest finding (ranks 1 and 9 waited for rank 7), first excluded
    assert [(c["code"], c["rank"]) for c in data["consequences"]] == [("EI0006", 1), ("EI0006", 9)]
    assert all(set(c) == set(first) for c in data["consequences"])


def test_the_ray_prefix_gives_pid_and_ip_through_its_colour_codes(tmp_path):
    logs = session(tmp_path)
    (logs / "10.0.0.4").rename(tmp_path / "elsewhere")  # without rank 7, rank 1 (18:09:20) is first
    first = triage.triage(logs).first
    assert (first.code, first.pid, first.rank, first.node) == ("EI0006", 1001, 1, None)
    (logs / "worker-5a4e3f01-01000000-1001.err").unlink()  # then rank 9, via the driver log
    first = triage.triage(logs).first
    assert (first.code, first.pid, first.rank, first.node) == ("EI0006", 2009, 9, "10.0.0.3")
    assert first.file == "job-driver-raysubmit_9f2a.log" and "\x1b" not in first.message


def test_a_burst_is_named_by_its_cann_code_and_timed_by_that_line(tmp_path):
    write(tmp_path / "train.log", socket_timeout(1, 1292363, "2025-04-08-18:07:20.444.436"))
    result = triage.triage(tmp_path)
    assert result.first.code == "EI0006" and result.first.line == 6
    assert result.first.time == datetime(2025, 4, 8, 18, 7, 20, 444436)
    assert result.later == 0  # one burst: its lines are the failure, not its consequences
    assert result.by_code == {"RuntimeError": 1, "ERR01100": 1, "EI0006": 1}


def test_human_output_names_node_code_cause_fix_and_source(tmp_path):
    result = invoke("triage", str(session(tmp_path)))
    assert result.exit_code == 1
    assert "first failure" in result.output and "node 10.0.0.4" in result.output and "rank 7" in result.output
    assert "EJ0002" in result.output and "hccn_tool" in result.output
    assert "vllm-project/vllm-ascend/issues/1815" in result.output
    assert "6 more" in result.output


# --- ordering by the lines' own stamps -----------------------------------------------------------

FORMATS = {
    "cann": lambda t: (
        f"EI0009: [PID: 11] {t:%Y-%m-%d-%H:%M:%S}.{t.microsecond // 1000:03d}.000 Transport init "
        "error. Reason: [Create][DestLink]Create Dest error! createLink para:rank[7]-localUserrank[7], dst_rank[15]\n"
    ),
    "plog": lambda t: (
        f"[ERROR] HCCL(12,python):{t:%Y-%m-%d-%H:%M:%S}.{t.microsecond // 1000:03d}.000 "
        "[hccl_socket_manager.cc:778] [12][Wait][LinkEstablish]wait socket establish timeout, role[1] rank[3]\n"
    ),
    "glog": lambda t: (
        f"[rank3]:[E{t:%m%d %H:%M:%S}.{t.microsecond:06d}000 ProcessGroupNCCL.cpp:632] [Rank 3] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600031 ms\n"
    ),
    "ray": lambda t: (
        f"[{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} E 14 15] core_worker.cc:411: "
        "A worker died or was killed while executing a task by an unexpected system error.\n"
    ),
    "logging": lambda t: (
        f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}\tERROR worker.py:77 -- "
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    ),
}
CODES = {"cann": "EI0009", "plog": "EI0006", "glog": "NCCL_WATCHDOG", "ray": "RAY_WORKER_DIED", "logging": "RAY_OOM"}


@pytest.mark.parametrize("earliest", sorted(FORMATS))
def test_findings_are_ordered_by_their_own_stamps_across_formats(tmp_path, earliest):
    base = datetime(2025, 4, 8, 18, 7, 20, 500000)
    later = [k for k in sorted(FORMATS) if k != earliest]
    # every file is named so that name order is the reverse of time order
    times = {earliest: base} | {k: base.replace(second=21 + i) for i, k in enumerate(later)}
    for i, (kind, t) in enumerate(sorted(times.items(), key=lambda kv: kv[1], reverse=True)):
        write(tmp_path / f"{i}-{kind}.log", FORMATS[kind](t), mtime=datetime(2025, 4, 9))
    result = triage.triage(tmp_path)
    assert result.first.code == CODES[earliest] and result.first.time == base
    assert result.later == 4


def test_a_glog_stamp_takes_its_year_from_the_dated_stamp_above_it(tmp_path):
    text = "[2023-11-20 10:30:00,000 I 5 6] core_worker.cc:1: up\n" + FORMATS["glog"](datetime(2025, 11, 20, 10, 35))
    write(tmp_path / "a.log", text, mtime=datetime(2025, 11, 20))
    assert triage.triage(tmp_path).first.time == datetime(2023, 11, 20, 10, 35)


def test_a_glog_stamp_without_a_dated_one_takes_the_files_year_or_the_one_before(tmp_path):
    write(tmp_path / "a.log", FORMATS["glog"](datetime(2000, 11, 20, 10, 35, 12, 61000)), mtime=datetime(2025, 11, 21))
    assert triage.triage(tmp_path).first.time == datetime(2025, 11, 20, 10, 35, 12, 61000)
    write(tmp_path / "a.log", FORMATS["glog"](datetime(2000, 12, 31, 23, 59)), mtime=datetime(2026, 1, 1, 0, 5))
    assert triage.triage(tmp_path).first.time == datetime(2025, 12, 31, 23, 59)


def test_c10s_unpadded_month_and_vllms_stamp_are_read(tmp_path):
    c10d = (
        "(WorkerDict pid=904548) [E331 20:50:12.688969421 socket.cpp:1011] [c10d] The client socket has timed out "
        "after 1800000ms while trying to connect to (10.0.0.9, 38321).\n"
    )
    write(tmp_path / "a.log", c10d, mtime=datetime(2025, 4, 1))
    first = triage.triage(tmp_path).first
    assert (first.code, first.time, first.pid) == (
        "C10D_STORE_TIMEOUT",
        datetime(2025, 3, 31, 20, 50, 12, 688969),
        904548,
    )
    vllm = (
        "(EngineCore_DP0 pid=77) ERROR 03-30 20:59:57 [core.py:790] RuntimeError: NPU out of memory. "
        "Tried to allocate 2.00 GiB\n"
    )
    write(tmp_path / "b.log", vllm, mtime=datetime(2025, 4, 1))
    first = triage.triage(tmp_path).first
    assert (first.code, first.time, first.file) == ("NPU_OOM", datetime(2025, 3, 30, 20, 59, 57), "b.log")


def test_a_line_without_a_stamp_takes_none_and_sorts_after_stamped_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(triage_scan, "BLOCK", 256)  # the stamps and the error sit in different read blocks
    text = (
        ray_line("2025-04-08 18:00:00,000", 5, "early")
        + ray_line("2025-04-08 18:07:00,250", 5, "last stamp before the error")
        + "Training Progress:   3%|▎  | 9/300 [6:58:42<225:45:17, 2792.84s/it]\n" * 20
        + "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    )
    write(tmp_path / "worker-aa-01000000-42.err", text)
    first = triage.triage(tmp_path).first
    assert first.code == "RAY_ACTOR_DIED" and first.time is None  # it does not take the stamp above it
    assert first.line == 23 and first.pid == 42
    # a stamped failure later than that stamp comes first: the unstamped line is not timed by its neighbour
    write(tmp_path / "z.log", FORMATS["ray"](datetime(2025, 4, 8, 18, 30)))
    assert triage.triage(tmp_path).first.code == "RAY_WORKER_DIED"


def test_an_unstamped_traceback_takes_its_time_from_the_stamped_findings_around_it(tmp_path):
    """A rank's traceback (no stamp) above another rank's stamped lost peer: it takes the first stamp below it,
    not "after everything", and comes before a later failure in another file."""
    write(
        tmp_path / "a.log",
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 9, in <module>\n'
        "[rank1]: ValueError: bad batch\n"
        + "noise\n"
        * 40
        + "[rank0]:[E0408 18:07:20.000000000 ProcessGroupGloo.cpp:143] RuntimeError: [../third_party/gloo/gloo/"
        "transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:5322\n",
        mtime=datetime(2025, 4, 9),  # the glog stamps' year
    )
    write(tmp_path / "b.log", FORMATS["glog"](datetime(2025, 4, 8, 18, 7, 30)), mtime=datetime(2025, 4, 9))
    first = triage.triage(tmp_path).first
    assert (first.code, first.rank, first.time) == ("ValueError", 1, datetime(2025, 4, 8, 18, 7, 20))


@pytest.mark.parametrize("signal", ["SIGSEGV", "SIGBUS", "SIGABRT"])
def test_a_workers_fatal_signal_is_named_with_the_pid_of_its_file(tmp_path, signal):
    """Ray's logging.cc failure signal handler, as a worker's .err has it (worker-<id>-<jobid>-<pid>.err)."""
    write(
        tmp_path / "worker-f1427cf2-01000000-1215.err",
        f"*** {signal} received at time=1796299694 on cpu 1 ***\n"
        "PC: @     0x7fe02ee5a267  (unknown)  kill\n"
        f"[2026-12-03 12:08:14,628 E 1215 1215] logging.cc:474: *** {signal} received at time=1796299694 "
        "on cpu 1 ***\n",
    )
    first = first_of(tmp_path)
    assert (first["code"], first["pid"], first["time"]) == (signal, 1215, "2026-12-03T12:08:14.628000")


def test_torchruns_exit_by_a_signal_is_named_with_the_signals_name(tmp_path):
    """torch before 2.5 printed `exitcode  : -6 (pid: N)` without the signal's name."""
    write(
        tmp_path / "train.log",
        "Root Cause (first observed failure):\n[0]:\n  time      : 2024-06-18_10:21:36\n  host      : node01\n"
        "  rank      : 3 (local_rank: 3)\n  exitcode  : -6 (pid: 12345)\n  error_file: <N/A>\n",
    )
    first = first_of(tmp_path)
    assert (first["code"], first["rank"], first["pid"], first["node"]) == ("TORCHRUN_SIGNAL", 3, 12345, "node01")
    assert first["message"].endswith("(SIGABRT)")


def test_line_numbers_are_right_when_read_in_many_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(triage_scan, "BLOCK", 4096)
    noise = "".join(f"(TaskRunner pid=11069) step noise line {i}\n" for i in range(5000))
    write(tmp_path / "train.log", noise + FORMATS["ray"](datetime(2025, 4, 8, 18, 7, 20)) + noise)
    assert triage.triage(tmp_path).first.line == 5001


# --- nothing failed, bad input -------------------------------------------------------------------


def test_healthy_logs_that_mention_errors_in_passing_exit_0(tmp_path):
    write(
        tmp_path / "train.log",
        "(TaskRunner pid=11069) step:3 - actor/pg_loss:0.1 - critic/rewards/mean:0.5\n"
        "(WorkerDict pid=48213) WARNING 08-05 14:02:20 [utils.py:88] retrying after ConnectionError\n"
        "[2025-08-05 14:02:21,102 I 48213 48301] core_worker.cc:1022: 0 ERROR events in the last interval\n",
    )
    code, data = run_json(tmp_path)
    assert code == 0 and data == {
        "schema": 1,
        "ok": True,
        "logs": str(tmp_path),
        "first": None,
        "later": 0,
        "consequences": [],
        "by_code": {},
        "skipped": [],
        "clock_skew": {},
        "discounted": [],
    }
    assert "no failure found" in invoke("triage", str(tmp_path)).output


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path):
    result = invoke("triage", str(tmp_path / "nope"))
    assert result.exit_code == 2 and "no such folder" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    code, data = run_json(tmp_path / "nope")
    assert code == 2 and data["exit_code"] == 2 and "no such folder" in data["error"]


def test_a_folder_without_text_logs_exits_2(tmp_path):
    write(tmp_path / "core.bin", b"\0\x01\x02EJ0002: The network port is down.\n")
    result = invoke("triage", str(tmp_path))
    assert result.exit_code == 2 and "no readable text log files" in result.output


def test_the_default_folder_is_the_ray_sessions_logs(tmp_path, monkeypatch):
    assert triage.DEFAULT_LOGDIR == Path("/tmp/ray/session_latest/logs")
    monkeypatch.setattr(triage, "DEFAULT_LOGDIR", session(tmp_path))
    result = invoke("triage", "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["first"]["code"] == "EJ0002"


def test_a_single_log_file_is_read_too(tmp_path):
    log = write(tmp_path / "train.log", FORMATS["ray"](datetime(2025, 4, 8, 18, 30)))
    first = triage.triage(log).first
    assert (first.code, first.file, first.line) == ("RAY_WORKER_DIED", "train.log", 1)


# --- untrusted input ------------------------------------------------------------------------------


def test_control_characters_from_the_logs_are_not_printed(tmp_path):
    evil = "RuntimeError: NPU out of memory.\x1b]0;owned\x07 \x1b[2J\rTried\x08 to allocate \x9b31m2 GiB\u2028x\n"
    write(tmp_path / "bad\x1bname.log", evil)
    result = invoke("triage", str(tmp_path))
    assert result.exit_code == 1
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028]", result.output)
    first = json.loads(invoke("triage", str(tmp_path), "--json").stdout)["first"]
    assert first["code"] == "NPU_OOM" and not re.search(r"[\x00-\x1f\x7f-\x9f]", first["message"] + first["file"])


def test_symlinks_out_of_the_folder_are_not_followed(tmp_path):
    outside = write(tmp_path / "outside" / "worker-aa-01000000-9.err", port_down(0, 9, "2025-04-08-18:00:00.000.000"))
    logs = tmp_path / "logs"
    write(logs / "train.log", FORMATS["ray"](datetime(2025, 4, 8, 18, 30)))
    (logs / "linked-dir").symlink_to(outside.parent, target_is_directory=True)
    (logs / "linked.err").symlink_to(outside)
    result = triage.triage(logs)
    assert result.first.code == "RAY_WORKER_DIED" and result.files == 1 and result.later == 0


def test_a_huge_line_is_read_in_bounded_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(triage_scan, "BLOCK", 1 << 16)
    huge = (
        "x" * (3 << 20) + " EJ0002: [PID: 5] 2025-04-08-18:07:19.000.000 The network port is down. " + "y" * (1 << 20)
    )
    write(tmp_path / "a.log", "first line\n" + huge + "\n" + FORMATS["ray"](datetime(2025, 4, 8, 18, 30)))
    result = triage.triage(tmp_path)
    assert result.first.code == "EJ0002" and result.first.line == 2
    assert len(result.first.message) <= triage.MAX_MESSAGE
    assert result.by_code == {"EJ0002": 1, "RAY_WORKER_DIED": 1}


def test_binary_files_are_skipped(tmp_path):
    write(tmp_path / "core.12345", b"\x7fELF\0\0" + b"EJ0002: [PID: 5] 2025-04-08-18:00:00.000.000 down\n" * 10)
    write(tmp_path / "train.log", FORMATS["ray"](datetime(2025, 4, 8, 18, 30)))
    result = triage.triage(tmp_path)
    assert result.first.code == "RAY_WORKER_DIED" and result.files == 1


# --- the folders it reads -------------------------------------------------------------------------


def test_a_cann_plog_folder(tmp_path):
    plog = tmp_path / "ascend" / "log" / "debug" / "plog"
    write(
        plog / "plog-3007_20250408180719000.log",
        "[INFO] HCCL(3007,python):2025-04-08-18:07:10.000.001 [hccl_comm.cc:12] [3007]init start\n"
        "[ERROR] HCCP(3007,python):2025-04-08-18:07:19.300.100 [ra_host.c:580]tid:3007, ra rdev init failed, ret(-67)\n"
        "[ERROR] HCCL(3007,python):2025-04-08-18:07:19.300.200 [hccl_socket_manager.cc:778] [3007][Wait][LinkEstablish]"
        "wait socket establish timeout, role[1] rank[7] timeout[120]\n",
    )
    write(plog.parent.parent / "run" / "plog" / "plog-2001_20250408180900000.log", "[INFO] HCCL(2001,python):up\n")
    result = triage.triage(tmp_path / "ascend" / "log")
    assert (result.first.code, result.first.pid, result.first.rank) == ("EI0006", 3007, 7)
    assert result.first.time == datetime(2025, 4, 8, 18, 7, 19, 300200)
    assert result.first.file == "debug/plog/plog-3007_20250408180719000.log" and result.files == 2


def test_an_ascendfix_run_folder(tmp_path):
    run = tmp_path / "ascendfix-runs" / "20250408-180000"
    prefix = f"{CYAN}(TaskRunner pid=11069){RESET} "
    write(run / "run.json", '{"command": ["bash", "train.sh"]}\n')
    write(
        run / "train.log",
        prefix + "step:1 - timing_s/step:2814.45\n"
        f"{CYAN}(WorkerDict pid=4101, ip=10.0.0.5){RESET} [rank12]: EI0009: [PID: 4101] 2025-04-08-18:10:02.500.000 "
        "Transport init error. Reason: [Create][DestLink]Create Dest error! createLink para:rank[12]-localUserrank[12]"
        "-localIpAddr[10.0.0.5], dst_rank[15]-remoteUserrank[15]-remote_ip_addr[10.0.0.6]\n"
        + "Traceback (most recent call last):\n"
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 64, in run_ppo\n'
        + prefix
        + "ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_init_model()\n",
    )
    result = triage.triage(tmp_path / "ascendfix-runs")
    first = result.first
    assert (first.code, first.node, first.pid, first.rank) == ("EI0009", "10.0.0.5", 4101, 12)
    # the RayTaskError wrapper counts as the exception it wraps
    assert first.file == "20250408-180000/train.log" and result.by_code == {"EI0009": 1, "RuntimeError": 1}


def test_rays_worker_death_message_names_the_workers_pid_and_ip(tmp_path):
    write(
        tmp_path / "job-driver-raysubmit_1.log",
        f"\x1b[33m(raylet){RESET} A worker died or was killed while executing a task by an unexpected system error. "
        "To troubleshoot the problem, check the logs for the dead worker. Worker IP address: 10.0.0.7 "
        "Worker port: 10003 Worker PID: 28435 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
        "unexpectedly exits with a connection error code 2. End of file.\n",
    )
    first = triage.triage(tmp_path).first
    assert (first.code, first.node, first.pid) == ("RAY_WORKER_DIED", "10.0.0.7", 28435)


def test_an_exception_line_counts_only_below_a_traceback(tmp_path, monkeypatch):
    warning = "WARNING 04-08 18:00:01 [importing.py:20] ModuleNotFoundError: No module named 'flash_attn'\n"
    write(tmp_path / "a.log", warning, mtime=datetime(2025, 4, 9))
    assert triage.triage(tmp_path).first is None
    monkeypatch.setattr(triage_scan, "BLOCK", 128)  # the traceback's first line and its last in different blocks
    frames = '  File "/opt/verl/verl/trainer/main_ppo.py", line 64, in run_ppo\n    raise\n'
    write(tmp_path / "a.log", warning + "Traceback (most recent call last):\n" + frames * 3 + "KeyError: 'actor'\n")
    result = triage.triage(tmp_path)
    assert result.first.code == "KeyError" and result.first.line == 9 and result.later == 0


def test_a_kernel_log_shows_the_oom_killer(tmp_path):
    write(tmp_path / "dmesg.txt", "[12345.678901] Out of memory: Killed process 4101 (python3) total-vm:1000kB\n")
    assert triage.triage(tmp_path).first.code == "LINUX_OOM"


# --- the table ------------------------------------------------------------------------------------

EXAMPLES = {
    "107022": "RuntimeError: npuSynchronizeDevice: FORCE STOP. The device task was aborted.",
    "507053": "RuntimeError: UCE ERROR. Uncorrectable error in the device memory.",
    "507054": "RuntimeError: HBM MULTI BIT ECC ERROR. error code is 507054",
    "507055": "RuntimeError: SUSPECT MEM ERROR. error code is 507055",
    "507056": "RuntimeError: HCCS LINK ERROR. error code is 507056",
    "507057": "RuntimeError: SUSPECT REMOTE ERROR. error code is 507057",
    "507904": "RuntimeError: HcclAllreduce, error code is 507904",
    "DEVICE_EXCEPTION": "[ERROR] RUNTIME(2201,python):2025-04-08-18:07:19.001.002 [device_error_proc.cc:1066]2201 "
    "ProcessStarsCoreErrorInfo: report error module_type=5, module_name=EZ9999",
    "EJ0001": "EJ0001: [PID: 468348] 2025-04-24-16:14:56.101.202 Failed to initialize the HCCP process. Reason: Maybe "
    "the last training process is running.",
    "EI0009": "EI0009: [PID: 2] 2025-09-24-20:59:48.119.066 Transport init error. Reason: createLink para:rank[1]",
    "EJ0002": "RuntimeError: EJ0002: [PID: 38079] 2025-07-15-12:45:31.202.787 The network port is down.",
    "EJ0003": "[PID: 159] 2025-03-26-17:01:02.816.428 Communication_Error_Bind_IP_Port(EJ0003): Failed to bind the IP "
    "port.",
    "EI0019": "EI0019: [PID: 3100] 2025-11-02-09:00:01.000.001 Failed to bind the socket, ip[10.0.0.4] port[60001].",
    "EI0020": "EI0020: [PID: 3100] 2025-11-02-09:00:01.000.001 Failed to bind the NPU socket, port[16666].",
    "EI0005": "EI0005: [PID: 3101] 2025-11-02-09:00:01.000.001 The arguments for collective communication are "
    "inconsistent between ranks: count 1024 vs 2048.",
    "EI0011": "EI0011: [PID: 3102] 2025-11-02-09:00:01.000.001 Failed to allocate memory for HCCL buffers.",
    "EI0012": "EI0012: [PID: 3103] 2025-11-02-09:00:01.000.001 An SDMA task exception occurred.",
    "EI0013": "EI0013: [PID: 3104] 2025-11-02-09:00:01.000.001 An error CQE was received on the RDMA link.",
    "EI0015": "EI0015: [PID: 3105] 2025-11-02-09:00:01.000.001 Failed to detect the cluster information (rootInfo).",
    "EI0006": "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket times out.",
    "EI0002": "EI0002: [PID: 1] 2025-06-25-10:45:23.586.187 The wait execution of the Notify register times out.",
    "507046": "RuntimeError: AclrtSynchronizeStreamWithTimeout, error code is 507046",
    "507048": "RuntimeError: npuSynchronizeDevice: AclrtSynchronizeDeviceWithTimeout, error code is 507048",
    "507014": "RuntimeError: acl::AclQueryEventRecordedStatus(event_, &currStatus), error code is 507014",
    "HCCL_WATCHDOG": "[rank7]:[E1212 12:10:10.131512730 compiler_depend.ts:1675] [Rank 7] HCCL watchdog thread "
    "terminated with exception:",
    "NCCL_WATCHDOG": "[rank3]:[E1120 10:35:12.061505813 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600010 milliseconds before timing out.",
    "C10D_STORE_TIMEOUT": "[E331 20:50:12.688969421 socket.cpp:1011] [c10d] The client socket has timed out after "
    "1800000ms",
    "SLEEP_MODE_ALLOC": "AssertionError: Expandable segments are not compatible with memory pool. Please track "
    "https://github.com/pytorch/pytorch/issues/147851 for the latest updates.",
    "NPU_OOM": "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity)",
    "CUDA_OOM": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RAY_OOM": "[2025-08-05 14:02:21,102 W 13035 13035] (gcs_server) gcs_worker_manager.cc:70: Reporting worker exit, "
    "worker id = cbe9, node id = 0c86, address = 10.0.0.9, exit_type = NODE_OUT_OF_MEMORY, exit_detail = 1 "
    "worker(s) were killed due to the node running low on memory.",
    "LINUX_OOM": "[12345.678901] Out of memory: Killed process 4101 (python3) total-vm:1000kB, anon-rss:900kB",
    # CPython's fatal_error (pylifecycle.c) and Ray's logging.cc signal handler, as a Ray worker's .err has them
    "PYTHON_FATAL": "Fatal Python error: Segmentation fault",
    "NATIVE_SIGNAL": "[2026-12-03 12:08:14,628 E 1215 1215] logging.cc:474: *** SIGSEGV received at time=1796299694 "
    "on cpu 1 ***",
    "TORCHRUN_SIGTERM": "  exitcode  : -15 (pid: 12346)  (SIGTERM)",  # torch 2.13 errors/__init__.py:188
    "TORCHRUN_SIGNAL": "  exitcode  : -9 (pid: 12345)",
    "TORCHRUN_EXIT": "E1203 11:56:13.177000 6435 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] "
    "failed (exitcode: 1) local_rank: 1 (pid: 6576) of binary: /usr/bin/python",
    "TORCHRUN_CHILD_FAILED": "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "GLOO_CONNECT": "RuntimeError: Gloo connectFullMesh failed with "
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "GLOO_PEER": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[10.0.0.5]:4525",
    "GLOO_TIMEOUT": "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv "
    "operation to complete",
    "RAY_UNSCHEDULABLE_GPU": "[2025-08-05 14:02:21,102 W 800 800] (raylet) main.cc:985: The lease with ID 00000001 "
    "cannot be scheduled right now. It requires {CPU: 1, GPU: 1} for placement, however the cluster currently "
    "cannot provide the requested resources.",
    "RAY_UNSCHEDULABLE": "2025-08-05 14:02:21,102\\tINFO monitor.py:438 -- :event_summary:Error: No available node "
    "types can fulfill resource request {'CPU': 64.0, 'NPU': 8.0}. Add suitable node types to this cluster to "
    "resolve this issue.",
    "WATCH_STALL": "2025-08-05 14:02:21,000 ERROR ascendfix watch: STALL in update_actor: no rank progressed since "
    "2025-08-05T14:02:21+00:00; culprit a1WorkerDict_0:1 [PID: 4101] IP: 10.0.0.5 node 9af3c2d1: Event.wait "
    "(threading.py:629); 2 rank(s) wait in all_reduce (torch/distributed/distributed_c10d.py:3252)",
    "RAY_ACTOR_DIED": "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    "RAY_WORKER_DIED": "(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
    "troubleshoot the problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR",
    "RAY_SYSTEM_ERROR": "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR",
    "CANN": "EH9999[PID: 285] 2025-12-12-12:10:10.639.672 (EH9999):  [Query][Status]query event recorded status failed",
    "ERR02200": "[ERROR] 2025-03-26-11:49:12 (PID:3674, Device:0, RankID:0) ERR02200 DIST call hccl api failed.",
    "ERR01100": "[ERROR] 2025-04-08-18:07:20 (PID:1292363, Device:1, RankID:1) ERR01100 OPS call acl api failed.",
    "ERR00100": "[ERROR] 2025-06-25-10:45:23 (PID:13075, Device:0, RankID:8) ERR00100 PTA call acl api failed",
    "ERR": "[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 DIST internal error",
    "python": "ValueError: the batch size 7 is not divisible by 2",
    "RAY_TASK_ERROR": "ray.exceptions.RayTaskError(KeyError): ray::WorkerDict.init_model() (pid=4101, ip=10.0.0.5, "
    "actor_id=7c1e, repr=<WorkerDict object at 0x7f>)",
}


def test_every_fingerprint_has_a_cause_a_fix_and_a_source():
    table = triage.fingerprints()
    assert [fp.code for fp in table] == list(EXAMPLES)  # the table's order: most specific first
    for fp in table:
        assert fp.cause and fp.fix and fp.source, fp.code


@pytest.mark.parametrize("code", sorted(EXAMPLES))
def test_each_fingerprint_fires_on_its_example_through_the_prefilter(tmp_path, code):
    line = EXAMPLES[code].encode()
    name = "kern.log" if code == "LINUX_OOM" else "a.log"  # the kernel's words are looked for in kernel logs
    needles = triage_scan.needles_for(name)
    picked = triage.PREFILTER.search(line) or any(n in line for n in needles)
    assert picked, "the pre-filter would never show it this line"
    after = ("python", "RAY_TASK_ERROR", "SLEEP_MODE_ALLOC", "TORCHRUN_CHILD_FAILED")
    above = "Traceback (most recent call last):\n" if code in after else ""
    write(tmp_path / name, above + EXAMPLES[code] + "\n")
    first = triage.triage(tmp_path).first
    inner = {"CANN": "EH9999", "ERR": "ERR02005", "python": "ValueError", "RAY_TASK_ERROR": "KeyError"}
    inner |= {"NATIVE_SIGNAL": "SIGSEGV"}
    assert first.code == inner.get(code, code)


def test_needles_are_the_literals_each_alternative_starts_with():
    assert triage.needles(r"EJ0002(?!\w)|The network port is down") == ("EJ0002", "The network port is down")
    assert triage.needles(r"\[c10d\] The client") == ("[c10d] The client",)
    assert triage.needles(r"(?P<code>ERR\d{5})") == ("ERR",)
    assert triage.needles(r"Create (?:Dest|Src) error|LinkEstablish\]wait") == ("Create ", "LinkEstablish]wait")
    assert triage.needles(r"Killed?|Out of") == ("Kille", "Out of")  # the "d" is optional
    assert triage.needles(r"EJ0002|up") == ()  # one alternative too short to search for: always run
    assert triage.needles(r"(?<=code is )507046(?!\d)|(?<=ret\()507046") == ("507046", "507046")  # lookbehind: before
    assert triage.needles(r"(?P<code>E[A-Z0-9]\d{4})") == () and triage.needles(r"^Error") == ()


def overlap(a: str, b: str) -> bool:
    """Whether two needles can share characters in a line: one holds the other, or one ends with what the other
    starts with."""
    return a in b or b in a or any(a.endswith(b[:k]) or b.endswith(a[:k]) for k in range(1, min(len(a), len(b))))


def merged(a: str, b: str) -> list[str]:
    """The shortest texts that hold both needles where they share characters: one inside the other, or one
    running on from the other's end."""
    if a in b or b in a:
        return [max(a, b, key=len)]
    return [x + y[k:] for x, y in ((a, b), (b, a)) for k in range(min(len(x), len(y)) - 1, 0, -1) if x.endswith(y[:k])]


def test_every_pair_of_overlapping_needles_resolves_to_the_most_specific_entry():
    """Table.match finds what trying every pattern in the table's order finds, on every text in which two
    entries' needles overlap (plus the context their patterns look for after them)."""
    fps = triage.fingerprints()
    table = triage_scan.Table(fps)
    pairs = set()
    for i, a in enumerate(fps):
        for b in fps[i + 1 :]:
            for na in a.needles:
                for nb in b.needles:
                    if not overlap(na, nb):
                        continue
                    pairs.add((a.code, b.code))
                    for text in merged(na, nb):
                        for tail in ("", " {'CPU': 1.0, 'GPU': 1.0}", ": 1"):
                            want = next((k for k, fp in enumerate(fps) if fp.pattern.search(text + tail)), None)
                            got = table.match(text + tail)
                            assert (got[0] if got else None) == want, (a.code, b.code, text + tail)
    assert ("RAY_UNSCHEDULABLE_GPU", "RAY_UNSCHEDULABLE") in pairs and len(pairs) >= 5, sorted(pairs)


def test_the_v1_autoscalers_gpu_request_gives_the_trainer_device_fix(tmp_path):
    """Ray 2.49.1 _private/autoscaler.py:846-850 (v1, what `ray start --head` runs) logs it in monitor.log."""
    write(
        tmp_path / "monitor.log",
        "2025-08-05 14:02:26,872\tWARNING autoscaler.py:850 -- Error: No available node types can fulfill resource "
        "request {'CPU': 1.0, 'GPU': 1.0}. Add suitable node types to this cluster to resolve this issue.\n",
    )
    first = first_of(tmp_path)
    assert first["code"] == "RAY_UNSCHEDULABLE_GPU" and "trainer.device=npu" in first["fix"]


# --- a real Ray job -------------------------------------------------------------------------------

RAY_DRIVER = textwrap.dedent(
    """
    import os, sys, time
    import ray

    @ray.remote(num_cpus=0)
    class WorkerDict:  # rank 7 loses its port and dies, as torch_npu reports it
        def init_model(self):
            stamp = time.strftime("%Y-%m-%d-%H:%M:%S") + ".123.456"
            print("[rank7]: RuntimeError: EJ0002: [PID: %d] %s The network port is down." % (os.getpid(), stamp),
                  file=sys.stderr, flush=True)
            time.sleep(1)  # let the log monitor forward it
            os._exit(1)

    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])
    ray.get(WorkerDict.remote().init_model.remote())  # raises ActorDiedError: the driver fails too
    """
)


@pytest.mark.slow
def test_a_real_ray_job_that_fails_is_triaged_from_its_run_and_session_folders(tmp_path, request, ascendfix_cli):
    pytest.importorskip("ray")
    (tmp_path / "driver.py").write_text(RAY_DRIVER)
    ray_dir = Path(tempfile.mkdtemp(prefix="afray-", dir="/tmp"))  # Ray's socket paths must stay under 107 bytes
    request.addfinalizer(lambda: shutil.rmtree(ray_dir, ignore_errors=True))
    args = ["run", "--device", "cuda", "--no-preflight", "--log-dir", "runs/1", sys.executable, "driver.py", ray_dir]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAY_AUTH_MODE": "disabled"}
    proc = ascendfix_cli(*args, cwd=tmp_path, env=env, clean_env=True)
    assert proc.returncode != 0 and "ActorDiedError" in proc.stdout + proc.stderr
    for logs in (tmp_path / "runs", ray_dir / "session_latest" / "logs"):
        result = triage.triage(logs)
        assert result.first.code == "EJ0002" and result.first.rank == 7, (logs, result)
        assert result.first.time.date() == datetime.now().date() and result.first.pid is not None
        assert result.later >= 1  # the actor's death, as Ray reports it
    run = triage.triage(tmp_path / "runs")
    assert set(run.by_code) >= {"EJ0002", "RAY_ACTOR_DIED"}


# --- the failures this stack really prints, one folder each ---------------------------------------


def first_of(logs: Path) -> dict:
    """The CLI's first finding, asserting the exit code that goes with a failure."""
    code, data = run_json(logs)
    assert code == 1, data
    return data["first"]


def fix_of(code: str) -> str:
    return next(fp.fix for fp in triage.fingerprints() if fp.code == code)


def cause_of(code: str) -> str:
    return next(fp.cause for fp in triage.fingerprints() if fp.code == code)


def test_a_clean_ray_jobs_teardown_notices_are_no_failure(tmp_path):
    code, data = run_json(fixtures.clean_ray_teardown(tmp_path))
    assert code == 0 and data["first"] is None and data["by_code"] == {}


def gcs_worker_exit(detail: str) -> str:
    """The GCS's W-level notice of a worker's exit (gcs_worker_manager.cc:70, as Ray 2.5x prints it in
    gcs_server.out; the exit detail's words are _raylet's: 'Worker exits with an exit code …',
    'SystemExit is raised (sys.exit is called).')."""
    return (
        "[2026-12-03 12:08:14,741 W 813 813] (gcs_server) gcs_worker_manager.cc:70: Reporting worker exit, worker id "
        "= f1427cf2663f81e6acdf9e7568d8b31f7f67dfbe46456036f129026a, node id = 1729f5314d37f741596f2879882c232abb95d"
        f"e36beb4f42d6a57936e, address = 10.0.0.7, exit_type = SYSTEM_ERROR, exit_detail = {detail}\n"
    )


def test_the_gcss_notice_of_a_worker_told_to_exit_at_shutdown_is_discounted_and_said(tmp_path):
    write(
        tmp_path / "gcs_server.out",
        gcs_worker_exit("Worker exits with an exit code 1. SystemExit is raised (sys.exit is called)."),
    )
    code, data = run_json(tmp_path)
    assert code == 0 and data["first"] is None and data["by_code"] == {}
    assert [(d["code"], d["file"], d["line"]) for d in data["discounted"]] == [
        ("RAY_SYSTEM_ERROR", "gcs_server.out", 1)
    ]
    assert "SystemExit" in data["discounted"][0]["why"]
    assert "discounted  RAY_SYSTEM_ERROR at gcs_server.out:1" in invoke("triage", str(tmp_path)).output


def test_the_gcss_notice_of_a_crashed_worker_names_its_node_from_its_address(tmp_path):
    write(tmp_path / "gcs_server.out", gcs_worker_exit("Worker unexpectedly exits with a connection error code 2."))
    first = first_of(tmp_path)
    assert (first["code"], first["node"]) == ("RAY_SYSTEM_ERROR", "10.0.0.7")


def test_the_exception_ray_logs_from_its_npu_type_probe_and_goes_on_from_is_no_failure(tmp_path):
    code, data = run_json(fixtures.ray_npu_probe(tmp_path))
    assert code == 0 and data["first"] is None and data["by_code"] == {}


@pytest.mark.parametrize(
    ("then", "line"),
    [
        # a job's own traceback below the probe's
        (
            'Traceback (most recent call last):\n  File "main_ppo.py", line 9, in <module>\n'
            "ModuleNotFoundError: No module named 'torch_npu'\n",
            14,
        ),
        # the same exception, raised where nobody handled it
        (
            "2025-08-05 14:02:23,000\tERROR worker.py:1 -- task failed\nTraceback (most recent call last):\n"
            "  File \"x.py\", line 1, in <module>\nModuleNotFoundError: No module named 'acl'\n",
            15,
        ),
    ],
)
def test_a_traceback_after_the_npu_probes_own_is_still_named(tmp_path, then, line):
    first = first_of(fixtures.ray_npu_probe(tmp_path, then))
    assert (first["code"], first["file"], first["line"]) == ("ModuleNotFoundError", "train.log", line), first


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (fixtures.ray_oom, ("RAY_OOM", "10.0.0.9", None, None)),  # the dead worker's pid is not in the line
        (fixtures.raylet_oom, ("RAY_OOM", "10.0.0.11", None, None)),
        (fixtures.relayed_oom, ("RAY_OOM", "10.0.0.9", 4242, None)),  # not the relaying TaskRunner's
    ],
)
def test_host_out_of_memory_is_named_when_ray_or_the_raylet_says_it(tmp_path, make, expected):
    first = first_of(make(tmp_path))
    assert (first["code"], first["node"], first["pid"], first["rank"]) == expected
    assert first["fix"] == fix_of("RAY_OOM") and "host memory" in first["fix"]


def test_the_kernels_oom_killer_is_read_from_dmesg_and_kern_log_with_their_node(tmp_path):
    first = first_of(fixtures.kernel_oom(tmp_path))
    assert (first["code"], first["node"], first["pid"]) == ("LINUX_OOM", "node07", 4101)
    assert first["time"] == "2025-08-05T14:10:01" and first["file"] == "node07/dmesg-T.txt"
    (tmp_path / "node07" / "dmesg-T.txt").unlink()
    first = first_of(tmp_path)
    assert (first["code"], first["node"], first["pid"], first["fix"]) == (
        "LINUX_OOM",
        "gpu-b08",
        77,
        fix_of("LINUX_OOM"),
    )


@pytest.mark.parametrize("cann_first", [False, True])
def test_verls_hccl_burst_joins_across_the_missing_rank_and_takes_the_workers_pid(tmp_path, cann_first):
    first = first_of(fixtures.verl_hccl_burst(tmp_path, cann_first))
    assert (first["code"], first["node"], first["pid"], first["rank"]) == ("EJ0001", "10.0.0.5", 468348, 2)
    assert first["fix"] == fix_of("EJ0001") and "wait 10 s" in first["fix"]
    _, data = run_json(tmp_path)
    assert data["later"] == 0 and data["by_code"] == {"ERR02200": 1, "EJ0001": 1}


def test_a_pid_that_reads_like_a_code_is_no_code(tmp_path):
    write(
        tmp_path / "worker-aa-01000000-507046.err",
        "EJ0001: [PID: 507046] 2025-04-24-16:14:56.101.202 Failed to initialize the HCCP process.\n"
        "[ERROR] 2025-04-24-16:14:56 (PID:507046, Device:0, RankID:3) ERR02200 DIST call hccl api failed.\n",
    )
    first = first_of(tmp_path)
    assert (first["code"], first["pid"], first["rank"]) == ("EJ0001", 507046, 3)
    _, data = run_json(tmp_path)
    assert "507046" not in data["by_code"]


def test_a_job_stuck_on_a_gpu_request_is_a_finding_that_names_trainer_device(tmp_path):
    first = first_of(fixtures.unschedulable(tmp_path))
    assert first["code"] == "RAY_UNSCHEDULABLE_GPU" and "{CPU: 1, GPU: 1}" in first["message"]
    assert "trainer.device=npu" in first["fix"] and first["time"] == "2025-08-05T14:02:26.872000"


def test_a_request_no_node_can_fulfil_names_the_resources_asked(tmp_path):
    fixtures.unschedulable(tmp_path, "{CPU: 64, NPU: 8}")
    (tmp_path / "monitor.log").unlink()
    first = first_of(tmp_path)
    assert first["code"] == "RAY_UNSCHEDULABLE" and "{CPU: 64, NPU: 8}" in first["message"]
    assert first["fix"] == fix_of("RAY_UNSCHEDULABLE")


@pytest.mark.parametrize("code", ["507053", "507054", "507056", "507904"])
def test_hardware_faults_say_isolate_the_card_or_node(code):
    fp = next(fp for fp in triage.fingerprints() if fp.code == code)
    assert "Isolate the" in fp.fix and "do not retune" in fp.fix


def test_the_advice_sends_the_operator_to_the_right_card():
    """As CANN's aclError.md and torch_npu at the pinned commit say (shared/UPSTREAM.md)."""
    assert "first fault on another rank" in fix_of("107022") and "do not isolate this card" in fix_of("107022")
    assert "Isolate the peer card" in fix_of("507055") and "507053" in fix_of("507055")
    assert "Reproduce the step on one card first" in fix_of("507057") and "out-of-bounds" in fix_of("507057")
    assert fix_of("EI0012").startswith("Check the peer first") and "the peer process exited" in cause_of("EI0012")
    assert "HCCL_NPU_SOCKET_PORT_RANGE" in fix_of("EI0020") and "ip_local_reserved_ports=" not in fix_of("EI0020")
    for code in ("EJ0003", "EI0019"):
        assert "ip_local_reserved_ports=60000-60031" in fix_of(code) and "60000-60015" not in fix_of(code)
    assert "32 ports" in cause_of("EJ0003")


def cann(code: str, pid: int, stamp: str, text: str) -> str:
    """A CANN error message as torch_npu raises it (``EXXXXX: [PID: N] <stamp> <text>``, CANN's ErrorManager
    format, as in vllm-ascend#1815 and #3162)."""
    return f"RuntimeError: {code}: [PID: {pid}] {stamp} {text}\n"


def test_a_newer_hcomms_transport_init_error_on_a_port_that_is_down_is_ei0009(tmp_path):
    write(
        tmp_path / "plog-1.log",
        cann("EI0009", 51, "2025-09-24-20:59:48.119.066", "transport init error. Reason: The network port is down."),
    )
    assert first_of(tmp_path)["code"] == "EI0009"


def test_a_force_stop_is_a_consequence_of_the_fault_on_another_card(tmp_path):
    """Rank 3's card is force-stopped (107022) a second before rank 5's UCE is logged: the UCE is named."""
    write(
        tmp_path / "node01" / "train.log",
        "[rank3]: " + cann("107022", 301, "2025-04-08-18:07:19.000.001", "FORCE STOP. The device task was aborted."),
    )
    write(
        tmp_path / "node02" / "train.log",
        "[rank5]: "
        + cann("507053", 502, "2025-04-08-18:07:20.000.001", "UCE ERROR. Uncorrectable error in the device memory."),
    )
    code, data = run_json(tmp_path)
    assert code == 1 and (data["first"]["code"], data["first"]["rank"], data["first"]["node"]) == (
        "507053",
        5,
        "node02",
    )
    assert [(d["code"], d["file"]) for d in data["discounted"]] == [("107022", "node01/train.log")]


def test_a_peers_memory_error_names_the_peer_when_its_log_is_here(tmp_path):
    write(
        tmp_path / "node01" / "train.log",
        "[rank1]: " + cann("507055", 101, "2025-04-08-18:07:19.000.001", "SUSPECT MEM ERROR. error code is 507055"),
    )
    write(
        tmp_path / "node02" / "train.log",
        "[rank2]: "
        + cann("507054", 202, "2025-04-08-18:07:19.500.001", "HBM MULTI BIT ECC ERROR. error code is 507054"),
    )
    first = first_of(tmp_path)
    assert (first["code"], first["rank"], first["node"]) == ("507054", 2, "node02")
    (tmp_path / "node02" / "train.log").unlink()
    first = first_of(tmp_path)  # the peer's log missing: this rank's, with the advice to isolate the peer
    assert first["code"] == "507055" and "Isolate the peer card" in first["fix"]


def test_the_device_side_error_wins_over_a_slow_clocks_consequences_and_the_skew_is_said(tmp_path):
    logs = fixtures.plog_device_error_with_skew(tmp_path)
    code, data = run_json(logs)
    first = data["first"]
    assert code == 1 and (first["code"], first["node"], first["pid"], first["rank"]) == (
        "DEVICE_EXCEPTION",
        "node02",
        2201,
        None,
    )
    assert first["time"] == "2025-04-08T18:07:19.001002" and first["fix"] == fix_of("DEVICE_EXCEPTION")
    assert set(data["clock_skew"]) == {"node04"} and 3590 < data["clock_skew"]["node04"] < 3610
    assert "clock skew: node node04" in invoke("triage", str(logs)).output


def test_a_timeout_that_names_its_peer_is_that_peers_consequence_whatever_the_stamps(tmp_path):
    first = first_of(fixtures.pointed_at(tmp_path))
    assert (first["code"], first["node"], first["pid"], first["rank"]) == ("EJ0002", "10.0.0.4", 307, 7)
    assert first["fix"] == fix_of("EJ0002")


def test_torchruns_root_cause_block_wins_over_rank_0s_lost_peer(tmp_path):
    first = first_of(fixtures.torchrun_sigkill(tmp_path))
    # torch elastic's own line and the block below it, one burst: the entry names it (its time, host and rank)
    assert (first["code"], first["node"], first["pid"], first["rank"]) == ("TORCHRUN_SIGNAL", "node01", 12345, 3)
    assert first["time"] == "2024-06-18T10:21:36" and "dmesg" in first["fix"] and "(SIGKILL)" in first["message"]
    lines = (tmp_path / "train.log").read_text().splitlines()
    (tmp_path / "train.log").write_text("\n".join(line for line in lines if "failed (exitcode" not in line) + "\n")
    first = first_of(tmp_path)  # the block alone: its time, host and rank
    assert (first["code"], first["node"], first["pid"], first["rank"]) == ("TORCHRUN_SIGNAL", "node01", 12345, 3)
    assert first["time"] == "2024-06-18T10:21:36" and first["fix"] == fix_of("TORCHRUN_SIGNAL")


def test_a_ray_task_error_is_named_by_the_exception_it_wraps(tmp_path):
    first = first_of(fixtures.ray_task_error(tmp_path))
    assert (first["code"], first["node"], first["pid"], first["rank"]) == ("KeyError", "10.0.0.5", 4101, None)
    lines = (tmp_path / "job-driver-raysubmit_3.log").read_text().splitlines()[:-1]
    (tmp_path / "job-driver-raysubmit_3.log").write_text("\n".join(lines) + "\n")  # without the inner line
    first = first_of(tmp_path)
    assert (first["code"], first["pid"]) == ("KeyError", 4101) and first["fix"] == fix_of("RAY_TASK_ERROR")


def test_vllms_sleep_mode_assertion_is_named_and_the_oom_advice_avoids_it(tmp_path):
    first = first_of(fixtures.sleep_mode_assert(tmp_path))
    assert (first["code"], first["node"], first["pid"]) == ("SLEEP_MODE_ALLOC", "10.0.0.6", 5005)
    assert "PYTORCH_NPU_ALLOC_CONF" in first["fix"]
    for code in ("CUDA_OOM", "NPU_OOM"):
        assert "Do not" in fix_of(code) and "sleep mode" in fix_of(code)


def test_the_advice_names_the_right_knobs():
    assert "ACL_STREAM_TIMEOUT" in fix_of("507046") and "ACL_DEVICE_SYNC_TIMEOUT" in fix_of("507046")
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031" in fix_of("EJ0003")
    for code in ("HCCL_WATCHDOG", "EI0002"):
        assert "HCCL_ASYNC_ERROR_HANDLING=0" in fix_of(code) and "HCCL_EXEC_TIMEOUT" in fix_of(code)


# --- reading its own input ------------------------------------------------------------------------


def test_a_file_or_folder_it_cannot_read_is_named_and_exits_1(tmp_path, monkeypatch):
    base = Path(tempfile.mkdtemp(prefix="aftriage-"))  # root reads everything: the read runs as nobody
    try:
        write(base / "train.log", "step:1 - loss:0.5\n")
        write(base / "plog" / "plog-1_1.log", "EJ0002: [PID: 1] 2025-04-08-18:00:00.000.000 The network port is down\n")
        write(base / "secret" / "x.log", "")
        for path in (base, base / "plog"):
            path.chmod(0o755)
        (base / "train.log").chmod(0o644)
        (base / "plog" / "plog-1_1.log").chmod(0o640)  # as CANN writes them for HwHiAiUser
        (base / "secret").chmod(0o700)
        triage.fingerprints()  # read the table first, as the user that can
        root = os.geteuid() == 0
        if root:
            os.setegid(65534)
            os.seteuid(65534)
        try:
            result = triage.triage(base)
        finally:
            if root:
                os.seteuid(0)
                os.setegid(0)
        assert result.first is None and result.failed
        assert {path for path, _ in result.skipped} == {"plog/plog-1_1.log", "secret"}
        assert all(why == "Permission denied" for _, why in result.skipped)
        monkeypatch.setattr(triage, "triage", lambda logdir: result)
        cli_result = invoke("triage", str(base))
        assert cli_result.exit_code == 1 and "not read  plog/plog-1_1.log: Permission denied" in cli_result.output
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_growing_log_is_read_up_to_its_size_when_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(triage_scan, "BLOCK", 1024)
    log = write(tmp_path / "train.log", FORMATS["ray"](datetime(2025, 4, 8, 18, 30)) + "noise\n" * 1000)
    size = log.stat().st_size
    scan = triage_scan.FileScan(log, "train.log", None, None, triage_scan.Table(triage.fingerprints()))
    found = scan.findings()
    assert next(found).code == "RAY_WORKER_DIED"
    with open(log, "a") as f:  # the job keeps writing while triage reads
        f.write(FORMATS["ray"](datetime(2025, 4, 8, 18, 31)) * 10)
    assert list(found) == [] and scan.size == size


# --- real Ray jobs, each in a network namespace of its own ----------------------------------------

OOM_JOB = textwrap.dedent(
    """
    import os, sys, time
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class Hog:  # holds more and more host memory until Ray's memory monitor kills it
        def grow(self):
            with open("hog", "w") as f:
                f.write(str(os.getpid()))
            chunks = []
            while True:
                chunks.append(bytearray(64 << 20))
                time.sleep(0.05)

    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])
    try:
        ray.get(Hog.remote().grow.remote(), timeout=240)
    except ray.exceptions.GetTimeoutError:
        sys.exit(4)
    except Exception as e:
        print("driver saw", type(e).__name__, file=sys.stderr)
        sys.exit(3)
    """
)

CLEAN_JOB = textwrap.dedent(
    """
    import sys
    import ray

    @ray.remote(num_cpus=0)
    class Worker:
        def step(self, i):
            return i * i

    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])
    workers = [Worker.remote() for _ in range(4)]
    print(sum(ray.get([w.step.remote(i) for i, w in enumerate(workers)])))
    for w in workers:
        ray.kill(w)
    ray.shutdown()
    """
)


def run_in_netns(work: Path, script: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """Run a Ray job script under `unshare -n` (only `lo`, brought up), its Ray folder in pytest's temp dir."""
    pytest.importorskip("ray")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip for a network namespace")
    (work / "job.py").write_text(script)
    ray_dir = work / "ray"
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" job.py "$1"', sys.executable, str(ray_dir)],
        cwd=work,
        env=environ | env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 and "unshare" in proc.stderr and "Operation not permitted" in proc.stderr:
        pytest.skip("no permission for a network namespace here")
    return proc, ray_dir / "session_latest" / "logs"


@pytest.mark.slow
def test_a_real_ray_actor_killed_by_the_memory_monitor_is_named_out_of_memory(short_tmp):
    threshold = {"RAY_memory_usage_threshold": "0.05", "RAY_memory_monitor_refresh_ms": "50"}
    proc, logs = run_in_netns(short_tmp, OOM_JOB, threshold)
    assert proc.returncode == 3 and "OutOfMemoryError" in proc.stderr, proc.stderr[-2000:]
    code, data = run_json(logs)
    assert code == 1 and data["first"]["code"] == "RAY_OOM", data
    assert data["first"]["node"] == "127.0.0.1" and data["skipped"] == []
    assert data["first"]["pid"] == int((logs.parents[2] / "hog").read_text())  # the killed worker's
    assert "host memory" in data["first"]["fix"]


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))  # Ray's teardown races: a worker-exit notice now and then
def test_a_real_clean_four_actor_ray_job_is_no_failure(short_tmp, attempt):
    proc, logs = run_in_netns(short_tmp, CLEAN_JOB, {})
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "14", proc.stderr[-2000:]
    code, data = run_json(logs)
    assert code == 0 and data["first"] is None and data["skipped"] == [], data


@pytest.mark.slow
def test_a_real_ray_job_started_with_an_npu_resource_and_no_acl_is_no_failure(short_tmp):
    """Ray's NPU-type probe logs the exception of its `import acl` and goes on: the driver's output says
    ERROR with a traceback, and triage of that output and the session's logs finds no failure."""
    own_dir = "ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])"  # the job's own Ray folder
    script = CLEAN_JOB.replace(own_dir, own_dir.replace("num_cpus=1,", 'num_cpus=1, resources={"NPU": 1},'))
    assert 'resources={"NPU": 1}' in script
    proc, logs = run_in_netns(short_tmp, script, {})
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "14", proc.stderr[-2000:]
    if "Failed to detect NPU type." not in proc.stderr:
        pytest.skip("Ray found its NPU type here (acl is importable): the probe logged nothing")
    assert "ModuleNotFoundError: No module named 'acl'" in proc.stderr
    (logs / "train.log").write_text(proc.stderr)  # the driver's output, as `ascendfix run` keeps it
    code, data = run_json(logs)
    assert code == 0 and data["first"] is None and data["skipped"] == [], data


# --- the profile's hints of the same audit ---------------------------------------------------------


def verl_batch_check():
    """verl 0.5.0's own `_validate_config` (its sdist), up to the real_train_batch_size assertion, as a function."""
    import ast
    import types

    from tests.upstream import verl_checkout

    source = (verl_checkout("0.5.0") / "verl" / "trainer" / "ppo" / "ray_trainer.py").read_text()
    tree = ast.parse(source)
    method = next(
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "_validate_config"
    )
    assert method.lineno == 391  # the lines the hint cites
    body = []
    for statement in method.body:
        body.append(statement)
        if isinstance(statement, ast.Assert) and "real_train_batch_size" in ast.unparse(statement.test):
            break
    function = ast.FunctionDef(name="check", args=method.args, body=body, decorator_list=[], returns=None)
    module = ast.Module(body=[function], type_ignores=[])
    ast.fix_missing_locations(module)
    space: dict = {}
    exec(compile(module, "ray_trainer.py", "exec"), space)

    def check(o: dict[str, int]) -> bool:
        ns = types.SimpleNamespace
        megatron = ns(
            tensor_model_parallel_size=o["tp"], pipeline_model_parallel_size=o["pp"], context_parallel_size=o["cp"]
        )
        actor = ns(strategy="megatron", megatron=megatron, ppo_micro_batch_size_per_gpu=o["micro"])
        config = ns(
            trainer=ns(n_gpus_per_node=8, nnodes=o["nodes"]),
            actor_rollout_ref=ns(actor=actor, rollout=ns(n=o["n"])),
            data=ns(train_batch_size=o["prompts"]),
        )
        try:
            space["check"](ns(config=config))
        except AssertionError:
            return False
        return True

    return check


def test_batch_size_hints_mirror_verls_megatron_check():
    from ascendfix.job.preflight import batch_size_hints

    verl_accepts = verl_batch_check()
    cases = [
        dict(prompts=p, n=n, nodes=nodes, tp=tp, pp=pp, cp=cp, micro=micro)
        for p in (128, 100, 96)
        for n in (16, 3)
        for nodes in (16, 3)
        for tp, pp, cp in ((4, 8, 1), (8, 1, 1), (4, 8, 3), (1, 1, 1))
        for micro in (1, 2)
    ]
    outcomes = set()
    for case in cases:
        overrides = {
            "data.train_batch_size": str(case["prompts"]),
            "actor_rollout_ref.rollout.n": str(case["n"]),
            "trainer.nnodes": str(case["nodes"]),
            "trainer.n_gpus_per_node": "8",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": str(case["tp"]),
            "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": str(case["pp"]),
            "actor_rollout_ref.actor.megatron.context_parallel_size": str(case["cp"]),
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": str(case["micro"]),
        }
        accepted = verl_accepts(case)
        assert (batch_size_hints(overrides) == []) == accepted, case
        outcomes.add(accepted)
    assert outcomes == {True, False}
    guide = dict(prompts=128, n=16, nodes=16, tp=4, pp=8, cp=1, micro=1)  # the guide's 3.3.2 job passes
    assert verl_accepts(guide)


def test_the_h100_deepep_hint_comes_with_the_flex_dispatcher_and_their_plus():
    from ascendfix.job import preflight
    from ascendfix.profile import manifest

    key = "+actor_rollout_ref.actor.megatron.override_transformer_config."
    hints = [h.override for h in manifest.load_profile("verl-796871d").hints if "cuda" in h.devices]
    deepep, flex = f"{key}moe_enable_deepep=True", f"{key}moe_token_dispatcher_type=flex"
    assert deepep in hints and flex in hints and hints.index(flex) == hints.index(deepep) + 1
    overrides = {deepep.lstrip("+").partition("=")[0]: "True"}  # as the script scan keys `+key=value`
    assert not preflight._hint_missing(deepep, overrides)  # set: not hinted again
    assert preflight._hint_missing(flex, overrides)  # DeepEP without flex: the flex hint still shows
