"""Time ``ascendfix doctor --ray`` over 1, 2 and 4 local Ray nodes; print the ratios to one node.

Every node runs its command in parallel, so the time should grow far less than linearly
with the number of nodes (on a small machine the nodes still share its cores). Each node
is a raylet started on this machine with ``ray.cluster_utils.Cluster``; all are stopped at
the end. Uses ``doctor`` when this ascendfix has it, else ``status`` (same fan-out path).

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

from ascendfix import cluster  # noqa: E402
from ascendfix.cli import main  # noqa: E402


def timed(argv: list[str], address: str, repeat: int, nodes: int) -> float:
    """Median wall time of one fan-out over the cluster, checking every node answered."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        answers = cluster.run(argv, address, timeout=120)
        times.append(time.perf_counter() - start)
        missing = [a.label for a in answers if a.error]
        if len(answers) != nodes or missing:
            raise SystemExit(f"expected {nodes} answers, got {len(answers)}; no answer from {missing}")
    return statistics.median(times)


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from ray.cluster_utils import Cluster

    command = "doctor" if "doctor" in main.commands else "status"
    argv = [command, "--profile", "verl-796871d", "--device", "npu", "--json"]
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "env_vars": {"PYTHONPATH": str(REPO)}}
    c = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    results = {}
    try:
        for nodes in (1, 2, 4):
            while len(c.list_all_nodes()) < nodes:
                c.add_node(**small)
            c.wait_for_nodes()
            results[nodes] = timed(argv, c.address, args.repeat, nodes)
    finally:
        c.shutdown()
    print(f"ascendfix {' '.join(argv[:-1])} --ray, median of {args.repeat}")
    print(f"(all nodes share this machine's {os.cpu_count()} CPU(s); real nodes each bring their own)")
    print(f"{'nodes':>5}  {'seconds':>8}  {'ratio to 1 node':>15}  {'linear would be':>15}")
    for nodes, seconds in results.items():
        print(f"{nodes:>5}  {seconds:8.2f}  {seconds / results[1]:15.2f}  {nodes:15.2f}")


if __name__ == "__main__":
    main_()
