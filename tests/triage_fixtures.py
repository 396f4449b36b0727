"""Log folders for `ascendfix triage`, one per failure, written in the formats the stack prints.

The shapes follow ../shared UPSTREAM.md "Failure signatures of this stack" (Ray 2.49/2.60, torch_npu
2.7.1, CANN 8.3, torch elastic, gloo, the kernel); every value is made up.
"""

from __future__ import annotations

from pathlib import Path

CYAN, RESET = "\x1b[36m", "\x1b[0m"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def clean_ray_teardown(logs: Path) -> Path:
    """A 4-actor job that finished: Ray's INFO notices of the actors' deaths, nothing else."""
    lines = "".join(
        f"[2025-08-05 14:02:2{i},10{i} I 13859 13900] actor_manager.cc:236: received notification on actor, "
        f"state: DEAD, ip address: 10.0.0.2, port: 3482{i}, num_restarts: 0, death context type="
        f"ActorDiedErrorContext actor_id=5113115019{i} worker_id=9f9f6f75{i}\n"
        for i in range(4)
    )
    write(logs / "python-core-driver-01000000ffff_13859.log", lines)
    write(logs / "raylet.out", "[2025-08-05 14:02:20,000 I 800 800] (raylet) main.cc:1: raylet started\n")
    return logs


def ray_oom(logs: Path) -> Path:
    """Ray's memory monitor kills rank 5's actor: the death notice has no 'Error' in it."""
    write(
        logs / "job-driver-raysubmit_1.log",
        f"{CYAN}(TaskRunner pid=11069){RESET} step:1 - perf/cpu_memory_used_gb:465.8\n"
        "[2025-08-05 14:10:02,510 W 11069 11100] core_worker.cc:1100: The actor is dead because its worker "
        "process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the "
        "node running low on memory. Memory on the node (IP: 10.0.0.9, ID: 0c86) was 1900.2GB / 2000GB (0.95)\n",
    )
    return logs


def relayed_oom(logs: Path) -> Path:
    """verl's TaskRunner (on the head, 10.0.0.2) relays the OutOfMemoryError of a worker on 10.0.0.9, in Ray
    2.49's wording: 'Memory on the node (IP: …, ID: …) where the task (…, name=…, pid=N, memory used=…GB) was
    running was …' (node_manager.cc's OOM kill message)."""
    prefix = f"{CYAN}(TaskRunner pid=11069, ip=10.0.0.2){RESET} "
    write(
        logs / "job-driver-raysubmit_2.log",
        prefix
        + "Traceback (most recent call last):\n"
        + prefix
        + "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        + prefix
        + "Memory on the node (IP: 10.0.0.9, ID: 0c86) where the task (actor ID: 7c1e, name=WorkerDict."
        "update_actor, pid=4242, memory used=401.3GB) was running was 1900.2GB / 2000GB (0.950), which exceeds the "
        "memory usage threshold of 0.95. Ray killed this worker (ID: 9f9f) because it was the most recently "
        "scheduled task.\n",
    )
    return logs


def raylet_oom(logs: Path) -> Path:
    """The raylet's own count of the workers it killed, at node (ID, IP)."""
    write(
        logs / "raylet.out",
        "[2025-08-05 14:10:02,400 I 800 800] (raylet) main.cc:1: raylet started\n"
        "[2025-08-05 14:10:03,002 W 800 812] (raylet) node_manager.cc:3100: 1 Workers (tasks / actors) killed due "
        "to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 0c8694e7, IP: 10.0.0.11) "
        "over the last time period.\n",
    )
    return logs


def kernel_oom(logs: Path) -> Path:
    """A container's memory cgroup kills the trainer (collected `dmesg -T` in the node's folder), and a host's
    kern.log with its own host name."""
    write(
        logs / "node07" / "dmesg-T.txt",
        "[Tue Aug  5 14:09:58 2025] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0\n"
        "[Tue Aug  5 14:10:01 2025] Memory cgroup out of memory: Killed process 4101 (python) total-vm:9000kB, "
        "anon-rss:8000kB\n",
    )
    write(
        logs / "kern.log",
        "Aug  5 14:12:00 gpu-b08 kernel: [99.123456] Out of memory: Killed process 77 (python3) total-vm:1kB\n",
    )
    return logs


