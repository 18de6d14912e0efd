"""A full resync of the control plane: every ModelDeployment reconciled once, through
the real compose-model-deployment over gRPC, with the required resources Crossplane
would send it.

    .venv/bin/python tests/bench/bench_fleet_resync.py [--runs 3] [--sizes 100x50,1000x200]
    .venv/bin/python tests/bench/bench_fleet_resync.py --full [--sample 40]

The default is quick (100 deployments over 50 and 200 clusters); `--full` runs the
issue's sizes: 100, 1,000 and 5,000 deployments over 50 and 200 clusters.

Each size is M ModelDeployments (1-20 replicas each, seeded) across C InferenceClusters
(four GPU pools each, sized so the fleet fits with room to spare). The fleet's
ModelReplicas are the ones compose-model-deployment composes (manifests.model_replica,
with the autoscaling member list) as the API server lists them: with an owner reference,
managedFields, resource refs and status conditions (Crossplane strips none of it), for
a steady-state placement: each deployment on up to three clusters. A reconcile request
carries what the function asks for: its ModelDeployment, its own ModelReplicas as
observed resources, and as required resources every InferenceCluster, each with the
capacity ledger compose-serving-stack writes into its status from the ModelReplicas
that target it (compose_serving_stack/ledger.py, run here on the fleet's ModelReplicas;
tests/ledgers.py). Before the ledger (#33) the function also asked for every
ModelReplica in the fleet: 924 ms per reconcile and an 89 MiB request at 5,000.

The function runs as Crossplane runs it (`python -m
functions.compose_model_deployment.main --insecure`, our own default limits); the request
size is then compared with the limits:

- the SDK's server default (crossplane-function-sdk-python, cli.py): receive and send
  4 MiB (`--max-recv-message-size` / MAX_RECV_MESSAGE_SIZE, in MB) — what our functions
  used before;
- ours (functions/common/sdk.py MAX_RECV_MESSAGE_MB / MAX_SEND_MESSAGE_MB): receive
  256 MiB, send 4 MiB;
- Crossplane v2.2.1 (internal/xfn/function_runner.go) dials with grpc-go defaults: it
  sends up to math.MaxInt32 and receives responses up to 4 MiB, and has no flag to
  change either.

A resync is M calls, one after another (Crossplane's reconcilers would run a few at a
time; one at a time shows the per-reconcile cost). It prints, per size, the median of
`--runs` resyncs of: wall time, CPU of the function per reconcile (median over calls),
request and response bytes, and the function's RSS at the end (peak, VmHWM). The first
call of a fresh function parses the whole fleet (its parse memo is empty) and is shown
apart: its wall time and CPU (it reads and replays every cluster's ledger once). With
`--sample N` each resync reconciles N deployments spread evenly over the M, and the
resync's wall time is extrapolated to M and marked `~`; per-reconcile figures are the
sample's medians. `--full` resyncs every deployment (no sample). The load average is
printed before and after each size, and the resync's CPU (the function's, all calls).

Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from crossplane.function.proto.v1 import run_function_pb2 as fnv1  # noqa: E402
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1  # noqa: E402

from functions.common import contracts  # noqa: E402
from functions.common.sdk import MAX_RECV_MESSAGE_MB, MAX_SEND_MESSAGE_MB  # noqa: E402
from functions.common.structs import struct_bytes  # noqa: E402
from functions.compose_model_deployment.fn import REQUIRED_CLUSTERS  # noqa: E402
from functions.compose_model_deployment.manifests import (  # noqa: E402
    autoscaling_spec,
    model_replica,
    replica_key,
)
from functions.compose_model_deployment.model import read_cluster, read_deployment  # noqa: E402
from tests.bench import unwind_on_sigterm  # noqa: E402
from tests.ledgers import with_ledgers  # noqa: E402
from tests.ports import free_port  # noqa: E402

MIB = 1024 * 1024
SDK_DEFAULT_LIMIT = 4 * MIB  # crossplane.function.cli.DEFAULT_MAX_RECV_MESSAGE_SIZE (MB)
CROSSPLANE_RESPONSE_LIMIT = 4 * MIB  # grpc-go defaultClientMaxReceiveMessageSize
OUR_LIMIT = MAX_RECV_MESSAGE_MB * MIB
SIZES = ((100, 50), (100, 200))
FULL_SIZES = ((100, 50), (100, 200), (1000, 50), (1000, 200), (5000, 50), (5000, 200))
POOLS = (
    ("h100", "NVIDIA H100 80GB HBM3", "Hopper", "80Gi", 8),
    ("a100", "NVIDIA A100-SXM4-80GB", "Ampere", "80Gi", 8),
    ("l40s", "NVIDIA L40S", "Ada Lovelace", "48Gi", 4),
    ("b200", "NVIDIA B200", "Blackwell", "180Gi", 8),
)
SELECTOR = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
SPREAD = 3  # clusters per deployment at most


def clusters(count: int, gpus_needed: int) -> list[dict]:
    per_pool_gpus = max(16, 2 * gpus_needed // (count * len(POOLS)))
    return [
        {
            "apiVersion": contracts.API_GROUP_VERSION,
            "kind": contracts.KIND_INFERENCE_CLUSTER,
            "metadata": {
                "name": f"cluster-{i:03d}",
                "uid": f"uid-ic-{i}",
                "resourceVersion": "1",
                "labels": {"fleet.example.com/tier": "production"},
            },
            "spec": {
                "stack": "Standard",
                "region": f"region-{i % 7}",
                "providerConfigRef": {"name": f"cluster-{i:03d}"},
                "nodePools": [
                    {
                        "name": name,
                        "nodes": -(-per_pool_gpus // per_node),
                        "maxNodes": 2 * -(-per_pool_gpus // per_node),
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
                        "fabrics": [{"name": "f0", "nodes": -(-per_pool_gpus // per_node)}],
                    }
                    for name, product, arch, memory, per_node in POOLS
                ],
            },
        }
        for i in range(count)
    ]


def deployment(index: int, replicas: int, gpus: int) -> dict:
    name = f"model-{index:05d}"
    return {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_MODEL_DEPLOYMENT,
        "metadata": {"name": name, "namespace": f"team-{index % 20:02d}", "uid": f"uid-{name}"},
        "spec": {
            "replicas": replicas,
            "source": {"uri": f"hf://org/{name}"},
            "profile": "default",
            "template": {
                "spec": {
                    "clusterSelector": {"matchLabels": {"fleet.example.com/tier": "production"}},
                    "engines": [
                        {
                            "name": "vllm",
                            "type": "vllm",
                            "members": [
                                {
                                    "role": "Standalone",
                                    "nodeSelector": {
                                        "devices": [
                                            {
                                                "name": "gpu",
                                                "count": gpus,
                                                "selectors": [{"cel": SELECTOR}],
                                            }
                                        ]
                                    },
                                    "template": {
                                        "spec": {
                                            "containers": [
                                                {
                                                    "name": "engine",
                                                    "image": "vllm/vllm-openai:v0.11.0",
                                                    "args": ["--model", f"org/{name}"],
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
            "autoscaling": {
                "mode": "shadow",
                "minReplicas": 1,
                "maxReplicas": replicas * 2,
                "signals": {
                    "demand": f'sum(rate(modelplane_requests_total{{deployment="{name}"}}[2m]))'
                },
            },
        },
    }


def _fields_v1(value) -> dict:
    """A managedFields fieldsV1 set for a value: every key path, as the API server records
    it for a server-side apply (lists approximated by one entry)."""
    if isinstance(value, dict):
        return {f"f:{k}": _fields_v1(v) for k, v in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return {"k:{}": _fields_v1(value[0])}
    return {}


COMPOSED_KINDS = (
    "Namespace", "ConfigMap", "ResourceClaimTemplate", "Deployment", "Service", "Role",
    "RoleBinding", "ServiceAccount", "Deployment", "Service", "InferencePool", "HTTPRoute",
    "ScaledObject", "AdaptivePolicy",
)  # fmt: skip


def as_listed(body: dict, owner: dict, cluster: str, ready: int) -> dict:
    """A ModelReplica as Crossplane lists it from the API server for a required resource:
    the composed body plus what the API server and the XR's own reconcile add (owner
    reference, managedFields, resource refs, status conditions); none of it is stripped."""
    name = body["metadata"]["name"]
    body["metadata"].update(
        uid=f"uid-{name}",
        resourceVersion="184467",
        generation=1,
        creationTimestamp="2026-11-01T00:00:00Z",
        ownerReferences=[
            {
                "apiVersion": contracts.API_GROUP_VERSION,
                "kind": contracts.KIND_MODEL_DEPLOYMENT,
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        annotations={"crossplane.io/composition-resource-name": replica_key(cluster)},
    )
    body["spec"]["crossplane"] = {
        "compositionRef": {"name": "modelreplicas.modelplane.ai"},
        "resourceRefs": [
            {
                "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
                "kind": "Object",
                "name": f"{name}-{kind.lower()}-{i}",
            }
            for i, kind in enumerate(COMPOSED_KINDS)
        ],
    }
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": "2026-11-01T00:05:00Z",
            "observedGeneration": 1,
        }
        for kind, reason, message in (
            ("Ready", "Available", ""),
            ("Synced", "ReconcileSuccess", ""),
            ("Composed", "Composed", f"Composed 14 objects for cluster {cluster}"),
            ("WorkloadReady", "Available", f"{ready} of {ready} replicas ready on {cluster}"),
            ("Serving", "Serving", f"{ready} replicas serve on cluster {cluster}"),
        )
    ]
    body["status"] = {"readyReplicas": ready, "conditions": conditions}
    body["metadata"]["managedFields"] = [
        {
            "manager": "apiextensions.crossplane.io/composed/" + owner["metadata"]["uid"],
            "operation": "Apply",
            "apiVersion": contracts.API_GROUP_VERSION,
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(
                {"metadata": {"labels": body["metadata"].get("labels", {})}, "spec": body["spec"]}
            ),
            "time": "2026-11-01T00:00:00Z",
        },
        {
            "manager": "apiextensions.crossplane.io/composite",
            "operation": "Apply",
            "apiVersion": contracts.API_GROUP_VERSION,
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1({"status": body["status"]}),
            "subresource": "status",
            "time": "2026-11-01T00:05:00Z",
        },
    ]
    return body


class Fleet:
    """M deployments, C clusters, and the ModelReplicas of a steady-state placement."""

    def __init__(self, deployments: int, cluster_count: int, seed: int = 17) -> None:
        rng = random.Random(seed)
        shapes = [(rng.randint(1, 20), rng.choice((1, 1, 2, 4, 8))) for _ in range(deployments)]
        self.deployments = [deployment(i, r, g) for i, (r, g) in enumerate(shapes)]
        self.clusters = clusters(cluster_count, sum(r * g for r, g in shapes))
        parsed = [read_cluster(c) for c in self.clusters]
        self.replicas_of: dict[str, list[dict]] = {}
        for i, xr in enumerate(self.deployments):
            spec = read_deployment(xr)
            used = min(SPREAD, spec.replicas)
            targets = [
                (parsed[(i * SPREAD + k) % cluster_count], POOLS[i % len(POOLS)][0])
                for k in range(used)
            ]
            autoscaling = autoscaling_spec(spec, targets)
            own = []
            for k, (cluster, pool) in enumerate(targets):
                n = spec.replicas // used + (1 if k < spec.replicas % used else 0)
                body = model_replica(spec, cluster, cluster.pool(pool), n, autoscaling=autoscaling)
                body["metadata"]["namespace"] = spec.namespace
                body = as_listed(body, xr, cluster.name, n)
                own.append(body)
            self.replicas_of[xr["metadata"]["uid"]] = own
        self.all_replicas = [r for rs in self.replicas_of.values() for r in rs]
        # Each cluster as compose-serving-stack leaves it: with its capacity ledger.
        self.clusters = with_ledgers(self.clusters, self.all_replicas)
        for c in self.clusters:
            c["metadata"]["resourceVersion"] = "2"  # the ledger's write
        # The required resources are the same for every reconcile: build them once.
        shared = fnv1.RunFunctionRequest()
        for c in self.clusters:
            shared.required_resources[REQUIRED_CLUSTERS].items.add().resource.MergeFromString(
                struct_bytes(c)
            )
        self.shared = shared

    def request(self, xr: dict) -> fnv1.RunFunctionRequest:
        req = fnv1.RunFunctionRequest()
        req.CopyFrom(self.shared)
        req.meta.tag = xr["metadata"]["uid"]
        req.observed.composite.resource.update(xr)
        for body in self.replicas_of[xr["metadata"]["uid"]]:
            key = body["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
            req.observed.resources[key].resource.update(body)
        return req


class Function:
    """compose-model-deployment as its own process, the way Crossplane runs it."""

    def __init__(self, limit_mb: int | None = None) -> None:
        """`limit_mb` None: the function's own default limits, as a user runs it."""
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "functions.compose_model_deployment.main",
                "--insecure",
                "--address",
                f"127.0.0.1:{self.port}",
                *([f"--max-recv-message-size={limit_mb}"] if limit_mb else []),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        # The client is Crossplane's side: it sends without limit and receives 4 MiB.
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}",
            options=[
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", CROSSPLANE_RESPONSE_LIMIT),
            ],
        )
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.stub = grpcv1.FunctionRunnerServiceStub(self.channel)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> tuple[float, float]:
        status = dict(
            line.split(":", 1)
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines()
        )
        return (int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024)

    def close(self) -> None:
        self.channel.close()
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=30)


