"""The gRPC shell of compose-model-replica.

Reads the ModelReplica and its InferenceCluster, composes its cluster's Objects
(compose.py), checks the launch lines it built (launch.py: warnings in the status, or a
refusal for a launch that cannot start), reads what the cluster shows back through the
observed Objects (status.py), and writes desired resources, status, conditions and
readiness, in that order. Bad input is a fatal result naming the field and the rule;
Crossplane then applies nothing, so what was composed before stays as it was.

The InferenceCluster is read for what a ModelReplica must not decide for itself (one
written directly, not by compose-model-deployment, could say anything): the provider
config its Objects go through is the one the cluster names or composes
(`spec.cluster.providerConfigRef`, refused otherwise), and the tenant Namespace carries
the cluster's own pod policy (functions/common/pod_policy.py), whatever the replica says.
Until Crossplane has fetched the cluster, everything composed before is kept as it is.
"""

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import conditions, contracts, launch_warnings
from functions.common.conditions import Condition
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    keep_observed,
    observed_composite,
    observed_resources,
    required,
    set_conditions,
)
from functions.compose_model_replica import launch
from functions.compose_model_replica.cluster import REQUIRED_CLUSTER, bind_to_cluster
from functions.compose_model_replica.compose import HEALTH_KEY, POLICY_KEY, compose
from functions.compose_model_replica.model import InvalidReplica, parse
from functions.compose_model_replica.status import observe

REASON_COMPOSED = "Composed"


class FunctionRunner(GuardedRunner):
    def __init__(self) -> None:
        super().__init__()

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = observed_composite(req)
        log = self.log.bind(composite=describe_composite(xr))

        try:
            replica = parse(xr)
        except InvalidReplica as err:
            log.info("invalid input", error=str(err))
            response.fatal(rsp, f"{describe_composite(xr)}: {err}")
            return rsp

        response.require_resources(
            rsp,
            REQUIRED_CLUSTER,
            contracts.API_GROUP_VERSION,
            contracts.KIND_INFERENCE_CLUSTER,
            match_name=replica.cluster.name,
        )
        asked = required(req, REQUIRED_CLUSTER)
        if not asked.fetched:
            # Asked for; until it arrives, nothing changes (a missing resource is deleted).
            keep_observed(rsp, observed_resources(req))
            return rsp
        try:
            replica = bind_to_cluster(replica, asked.items[0] if asked.items else None)
        except InvalidReplica as err:
            log.info("invalid input", error=str(err))
            response.fatal(rsp, f"{describe_composite(xr)}: {err}")
            return rsp

        plan = compose(replica)
        try:
            # What the engine or the kubelet would say about the launch (launch.py).
            found = launch.check(replica, plan.workloads)
        except InvalidReplica as err:
            log.info("launch cannot start", error=str(err))
            response.fatal(rsp, f"{describe_composite(xr)}: {err}")
            return rsp
        observed = {
            name: resource.struct_to_dict(r.resource) for name, r in req.observed.resources.items()
        }
        status = observe(replica, plan.workloads, observed, HEALTH_KEY, POLICY_KEY)

        dropped = sorted(set(observed) - {c.key for c in plan.composed})
        if dropped:
            # Deliberate, never silent: the model became available again (the 503
            # filter goes) or autoscaling was switched off (KEDA's objects go).
            response.normal(rsp, f"removing {', '.join(dropped)}: no longer part of this replica")
        for composed in plan.composed:
            desired = rsp.desired.resources[composed.key]
            resource.update(desired, composed.object)
            if composed.key in status.ready_objects:
                desired.ready = fnv1.Ready.READY_TRUE

        written = status.to_status()
        if found:
            written["warnings"] = launch_warnings.to_status(found)
        resource.update(rsp.desired.composite, {"status": written})
        for warning in found:
            response.warning(rsp, f"{describe_composite(xr)}: {warning}")
        rsp.desired.composite.ready = (
            fnv1.Ready.READY_TRUE if status.ready else fnv1.Ready.READY_FALSE
        )
        set_conditions(
            rsp,
            Condition(
                type=conditions.COMPOSED,
                status=conditions.TRUE,
                reason=REASON_COMPOSED,
                message=(
                    f"{len(plan.composed)} objects for cluster {replica.cluster.name} "
                    f"({replica.cluster.stack} stack, {replica.shape.value})"
                ),
            ),
            *status.conditions,
        )
        log.debug("composed", objects=len(plan.composed), ready=status.ready_replicas)
        return rsp
