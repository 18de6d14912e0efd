"""One RunFunction at the edges of the XRDs' bounds, per function (issue 20, class 1/3).

    .venv/bin/python tests/bench/bench_worst_case_runfunction.py [--runs 3]

Sizes, each the median of `--runs` calls of the function's own RunFunction in-process:

- compose-serving-stack with 1, 2, 4 and 8 MetricMappings at the XRD's bounds (64
  metrics x 8 `from` names of ~200 characters, 32 labels). One composes (~0.46 MB of
  collector config); from two on the ConfigMap is over the limits and the call is a
  fatal naming the mappings — the time is what it takes to find that out.
- compose-model-deployment placing 1,000 replicas over 50 clusters of 32 node pools of
  10,000 nodes each (the XRDs' maxima for pools and nodes).
- compose-model-replica: a leader with 63 worker nodes (the maximum) and 1,000 replicas.

Prints the result (composed / fatal) and the request size. Not a test: pytest does not
collect bench_*.py.
"""

import argparse
import asyncio
import copy
import statistics
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from crossplane.function.proto.v1 import run_function_pb2 as fnv1  # noqa: E402

from functions.compose_model_deployment import fn as deployment_fn  # noqa: E402
from functions.compose_model_replica import fn as replica_fn  # noqa: E402
from functions.compose_serving_stack import fn as stack_fn  # noqa: E402
from tests.unit.test_hostile_input import max_size_mapping  # noqa: E402

EXAMPLES = REPO / "examples"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _request(xr: dict, required: dict[str, list[dict]]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for key, items in required.items():
        req.required_resources[key].SetInParent()
        for item in items:
            req.required_resources[key].items.add().resource.update(item)
    return req


def _time(runner, req: fnv1.RunFunctionRequest, runs: int) -> tuple[float, str]:
    seconds = []
    outcome = ""
    for _ in range(runs):
        began = time.perf_counter()
        rsp = asyncio.run(runner.RunFunction(req))
        seconds.append(time.perf_counter() - began)
        fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        outcome = (
            f"fatal: {fatal[0][:90]}..." if fatal else f"{len(rsp.desired.resources)} composed"
        )
    return statistics.median(seconds), outcome


def serving_stack(runs: int) -> None:
    xr = _load(EXAMPLES / "inferenceclusters" / "us-east-h100.yaml")
    destination = _load(EXAMPLES / "telemetrydestinations" / "fleet.yaml")
    for count in (1, 2, 4, 8):
        req = _request(
            xr,
            {
                stack_fn.REQUIRED_MAPPINGS: [max_size_mapping(i) for i in range(count)],
                stack_fn.REQUIRED_DESTINATIONS: [destination],
                stack_fn.REQUIRED_CLUSTERS: [xr],
                stack_fn.REQUIRED_REPLICAS: [],
            },
        )
        seconds, outcome = _time(stack_fn.FunctionRunner(), req, runs)
        print(
            f"compose-serving-stack, {count} max-size MetricMappings "
            f"({req.ByteSize() / 1e6:.2f} MB request): {seconds:.2f} s; {outcome}"
        )


def model_deployment(runs: int) -> None:
    deployment = _load(EXAMPLES / "modeldeployments" / "llama-8b-vllm.yaml")
    deployment["spec"]["replicas"] = 1000
    base = _load(EXAMPLES / "inferenceclusters" / "us-east-h100.yaml")
    clusters = []
    for c in range(50):
        cluster = copy.deepcopy(base)
        cluster["metadata"]["name"] = f"cluster-{c:02d}"
        pool = cluster["spec"]["nodePools"][0]
        pools = []
        for p in range(32):
            extra = copy.deepcopy(pool)
            extra.update(name=f"pool-{p:02d}", nodes=10000, maxNodes=10000)
            pools.append(extra)
        cluster["spec"]["nodePools"] = pools
        clusters.append(cluster)
    req = _request(
        deployment,
        {deployment_fn.REQUIRED_CLUSTERS: clusters},
    )
    seconds, outcome = _time(deployment_fn.FunctionRunner(), req, runs)
    print(
        f"compose-model-deployment, 1,000 replicas over 50 clusters x 32 pools x 10,000 nodes "
        f"({req.ByteSize() / 1e6:.2f} MB request): {seconds:.2f} s; {outcome}"
    )


def model_replica(runs: int) -> None:
    xr = _load(REPO / "tests/unit/testdata/model_replica/inputs/leader-worker.yaml")
    xr["spec"]["replicas"] = 1000
    for member in xr["spec"]["engines"][0]["members"]:
        if member["role"] == "Leader":
            member["workerNodes"] = 63  # the XRD's maximum: 64-node gangs
    req = _request(xr, {})
    seconds, outcome = _time(replica_fn.FunctionRunner(), req, runs)
    print(
        f"compose-model-replica, leader + 63 workers, 1,000 replicas "
        f"({req.ByteSize() / 1e3:.1f} kB request): {seconds:.3f} s; {outcome}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    serving_stack(args.runs)
    model_deployment(args.runs)
    model_replica(args.runs)


if __name__ == "__main__":
    main()
