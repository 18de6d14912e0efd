"""How long compose-model-deployment takes on fleets of growing size.

    .venv/bin/python tests/bench/bench_placement.py [--runs 7] [--sizes 10x10,50x100]

For each size (clusters x replicas) the fleet has 4 node pools per cluster (H100, A100,
L40S, B200; different device profiles), one other deployment holding capacity on every
cluster, and half of the deployment's replicas already placed (its ModelReplicas are
both observed and required, as Crossplane sends them). It prints the median of `--runs`
runs of:

- placement: `place()` alone, on parsed inputs;
- RunFunction warm: request bytes -> RunFunction -> response bytes, on a function server
  that has seen the fleet before (its parse memo, keyed by uid and resourceVersion as
  the API server sets them, and the CEL caches are warm: the steady state of a running
  function, which sees the same fleet on every reconcile);
- RunFunction cold: the same on a fresh FunctionRunner with every cache cleared;
- cold, fresh process: the first RunFunction of a new Python process (the function's
  modules imported, as a server has them before its first request; nothing parsed,
  compiled or evaluated yet), one process per run;
- warm, no autoscaling: the same deployment without `autoscaling`. With it, every
  ModelReplica carries the full member list (the AdaptivePolicy contract), so the
  response grows with the square of the clusters used (at most 100: the AdaptivePolicy's
  member limit); this column shows what that list costs;
- floor: a do-nothing function (`response.to(req)`) on the same request bytes, i.e. the
  protobuf decode/encode every function pays.

Each is given as wall time and, after the bar, as process CPU time (the function's
worker thread included): on a shared, loaded machine the wall time of a call that hops
to a worker thread is mostly waiting for a core, so the ratios to the floor are taken
on CPU time, and always against the warm floor (the fresh-process floor is higher, so a
ratio against it would flatter the function). The load average is printed before and
after: above the machine's cores, even CPU time is inflated (cache misses, frequency).

Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import structlog

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from crossplane.function import response  # noqa: E402
from crossplane.function.proto.v1 import run_function_pb2 as fnv1  # noqa: E402

from functions.common import contracts  # noqa: E402
from functions.compose_model_deployment import cel_env  # noqa: E402
from functions.compose_model_deployment.fn import (  # noqa: E402
    REQUIRED_CLUSTERS,
    FunctionRunner,
)
from functions.compose_model_deployment.manifests import replica_key, replica_name  # noqa: E402
from functions.compose_model_deployment.model import (  # noqa: E402
    read_cluster,
    read_deployment,
    read_holding,
)
from functions.compose_model_deployment.placement import place  # noqa: E402
from tests.ledgers import with_ledgers  # noqa: E402

SIZES = ((10, 10), (50, 100), (200, 1000), (500, 10), (500, 1000))
POOLS = (
    ("h100", "NVIDIA H100 80GB HBM3", "Hopper", "80Gi", 8),
    ("a100", "NVIDIA A100-SXM4-80GB", "Ampere", "80Gi", 8),
    ("l40s", "NVIDIA L40S", "Ada Lovelace", "48Gi", 4),
    ("b200", "NVIDIA B200", "Blackwell", "180Gi", 8),
)
SELECTORS = (
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.nvidia.com"].architecture in ["Hopper", "Blackwell", "Ampere"]',
)


def fleet(clusters: int, replicas: int) -> list[dict]:
    nodes = max(2, replicas // clusters)
    return [
        {
            "apiVersion": contracts.API_GROUP_VERSION,
            "kind": contracts.KIND_INFERENCE_CLUSTER,
            "metadata": {
                "name": f"cluster-{i:03d}",
                "uid": f"uid-ic-{i}",
                "resourceVersion": "1",
                "labels": {"tier": "production"},
            },
            "spec": {
                "stack": "Standard",
                "region": f"region-{i % 7}",
                "providerConfigRef": {"name": f"cluster-{i:03d}"},
                "nodePools": [
                    {
                        "name": name,
                        "nodes": nodes,
                        "maxNodes": nodes * 2,
                        "nodeSelector": {"karpenter.sh/nodepool": name},
                        "devices": {
                            "driver": "gpu.nvidia.com",
                            "perNode": per_node,
                            "attributes": {
                                "productName": {"string": product},
                                "architecture": {"string": arch},
                            },
                            "capacity": {"memory": memory},
                        },
                        "fabrics": [{"name": "f0", "nodes": nodes}],
                    }
                    for name, product, arch, memory, per_node in POOLS
                ],
            },
        }
        for i in range(clusters)
    ]


def deployment_xr(replicas: int, *, autoscaling: bool = True) -> dict:
    request = {"name": "gpu", "count": 1, "selectors": [{"cel": s} for s in SELECTORS]}
    return {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_MODEL_DEPLOYMENT,
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
            "profile": "default",
            "template": {
                "spec": {
                    "clusterSelector": {"matchLabels": {"tier": "production"}},
                    "engines": [
                        {
                            "name": "vllm",
                            "type": "vllm",
                            "members": [
                                {
                                    "role": "Standalone",
                                    "nodeSelector": {"devices": [request]},
                                    "template": {
                                        "spec": {
                                            "containers": [
                                                {
                                                    "name": "engine",
                                                    "image": "vllm/vllm-openai:v0.11.0",
                                                    "args": ["--model", "x", "--port", "8000"],
                                                }
                                            ]
                                        }
                                    },
                                }
                            ],
                        }
                    ],
                }
            },
            **(
                {"autoscaling": {"mode": "shadow", "minReplicas": 1, "maxReplicas": 8}}
                if autoscaling
                else {}
            ),
        },
    }


def model_replica(
    deployment: str, namespace: str, cluster: str, pool: str, *, n: int, devices: int
):
    return {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_MODEL_REPLICA,
        "metadata": {
            "name": f"{deployment}-{cluster}",
            "namespace": namespace,
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "uid": f"uid-{namespace}-{deployment}-{cluster}",
            "resourceVersion": "1",
            "annotations": {"crossplane.io/composition-resource-name": replica_key(cluster)},
            "labels": {contracts.LABEL_DEPLOYMENT: deployment, contracts.LABEL_CLUSTER: cluster},
        },
        "spec": {
            "deployment": deployment,
            "cluster": {
                "name": cluster,
                "stack": "Standard",
                "providerConfigRef": {"name": cluster},
            },
            "nodePool": {"name": pool},
            "replicas": n,
            "definitionHash": "h",
            "source": {"uri": "hf://x"},
            "engines": [
                {
                    "name": "vllm",
                    "type": "vllm",
                    "members": [
                        {
                            "role": "Standalone",
                            "devices": [{"name": "gpu", "count": devices}],
                            "template": {
                                "spec": {"containers": [{"name": "engine", "image": "i"}]}
                            },
                        }
                    ],
                }
            ],
        },
        "status": {"readyReplicas": n},
    }


def scenario(clusters: int, replicas: int, *, autoscaling: bool = True):
    ics = fleet(clusters, replicas)
    xr = deployment_xr(replicas, autoscaling=autoscaling)
    half = replicas // 2
    # Where this function would have put them: an autoscaled deployment on at most the
    # AdaptivePolicy's member limit of clusters.
    spread = min(clusters, contracts.ADAPTIVE_POLICY_MAX_CLUSTERS) if autoscaling else clusters
    own = []
    for i in range(spread):
        n = half // spread + (1 if i < half % spread else 0)
        if n:
            mr = model_replica("llama", "ml", f"cluster-{i:03d}", "h100", n=n, devices=1)
            mr["metadata"]["name"] = replica_name(read_deployment(xr), f"cluster-{i:03d}")
            own.append(mr)
    others = [
        model_replica("other", "team-b", f"cluster-{i:03d}", "b200", n=2, devices=4)
        for i in range(clusters)
    ]
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for mr in own:
        req.observed.resources[
            mr["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        ].resource.update(mr)
    # What everyone holds arrives in the clusters' ledgers (compose-serving-stack's).
    for ic in with_ledgers(ics, own + others):
        req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(ic)
    return xr, ics, own + others, req.SerializeToString()


def median_ms(fn, runs: int) -> float:
    """Median wall milliseconds of `fn`."""
    return median_wall_and_cpu_ms(fn, runs)[0]


def median_wall_and_cpu_ms(fn, runs: int) -> tuple[float, float]:
    """Median wall and process-CPU milliseconds of `fn` (CPU counts the function's worker
    thread too, and is what a loaded machine distorts least)."""
    walls, cpus = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - start) * 1000)
        cpus.append((time.process_time() - start_cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def clear_caches() -> None:
    cel_env._compiled.cache_clear()
    cel_env.evaluate.cache_clear()
    cel_env.device_activation.cache_clear()


class DoNothing:
    async def RunFunction(self, req, _=None):
        return response.to(req)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _handler():
    loop = asyncio.new_event_loop()

    def handle(runner, payload: bytes) -> bytes:
        req = fnv1.RunFunctionRequest.FromString(payload)
        rsp = loop.run_until_complete(runner.RunFunction(req))
        return rsp.SerializeToString()

    return handle


def first_call(clusters: int, replicas: int, floor: bool) -> None:
    """In a fresh process: time the first call, print {"wall": ms, "cpu": ms}."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    *_, payload = scenario(clusters, replicas)
    handle = _handler()
    runner = DoNothing() if floor else FunctionRunner()  # a server builds it before serving
    start, start_cpu = time.perf_counter(), time.process_time()
    handle(runner, payload)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    print(json.dumps({"wall": wall * 1000, "cpu": cpu * 1000}))


