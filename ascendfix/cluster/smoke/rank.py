"""``ray smoke``'s ranks: one Ray actor per rank, running real ``torch.distributed`` collectives.

An actor inherits its node's environment, as the job's workers do, plus what the driver's
``runtime_env`` adds: HCCL's timeouts bounded by the phase, and ``RAY_LOCAL_RANK``, which picks the
device when ``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES`` (or its CUDA twin) keeps Ray from
narrowing the visible devices (as verl 0.5.0's ``Worker`` does: ``set_device(int(RAY_LOCAL_RANK))``).
Each op is checked for the right result and timed; a failing rank answers with the step it failed
in and, for HCCL, the first line carrying a CANN error code (``EI0006: ...``). torch is imported only
here, inside the actor.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import timedelta

ITERATIONS = 5
NOSET = ("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")
_CANN_CODE = re.compile(r"\bE[A-Z]\d{4}\b")


def hccl_error_line(text: str) -> str:
    """The first line of ``text`` carrying a CANN error code (``EI0006``, ``EJ0001``...), or ""."""
    return next((line.strip()[:300] for line in text.splitlines() if _CANN_CODE.search(line)), "")


def device_index(environ: dict | os._Environ) -> int:
    """The device this rank sets: ``RAY_LOCAL_RANK`` when a ``RAY_EXPERIMENTAL_NOSET_*`` flag is on, else 0
    (Ray narrowed the visible devices to the one it gave the actor)."""
    if any(environ.get(flag) for flag in NOSET):
        return int(environ.get("RAY_LOCAL_RANK", "0") or 0)
    return 0


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


def _forget_failed_join(dist: ModuleType) -> None:
    """After a failed ``init_process_group``: back to a clean slate, so the actor's next group meets its peers.

    torch names the default group's store keys by a counter it resets only in ``destroy_process_group``,
    which a group that never formed cannot reach; a counter left at 1 waits forever for keys its peers,
    at 0, never write.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
        return
    world = getattr(dist.distributed_c10d, "_world", None)
    if world is not None:
        world.group_count = 0


