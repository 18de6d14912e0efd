"""The runtime live in the fleet box: our agents and scalers as processes, real KEDA
(operator and metrics adapter) on each member, and kube-controller-manager's HPA
controller reading our scaler's floor through the member API server's aggregation
layer (hack/fleetbox/runtime.py).

The runtime runs on the examples' two members only (us-east-1, eu-west-1): that is
enough for a hub election with a failover, and two KEDA processes, agent and scaler per member is
already a lot on two cores.

The intents here are written the way the hub writes them (status.intent stamped with
the term read from the members' hub Leases, which the live agents hold), so KEDA's
answer, not the hub's decision, is what is under test.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from fleetbox.members import DEFAULT_MEMBERS
from fleetbox.wait import wait_for
from functions.common.contracts import (
    ANNOTATION_FENCING_TOKEN,
    AUTOSCALING_GROUP_VERSION,
    HUB_LEASE_NAME,
    SCALED_OBJECT_API_VERSION,
    SCALER_TRIGGER_AUTHENTICATION,
    SYSTEM_NAMESPACE,
)
from functions.compose_model_replica import autoscaling
from functions.compose_model_replica.autoscaling import SCALER_ADDRESS
from functions.runtime.scaler.server import METRIC_NAME

MEMBERS = DEFAULT_MEMBERS
NAMESPACE = "runtime-live"
# KEDA names a ScaledObject's first trigger's metric s0-<the scaler's metric name>.
KEDA_METRIC = f"s0-{METRIC_NAME}"
# A few HPA syncs (15 s each) and KEDA's polling (30 s): long enough that a floor KEDA
# obeyed would have moved the workload.
HOLD_SECONDS = 50.0
ENGINE_IMAGE = "registry.invalid/engine:1"
MOVE_SECONDS = 150.0


@pytest.fixture(scope="module", autouse=True)
def _namespace(box):
    yield
    for name in MEMBERS:
        box.kubectl(name, "delete", "namespace", NAMESPACE, "--wait=false", check=False)


def hub_term(box, member: str) -> tuple[str, str]:
    lease = json.loads(
        box.kubectl(
            member, "get", "lease", HUB_LEASE_NAME, "-n", SYSTEM_NAMESPACE, "-o", "json"
        ).stdout
    )
    holder = lease["spec"].get("holderIdentity") or ""
    token = (lease["metadata"].get("annotations") or {}).get(ANNOTATION_FENCING_TOKEN, "")
    return holder, token


def one_hub(box, exclude: str = "") -> tuple[str, str]:
    """The term every member's hub Lease names, once they all name the same holder."""

    def agreed():
        terms = {hub_term(box, m) for m in MEMBERS}
        if len(terms) != 1:
            return None
        ((holder, token),) = terms
        return (holder, token) if holder and token and holder != exclude else None

    return wait_for("one hub on every member", agreed, timeout=120)


def workload(name: str, cluster: str) -> list[dict]:
    """A Deployment, the AdaptivePolicy copy and the ScaledObject as compose-model-replica
    writes them (the trigger is the scaler at its in-cluster address)."""
    labels = {"app": name}
    return [
        {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "engine", "image": ENGINE_IMAGE}]},
                },
            },
        },
        {
            "apiVersion": AUTOSCALING_GROUP_VERSION, "kind": "AdaptivePolicy",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "mode": "auto",
                "workload": {
                    "apiVersion": SCALED_OBJECT_API_VERSION, "kind": "ScaledObject", "name": name,
                },
                "clusters": [{"name": m, "maxReplicas": 6} for m in MEMBERS],
            },
        },
        scaled_object(name, NAMESPACE),
    ]  # fmt: skip


def scaled_object(name: str, namespace: str) -> dict:
    """A ScaledObject as compose-model-replica writes it: its one trigger is the scaler at
    its in-cluster address, over TLS with KEDA's client certificate."""
    return {
        "apiVersion": SCALED_OBJECT_API_VERSION, "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicaCount": 1,
            "maxReplicaCount": 6,
            "advanced": autoscaling.ADVANCED,
            "triggers": [{
                "type": "external-push",
                "metadata": {"scalerAddress": SCALER_ADDRESS, "policy": name},
                "authenticationRef": {
                    "name": SCALER_TRIGGER_AUTHENTICATION, "kind": "ClusterTriggerAuthentication",
                },
            }],
        },
    }  # fmt: skip


