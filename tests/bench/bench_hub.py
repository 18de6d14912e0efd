"""How long one hub step (`plan`) takes for one policy as the fleet grows.

    .venv/bin/python tests/bench/bench_hub.py [--runs 7]

For 3, 10, 50 and 200 members (the policy allows up to 255 clusters; the acceptance
bound is 5 ms at 200) it times three states of one policy, each the median of `--runs`
runs of a loop of steps, with every optional policy field in use: per-cluster weights
with minWeight/maxWeight bounds, costRank, per-cluster replicaCapacity, StaticFirst
placement, a saturation signal and extra named metrics in every report, two routes
and a composed backend name per cluster (clusters[].backendRef),
and other policies' reservations on a quarter of the members:

- steady: every member reports, nobody is short, weights set (the common case);
- escalating: one member short, every other one a candidate with static room and
  NodePool headroom in two regions (candidates sorted, allocation, a traffic step);
- recovering: half the members hold raised floors with tiers, weights returning home,
  one member's report stale (release order, held members, the safePressure check).

Each member's spec hash (how the hub notices a member whose copy differs) is computed
once per parsed spec (`PolicySpec.member_hash`), as the agent keeps a policy's parsed
spec while its object is unchanged; the first step after a change pays it (about 50 us
a member). Not a test: pytest does not collect bench_*.py.
"""

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from functions.runtime.hub.decision import HubState  # noqa: E402
from functions.runtime.hub.fleet import (  # noqa: E402
    PHASE_ESCALATED,
    PHASE_RECOVERING,
    ClusterFleet,
    FleetStatus,
)
from functions.runtime.hub.plan import plan  # noqa: E402
from functions.runtime.shared.policy import PolicySpec, spec_hash  # noqa: E402
from functions.runtime.shared.report import Report  # noqa: E402

SIZES = (3, 10, 50, 200)
NOW = 1_800_000_000.0


def policy(members: int) -> PolicySpec:
    return PolicySpec.model_validate(
        {
            "mode": "auto",
            "workload": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "llm"},
            "clusters": [
                {
                    "name": f"m{i:02d}",
                    "region": f"region-{i % 4}",
                    "maxReplicas": 16,
                    "nodePools": ["h100", "a100"],
                    "minWeight": 0,
                    "maxWeight": 60,
                    "costRank": i % 5,
                    # As compose-model-deployment names each cluster's backend.
                    "backendRef": f"llm-at-m{i:02d}",
                    **({"replicaCapacity": 12} if i % 3 == 0 else {}),
                    **({"weight": 100 // members} if i % 2 == 0 else {}),
                }
                for i in range(members)
            ],
            "placement": "StaticFirst",
            "signals": {
                "demand": "d",
                "pressure": "p",
                "latency": "l",
                "saturation": "s",
                "extra": [{"name": "waiting", "promql": "w"}, {"name": "kv", "promql": "k"}],
            },
            "saturationThreshold": 0.9,
            "capacity": {"replicaCapacity": 10},
            "latencySLO": 1.0,
            "route": {"name": "llm"},
            "traffic": {"routes": [{"name": "llm-internal", "namespace": "gw"}]},
        }
    )


def report(spec: PolicySpec, name: str, *, needed=0, ready=4, pressure=5.0, age=5.0) -> Report:
    return Report(
        time=NOW - age,
        spec_hash=spec_hash(spec, name),
        ready=ready,
        desired=ready,
        scheduled=ready,
        needed=needed,
        static_room=2,
        node_pool_headroom=4,
        safe_pressure=9.0,
        demand=pressure * ready,
        pressure=pressure,
        latency=0.4,
        saturation=min(1.0, pressure / 10),
        extra={"waiting": pressure * 2, "kv": 0.5},
    )


def states(members: int) -> dict[str, tuple[HubState, PolicySpec]]:
    spec = policy(members)
    names = spec.cluster_names
    share, extra = divmod(100, members)
    weights = {n: share + (1 if i < extra else 0) for i, n in enumerate(names)}
    steady_fleet = FleetStatus(clusters=tuple(ClusterFleet(n, weight=weights[n]) for n in names))
    steady = HubState("m00/agent", {n: report(spec, n) for n in names}, steady_fleet)

    short = {n: report(spec, n) for n in names}
    short[names[0]] = report(spec, names[0], needed=12, pressure=14.0)
    escalating_fleet = FleetStatus(
        phase=PHASE_ESCALATED,
        clusters=tuple(
            ClusterFleet(
                n,
                weight=weights[n],
                steady_weight=weights[n],
                short_since=NOW - 300 if n == names[0] else None,
            )
            for n in names
        ),
    )
    escalating = HubState("m00/agent", short, escalating_fleet)

    home_weight = max(0, weights[names[0]] - 30)
    recovering_clusters = [
        ClusterFleet(names[0], weight=home_weight, steady_weight=weights[names[0]])
    ]
    for i, n in enumerate(names[1:], start=1):
        raised = i <= members // 2
        recovering_clusters.append(
            ClusterFleet(
                n,
                floor=6 if raised else 0,
                tier=i if raised else None,
                base=4 if raised else 0,
                weight=weights[n] + (30 if i == 1 else 0),
                steady_weight=weights[n],
                last_step_at=NOW - 600,
            )
        )
    calm = {n: report(spec, n, pressure=3.0) for n in names}
    calm[names[-1]] = report(spec, names[-1], age=600)  # stale
    recovering = HubState(
        "m00/agent",
        calm,
        FleetStatus(
            phase=PHASE_RECOVERING,
            calm_since=NOW - 3600,
            clusters=tuple(recovering_clusters),
        ),
    )
    # Other policies' floors waiting for room on a quarter of the members.
    reserved = {n: 1 for n in names[::4]}
    return {
        "steady": (replace(steady, reserved=reserved), spec),
        "escalating": (replace(escalating, reserved=reserved), spec),
        "recovering": (replace(recovering, reserved=reserved), spec),
    }


def median_ms(state: HubState, spec: PolicySpec, runs: int, loops: int, clock) -> float:
    samples = []
    for _ in range(runs):
        start = clock()
        for _ in range(loops):
            plan(state, spec, NOW)
        samples.append((clock() - start) / loops * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="time the process's CPU (a shared, loaded machine) instead of the wall clock",
    )
    args = parser.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter
    kind = "CPU" if args.cpu else "wall"
    print(f"hub step per policy, median of {args.runs} runs (ms, {kind} time)")
    print(f"{'members':>8} {'steady':>10} {'escalating':>12} {'recovering':>12}")
    for members in SIZES:
        loops = max(5, 300 // members)
        row = {
            name: median_ms(state, spec, args.runs, loops, clock)
            for name, (state, spec) in states(members).items()
        }
        print(
            f"{members:>8} {row['steady']:>10.3f} {row['escalating']:>12.3f}"
            f" {row['recovering']:>12.3f}"
        )


if __name__ == "__main__":
    main()
