"""A fleet-wide request passes the function as users run it.

compose-model-deployment receives every InferenceCluster of the fleet, each with its
capacity ledger, in each request (before the ledger, every ModelReplica: with the SDK's
default 4 MB receive limit a fleet of about 220 deployments over 50 clusters was refused
with RESOURCE_EXHAUSTED before any code ran). A fleet of some 2,000 clusters still
passes 4 MB. The function, started with no flags as a Function package runs it, must
answer such a request; the flags and their environment variables still override the
default."""

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common.sdk import MAX_RECV_MESSAGE_MB, MAX_SEND_MESSAGE_MB
from tests.bench.bench_fleet_resync import CROSSPLANE_RESPONSE_LIMIT, MIB, Fleet, Function

SDK_DEFAULT_MB = 4


@pytest.fixture(scope="module")
def request_over_4mb():
    """One reconcile of 100 deployments over 2,500 clusters: ~5.5 MB of required resources."""
    fleet = Fleet(100, 2500)
    return fleet.request(fleet.deployments[0])


def test_a_fleet_request_over_the_sdk_default_is_answered_with_no_flags(request_over_4mb):
    request = request_over_4mb
    assert request.ByteSize() > SDK_DEFAULT_MB * MIB
    function = Function()
    try:
        answer = function.stub.RunFunction(request, timeout=120)
    finally:
        function.close()
    assert not [r for r in answer.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(answer.desired.resources) >= 1


def test_the_receive_flag_still_lowers_the_limit(request_over_4mb):
    function = Function(SDK_DEFAULT_MB)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            function.stub.RunFunction(request_over_4mb, timeout=120)
    finally:
        function.close()
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_responses_stay_within_what_crossplane_receives():
    assert MAX_SEND_MESSAGE_MB * MIB <= CROSSPLANE_RESPONSE_LIMIT
    assert MAX_RECV_MESSAGE_MB > SDK_DEFAULT_MB
