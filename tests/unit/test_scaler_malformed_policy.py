"""A policy the API server should have refused still gets an answer KEDA can use.

The CRD's schema keeps these shapes out of a real API server (the runtime tier), so the
scaler's gRPC service is driven here over a cache stub: what matters is the wire answer,
OK with floor 0 ("no influence", ARCHITECTURE's scaler rule), never UNKNOWN from an
exception in the handler.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from functions.runtime.scaler.core import HubLeaseCopy, served_floor
from functions.runtime.scaler.proto import stubs
from functions.runtime.scaler.server import METRIC_NAME, FloorScaler, serve

pb, pb_grpc = stubs()

HUB = "member-1/agent-0"
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
EXPIRES = (NOW + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")


class _Cache:
    """The one policy a test names, and a Lease its hub holds."""

    def __init__(self, policy: object) -> None:
        self.policy = policy
        self.synced = True

    def snapshot(self, namespace: str, name: str):
        return self.policy, HubLeaseCopy(holder=HUB, token="term-1"), 1

    async def changed(self, generation: int, timeout: float) -> int:
        await asyncio.sleep(timeout)
        return generation


def _policy(clusters: object, floor: object = 4, spec: object = None) -> dict:
    return {
        "spec": spec if spec is not None else {"mode": "auto", "clusters": clusters},
        "status": {
            "intent": {"floor": floor, "hub": HUB, "fencingToken": "term-1", "expires": EXPIRES}
        },
    }


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (_policy([{"name": "member-0", "maxReplicas": -3}]), "maxReplicas -3"),
        (_policy([{"name": "member-0", "maxReplicas": "lots"}]), "maxReplicas 'lots'"),
        (_policy({"member-0": 8}), "spec.clusters is not a list"),
        (_policy(None, spec="auto"), "spec is not an object"),
        (_policy([["member-0", 8]]), "not in spec.clusters"),
    ],
    ids=[
        "negative_max_replicas",
        "max_replicas_a_string",
        "clusters_an_object",
        "spec_a_string",
        "cluster_entry_a_list",
    ],
)
def test_a_malformed_policy_is_floor_zero_with_status_ok(policy, reason):
    scaler = FloorScaler(_Cache(policy), "member-0", wall=NOW.timestamp)
    served, port = serve(scaler, "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            ref = pb.ScaledObjectRef(name="llm", namespace="team-a")
            metrics = stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName=METRIC_NAME), timeout=5
            )
            assert [m.metricValue for m in metrics.metricValues] == [0]
            assert stub.IsActive(ref, timeout=5).result is False
            stream = stub.StreamIsActive(ref, timeout=5)
            assert next(stream).result is False
            stream.cancel()
    finally:
        served.stop(0)
    # The reason the scaler logs names the field.
    assert reason in served_floor(policy, HubLeaseCopy(HUB, "term-1"), "member-0", NOW).reason