def reconcile(function: Function, req: fnv1.RunFunctionRequest) -> tuple[float, float, int]:
    """One call: wall seconds, the function's CPU seconds, response bytes."""
    cpu_before = function.cpu_seconds()
    began = time.perf_counter()
    rsp = function.stub.RunFunction(req, timeout=600)
    wall = time.perf_counter() - began
    cpu = function.cpu_seconds() - cpu_before
    assert not any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results), rsp.results
    return wall, cpu, rsp.ByteSize()


def sampled(fleet: Fleet, sample: int | None) -> list[dict]:
    """The deployments a resync reconciles: all, or `sample` spread evenly."""
    if not sample or sample >= len(fleet.deployments):
        return fleet.deployments
    step = len(fleet.deployments) / sample
    return [fleet.deployments[int(i * step)] for i in range(sample)]


def resync(function: Function, fleet: Fleet, sample: int | None) -> dict:
    deployments = sampled(fleet, sample)
    request_bytes, response_bytes, latencies, cpus = [], [], [], []
    cpu_start = function.cpu_seconds()
    build = 0.0  # building requests is the client's cost, not the resync's
    start = time.perf_counter()
    for xr in deployments:
        built = time.perf_counter()
        req = fleet.request(xr)
        request_bytes.append(req.ByteSize())
        build += time.perf_counter() - built
        wall, cpu, size = reconcile(function, req)
        latencies.append(wall)
        cpus.append(cpu)
        response_bytes.append(size)
    wall = time.perf_counter() - start - build
    total_cpu = function.cpu_seconds() - cpu_start
    return {
        "wall": wall * len(fleet.deployments) / len(deployments),
        "cpu": total_cpu * len(fleet.deployments) / len(deployments),
        "cpu_per_reconcile_ms": statistics.median(cpus) * 1000,
        "latency_ms": statistics.median(latencies) * 1000,
        "request": max(request_bytes),
        "response": max(response_bytes),
    }