def verl_hccl_burst(logs: Path, cann_first: bool = False) -> Path:
    """verl's worker, relayed by Ray: RuntimeError, torch_npu's ERR02200 with RankID, then EJ0001 with the
    worker's pid (the relaying process's pid is the prefix's); or the CANN line first."""
    prefix = f"{CYAN}(WorkerDict pid=2100, ip=10.0.0.5){RESET} "
    err = "[ERROR] 2025-04-24-16:14:56 (PID:468348, Device:0, RankID:2) ERR02200 DIST call hccl api failed.\n"
    cann = (
        "EJ0001: [PID: 468348] 2025-04-24-16:14:56.101.202 Failed to initialize the HCCP process. Reason: Maybe "
        "the last training process is running.\n"
    )
    body = ["RuntimeError: create:torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:1 HCCL function error\n"]
    body += [cann, err] if cann_first else [err, cann]
    write(logs / "job-driver-raysubmit_2.log", "".join(prefix + line for line in body))
    return logs


def unschedulable(logs: Path, resources: str = "{CPU: 1, GPU: 1}") -> Path:
    """A job that hangs: the raylet cannot place its request, the autoscaler finds no node type."""
    write(
        logs / "raylet.out",
        "[2025-08-05 14:02:20,000 I 800 800] (raylet) main.cc:1: raylet started\n"
        "[2025-08-05 14:02:26,872 W 800 800] (raylet) main.cc:985: The lease with ID 0000000001000000 cannot be "
        f"scheduled right now. It requires {resources} for placement, however the cluster currently cannot provide "
        "the requested resources. The required resources may be added as autoscaling takes place or placement "
        "groups are scheduled.\n",
    )
    write(
        logs / "monitor.log",
        "2025-08-05 14:02:31,083\tINFO monitor.py:438 -- :event_summary:Error: No available node types can fulfill "
        "resource request {'CPU': 1.0, 'GPU': 1.0}. Add suitable node types to this cluster to resolve this issue.\n",
    )
    return logs


def plog_device_error_with_skew(logs: Path) -> Path:
    """Rank 51's operator fails on the device (node02's plog); ranks on node01, node03 and node04 time out on it
    after HCCL_EXEC_TIMEOUT, saying remote rank [51]; node04's clock is an hour slow, so its own 507048 and
    EI0002 carry the earliest stamps."""
    write(
        logs / "node02" / "ascend" / "log" / "debug" / "plog" / "plog-2201_20250408180000000.log",
        "[INFO] HCCL(2201,python):2025-04-08-18:00:00.000.001 [hccl_comm.cc:12] [2201]init start\n"
        "[ERROR] RUNTIME(2201,python):2025-04-08-18:07:19.001.002 [device_error_proc.cc:1066]2201 "
        "ProcessStarsCoreErrorInfo: report error module_type=5, module_name=EZ9999\n"
        "[ERROR] RUNTIME(2201,python):2025-04-08-18:07:19.001.300 [device_error_proc.cc:1100]2201 The extend info: "
        "errcode:(0x800000, 0x0, 0x0) errorStr: aivec error exception. fixp_error0 info: 0x5, fixp_error1 info: 0x0\n"
        "[ERROR] RUNTIME(2201,python):2025-04-08-18:07:19.002.000 [stream.cc:1200]2201 Kernel task happen error, "
        "retCode=0x31, [aicore exception].\n"
        "[ERROR] RUNTIME(2201,python):2025-04-08-18:07:19.003.000 [api_c.cc:1]2201 rtStreamSynchronize: "
        "ErrCode=507035, desc=[vector core exception], InnerCode=0x715002a, runtime result = 507035\n",
    )

    def victim(rank: int, pid: int, stamp: str) -> str:
        return (
            f"[rank{rank}]: [ERROR] {stamp[:19]} (PID:{pid}, Device:{rank % 8}, RankID:{rank}) ERR00100 PTA call "
            "acl api failed\n"
            f"[rank{rank}]: EI0002: [PID: {pid}] {stamp} The wait execution of the Notify register times out. "
            "Reason: The Notify register has not received the Notify record from remote rank: [51]. base "
            "information: [streamID:[1], taskID[8318285], tag[AllReduce_group_name_710]]\n"
        )

    write(logs / "node01" / "worker-aa-01000000-1301.err", victim(12, 1301, "2025-04-08-18:37:55.000.100"))
    write(logs / "node03" / "worker-bb-01000000-1303.err", victim(30, 1303, "2025-04-08-18:37:55.200.000"))
    write(
        logs / "node04" / "worker-cc-01000000-1304.err",
        "[rank40]: RuntimeError: npuSynchronizeDevice: AclrtSynchronizeDeviceWithTimeout, error code is 507048\n"
        "[rank40]: [ERROR] 2025-04-08-17:37:50 (PID:1304, Device:0, RankID:40) ERR00100 PTA call acl api failed\n"
        + "\n" * 40
        + victim(40, 1304, "2025-04-08-17:37:55.100.000"),
    )
    return logs