class Rank:
    """One rank of the smoke's collectives: a Ray actor (two threads, so ``where`` answers while it works)."""

    def __init__(self) -> None:
        self.phase = "starting"

    def where(self) -> str:
        """The step this rank is in (asked when it does not answer in time)."""
        return self.phase

    def ready(self, backend: str) -> bool:
        """Import what ``backend`` needs (torch, torch_npu) now, so a pair's clock starts with both ranks up."""
        try:
            self._setup(backend)
        except Exception:  # the pair itself says why
            pass
        return True

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's side: this node's IP and a port free here, for the others to meet at."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def run(self, spec: dict) -> dict:
        """Join the process group, run each ``[op, bytes]``, check its result, time it:
        ``{"results": [{"op", "bytes", "ok", "seconds"}...]}`` or ``{"error"}`` (with ``"late"`` when its imports
        took longer than ``join_within`` seconds, the peers' wait: it did not join)."""
        try:
            return self._run(spec)
        except Exception as e:  # the rank's own failure is its answer, with the step it failed in
            error = f"{self.phase}: {type(e).__name__}: {_first_line(e)}"
            code = hccl_error_line(str(e))
            return {"error": error + (f" [{code}]" if code and code not in error else "")}

    def _setup(self, backend: str) -> tuple[ModuleType, str]:
        self.phase = "import torch"
        import torch

        device = "cpu"
        if backend == "hccl":
            self.phase = "import torch_npu"
            import torch_npu  # registers the npu device (torch.npu is its torch_npu.npu) and hccl

            index = device_index(os.environ)
            torch_npu.npu.set_device(index)
            device = f"npu:{index}"
        elif backend == "nccl":
            self.phase = "set_device(cuda)"
            if not torch.cuda.is_available():
                raise RuntimeError("torch sees no CUDA device on this node (torch.cuda.is_available() is False)")
            index = device_index(os.environ)
            torch.cuda.set_device(index)
            device = f"cuda:{index}"
        return torch, device

    def _join(self, spec: dict) -> tuple[ModuleType, timedelta]:
        from datetime import timedelta

        import torch.distributed as dist

        backend, timeout = spec["backend"], timedelta(seconds=spec["timeout"])
        self.phase = f"init_process_group({backend}) at {spec['addr']}:{spec['port']}"
        init = f"tcp://{spec['addr']}:{spec['port']}"
        try:
            dist.init_process_group(
                backend, init_method=init, rank=spec["rank"], world_size=spec["world"], timeout=timeout
            )
        except Exception:
            _forget_failed_join(dist)
            raise
        return dist, timeout

    def _run(self, spec: dict) -> dict:
        start = time.monotonic()
        try:
            torch, device = self._setup(spec["backend"])
        except ImportError as e:
            module = self.phase.removeprefix("import ")
            return {"error": f"{module} is not importable on this node ({e}): the job needs it"}
        took = time.monotonic() - start
        if took > spec.get("join_within", took):  # the others gave up on it: it joins nothing
            return {
                "error": f"{self.phase}: took {took:.0f} s, its peers waited {spec['join_within']:.0f} s",
                "late": True,
            }
        dist, timeout = self._join(spec)
        try:
            if spec["backend"] == "gloo":
                self.phase = "monitored_barrier"
                dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
            results = [self._op(torch, dist, op, nbytes, spec, device) for op, nbytes in spec["ops"]]
            return {"results": results}
        finally:
            dist.destroy_process_group()

    def _op(self, torch: ModuleType, dist: ModuleType, op: str, nbytes: int, spec: dict, device: str) -> dict:
        rank, world = spec["rank"], spec["world"]
        self.phase = f"{op} {nbytes} bytes"
        f32 = {"dtype": torch.float32, "device": device}
        chunk = max(nbytes // 4 // world, 1)
        count = chunk * world
        if op == "all_reduce":
            count = max(nbytes // 4, 1)
            probe = torch.full((count,), float(rank + 1), **f32)
            dist.all_reduce(probe)
            good = bool(torch.all(probe == world * (world + 1) / 2).item())
            buffer = torch.zeros(count, **f32)
            args: tuple = (buffer,)
            call = dist.all_reduce
        elif op == "all_gather":
            mine, out = torch.full((chunk,), float(rank), **f32), torch.empty(count, **f32)
            call = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
            call(out, mine)
            good = bool(torch.equal(out, torch.arange(world, **f32).repeat_interleave(chunk)))
            args = (out, mine)
        elif op == "reduce_scatter":
            mine, out = torch.full((count,), float(rank + 1), **f32), torch.empty(chunk, **f32)
            call = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            call(out, mine)
            good = bool(torch.all(out == world * (world + 1) / 2).item())
            args = (out, mine)
        else:  # all_to_all: block j of rank i is i*world+j; rank r receives block r of every rank
            mine = torch.arange(world, **f32).add(rank * world).repeat_interleave(chunk)
            out = torch.empty(count, **f32)
            call = dist.all_to_all_single
            call(out, mine)
            good = bool(torch.equal(out, (torch.arange(world, **f32) * world + rank).repeat_interleave(chunk)))
            args = (out, mine)
        seconds = self._time(torch, device, lambda: call(*args))
        return {"op": op, "bytes": count * 4, "ok": good, "seconds": seconds}

    def _time(self, torch: ModuleType, device: str, once: Callable[[], object], best: bool = False) -> float:
        """Seconds per call of ``once``: the mean over the iterations, or the fastest one (``best``)."""

        def sync() -> None:
            if device.startswith("npu"):
                torch.npu.synchronize()
            elif device.startswith("cuda"):
                torch.cuda.synchronize()

        took = []
        sync()
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            once()
            if best:
                sync()
                took.append(time.perf_counter() - start)
                start = time.perf_counter()
        sync()
        return min(took) if best else (time.perf_counter() - start) / ITERATIONS

    def pair(self, spec: dict) -> dict:
        """One side of a two-rank link test: a small message, then ``bytes`` (larger than the interface's
        MTU) each way, timed: ``{"ok", "seconds", "bytes", "connect_s"}`` (the seconds ``init_process_group``
        took here) or ``{"error"}``."""
        try:
            torch, device = self._setup(spec["backend"])
            start = time.perf_counter()
            dist, _ = self._join({**spec, "world": 2})
            connect_s = time.perf_counter() - start
        except Exception as e:
            return {"error": f"{self.phase}: {type(e).__name__}: {_first_line(e)}"}
        try:
            peer = 1 - spec["rank"]
            small = torch.full((16,), 1.0, dtype=torch.float32, device=device)
            big = torch.full((max(spec["bytes"] // 4, 1),), float(spec["rank"]), dtype=torch.float32, device=device)

            def exchange(buffer: Any) -> None:  # a torch.Tensor
                if spec["rank"] == 0:
                    dist.send(buffer, peer)
                    dist.recv(buffer, peer)
                else:
                    dist.recv(buffer, peer)
                    dist.send(buffer, peer)

            self.phase = "send/recv 64 bytes"
            exchange(small)
            self.phase = f"send/recv {big.numel() * 4} bytes"
            seconds = self._time(torch, device, lambda: exchange(big), best=True) / 2  # one way, the least noise
            return {"ok": True, "seconds": seconds, "bytes": big.numel() * 4, "connect_s": connect_s}
        except Exception as e:
            return {"error": f"{self.phase}: {type(e).__name__}: {_first_line(e)}"}
        finally:
            dist.destroy_process_group()
