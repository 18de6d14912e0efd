"""How long a burst takes to get capacity on a helper, and calm to give it back, with
every part real (tests/e2e/floors.py): collectors scraping fake vLLM pages, our agents
(hub) and scalers, KEDA and the HPA, kube-scheduler and KWOK.

    .venv/bin/python tests/bench/bench_burst_floor.py [--runs 3]

A fleet box with the examples' two GPU members (us-east-1 home, eu-west-1 helper; the
examples' InferenceClusters' KWOK nodes, no claims applied) and the runtime on both, at
the box's agent intervals (hack/fleetbox/runtime.py AGENT_INTERVALS: signals read every
1 s from collectors scraping every 2 s, reports every 2 s, a hub step every 1 s). Each
run is a fresh namespace (a new Deployment, HPA and policy) with demand
one replica's worth (8/s, replicaCapacity 10), then a burst to 30/s; it times

- burst → the helper's raised floor Ready (its Deployment at the floor, every replica
  Ready: hub decision, scaler, KEDA, HPA, scheduler, KWOK);
- burst → the first traffic shift onto the helper (the route's weights);
- calm (demand back to 8/s) → the floor released (KEDA serves 0, traffic home);
- calm → the helper's extra replicas given back (the ScaledObject's HPA has no
  scale-down window of its own: the hub's calmFor is the wait).

Prints each run and the median over `--runs`. Not a test: pytest does not collect
bench_*.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from fleetbox.box import FleetBox  # noqa: E402
from fleetbox.runtime import Runtime  # noqa: E402
from fleetbox.wait import FleetBoxError, wait_for  # noqa: E402
from tests.e2e import floors  # noqa: E402

TIMEOUT = 300.0


def one_run(box, runtime, folder: Path, run: int) -> tuple[float, float, float, float]:
    burst = floors.Burst(box, runtime, folder / f"run-{run}", namespace=f"bench-burst-{run}")
    try:
        burst.start().settle()
        began = time.monotonic()
        burst.total = floors.BURST

        def ready():
            floor = burst.floor(floors.HELPER)
            replicas, ready = burst.replicas(floors.HELPER)
            return floor > 1 and replicas >= floor and ready >= floor

        wait_for("the helper's floor Ready", ready, TIMEOUT)
        raised = time.monotonic() - began
        wait_for("traffic on the helper", lambda: burst.weights()[floors.HELPER] > 0, TIMEOUT)
        shifted = time.monotonic() - began
        calm = time.monotonic()
        burst.total = floors.CALM

        def released():
            return (
                burst.floor(floors.HELPER) == 0
                and burst.keda_floor(floors.HELPER) == 0.0
                and burst.weights()[floors.HELPER] == 0
            )

        wait_for("the floor released", released, TIMEOUT)
        release = time.monotonic() - calm
        wait_for(
            "the helper's extra replicas given back",
            lambda: burst.replicas(floors.HELPER)[0] == 1,
            TIMEOUT,
        )
        return raised, shifted, release, time.monotonic() - calm
    except FleetBoxError:
        print(burst.summary())
        raise
    finally:
        burst.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    box = FleetBox(members=floors.MEMBERS, gpu=floors.MEMBERS)
    runtime = None
    figures: list[tuple[float, float, float, float]] = []
    try:
        box.start()
        runtime = Runtime(box, floors.MEMBERS).start()
        with tempfile.TemporaryDirectory() as folder:
            for run in range(args.runs):
                figures.append(one_run(box, runtime, Path(folder), run))
                raised, shifted, released, given_back = figures[-1]
                print(
                    f"run {run + 1}: burst → helper floor Ready {raised:.1f} s, "
                    f"→ traffic shifted {shifted:.1f} s; calm → floor released {released:.1f} s, "
                    f"→ replicas given back {given_back:.1f} s",
                    flush=True,
                )
    finally:
        if runtime is not None:
            runtime.close()
        box.close()
    for index, what in enumerate(
        (
            "burst → helper's raised floor Ready",
            "burst → first traffic shift to the helper",
            "calm → floor released and traffic home",
            "calm → the helper's extra replicas given back (the HPA at its minimum)",
        )
    ):
        values = [f[index] for f in figures]
        print(
            f"{what}: median {statistics.median(values):.1f} s over {len(values)} runs "
            f"(2 members, floor step 2, demand 8/s → 30/s at 10/s per replica)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
