"""The gRPC shell of a MetricMapping (served by compose-telemetry; main.py picks it by
kind).

A MetricMapping composes nothing: it is validated against the fleet's other mappings
(mapping_validation.py) and reports `MappingValid`. Until the other mappings have been
fetched it is validated alone; the next call checks it against them.
"""

from __future__ import annotations

from typing import Final

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import contracts
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    observed_composite,
    required,
    set_conditions,
)
from functions.compose_telemetry.mapping_validation import validate_mapping, verdict

REQUIRED_MAPPINGS: Final = "metric-mappings"


class MetricMappingRunner(GuardedRunner):
    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = observed_composite(req)

        # 1. Resolve inputs: the fleet's other mappings (not fetched yet: none).
        response.require_resources(
            rsp, REQUIRED_MAPPINGS, contracts.API_GROUP_VERSION, contracts.KIND_METRIC_MAPPING
        )
        others = required(req, REQUIRED_MAPPINGS)

        # 2. Decide; 3. nothing to compose; 4. results and conditions.
        said = verdict(describe_composite(xr), xr, validate_mapping(xr, list(others.items)))
        if said.warning:
            response.warning(rsp, said.warning)
        set_conditions(rsp, *said.conditions)
        return rsp
