"""The gRPC shell of a ModelCache (served by compose-model-deployment; main.py picks it
by kind).

Reads the ModelCache, asks for every InferenceCluster, decides in pure code which
clusters it is staged on and what each composed object is (cache_plan.py, modelcache.py),
writes the desired Objects, status and the CacheReady condition. A cluster not fetched
yet or not readable is never read as "not selected" (that would delete its weights):
until the clusters arrive everything composed before is kept, and a cluster that cannot
be read keeps its objects as they are.
"""

from __future__ import annotations

from typing import Final

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import conditions, contracts
from functions.common.conditions import Condition
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    keep_observed,
    kept_manifest,
    required,
    set_conditions,
)
from functions.common.structs import ParsedByContent, plain
from functions.compose_model_deployment import modelcache
from functions.compose_model_deployment.cache_plan import plan_cache
from functions.compose_model_deployment.model import (
    CLUSTER_FIELDS,
    InputError,
    cluster_name,
    read_cluster,
)

REQUIRED_CLUSTERS: Final = "inference-clusters"
REASON_WAITING: Final = "WaitingForInputs"


class ModelCacheRunner(GuardedRunner):
    def __init__(self) -> None:
        super().__init__()
        self.clusters = ParsedByContent(read_cluster, CLUSTER_FIELDS)

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = plain(req.observed.composite.resource)
        name = describe_composite(xr)

        # 1. Resolve inputs.
        try:
            cache = modelcache.read_cache(xr)
        except InputError as err:
            response.fatal(rsp, f"{name}: {err}")
            return rsp
        response.require_resources(
            rsp, REQUIRED_CLUSTERS, contracts.API_GROUP_VERSION, contracts.KIND_INFERENCE_CLUSTER
        )
        observed = {key: plain(r.resource) for key, r in req.observed.resources.items()}
        asked = required(req, REQUIRED_CLUSTERS, convert=lambda s: s)
        if not asked.fetched:
            keep_observed(rsp, observed)
            message = f"asked for {REQUIRED_CLUSTERS}; composing nothing new until they arrive"
            set_conditions(
                rsp,
                Condition(modelcache.CACHE_READY, conditions.UNKNOWN, REASON_WAITING, message),
            )
            return rsp
        clusters = []
        unreadable: set[str] = set()
        for item in asked.items:
            try:
                clusters.append(self.clusters(item))
            except InputError as err:
                unreadable.add(cluster_name(plain(item)))
                response.warning(
                    rsp, f"{name}: keeping what is staged on a cluster as it is: {err}"
                )

        # 2. Decide.
        decided = plan_cache(cache, clusters, unreadable, observed)

        # 3. Desired resources.
        for composed in decided.composed:
            resource.update(rsp.desired.resources[composed.key], composed.body)
            if composed.ready:
                rsp.desired.resources[composed.key].ready = fnv1.Ready.READY_TRUE
        for key in decided.kept:
            resource.update(rsp.desired.resources[key], kept_manifest(observed[key]))
        if decided.removed:
            # Deliberate, never silent: a cluster left the selector (or the source changed).
            response.normal(
                rsp,
                f"{name}: removing {', '.join(decided.removed)}: no longer part of this cache",
            )

        # 4. Status, results and conditions.
        resource.update(rsp.desired.composite, {"status": decided.status(cache)})
        for p in decided.phases:
            if p.phase == modelcache.PHASE_FAILED:
                response.warning(rsp, f"{name}: download on {p.cluster} failed: {p.message}")
        set_conditions(rsp, modelcache.cache_condition(decided.phases))
        rsp.desired.composite.ready = (
            fnv1.Ready.READY_TRUE if decided.all_ready else fnv1.Ready.READY_FALSE
        )
        return rsp
