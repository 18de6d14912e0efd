"""What a rollout in progress adds to a reconcile: the fleet of bench_fleet_resync.py,
every ModelDeployment reconciled through the real compose-model-deployment over gRPC,
once settled (its last revision Complete) and once mid-rollout (a new revision given to
its first wave, the other clusters on the last good one).

    .venv/bin/python tests/bench/bench_rollout_resync.py [--runs 5] [--sizes 100x50,100x200]
    .venv/bin/python tests/bench/bench_rollout_resync.py --sample 40 --sizes 1000x200

Both states are the function's own: a deployment is reconciled once as the fleet lists it
(its ModelReplicas composed before, no status yet), and what the function answers — the
ModelDeployment's status (status.rollout, with the last good template) and its desired
ModelReplicas, each with its revision — becomes the next request's observed state, as
Crossplane would send it (the ModelReplicas as the API server lists them: owner
reference, managedFields, resource refs, status, tests/bench/bench_fleet_resync.py's
`as_listed`). That is the *settled* state. Then each deployment's engine image changes
(a new revision) and the settled state is reconciled once: the function starts the
rollout (status.rollout Progressing, wave 1 of 2 by default: one cluster on the new
revision) — that answer, fed back the same way, is the *rolling* state: the reconcile
that a wave waiting on its clusters repeats until it passes (the new revision is not
rolled on the wave's cluster yet, so the wave stays Pending).

The two states are then resynced alternately (`--runs` each, one after another, so load
drifts reach both) in the same function process, and it prints, per size, the median of
the function's CPU per reconcile and the median wall time of one for each state, and
the rolling/settled ratio: the
acceptance bound of issue #41 is a rolling reconcile within 10 % of a settled one. With
`--sample N` each resync reconciles N deployments spread evenly over the fleet.

Needs the rollout planner (functions/compose_model_deployment/rollout.py, issue #41's
core); it fails at import without it. Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from crossplane.function.proto.v1 import run_function_pb2 as fnv1  # noqa: E402
from google.protobuf import json_format  # noqa: E402

from functions.common import contracts  # noqa: E402
from functions.compose_model_deployment import rollout as planner  # noqa: E402
from tests.bench import unwind_on_sigterm  # noqa: E402
from tests.bench.bench_fleet_resync import (  # noqa: E402
    SIZES,
    Fleet,
    Function,
    as_listed,
    loadavg,
    reconcile,
    sampled,
)

NEW_IMAGE = "vllm/vllm-openai:v0.11.1"  # the fleet's deployments run v0.11.0


def _plain(message) -> dict:
    return json_format.MessageToDict(message)


def request(fleet: Fleet, xr: dict, replicas: list[dict]) -> fnv1.RunFunctionRequest:
    """The request Crossplane sends: the XR, its ModelReplicas observed, every cluster."""
    req = fnv1.RunFunctionRequest()
    req.CopyFrom(fleet.shared)
    req.meta.tag = xr["metadata"]["uid"]
    req.observed.composite.resource.update(xr)
    for body in replicas:
        key = body["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        req.observed.resources[key].resource.update(body)
    return req


def fed_back(
    function: Function, fleet: Fleet, xr: dict, replicas: list[dict]
) -> tuple[dict, list[dict]]:
    """One reconcile of `xr` over `replicas`, and what Crossplane would observe next: the
    XR with the status the function wrote, and the desired ModelReplicas as listed, every
    replica Ready (the model serves: a rollout has something to protect)."""
    rsp = function.stub.RunFunction(request(fleet, xr, replicas), timeout=600)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert not fatal, fatal
    status = _plain(rsp.desired.composite.resource).get("status") or {}
    settled = {**copy.deepcopy(xr), "status": status}
    observed = []
    for key in sorted(rsp.desired.resources):
        body = _plain(rsp.desired.resources[key].resource)
        if body.get("kind") != contracts.KIND_MODEL_REPLICA:
            continue
        body.setdefault("metadata", {}).setdefault("namespace", xr["metadata"]["namespace"])
        cluster = body["spec"]["cluster"]["name"]
        # Settled: every replica it asks for is Ready (the model serves).
        listed = as_listed(body, xr, cluster, int(body["spec"].get("replicas", 0)))
        listed["metadata"]["annotations"]["crossplane.io/composition-resource-name"] = key
        # The revision the workload has rolled to, as compose-model-replica reports it:
        # the last good one everywhere (the new one has not rolled on its wave yet).
        previous = ((status.get("rollout") or {}).get("previous")) or ""
        if previous:
            listed["status"]["revision"] = previous
        observed.append(listed)
    return settled, observed


def with_new_image(xr: dict) -> dict:
    changed = copy.deepcopy(xr)
    for engine in changed["spec"]["template"]["spec"]["engines"]:
        for member in engine["members"]:
            for container in member["template"]["spec"]["containers"]:
                container["image"] = NEW_IMAGE
    return changed


def states(function: Function, fleet: Fleet, deployments: list[dict]) -> dict[str, list]:
    """(request per deployment) for the settled and the rolling state."""
    settled_requests, rolling_requests = [], []
    phases: dict[str, int] = {}
    for xr in deployments:
        own = fleet.replicas_of[xr["metadata"]["uid"]]
        settled_xr, settled_replicas = fed_back(function, fleet, xr, own)
        # Once more: the first answer may adopt the revision the replicas carried.
        settled_xr, settled_replicas = fed_back(function, fleet, settled_xr, settled_replicas)
        settled_requests.append(request(fleet, settled_xr, settled_replicas))
        changed = with_new_image(settled_xr)
        rolling_xr, rolling_replicas = fed_back(function, fleet, changed, settled_replicas)
        phase = (rolling_xr["status"].get("rollout") or {}).get("phase", "none")
        phases[phase] = phases.get(phase, 0) + 1
        rolling_requests.append(request(fleet, rolling_xr, rolling_replicas))
    # Every rolling deployment is mid-rollout, or the comparison says nothing.
    assert phases == {contracts.ROLLOUT_PHASE_PROGRESSING: len(deployments)}, phases
    return {"settled": settled_requests, "rolling": rolling_requests}


def resync(function: Function, requests: list) -> dict[str, float]:
    """One pass over the requests: the function's CPU per reconcile (its total over the
    pass, divided: /proc counts CPU in 10 ms ticks, too coarse for one call) and the
    median wall time of a call."""
    walls = []
    cpu_before = function.cpu_seconds()
    for req in requests:
        wall, _, _ = reconcile(function, req)
        walls.append(wall)
    cpu = function.cpu_seconds() - cpu_before
    return {
        "cpu_ms": cpu / len(requests) * 1000,
        "wall_ms": statistics.median(walls) * 1000,
    }


def main() -> None:
    unwind_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--sizes",
        default=",".join(f"{m}x{c}" for m, c in SIZES),
        help="deployments x clusters, comma-separated",
    )
    parser.add_argument("--sample", type=int, default=None)
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    print(
        f"reconcile cost, settled vs a rollout in progress (planner: {planner.__name__}); "
        f"median of {args.runs} resyncs per state, alternated"
    )
    print(
        f"{'deployments':>11} {'clusters':>8} {'calls':>5} {'settled cpu ms':>14} "
        f"{'rolling cpu ms':>14} {'ratio':>6} {'settled ms':>10} {'rolling ms':>10} "
        f"{'ratio':>6} {'req KiB s/r':>13}  load"
    )
    for deployments, cluster_count in sizes:
        fleet = Fleet(deployments, cluster_count)
        chosen = sampled(fleet, args.sample)
        load_before = loadavg()
        function = Function()
        try:
            built = time.perf_counter()
            requests = states(function, fleet, chosen)
            setup = time.perf_counter() - built
            runs: dict[str, list[dict[str, float]]] = {"settled": [], "rolling": []}
            for state in ("settled", "rolling"):  # warm: every parse memo filled
                resync(function, requests[state])
            for _ in range(args.runs):
                for state in ("settled", "rolling"):
                    runs[state].append(resync(function, requests[state]))
        finally:
            function.close()
        median = {
            state: {k: statistics.median(r[k] for r in got) for k in got[0]}
            for state, got in runs.items()
        }
        size = {
            state: statistics.median(r.ByteSize() for r in reqs) / 1024
            for state, reqs in requests.items()
        }
        settled, rolling = median["settled"], median["rolling"]
        print(
            f"{deployments:>11} {cluster_count:>8} {len(chosen):>5} "
            f"{settled['cpu_ms']:>14.1f} {rolling['cpu_ms']:>14.1f} "
            f"{rolling['cpu_ms'] / settled['cpu_ms']:>6.2f} "
            f"{settled['wall_ms']:>10.1f} {rolling['wall_ms']:>10.1f} "
            f"{rolling['wall_ms'] / settled['wall_ms']:>6.2f} "
            f"{size['settled']:>6.0f}/{size['rolling']:<6.0f}  "
            f"{load_before} -> {loadavg()} (setup {setup:.0f}s)",
            flush=True,
        )
        del fleet


if __name__ == "__main__":
    main()