def pointed_at(logs: Path) -> Path:
    """Rank 3 times out waiting for rank 7 (dstRank[7]); rank 7's port went down, but its node's clock is fast."""
    write(
        logs / "10.0.0.3" / "worker-dd-01000000-303.err",
        "[rank3]: EI0006: [PID: 303] 2025-04-08-18:09:20.444.436 Getting socket times out. Reason: Remote Rank did "
        "not send the data in time. srcRank[3] dstRank[7]\n",
    )
    write(
        logs / "10.0.0.4" / "worker-ee-01000000-307.err",
        "[rank7]: RuntimeError: EJ0002: [PID: 307] 2025-04-08-18:15:19.902.311 The network port is down.\n",
    )
    return logs


def torchrun_sigkill(logs: Path) -> Path:
    """torchrun: rank 3 is SIGKILLed; rank 0, an unstamped line below a stamp, loses its gloo peer."""
    write(
        logs / "train.log",
        "[2024-06-18 10:21:30,000] torch.distributed.run: [WARNING] starting 4 processes\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "train.py", line 9, in <module>\n'
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer "
        "[10.0.0.1]:41234\n"
        "E0618 10:21:36.480000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) "
        "local_rank: 3 (pid: 12345) of binary: /usr/bin/python\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-06-18_10:21:36\n"
        "  host      : node01\n"
        "  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : -9 (pid: 12345)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 12345\n"
        "============================================================\n",
    )
    return logs


def ray_task_error(logs: Path) -> Path:
    """The driver re-raises a worker's KeyError wrapped in RayTaskError; the inner exception is nine lines below."""
    frames = '  File "/opt/verl/verl/single_controller/ray/base.py", line 600, in func\n    return getattr(x)\n'
    write(
        logs / "job-driver-raysubmit_3.log",
        "Traceback (most recent call last):\n"
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 64, in run_ppo\n'
        "ray.exceptions.RayTaskError(KeyError): ray::WorkerDict.actor_rollout_init_model() (pid=4101, ip=10.0.0.5, "
        "actor_id=7c1e, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f>)\n"
        + frames * 4
        + "KeyError: 'actor_rollout_ref.actor.megatron'\n",
    )
    return logs


def sleep_mode_assert(logs: Path) -> Path:
    """vllm's sleep-mode allocator with PYTORCH_NPU_ALLOC_CONF=expandable_segments:True."""
    prefix = f"{CYAN}(WorkerDict pid=5005, ip=10.0.0.6){RESET} "
    write(
        logs / "job-driver-raysubmit_4.log",
        "".join(
            prefix + line + "\n"
            for line in (
                "Traceback (most recent call last):",
                '  File "/vllm-ascend/vllm_ascend/device_allocator/camem.py", line 148, in __init__',
                '    assert "expandable_segments:True" not in conf, (',
                "AssertionError: Expandable segments are not compatible with memory pool. Please track "
                "https://github.com/pytorch/pytorch/issues/147851 for the latest updates.",
            )
        ),
    )
    return logs


RAY_NPU_PROBE = (
    "2025-08-05 14:02:20,193\tERROR npu.py:82 -- Failed to detect NPU type.\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/ray/_private/accelerators/npu.py", line 78, in '
    "get_current_node_accelerator_type\n"
    "    import acl\n"
    "ModuleNotFoundError: No module named 'acl'\n"
)


def ray_npu_probe(logs: Path, then: str = "") -> Path:
    """Ray's NPU-type probe without CANN's Python path, as ray.init with an NPU resource prints it (reproduced
    with Ray 2.60: logger.exception in ray/_private/accelerators/npu.py), then a job that started; ``then``
    follows it."""
    started = "2025-08-05 14:02:22,437\tINFO worker.py:2038 -- Started a local Ray instance.\n"
    write(logs / "train.log", RAY_NPU_PROBE + RAY_NPU_PROBE + started + then)
    return logs
