"""How long a user waits for engines to run on a GPU member of the fleet box: from
`kubectl apply` of a ModelDeployment to all its engine pods Running and Ready, through
real Crossplane core, our functions, provider-kubernetes, the member's controller
manager (Deployment, ReplicaSet, ResourceClaim), the real kube-scheduler allocating DRA
devices, and KWOK starting the pods (about 1-2 s after binding, hack/fleetbox/gpu.py).

    .venv/bin/python tests/bench/bench_fleet_pods.py [--runs 5] [--replicas 3]

One GPU member (us-east-1, its nodes from examples/inferenceclusters/us-east-h100.yaml:
8 H100 nodes x 8 GPUs, 4 L40S nodes x 4). Each run applies a new llama-8b-like deployment
of N replicas (one GPU each) placed on that member, waits for every engine pod Ready,
then deletes it and waits for its pods to go.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from fleetbox.box import FleetBox, missing_tools  # noqa: E402
from fleetbox.wait import is_true, wait_for  # noqa: E402
from tests.e2e import claims  # noqa: E402

MEMBER = "us-east-1"
NAMESPACE = "ml-team"
TIER = "fleet.example.com/tier"


def _deployment(name: str, replicas: int) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    document["spec"]["replicas"] = replicas
    document["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": {TIER: "bench"}}
    document["spec"].pop("autoscaling", None)
    return document


def _engine_pods(box: FleetBox, name: str) -> list[dict]:
    done = box.kubectl(
        MEMBER, "get", "pods", "-n", NAMESPACE, "-l",
        f"modelplane.ai/deployment={name},modelplane.ai/role=Standalone", "-o", "json",
    )  # fmt: skip
    return json.loads(done.stdout)["items"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    missing = missing_tools(gpu=True)
    if missing:
        print(f"missing tools {missing}: run 'bash hack/tools.sh'", file=sys.stderr)
        return 1
    box = FleetBox(members=(MEMBER,), gpu=(MEMBER,))
    try:
        box.start()
        print(f"fleet box: control plane + 1 GPU member started in {box.timings['start']:.1f} s")
        cluster = claims.example("inferenceclusters/us-east-h100.yaml")
        cluster["metadata"]["labels"] = {TIER: "bench"}
        claims.apply_document(box, cluster)
        seconds = []
        for run in range(args.runs):
            name = f"bench-pods-{run}"
            began = time.monotonic()
            claims.apply_document(box, _deployment(name, args.replicas))

            def ready(name=name):
                pods = _engine_pods(box, name)
                up = [p for p in pods if is_true(p, "Ready")]
                assert len(up) == args.replicas, f"{len(up)}/{args.replicas} Ready"
                return True

            wait_for(f"{name}'s pods Ready", ready, 300)
            seconds.append(time.monotonic() - began)
            claims.delete(box, "modeldeployment", name, NAMESPACE)
            wait_for(f"{name}'s pods gone", lambda n=name: not _engine_pods(box, n), 300)
        figures = ", ".join(f"{s:.1f}" for s in seconds)
        print(
            f"apply -> all engine pods Running and Ready ({args.replicas} replicas x 1 GPU, "
            f"1 GPU member): median {statistics.median(seconds):.1f} s over {len(seconds)} "
            f"runs ({figures})"
        )
    finally:
        box.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
