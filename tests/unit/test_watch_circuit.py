"""While core's watch circuit breaker is open on an XR (its `Responsive` condition False),
core drops the XR's watch events, a parent's change to it included, and reconciles it
when its TTL ends: every function then asks to be called back within a few seconds, and
only then (functions/common/sdk.py)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import sdk
from functions.compose_model_replica import fn as replica_fn

INPUTS = Path(__file__).parent / "testdata" / "model_replica" / "inputs"
OPEN = {
    "type": "Responsive",
    "status": "False",
    "reason": "WatchCircuitOpen",
    "message": "Too many watch events from Object/x (ml-team). Allowing events periodically.",
}
CLOSED = {"type": "Responsive", "status": "True", "reason": "WatchCircuitClosed"}
SYNCED = {"type": "Synced", "status": "False", "reason": "ReconcileError"}


def _ttl(conditions: list[dict]) -> float:
    xr = copy.deepcopy(yaml.safe_load((INPUTS / "standalone.yaml").read_text()))
    if conditions:
        xr.setdefault("status", {})["conditions"] = conditions
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    rsp = asyncio.run(replica_fn.FunctionRunner().RunFunction(req))
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    return rsp.meta.ttl.ToTimedelta().total_seconds()


@pytest.mark.parametrize(
    ("conditions", "open_"),
    [
        ([], False),
        ([CLOSED], False),
        ([SYNCED], False),
        ([SYNCED, OPEN], True),
    ],
    ids=["no_condition", "closed", "another_false_condition", "open"],
)
def test_a_function_asks_to_be_called_back_soon_only_while_the_breaker_is_open(conditions, open_):
    ttl = _ttl(conditions)
    if open_:
        assert ttl == sdk.WATCH_CIRCUIT_OPEN_CALL_BACK_SECONDS
    else:
        assert ttl == 60  # the SDK's default: events reach the XR
