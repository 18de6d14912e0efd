"""What placing on CPU-only pools costs next to placing on GPU pools of the same fleet.

    .venv/bin/python tests/bench/bench_cpu_placement.py [--runs 7] [--sizes 10x10,100x100]

For each size (clusters x replicas) the fleet has 4 node pools per cluster, either all
GPU pools (8 devices per node) or all CPU-only pools (64 CPU, 256Gi per node, of four
sizes), and another deployment holds 2 replicas on every cluster. A CPU placement
re-expresses every CPU pool and holding in the deployment's slots before the same
planner runs (cpu.in_slots); this prints the median of `--runs` runs of `place()` for
each, in milliseconds, and the ratio.

Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from functions.compose_model_deployment.manifests import model_replica
from functions.compose_model_deployment.model import (
    read_cluster,
    read_deployment,
    read_holding,
)
from functions.compose_model_deployment.placement import place

GPU = 'device.attributes["gpu.nvidia.com"].productName == "H100"'


def fleet(clusters: int, kind: str) -> list:
    out = []
    for c in range(clusters):
        pools = []
        for p in range(4):
            pool = {"name": f"p{p}", "nodes": 4 + p, "maxNodes": 8 + 2 * p, "costRank": p}
            if kind == "cpu":
                pool.update(cpu=str(16 * (p + 1)), memory=f"{64 * (p + 1)}Gi")
            else:
                pool["devices"] = {
                    "driver": "gpu.nvidia.com",
                    "perNode": 8,
                    "attributes": {"productName": {"string": "H100"}},
                }
            pools.append(pool)
        out.append(
            read_cluster(
                {
                    "metadata": {"name": f"c{c:04d}", "labels": {"tier": "prod"}},
                    "spec": {
                        "region": "r",
                        "providerConfigRef": {"name": f"c{c:04d}"},
                        "nodePools": pools,
                    },
                }
            )
        )
    return out


def deployment(name: str, replicas: int, kind: str):
    selector = (
        {"cpu": "4", "memory": "16Gi"}
        if kind == "cpu"
        else {"devices": [{"name": "gpu", "count": 2, "selectors": [{"cel": GPU}]}]}
    )
    member = {"role": "Standalone", "nodeSelector": selector, "template": {}}
    return read_deployment(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "replicas": replicas,
                "source": {"uri": "hf://x/y"},
                "template": {
                    "spec": {"engines": [{"name": "e", "type": "vllm", "members": [member]}]}
                },
            },
        }
    )


def holdings(clusters: list, kind: str) -> list:
    other = deployment("other", 1, kind)
    out = []
    for cluster in clusters:
        manifest = model_replica(other, cluster, cluster.pools[0], 2, autoscaling=None)
        manifest["metadata"].update(namespace="ns", creationTimestamp="2026-01-01T00:00:00Z")
        out.append(read_holding(manifest))
    return out


def median_ms(clusters: int, replicas: int, kind: str, runs: int) -> float:
    fleet_ = fleet(clusters, kind)
    held = holdings(fleet_, kind)
    d = deployment("m", replicas, kind)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        plan = place(d, fleet_, held, replicas)
        times.append((time.perf_counter() - start) * 1000)
        assert plan.placed == replicas, plan.reason
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sizes", default="10x10,100x100,500x500")
    args = parser.parse_args()
    print(f"median of {args.runs} runs of place(), ms; 4 pools per cluster, 1 other holder")
    print(f"{'clusters x replicas':>20}  {'GPU pools':>10}  {'CPU pools':>10}  {'CPU/GPU':>8}")
    for size in args.sizes.split(","):
        clusters, replicas = (int(x) for x in size.split("x"))
        gpu = median_ms(clusters, replicas, "gpu", args.runs)
        cpu = median_ms(clusters, replicas, "cpu", args.runs)
        print(f"{size:>20}  {gpu:>10.1f}  {cpu:>10.1f}  {cpu / gpu:>8.2f}")


if __name__ == "__main__":
    main()
