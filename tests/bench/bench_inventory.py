"""How long one inventory step's computation (`compute_inventory`) takes as a member grows.

    .venv/bin/python tests/bench/bench_inventory.py [--runs 7]

For members of 50, 500 and 2000 GPU nodes (8 devices each, in fabrics of 32 nodes, one
ResourceSlice per node; two thirds of the nodes running one 8-GPU replica with its
ResourceClaim and pod, a few nodes unreachable or cordoned), prints the median of
`--runs` runs of one computation. Listing the objects from the API server is not
included: that is the API server's cost and the same for any reader. Not a test: pytest
does not collect bench_*.py.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from functions.common.contracts import LABEL_DEPLOYMENT, LABEL_ROLE, LABEL_SERVING  # noqa: E402
from functions.common.inventory import GPU_DRIVER, LABEL_FABRIC  # noqa: E402
from functions.runtime.agent.idle import Counters, IdleMemory  # noqa: E402
from functions.runtime.agent.inventory import MemberObjects, compute_inventory  # noqa: E402

SIZES = (50, 500, 2000)
NOW = 1_800_000_000.0


def member(nodes: int) -> tuple[MemberObjects, Counters]:
    node_objs, slices, claims, pods, counters = [], [], [], [], {}
    for i in range(nodes):
        name = f"gpu-{i:05d}"
        ready = i % 97 != 0
        node_objs.append(
            {
                "metadata": {"name": name, "labels": {LABEL_FABRIC: f"nvl-{i // 32}"}},
                "spec": {"unschedulable": i % 89 == 0},
                "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
            }
        )
        slices.append(
            {
                "spec": {
                    "driver": GPU_DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1},
                    "devices": [
                        {"name": f"gpu-{d}", "attributes": {"productName": {"string": "H100"}}}
                        for d in range(8)
                    ],
                }
            }
        )
        if i % 3:
            serving = f"model-{i % 40}-r{i}"
            claims.append(
                {
                    "metadata": {"namespace": "ml", "name": f"{serving}-gpu"},
                    "status": {
                        "allocation": {
                            "devices": {
                                "results": [
                                    {"driver": GPU_DRIVER, "pool": name, "device": f"gpu-{d}"}
                                    for d in range(8)
                                ]
                            }
                        }
                    },
                }
            )
            pods.append(
                {
                    "metadata": {
                        "namespace": "ml",
                        "name": serving,
                        "labels": {
                            LABEL_SERVING: serving,
                            LABEL_DEPLOYMENT: f"model-{i % 40}",
                            LABEL_ROLE: "Standalone",
                        },
                    },
                    "spec": {"nodeName": name},
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "resourceClaimStatuses": [
                            {"name": "gpu", "resourceClaimName": f"{serving}-gpu"}
                        ],
                    },
                }
            )
            counters[("ml", serving)] = float(i)
    return MemberObjects(node_objs, slices, claims, pods), Counters(counters)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    print(f"{'GPU nodes':>10} {'devices':>8} {'replicas':>9} {'median ms':>10}")
    for size in SIZES:
        objects, counters = member(size)
        memory = IdleMemory()
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            _, memory = compute_inventory(objects, counters, memory, NOW)
            times.append(time.perf_counter() - started)
        print(
            f"{size:>10} {size * 8:>8} {len(objects.pods):>9} "
            f"{statistics.median(times) * 1000:>10.1f}"
        )


if __name__ == "__main__":
    main()
