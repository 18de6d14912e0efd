"""The gRPC shell of a ModelCache (served by compose-model-deployment; main.py picks it
by kind).

Reads the ModelCache, asks for every InferenceCluster and the ModelDeployments in its
namespace (it is staged only where one that references it could be placed), decides in
pure code which clusters it is staged on and what each composed object is
(cache_plan.py, modelcache.py), writes the desired Objects, status and the CacheReady
condition. A cluster not fetched yet or not readable is never read as "not selected"
(that would delete its weights): until the clusters and deployments arrive everything
composed before is kept, and a cluster that cannot be read keeps its objects as they
are.
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
    Deployment,
    InputError,
    cluster_name,
    read_cluster,
    read_deployment,
)

REQUIRED_CLUSTERS: Final = "inference-clusters"
REQUIRED_DEPLOYMENTS: Final = "model-deployments"
REASON_WAITING: Final = "WaitingForInputs"


def _require_inputs(rsp: fnv1.RunFunctionResponse, namespace: str) -> None:
    """Every InferenceCluster, and the ModelDeployments in the cache's namespace."""
    response.require_resources(
        rsp, REQUIRED_CLUSTERS, contracts.API_GROUP_VERSION, contracts.KIND_INFERENCE_CLUSTER
    )
    response.require_resources(
        rsp,
        REQUIRED_DEPLOYMENTS,
        contracts.API_GROUP_VERSION,
        contracts.KIND_MODEL_DEPLOYMENT,
        namespace=namespace,
    )


def _referencing(
    rsp: fnv1.RunFunctionResponse,
    name: str,
    cache: modelcache.ModelCache,
    items: tuple[dict, ...],
) -> list[Deployment] | None:
    """The ModelDeployments that reference the cache; None when one of them cannot be
    read (a warning says which): one that cannot be read might run anywhere."""
    found = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        spec = item.get("spec") if isinstance(item, dict) else None
        ref = (spec or {}).get("modelCacheRef") if isinstance(spec, dict) else None
        if not isinstance(ref, dict) or ref.get("name") != cache.name:
            continue
        if (meta or {}).get("namespace", cache.namespace) != cache.namespace:
            continue
        try:
            found.append(read_deployment(item))
        except InputError as err:
            response.warning(
                rsp,
                f"{name}: staging on every selected cluster: ModelDeployment "
                f"{(meta or {}).get('name', '')} cannot be read: {err}",
            )
            return None
    return found


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
        _require_inputs(rsp, cache.namespace)
        observed = {key: plain(r.resource) for key, r in req.observed.resources.items()}
        asked = required(req, REQUIRED_CLUSTERS, convert=lambda s: s)
        asked_deployments = required(req, REQUIRED_DEPLOYMENTS)
        if not asked.fetched or not asked_deployments.fetched:
            keep_observed(rsp, observed)
            message = (
                f"asked for {REQUIRED_CLUSTERS} and {REQUIRED_DEPLOYMENTS}; composing nothing "
                "new until they arrive"
            )
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

        referencing = _referencing(rsp, name, cache, asked_deployments.items)

        # 2. Decide.
        decided = plan_cache(cache, clusters, unreadable, observed, referencing)

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
        set_conditions(rsp, modelcache.cache_condition(decided.phases, decided.skipped))
        rsp.desired.composite.ready = (
            fnv1.Ready.READY_TRUE if decided.all_ready else fnv1.Ready.READY_FALSE
        )
        return rsp
