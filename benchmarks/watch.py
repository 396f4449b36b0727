"""The watch's CPU per poll and its detection latency at 4, 128 and 1,024 ranks; print them side by side.

A cluster of 1,024 real ranks does not fit this machine, so the polls are replayed: a verl-shaped run
(16 ranks a node; each step a 60 s ``generate``, busy, then a 30 s ``update``, busy for 25 s and then
quiet in ``all_reduce``; a 2 s poll) is fed to the detector exactly as ``follow`` feeds it, and at the
fault step rank 1 blocks outside the collective. Measured, per poll:

- the watch's own process: the detector's work, turning the GCS's answer for every alive actor into
  ranks (the real ``ActorTableData`` protos of N actors parsed by Ray's own accessor code), and Ray's
  client work to run one probe task per node and gather the answers (real tasks on a local Ray);
- each node's probe (its ranks' ``/proc`` read, 16 a node, in parallel on every node), real, on this
  machine's processes; and one ``py-spy dump`` of a real Python process, which a suspected stall costs
  once per rank, twice per stall;

and the detection latency: from the moment the last rank went quiet to the stall event, in the
replay's clock (the bound learned from the run plus the two stack samples), and in wall time that adds
each poll's work. Also the CPU of a poll after 10 and after 200 steps: it must not grow with the steps.

    python benchmarks/watch.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ascendfix.cluster.watch import probe, rules  # noqa: E402

PER_NODE = 16
POLL_S = rules.POLL_S
GEN_S, UPDATE_S, QUIET_S = 60.0, 30.0, 5.0
WAIT = ("all_reduce (torch/distributed/distributed_c10d.py:3252)", "WorkerDict.update_actor (verl/workers/x.py:9)")
BLOCKED = ("Event.wait (threading.py:629)", "WorkerDict.update_actor (verl/workers/x.py:7)")
BUSY = ("forward (verl/workers/x.py:40)", "WorkerDict.update_actor (verl/workers/x.py:5)")


def ranks(n: int) -> list[rules.Rank]:
    """N ranks named as verl names them, 16 a node."""
    return [
        rules.Rank(10_000 + r, f"10.0.{r // PER_NODE // 250}.{r // PER_NODE % 250 + 1}", f"{r // PER_NODE:056x}",
                   f"a1b2WorkerDict_{r // PER_NODE}:{r % PER_NODE}", "02000000", "WorkerDict")
        for r in range(n)
    ]  # fmt: skip


def replay(n: int, steps: int, fault: bool) -> dict:
    """Feed ``steps`` steps (the last one faulty when ``fault``) to a detector; its CPU per poll and what it said."""
    det, who = rules.Detector(POLL_S), ranks(n)
    ticks = [0] * n
    t, cpu, polls, stall, quiet_at = 0.0, 0.0, 0, None, None
    step_s = GEN_S + UPDATE_S + POLL_S
    for step in range(steps):
        begin = step * step_s
        bad = fault and step == steps - 1
        end = begin + (10 * step_s if bad else step_s)
        while t < end and stall is None:
            t += POLL_S
            into = t - begin
            samples = {}
            wanted = det.wants()
            for i, rank in enumerate(who):
                if into < GEN_S:
                    title, busy, stack = "ray::WorkerDict.generate_sequences", True, BUSY
                elif into < GEN_S + UPDATE_S:
                    blocked = bad and i == 1
                    busy = not blocked and into < GEN_S + UPDATE_S - QUIET_S
                    title = "ray::WorkerDict.update_actor"
                    stack = BLOCKED if blocked else (BUSY if busy else WAIT)
                    if bad and not busy and i != 1 and into >= GEN_S + UPDATE_S - QUIET_S:
                        busy = False  # the others wait for rank 1 for ever
                else:
                    title, busy, stack = "ray::WorkerDict", False, ("main_loop (ray/_private/worker.py:1)",)
                if bad and into >= GEN_S + UPDATE_S:  # the faulty step never ends
                    title, busy = "ray::WorkerDict.update_actor", False
                    stack = BLOCKED if i == 1 else WAIT
                ticks[i] += int(POLL_S * 100) if busy else 0
                give = stack if rank.pid in wanted else None
                samples[rank.pid] = (rank, rules.Sample(title, "S", ticks[i], "futex_wait_queue", give))
            if bad and quiet_at is None and into >= GEN_S + UPDATE_S - QUIET_S:
                quiet_at = t - POLL_S  # the last poll that saw a rank compute
            began = time.process_time()
            events = det.observe(t, samples)
            cpu += time.process_time() - began
            polls += 1
            stall = next((e for e in events if e["event"] == "stall"), stall)
            if stall is not None:
                stall = {**stall, "at": t}
    return {"cpu_per_poll": cpu / polls, "stall": stall, "quiet_at": quiet_at, "bound": det.bound("update_actor")}


def actor_parse_cpu(n: int) -> float:
    """CPU of turning N actors' ``ActorTableData`` (as the GCS sends them) into ranks, as ``follow`` reads them."""
    from ray._private.state import GlobalState
    from ray.core.generated import gcs_pb2

    blobs = []
    for rank in ranks(n):
        data = gcs_pb2.ActorTableData(
            actor_id=os.urandom(16), class_name="WorkerDict", name=rank.actor, job_id=bytes.fromhex(rank.job_id),
            state=gcs_pb2.ActorTableData.ALIVE, pid=rank.pid,
        )  # fmt: skip
        data.address.ip_address, data.address.node_id = rank.node_ip, bytes.fromhex(rank.node_id.ljust(56, "0"))
        blobs.append(data.SerializeToString())
    state = GlobalState()
    began = time.process_time()
    for _ in range(5):
        found = {}
        for blob in blobs:
            info = state._gen_actor_info(gcs_pb2.ActorTableData.FromString(blob))
            found[info["ActorID"]] = info
        [
            rules.Rank(a["Pid"], a["Address"]["IPAddress"], a["Address"]["NodeID"], a["Name"], "02000000", "W")
            for a in found.values()
        ]
    return (time.process_time() - began) / 5


