"""The gRPC shell of compose-telemetry.

Reads a TelemetryDestination or a MetricMapping and will compose the fleet gateway or
validate the mapping; for now it proves the harness by saying what it was given.
"""

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions.common.contracts import FUNCTION_TELEMETRY
from functions.common.sdk import describe_composite, observed_composite, report_not_composing_yet


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    def __init__(self) -> None:
        self.log = logging.get_logger()

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = observed_composite(req)
        spec = xr.get("spec", {})
        given = f"{describe_composite(xr)} (spec fields: {', '.join(sorted(spec)) or 'none'})"
        self.log.info("received", composite=describe_composite(xr))
        report_not_composing_yet(rsp, FUNCTION_TELEMETRY, given, "issue #6")
        return rsp