def fresh_process_ms(clusters: int, replicas: int, runs: int, floor: bool = False):
    """Median wall and CPU ms of the first call in `runs` fresh processes."""
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, "--first-call", f"{clusters}x{replicas}"]
            + (["--floor"] if floor else []),
            check=True,
            capture_output=True,
            text=True,
        )
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return (
        statistics.median(s["wall"] for s in samples),
        statistics.median(s["cpu"] for s in samples),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--sizes",
        default=",".join(f"{c}x{r}" for c, r in SIZES),
        help="clusters x replicas, comma-separated",
    )
    parser.add_argument("--first-call", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_call:
        first_call(*(int(v) for v in args.first_call.split("x")), floor=args.floor)
        return
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    # The function logs each placement at debug; a benchmark prints only its table.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    handle = _handler()
    print(f"load average before: {loadavg()} ({os.cpu_count()} cores)")

    header = (
        f"{'clusters x replicas':>19} {'pools':>6} {'placed':>7} {'request KB':>10} "
        f"{'placement ms':>12} {'warm ms':>8} {'cold ms':>8} {'warm, no autoscaling ms':>23} "
        f"{'floor ms':>8} | {'cpu: warm':>9} {'cold':>7} {'fresh process':>13} "
        f"{'floor':>6} {'warm/floor':>10} {'cold/floor':>10} {'fresh/floor':>11} "
        f"{'response KB':>11}"
    )
    print(header)
    print("-" * len(header))
    for clusters, replicas in sizes:
        xr, ics, mrs, payload = scenario(clusters, replicas)
        deployment = read_deployment(xr)
        parsed_clusters = [read_cluster(ic) for ic in ics]
        holdings = [read_holding(mr) for mr in mrs]
        plan = place(deployment, parsed_clusters, holdings, replicas)
        assert plan.unplaceable == 0, plan.reason
        placement = median_ms(
            lambda d=deployment, c=parsed_clusters, h=holdings, r=replicas: place(d, c, h, r),
            args.runs,
        )
        runner = FunctionRunner()
        out = fnv1.RunFunctionResponse.FromString(handle(runner, payload))
        assert not [r for r in out.results if r.severity == fnv1.SEVERITY_FATAL]
        warm, warm_cpu = median_wall_and_cpu_ms(lambda r=runner, p=payload: handle(r, p), args.runs)

        def cold(p=payload):
            clear_caches()
            handle(FunctionRunner(), p)

        cold_ms, cold_cpu = median_wall_and_cpu_ms(cold, args.runs)
        *_, plain_payload = scenario(clusters, replicas, autoscaling=False)
        plain_runner = FunctionRunner()
        handle(plain_runner, plain_payload)
        no_autoscaling = median_ms(lambda r=plain_runner, p=plain_payload: handle(r, p), args.runs)
        floor, floor_cpu = median_wall_and_cpu_ms(
            lambda p=payload: handle(DoNothing(), p), args.runs
        )
        _, fresh_cpu = fresh_process_ms(clusters, replicas, args.runs)
        print(
            f"{f'{clusters} x {replicas}':>19} {clusters * len(POOLS):>6} {plan.placed:>7} "
            f"{len(payload) / 1024:>10.0f} {placement:>12.2f} {warm:>8.2f} {cold_ms:>8.2f} "
            f"{no_autoscaling:>23.2f} {floor:>8.2f} | {warm_cpu:>9.2f} {cold_cpu:>7.2f} "
            f"{fresh_cpu:>13.2f} {floor_cpu:>6.2f} {warm_cpu / floor_cpu:>10.1f} "
            f"{cold_cpu / floor_cpu:>10.1f} {fresh_cpu / floor_cpu:>11.1f} "
            f"{len(handle(runner, payload)) / 1024:>11.0f}",
            flush=True,
        )
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