def limit_check(fleet: Fleet, limit_mb: int | None) -> str:
    """What a function with a given receive limit says to the largest request."""
    function = Function(limit_mb)
    try:
        function.stub.RunFunction(fleet.request(fleet.deployments[0]), timeout=120)
        return "accepted"
    except grpc.RpcError as err:
        return f"{err.code().name}"
    finally:
        function.close()


EXACT_UP_TO = 2000  # deployments; past this the edge is extrapolated (building it takes minutes)


def largest_fitting(cluster_count: int, limit: int) -> tuple[int, int, int, int, bool]:
    """The most deployments whose reconcile request still fits `limit`, with the fleet's
    replicas, ModelReplicas and that request's bytes then, and whether it was found
    exactly. The request grows linearly with the deployments (the fleet's ModelReplicas):
    two fleets give the slope; an edge within EXACT_UP_TO is then walked to exactly,
    one past it is extrapolated from the slope."""
    sizes = {m: Fleet(m, cluster_count) for m in (200, 400)}
    bytes_at = {m: f.request(f.deployments[0]).ByteSize() for m, f in sizes.items()}
    replicas_at = {m: len(f.all_replicas) for m, f in sizes.items()}
    slope = (bytes_at[400] - bytes_at[200]) / 200
    guess = int(200 + (limit - bytes_at[200]) / slope)
    if guess > EXACT_UP_TO:
        per_deployment = (replicas_at[400] - replicas_at[200]) / 200
        objects = int(replicas_at[200] + (guess - 200) * per_deployment)
        replicas_per_deployment = sum(d["spec"]["replicas"] for d in sizes[400].deployments) / 400
        return guess, int(guess * replicas_per_deployment), objects, limit, False
    while True:  # the estimate is within a few deployments; walk to the exact edge
        fleet = Fleet(guess, cluster_count)
        size = fleet.request(fleet.deployments[0]).ByteSize()
        if size > limit:
            guess -= max(1, (size - limit) // int(slope) + 1)
            continue
        larger = Fleet(guess + 1, cluster_count)
        if larger.request(larger.deployments[0]).ByteSize() <= limit:
            guess += 1
            continue
        replicas = sum(d["spec"]["replicas"] for d in fleet.deployments)
        return guess, replicas, len(fleet.all_replicas), size, True


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    unwind_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-limit-search", action="store_true")
    parser.add_argument(
        "--sizes",
        default=",".join(f"{m}x{c}" for m, c in SIZES),
        help="deployments x clusters, comma-separated",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="the issue's sizes: " + ", ".join(f"{m}x{c}" for m, c in FULL_SIZES),
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        help="reconcile this many deployments per resync (spread evenly) and extrapolate "
        "the resync's wall time",
    )
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    if args.full:
        sizes = list(FULL_SIZES)
    print(
        f"full resync, median of {args.runs}; limits: the SDK's server default receives/sends "
        f"{SDK_DEFAULT_LIMIT // MIB} MiB, ours receives {MAX_RECV_MESSAGE_MB} MiB and sends "
        f"{MAX_SEND_MESSAGE_MB} MiB; Crossplane receives responses up to "
        f"{CROSSPLANE_RESPONSE_LIMIT // MIB} MiB and sends without limit"
    )
    header = (
        f"{'deployments':>11} {'clusters':>8} {'replicas':>8} {'MRs':>6} {'calls':>5} "
        f"{'resync s':>9} {'cpu s':>8} {'ms/call':>8} {'cpu ms':>7} {'first ms':>9} "
        f"{'first cpu':>9} "
        f"{'request':>9} {'response':>9} {'rss MiB':>8} {'peak MiB':>8}  "
        f"SDK default 4 MiB / ours  load"
    )
    print(header)
    for deployments, cluster_count in sizes:
        fleet = Fleet(deployments, cluster_count)
        load_before = loadavg()
        function = Function()
        try:
            first_wall, first_cpu, _ = reconcile(function, fleet.request(fleet.deployments[0]))
            runs = [resync(function, fleet, args.sample) for _ in range(args.runs)]
            rss, peak = function.rss_mib()
        finally:
            function.close()
        calls = len(sampled(fleet, args.sample))
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        replicas = sum(d["spec"]["replicas"] for d in fleet.deployments)
        verdict = (
            f"{limit_check(fleet, SDK_DEFAULT_LIMIT // MIB)} / accepted"
            if median["request"] > SDK_DEFAULT_LIMIT
            else "fits / fits"
        )
        extrapolated = "~" if calls < deployments else ""
        print(
            f"{deployments:>11} {cluster_count:>8} {replicas:>8} {len(fleet.all_replicas):>6} "
            f"{calls:>5} {extrapolated + format(median['wall'], '.1f'):>9} "
            f"{extrapolated + format(median['cpu'], '.1f'):>8} "
            f"{median['latency_ms']:>8.1f} {median['cpu_per_reconcile_ms']:>7.1f} "
            f"{first_wall * 1000:>9.0f} {first_cpu * 1000:>9.0f} "
            f"{median['request'] / MIB:>7.2f}Mi {median['response'] / 1024:>7.1f}Ki "
            f"{rss:>8.0f} {peak:>8.0f}  {verdict:<24}  {load_before} -> {loadavg()}",
            flush=True,
        )
        del fleet
    if args.no_limit_search:
        return
    for cluster_count in sorted({c for _, c in sizes}):
        for label, limit in (("the SDK's default", SDK_DEFAULT_LIMIT), ("ours", OUR_LIMIT)):
            most, replicas, objects, size, exact = largest_fitting(cluster_count, limit)
            print(
                f"across {cluster_count} clusters a request passes {label} "
                f"{limit // MIB} MiB after {'' if exact else '~'}{most} deployments "
                f"({replicas} replicas, {objects} ModelReplicas, {size / objects:.0f} bytes "
                f"each{'' if exact else '; extrapolated'})",
                flush=True,
            )


if __name__ == "__main__":
    main()