def write_intent(box, member: str, name: str, floor: int, term: tuple[str, str]) -> None:
    expires = (datetime.now(UTC) + timedelta(seconds=600)).strftime("%Y-%m-%dT%H:%M:%SZ")
    intent = {
        "floor": floor,
        "tier": 0,
        "hub": term[0],
        "fencingToken": term[1],
        "expires": expires,
    }
    box.kubectl(
        member, "patch", "adaptivepolicy", name, "-n", NAMESPACE, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"intent": intent}}),
    )  # fmt: skip


def replicas(box, member: str, name: str) -> int:
    out = box.kubectl(member, "get", "deployment", name, "-n", NAMESPACE, "-o", "json").stdout
    return json.loads(out)["spec"]["replicas"]


def keda_metric(box, member: str, name: str) -> float | None:
    """The floor as KEDA serves it to the HPA: external.metrics.k8s.io, through the
    member API server's aggregation layer to the KEDA adapter, the operator, our scaler."""
    path = (
        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/{KEDA_METRIC}"
        f"?labelSelector=scaledobject.keda.sh/name%3D{name}"
    )
    result = box.kubectl(member, "get", "--raw", path, check=False)
    if result.returncode != 0:
        return None
    items = json.loads(result.stdout)["items"]
    return float(items[0]["value"].rstrip("m")) / (1000 if items[0]["value"].endswith("m") else 1)


def hpa_ready(box, member: str, name: str) -> bool:
    result = box.kubectl(
        member, "get", "hpa", f"keda-hpa-{name}", "-n", NAMESPACE, "-o", "json", check=False
    )
    if result.returncode != 0:
        return False
    conditions = {
        c["type"]: c["status"]
        for c in json.loads(result.stdout).get("status", {}).get("conditions", [])
    }
    return conditions.get("ScalingActive") == "True"


def test_a_deposed_hubs_floor_never_moves_the_workload_through_keda(box, runtime):
    name = "fenced"
    for member in MEMBERS:
        box.kubectl(member, "create", "namespace", NAMESPACE, check=False)
        box.kubectl(member, "apply", "-f", "-", stdin=yaml.safe_dump_all(workload(name, member)))
    old = one_hub(box)
    for member in MEMBERS:
        # KEDA made the HPA and the HPA reads our floor through the aggregation layer.
        runtime.wait_for(
            f"KEDA's HPA active on {member}", lambda m=member: hpa_ready(box, m, name), 180,
            [member],
        )  # fmt: skip

    # The hub pauses (SIGSTOP: no chance to release its Leases); another agent takes over.
    hub_member = old[0].split("/")[0]
    paused = runtime.process("agent", hub_member)
    paused.popen.send_signal(19)
    try:
        new = one_hub(box, exclude=old[0])
        # The deposed hub wakes and writes a floor with its old term, on every member.
        for member in MEMBERS:
            write_intent(box, member, name, 4, old)
        began = time.monotonic()
        while time.monotonic() - began < HOLD_SECONDS:
            for member in MEMBERS:
                assert replicas(box, member, name) == 1, f"{member}: KEDA obeyed a deposed hub"
                assert keda_metric(box, member, name) in (0.0, None)
            time.sleep(5)
        for member in MEMBERS:
            assert keda_metric(box, member, name) == 0.0, f"{member}: KEDA saw no floor at all"
            policy = json.loads(box.kubectl(
                member, "get", "adaptivepolicy", name, "-n", NAMESPACE, "-o", "json"
            ).stdout)  # fmt: skip
            assert policy["status"]["intent"]["hub"] == old[0], "the intent was replaced meanwhile"

        # The current hub's floor moves the workload on every member, through KEDA.
        for member in MEMBERS:
            write_intent(box, member, name, 4, new)

        def moved(member: str) -> bool:
            if replicas(box, member, name) == 4:
                return True
            # On a loaded machine the 6 s Leases can change hands again; the current
            # hub renews its intents under its new term, and so does this test.
            current = one_hub(box, exclude=old[0])
            if hub_term(box, member) == current and current != new:
                write_intent(box, member, name, 4, current)
            return False

        for member in MEMBERS:
            runtime.wait_for(
                f"{member}: the workload at the current hub's floor",
                lambda m=member: moved(m), MOVE_SECONDS, [member],
            )  # fmt: skip
            assert keda_metric(box, member, name) == 4.0
    finally:
        paused.popen.send_signal(18)
