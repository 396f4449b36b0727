"""A verl-shaped Ray job for ``watch``'s tests: ranks named as verl names them, called rank by rank.

``python -m tests.watch_job ADDRESS FAULT [STEPS]`` connects to the cluster at ADDRESS and runs
STEPS steps, each a ``generate`` then an ``update`` (real gloo ``all_reduce`` with an hour's
timeout, as the guide's HCCL_EXEC_TIMEOUT) on three actors ``{prefix}WorkerDict_0:{rank}``, called
rank by rank from a ``TaskRunner`` actor (as verl's trainer calls them), which waits in ``ray.get``. At step
3 rank 1 does FAULT inside ``update``: ``block`` (waits forever on an event, outside any collective),
``stop`` (SIGSTOPs itself in its compute), ``busy`` (computes 12x as long as usual), ``none``. It
first prints the ranks' pids (``rank pids: P0 P1 P2``), for a test's stand-in ``npu-smi`` to list.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import timedelta

import ray

FAULT_STEP, FAULTY, RANKS = 3, 1, 3


def compute(seconds: float) -> int:
    """Burn CPU for ``seconds`` (the rank's real work)."""
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += sum(range(1000))
    return n


@ray.remote(num_cpus=0)
class WorkerDict:
    def __init__(self, rank: int, port: int) -> None:
        import torch.distributed as dist

        self.rank = rank
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=RANKS, timeout=timedelta(hours=1)
        )

    def getpid(self) -> int:
        return os.getpid()

    def generate(self, seconds: float) -> int:
        return compute(seconds)

    def update(self, step: int, seconds: float, fault: str) -> float:
        import torch
        import torch.distributed as dist

        if step == FAULT_STEP and self.rank == FAULTY:
            if fault == "block":
                threading.Event().wait()  # a dead-locked data loader, say
            elif fault == "stop":
                compute(0.2)
                os.kill(os.getpid(), signal.SIGSTOP)
            elif fault == "busy":
                seconds *= 12
        compute(seconds)
        t = torch.ones(4)
        dist.all_reduce(t)
        return float(t[0])


@ray.remote(num_cpus=0)
class TaskRunner:  # verl's trainer runs in an actor too, and waits in ray.get on the ranks' calls
    def __init__(self, port: int) -> None:
        self.workers = [WorkerDict.options(name=f"a1b2c3WorkerDict_0:{r}").remote(r, port) for r in range(RANKS)]
        ray.get([w.__ray_ready__.remote() for w in self.workers])

    def pids(self) -> list[int]:
        return ray.get([w.getpid.remote() for w in self.workers])

    def step(self, step: int, fault: str) -> None:
        ray.get([w.generate.remote(3.0 + step % 2) for w in self.workers])  # uneven phases
        ray.get([w.update.remote(step, 1.5, fault) for w in self.workers])


def main() -> None:
    address, fault = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    runner = TaskRunner.remote(int(os.environ.get("WATCH_JOB_PORT", "29533")))
    print("rank pids:", *ray.get(runner.pids.remote()), flush=True)  # a test's npu-smi lists them
    for step in range(1, steps + 1):
        ray.get(runner.step.remote(step, fault))
        print(f"step {step} done", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
