"""Time ``ascendfix doctor --ray`` and ``ascendfix ray wait`` over 1, 2 and 4 local Ray nodes; print the ratios.

Every node runs its command in parallel, so the time should grow far less than linearly
with the number of nodes (on a small machine the nodes still share its cores). Each node
is a raylet started on this machine with ``ray.cluster_utils.Cluster``, with the profile's
environment and 8 NPUs registered, bound to loopback; all are stopped at the end. ``ray wait`` is the whole command:
the count of arrived nodes, then every node's variables, ``ulimit -n``, NPUs and patch status.

    python benchmarks/cluster.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ascendfix.cluster import fanout  # noqa: E402
from ascendfix.cluster import wait as raywait  # noqa: E402
from ascendfix.job import launch  # noqa: E402
from ascendfix.profile import manifest, records  # noqa: E402


def timed(argv: list[str], address: str, repeat: int, nodes: int) -> float:
    """Median wall time of one fan-out over the cluster, checking every node answered."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        answers = fanout.run(argv, address, timeout=120)
        times.append(time.perf_counter() - start)
        missing = [a.label for a in answers if a.error]
        if len(answers) != nodes or missing:
            raise SystemExit(f"expected {nodes} answers, got {len(answers)}; no answer from {missing}")
    return statistics.median(times)


def timed_wait(profile: records.Profile, address: str, repeat: int, nodes: int) -> float:
    """Median wall time of ``ray wait --nodes N`` (arrival, then every node's view), checking all answered."""
    status = ["status", "--profile", profile.name, "--device", "npu", "--json"]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        arrived = raywait.wait(address, nodes, 8, "NPU", timeout=60)
        report = raywait.check(profile, "npu", address, arrived, 8, 120, status)
        times.append(time.perf_counter() - start)
        missing = [v.label for v in report.nodes if v.error]
        if not arrived.ready or len(report.nodes) != nodes or missing:
            raise SystemExit(f"ray wait: {arrived.line()}; no answer from {missing}")
    return statistics.median(times)


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every node on loopback; Ray reads it at import
    from ray.cluster_utils import Cluster

    argv = ["doctor", "--profile", "verl-796871d", "--device", "npu", "--json"]
    profile = manifest.load_profile("verl-796871d")
    site = {"HCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(REPO)}
    env = launch.job_environment(launch.resolve_env(profile, "npu", {}), site)
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "env_vars": env, "resources": {"NPU": 8}}
    c = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    fan_out, waits = {}, {}
    try:
        for nodes in (1, 2, 4):
            while len(c.list_all_nodes()) < nodes:
                c.add_node(**small)
            c.wait_for_nodes()
            fan_out[nodes] = timed(argv, c.address, args.repeat, nodes)
            waits[nodes] = timed_wait(profile, c.address, args.repeat, nodes)
    finally:
        c.shutdown()
    print(f"ascendfix {' '.join(argv[:-1])} --ray  and  ascendfix ray wait --nodes N, median of {args.repeat}")
    print(f"(all nodes share this machine's {os.cpu_count()} CPU(s); real nodes each bring their own)")
    heads = ("nodes", "doctor s", "ratio", "ray wait s", "ratio", "linear would be")
    print("  ".join(f"{h:>{w}}" for h, w in zip(heads, (5, 10, 6, 10, 6, 15), strict=True)))
    for nodes in fan_out:
        f, w = fan_out[nodes], waits[nodes]
        print(f"{nodes:>5}  {f:10.2f}  {f / fan_out[1]:6.2f}  {w:10.2f}  {w / waits[1]:6.2f}  {nodes:15.2f}")


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main_)
