"""The gRPC shell of compose-model-deployment.

Reads a ModelDeployment and will place its replicas across InferenceClusters as
ModelReplicas; for now it proves the harness by saying what it was given.
"""

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions.common.contracts import FUNCTION_MODEL_DEPLOYMENT
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
        engines = spec.get("template", {}).get("spec", {}).get("engines", [])
        replicas = spec.get("replicas")
        given = f"{describe_composite(xr)} ({replicas} replicas, {len(engines)} engines)"
        self.log.info("received", composite=describe_composite(xr))
        report_not_composing_yet(rsp, FUNCTION_MODEL_DEPLOYMENT, given, "issue #4")
        return rsp