def probe_cpu(pids: list[int]) -> float:
    """CPU of one node's probe reading its 16 ranks' /proc (real processes of this machine)."""
    began = time.process_time()
    for _ in range(20):
        probe.sample(pids, [])
    return (time.process_time() - began) / 20


def dump_s(pid: int) -> float | None:
    """Wall time of one ``py-spy dump --nonblocking`` of a real sleeping Python process (None: no py-spy)."""
    tool = probe.pyspy()
    if tool is None:
        return None
    began = time.perf_counter()
    for _ in range(3):
        probe.dump_stack(pid, tool)
    return (time.perf_counter() - began) / 3


def ray_cpu(nodes: list[int]) -> dict[int, float]:
    """The watch's CPU to run one probe per node and gather the answers (Ray's own client work), per poll:
    ``n`` probe tasks on a real local Ray (one node here, so they queue there as ``n`` nodes' would not)."""
    import tempfile

    import ray

    folder = tempfile.mkdtemp(prefix="afb-", dir="/tmp")
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=folder, logging_level="ERROR", log_to_driver=False)
    try:
        ray.cloudpickle.register_pickle_by_value(probe)
        task = ray.remote(num_cpus=0, max_retries=0)(probe.sample)
        pids = [os.getpid()] * PER_NODE
        ray.get([task.remote(pids, []) for _ in range(max(nodes))])  # the workers started
        cpu = {}
        for n in nodes:
            began = time.process_time()
            for _ in range(5):
                ray.get([task.remote(pids, []) for _ in range(n)])
            cpu[n] = (time.process_time() - began) / 5
        return cpu
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    sleepers = [
        subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]) for _ in range(PER_NODE)
    ]
    try:
        time.sleep(1)
        node_probe = probe_cpu([p.pid for p in sleepers])
        one_dump = dump_s(sleepers[0].pid)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    print(f"poll every {POLL_S:g} s; {PER_NODE} ranks a node; replayed steps of {GEN_S:g} s + {UPDATE_S:g} s")
    print(f"each node's probe ({PER_NODE} ranks' /proc): {node_probe * 1e3:.2f} ms CPU a poll, on every node at once")
    if one_dump is not None:
        print(
            f"one py-spy dump: {one_dump * 1e3:.0f} ms (a suspected stall: two per rank, "
            f"{probe.DUMPS_AT_ONCE} at a time on each node, every node at once)"
        )
    else:
        print("py-spy not installed here: the stack dumps are not timed (pip install py-spy)")
    print()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # bind loopback only
    counts = (4, 128, 1024)
    client = ray_cpu([-(-n // PER_NODE) for n in counts])
    head = f"{'ranks':>6} {'watch CPU/poll':>15} {'× 4 ranks':>10} {'share of a core':>16} "
    print(head + f"{'bound':>7} {'named after quiet':>18} {'in wall time':>13} {'culprit':>22}")
    base = None
    for n in counts:
        run = replay(n, steps=4, fault=True)
        own = run["cpu_per_poll"] + actor_parse_cpu(n) + client[-(-n // PER_NODE)]
        base = base or own
        stall = run["stall"]
        if stall is None:
            raise SystemExit(f"{n} ranks: no stall named")
        latency = stall["at"] - run["quiet_at"]
        sample_s = -(-PER_NODE // probe.DUMPS_AT_ONCE) * (one_dump or 0)  # one node's ranks, four at a time
        wall = latency + 2 * (sample_s + own)  # at most: both stack samples delay the polls after them
        culprit = ",".join(c["actor"] for c in stall["culprits"])
        print(
            f"{n:>6} {own * 1e3:>12.2f} ms {own / base:>9.1f}× {own / POLL_S:>15.2%} "
            f"{run['bound']:>5.1f} s {latency:>16.1f} s {wall:>11.1f} s {culprit:>22}"
        )
    print()
    early, late = (replay(128, steps, fault=False)["cpu_per_poll"] for steps in (10, 200))
    print(f"128 ranks, the detector's CPU a poll: {early * 1e3:.3f} ms after 10 steps, {late * 1e3:.3f} ms after 200 "
          f"({late / early:.2f}×: it does not grow with the steps)")  # fmt: skip
    if shutil.which("py-spy") is None and one_dump is None:
        print("note: without py-spy the stall is still named, from /proc alone")


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
