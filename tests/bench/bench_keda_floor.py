"""How long a hub's floor takes to reach a workload through real KEDA and the HPA.

    .venv/bin/python tests/bench/bench_keda_floor.py [--runs 3]

A fleet box with the examples' two members (no examples applied) and the runtime on
both (hack/fleetbox/runtime.py: agents, scalers, KEDA operator and adapter, the HPA
controller in kube-controller-manager). One Deployment, AdaptivePolicy and ScaledObject
(as compose-model-replica writes them) on the first member; each run writes an intent
stamped with the live hub's term, one replica above the last, and times

- intent written → KEDA serves the floor (external.metrics.k8s.io, through the
  aggregation layer);
- intent written → the Deployment's spec.replicas at the floor (the HPA's decision).

Prints the median over `--runs` runs with every figure. Not a test: pytest does not
collect bench_*.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from fleetbox.box import FleetBox  # noqa: E402
from fleetbox.runtime import Runtime  # noqa: E402
from fleetbox.wait import wait_for  # noqa: E402
from tests.e2e import test_runtime_live as live  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    box = FleetBox(members=live.MEMBERS)
    runtime = None
    member, name = live.MEMBERS[0], "bench-floor"
    served: list[float] = []
    moved: list[float] = []
    try:
        box.start()
        runtime = Runtime(box, live.MEMBERS).start()
        box.kubectl(member, "create", "namespace", live.NAMESPACE)
        box.kubectl(
            member, "apply", "-f", "-", stdin=yaml.safe_dump_all(live.workload(name, member))
        )
        wait_for("KEDA's HPA active", lambda: live.hpa_ready(box, member, name), 180)
        term = live.one_hub(box)
        for run in range(args.runs):
            floor = run + 2
            began = time.monotonic()
            live.write_intent(box, member, name, floor, term)
            wait_for(
                "KEDA serves the floor",
                lambda f=floor: live.keda_metric(box, member, name) == f,
                120,
            )
            served.append(time.monotonic() - began)
            wait_for(
                "the workload at the floor",
                lambda f=floor: live.replicas(box, member, name) == f, 180,
            )  # fmt: skip
            moved.append(time.monotonic() - began)
            print(
                f"run {run + 1}: floor {floor}: served {served[-1]:.1f} s, moved {moved[-1]:.1f} s"
            )
    finally:
        if runtime is not None:
            runtime.close()
        box.close()
    for what, values in (
        ("intent → KEDA serves the floor", served),
        ("intent → workload at the floor (HPA)", moved),
    ):
        print(f"{what}: median {statistics.median(values):.1f} s over {len(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
