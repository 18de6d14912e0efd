"""The gRPC shell of a ModelAdapter (served by compose-model-deployment; main.py picks it
by kind).

Reads the ModelAdapter, asks for the ModelDeployments and ModelAdapters in its
namespace (the base, the names already served there, the adapters that came first) and
the base's ModelReplicas (where it is placed), decides in pure code whether the adapter
is admitted and what each cluster gets (adapters.py), writes the desired Objects, status
and the AdapterReady condition. Until every input has arrived, everything composed
before is kept: "not fetched yet" is never "the base is placed nowhere".
"""

from __future__ import annotations

from typing import Final

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import adapters as contract
from functions.common import conditions, contracts
from functions.common.conditions import Condition
from functions.common.naming import label_value
from functions.common.reader import InputError
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    keep_observed,
    required,
    set_conditions,
)
from functions.common.structs import plain
from functions.compose_model_deployment import adapters

REQUIRED_DEPLOYMENTS: Final = "model-deployments"
REQUIRED_ADAPTERS: Final = "model-adapters"
REQUIRED_REPLICAS: Final = "base-replicas"
REASON_WAITING: Final = "WaitingForInputs"


class ModelAdapterRunner(GuardedRunner):
    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = plain(req.observed.composite.resource)
        name = describe_composite(xr)

        # 1. Resolve inputs.
        try:
            adapter = adapters.read_adapter(xr)
        except InputError as err:
            response.fatal(rsp, f"{name}: {err}")
            return rsp
        for key, kind, labels in (
            (REQUIRED_DEPLOYMENTS, contracts.KIND_MODEL_DEPLOYMENT, None),
            (REQUIRED_ADAPTERS, contract.KIND_MODEL_ADAPTER, None),
            (
                REQUIRED_REPLICAS,
                contracts.KIND_MODEL_REPLICA,
                {contracts.LABEL_DEPLOYMENT: label_value(adapter.base)},
            ),
        ):
            response.require_resources(
                rsp,
                key,
                contracts.API_GROUP_VERSION,
                kind,
                match_labels=labels,
                namespace=adapter.namespace,
            )
        observed = {key: plain(r.resource) for key, r in req.observed.resources.items()}
        asked = [
            required(req, key)
            for key in (REQUIRED_DEPLOYMENTS, REQUIRED_ADAPTERS, REQUIRED_REPLICAS)
        ]
        if not all(a.fetched for a in asked):
            keep_observed(rsp, observed)
            set_conditions(
                rsp,
                Condition(
                    contract.ADAPTER_READY,
                    conditions.UNKNOWN,
                    REASON_WAITING,
                    "asked for the namespace's ModelDeployments and ModelAdapters and the "
                    "base's ModelReplicas; composing nothing new until they arrive",
                ),
            )
            return rsp
        deployments, siblings, replicas = (a.items for a in asked)

        bases: list[adapters.Base] = []
        base: adapters.Base | None = None
        for item in deployments:
            try:
                read = adapters.read_base(item)
            except InputError as err:
                if (item.get("metadata") or {}).get("name") == adapter.base:
                    # The base cannot take adapters as written (an engine that cannot
                    # load them): nothing is served until it can, and it says why.
                    response.fatal(rsp, f"{name}: ModelDeployment {adapter.base}: {err}")
                    return rsp
                read = adapters.Base(
                    str((item.get("metadata") or {}).get("name") or ""),
                    None,
                    adapters.served_names(item),
                )
            bases.append(read)
            if read.name == adapter.base:
                base = read
        others = []
        for item in siblings:
            try:
                others.append(adapters.read_adapter(item))
            except InputError:
                continue  # its own reconcile says why; it holds no name or slot
        placements = adapters.read_placements(replicas, adapter.base)

        # 2. Decide.
        refusal = adapters.admit(adapter, base, bases, others)
        decided = adapters.plan_adapter(adapter, refusal, placements, observed)

        # 3. Desired resources.
        for composed in decided.composed:
            resource.update(rsp.desired.resources[composed.key], composed.body)
            if composed.ready:
                rsp.desired.resources[composed.key].ready = fnv1.Ready.READY_TRUE
        if decided.removed:
            # Deliberate, never silent: the base left a cluster, or the adapter is refused.
            response.normal(
                rsp,
                f"{name}: removing {', '.join(decided.removed)}: "
                + (decided.refusal.message if decided.refusal else "the base is no longer there"),
            )

        # 4. Status, results and conditions.
        resource.update(rsp.desired.composite, {"status": decided.status(adapter)})
        if decided.refusal is not None:
            response.warning(rsp, f"{name}: {decided.refusal.message}")
        for p in decided.phases:
            if p.phase == "Failed":
                response.warning(rsp, f"{name}: download on {p.cluster} failed: {p.message}")
        set_conditions(rsp, decided.condition())
        rsp.desired.composite.ready = (
            fnv1.Ready.READY_TRUE if decided.all_staged else fnv1.Ready.READY_FALSE
        )
        return rsp
