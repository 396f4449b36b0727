"""The watch's loop on Ray: attach, follow the jobs, probe each node, hand the samples to the detector.

Each poll reads the GCS's job table and each followed job's alive actors (Ray's ``ray._private.state``
accessor: it answers from the GCS itself, with or without the dashboard, and holds alive actors, not
tasks, so a poll's cost does not grow with the steps run), then runs :func:`probe.sample` once on
each node that has ranks (with ``npu-smi info`` where the detector asks for NPU use): a Ray task
pinned there with ``num_cpus=0`` (no resource the job asks for, no placement group). The watch's
own driver is not followed. Nothing here prints: events go to ``emit`` as plain dicts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from ascendfix.cluster import fanout
from ascendfix.cluster import wait as raywait
from ascendfix.cluster.watch import probe, rules

NAMESPACE = "ascendfix-watch"  # the watch's own driver: another watch does not follow it


@dataclass
class Outcome:
    """What a watch ended with: how many jobs it followed and the stalls it named."""

    jobs: int = 0
    stalls: int = 0

    @property
    def ok(self) -> bool:
        """No stall was named."""
        return not self.stalls


class Cluster:
    """The reads a poll makes of a connected Ray cluster."""

    def __init__(self, ray: ModuleType) -> None:
        from ray._private.state import state
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray.cloudpickle.register_pickle_by_value(probe)  # the nodes need not have ascendfix installed
        self.ray, self.state, self.affinity = ray, state, NodeAffinitySchedulingStrategy
        self.own_job = ray.get_runtime_context().get_job_id()
        self.task = ray.remote(num_cpus=0, max_retries=0)(probe.sample)
        self.pending: dict[str, object] = {}  # node id -> the probe still running there

    def jobs(self) -> list[dict]:
        """The jobs on the cluster but the watches' own: id, alive, driver pid, entrypoint."""
        from ray.core.generated import gcs_pb2

        accessor = self.state._connect_and_get_accessor()  # what state.job_table() reads, with the namespace
        table = accessor.get_job_table(skip_submission_job_info_field=True, skip_is_running_tasks_field=True)
        jobs = []
        for blob in table:
            entry = gcs_pb2.JobTableData.FromString(blob)  # type: ignore[attr-defined]  # protobuf makes it at import
            if entry.job_id.hex() == self.own_job or entry.config.ray_namespace == NAMESPACE:
                continue
            jobs.append(
                {
                    "job_id": entry.job_id.hex(),
                    "alive": not entry.is_dead,
                    "driver_pid": entry.driver_pid,
                    "entrypoint": entry.entrypoint,
                }
            )
        return jobs

    def actors(self, job_id: str) -> list[rules.Rank]:
        """The job's alive actors as ranks."""
        found = self.state.actor_table(None, job_id=self.ray.JobID.from_hex(job_id), actor_state_name="ALIVE")
        return [
            rules.Rank(
                a["Pid"], a["Address"]["IPAddress"], a["Address"]["NodeID"], a["Name"], job_id, a["ActorClassName"]
            )
            for a in found.values()
            if a.get("Pid")
        ]

    def probe(
        self, by_node: dict[str, list[int]], stacks: set[int], npu: set[int], timeout: float
    ) -> tuple[int, dict[int, dict]]:
        """Run :func:`probe.sample` on each node (one at a time per node), reading the NPUs where a pid of
        ``npu`` runs; the clock tick and what came back."""
        for node_id, pids in by_node.items():
            if node_id not in self.pending:
                how = self.affinity(node_id, soft=False)
                wanted = [p for p in pids if p in stacks]
                read_npu = any(p in npu for p in pids)
                self.pending[node_id] = self.task.options(scheduling_strategy=how).remote(pids, wanted, read_npu)
        refs = list(self.pending.values())
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
        seen, clk_tck = {}, 100
        for node_id, ref in list(self.pending.items()):
            if ref not in ready:
                continue
            del self.pending[node_id]
            try:
                answer = self.ray.get(ref)
            except Exception:  # a node that could not run the probe: its ranks are unknown this poll
                continue
            clk_tck = answer["clk_tck"]
            seen.update(answer["pids"])
        return clk_tck, seen


def follow(address: str | None, emit: Callable[[dict], None], poll_s: float = rules.POLL_S) -> Outcome:
    """Watch the cluster at ``address`` until the jobs it followed have ended; events to ``emit``."""
    ray = fanout.import_ray()
    raywait.connect(ray, address, NAMESPACE)
    try:
        return _loop(Cluster(ray), address or "auto", emit, poll_s)
    finally:
        ray.shutdown()


def _loop(cluster: Cluster, address: str, emit: Callable[[dict], None], poll_s: float) -> Outcome:
    detector = rules.Detector(poll_s)
    outcome, alive = Outcome(), {}
    emit({"event": "started", "address": address, "poll_s": poll_s, "time": rules.iso(time.time())})
    while True:
        began = time.monotonic()
        try:
            jobs = {j["job_id"]: j for j in cluster.jobs()}
        except Exception as e:  # the head went away: say so and end, never a traceback
            why = f"lost the cluster: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
            emit(
                {
                    "event": "ended",
                    "jobs": outcome.jobs,
                    "stalls": outcome.stalls,
                    "time": rules.iso(time.time()),
                    "error": why,
                }
            )
            return outcome
        for job_id, job in jobs.items():
            if job["alive"] and job_id not in alive:
                alive[job_id] = job
                outcome.jobs += 1
                emit(
                    {"event": "job", "job_id": job_id, "state": "running", **_who(job), "time": rules.iso(time.time())}
                )
        for job_id in [j for j in alive if not jobs.get(j, {}).get("alive")]:
            job = alive.pop(job_id)
            emit({"event": "job", "job_id": job_id, "state": "ended", **_who(job), "time": rules.iso(time.time())})
        if outcome.jobs and not alive:
            break
        try:
            ranks = {r.pid: r for job_id in alive for r in cluster.actors(job_id)}
        except Exception:  # a job that ended between the two reads: the next poll sees it
            time.sleep(poll_s)
            continue
        by_node: dict[str, list[int]] = {}
        for r in ranks.values():
            by_node.setdefault(r.node_id, []).append(r.pid)
        wait_s = max(poll_s, probe.DUMP_TIMEOUT_S + 2)
        clk_tck, seen = cluster.probe(by_node, detector.wants(), detector.wants_npu(), wait_s)
        samples = {
            pid: (ranks[pid], _sample(seen[pid]))
            for pid in ranks
            if pid in seen and not seen[pid].get("gone") and seen[pid]["state"] != "Z"
        }
        unknown = {pid for pid in ranks if pid not in seen}
        for event in detector.observe(time.time(), samples, clk_tck, unknown):
            outcome.stalls += event["event"] == "stall"
            emit(event)
        time.sleep(max(0.0, poll_s - (time.monotonic() - began)))
    emit({"event": "ended", "jobs": outcome.jobs, "stalls": outcome.stalls, "time": rules.iso(time.time())})
    return outcome


def _who(job: dict) -> dict:
    return {"driver_pid": job["driver_pid"], "entrypoint": job["entrypoint"][:300]}


def _sample(seen: dict) -> rules.Sample:
    stack = seen.get("stack")
    return rules.Sample(
        seen["title"],
        seen["state"],
        seen["ticks"],
        seen.get("wchan", ""),
        tuple(stack) if stack is not None else None,
        seen.get("stack_error", ""),
        seen.get("npu"),
    )
