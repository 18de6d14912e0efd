"""How long a user waits on the fleet box: from `kubectl apply` of a ModelDeployment to
its engine workloads existing on every member it was placed on, through real Crossplane
core, our functions over mTLS and provider-kubernetes.

    .venv/bin/python tests/bench/bench_fleet_apply.py [--runs 5] [--replicas 4]

Prints the box's start-up time and the median (and each run) of apply → workloads on
every member, for a deployment of N replicas spread over two clusters (two members,
H100 and B200 pools as in examples/). Each run applies a new deployment and deletes it
afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from fleetbox.box import FleetBox, missing_tools  # noqa: E402
from fleetbox.wait import wait_for  # noqa: E402
from tests.e2e import claims  # noqa: E402
from tests.e2e import test_changes as scenario  # noqa: E402

WORKLOADS = {"Deployment", "LeaderWorkerSet", "PodCliqueSet"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=4)
    args = parser.parse_args()
    missing = missing_tools()
    if missing:
        print(f"missing tools {missing}: run 'bash hack/tools.sh'", file=sys.stderr)
        return 1
    box = FleetBox(members=(scenario.H100, scenario.B200))
    try:
        box.start()
        print(f"fleet box: control plane + 2 members started in {box.timings['start']:.1f} s")
        for cluster in (
            scenario._cluster("us-east-h100.yaml", scenario.H100),
            scenario._cluster("eu-west-b200.yaml", scenario.B200),
        ):
            claims.apply_document(box, cluster)
        seconds = []
        for run in range(args.runs):
            name = f"bench-{run}"
            began = time.monotonic()
            claims.apply_document(box, scenario._deployment(name, args.replicas, scenario.E2E_TIER))

            def everywhere(name=name):
                placed = scenario._placed(box, name)
                assert sum(placed.values()) == args.replicas, placed
                composed = claims.everything_composed_for(box, name, scenario.NAMESPACE)
                on = {m for m, s in composed if s["kind"] in WORKLOADS}
                assert on == set(placed), (on, placed)
                assert all(claims.remote_get(box, m, s) for m, s in composed)
                return True

            wait_for(f"{name} on every member", everywhere, 300)
            seconds.append(time.monotonic() - began)
            claims.delete(box, "modeldeployment", name, scenario.NAMESPACE)
        figures = ", ".join(f"{s:.1f}" for s in seconds)
        print(
            f"apply -> workloads on every member ({args.replicas} replicas, 2 clusters): "
            f"median {statistics.median(seconds):.1f} s over {len(seconds)} runs ({figures})"
        )
    finally:
        box.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
