"""The gRPC shell of compose-model-deployment.

Reads the ModelDeployment, asks for every InferenceCluster and every ModelReplica (the
clusterSelector's matchExpressions cannot be put in a required-resource selector, so all
clusters are fetched and the selector is applied in pure code), decides parking and
placement in pure code, composes one ModelReplica per cluster used, and writes status
and conditions. The wall clock is read here, once, and passed in.

Inputs are resolved explicitly: until both requirements have been answered nothing new
is placed and every ModelReplica composed before is kept as it is; an empty answer is
"absent" (no clusters, or nobody holds capacity), never "not fetched yet".

Parsing a cluster or a replica is memoized by its uid and resourceVersion (or, without
them, its serialized bytes): the same fleet arrives on every reconcile, and converting
protobuf Structs is the costliest part of a large request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Generic, TypeVar

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from functions.common import contracts
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    keep_observed,
    not_fetched,
    required,
    set_conditions,
)
from functions.common.served_name import served_name_mismatch
from functions.compose_model_deployment import manifests, parking, status, targets
from functions.compose_model_deployment.devices import check_selectors
from functions.compose_model_deployment.model import (
    Cluster,
    Deployment,
    Holding,
    InputError,
    cluster_name,
    read_cluster,
    read_deployment,
    read_holding,
)
from functions.compose_model_deployment.placement import PlacementPlan, place

REQUIRED_CLUSTERS: Final = "inference-clusters"
REQUIRED_REPLICAS: Final = "model-replicas"
# What a waiting result keeps of an observed ModelReplica's metadata (as it always has).
KEPT_REPLICA_METADATA: Final = ("name", "labels")
_CACHE_LIMIT: Final = 20000

T = TypeVar("T")


def plain(value):
    """A Struct value as plain Python, integral numbers as int (Structs carry floats)."""
    if isinstance(value, struct_pb2.Struct):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, struct_pb2.ListValue):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _memo_key(struct: struct_pb2.Struct) -> object:
    """What identifies a resource's content: its uid and resourceVersion when the API
    server set them (any change bumps the version), else its exact bytes."""
    meta = struct["metadata"] if "metadata" in struct else None  # noqa: SIM401 (a Struct has no .get)
    if isinstance(meta, struct_pb2.Struct) and "uid" in meta and "resourceVersion" in meta:
        uid, version = meta["uid"], meta["resourceVersion"]
        if uid and isinstance(uid, str) and isinstance(version, str):
            return (uid, version)
    return struct.SerializeToString(deterministic=True)


# The members whose engine answers requests (its name is the one clients send).
SERVING_ROLES: Final = (contracts.ROLE_STANDALONE, contracts.ROLE_LEADER, contracts.ROLE_DECODE)


def _warn_served_name_mismatch(
    rsp: fnv1.RunFunctionResponse, name: str, deployment: Deployment
) -> None:
    """A user's --served-model-name other than the deployment's name changes the name
    clients must send; say so rather than let requests for the deployment's name 404."""
    for engine in deployment.engines:
        for member in engine.members:
            if member.role not in SERVING_ROLES:
                continue
            mismatch = served_name_mismatch(engine.type, member.template, deployment.name)
            if mismatch:
                response.warning(rsp, f"{name}: {member.path}: {mismatch}")


class _Memo(Generic[T]):
    """Parsed values by the exact bytes they were parsed from (bounded)."""

    def __init__(self, parse: Callable[[dict], T]) -> None:
        self.parse = parse
        self.values: dict[bytes, T] = {}

    def __call__(self, struct: struct_pb2.Struct) -> T:
        key = _memo_key(struct)
        found = self.values.get(key)
        if found is None:
            if len(self.values) >= _CACHE_LIMIT:
                self.values.clear()
            found = self.values[key] = self.parse(plain(struct))
        return found


@dataclass(frozen=True)
class _Fleet:
    clusters: list[Cluster]
    holdings: list[Holding]
    frozen: list[Holding]  # this deployment's, on a cluster (or in a replica) not readable
    frozen_keys: set[str]  # their composed-resource keys, kept exactly as observed


class FunctionRunner(GuardedRunner):
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.clusters = _Memo(read_cluster)
        self.holdings = _Memo(read_holding)

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        now = self.clock()
        xr = plain(req.observed.composite.resource)
        name = describe_composite(xr)

        # 1. Resolve inputs.
        try:
            deployment = read_deployment(xr)
            check_selectors(deployment)
        except InputError as err:
            response.fatal(rsp, f"{name}: {err}")
            return rsp
        response.require_resources(
            rsp, REQUIRED_CLUSTERS, contracts.API_GROUP_VERSION, contracts.KIND_INFERENCE_CLUSTER
        )
        response.require_resources(
            rsp, REQUIRED_REPLICAS, contracts.API_GROUP_VERSION, contracts.KIND_MODEL_REPLICA
        )
        observed_own = {
            key: r.resource
            for key, r in req.observed.resources.items()
            if r.resource["kind"] == contracts.KIND_MODEL_REPLICA
        }
        # Raw Structs: parsing is memoized on them (see the module docstring).
        asked_clusters = required(req, REQUIRED_CLUSTERS, convert=lambda s: s)
        asked_replicas = required(req, REQUIRED_REPLICAS, convert=lambda s: s)
        missing = not_fetched(asked_clusters, asked_replicas)
        if missing:
            keep_observed(
                rsp,
                {key: plain(s) for key, s in observed_own.items()},
                metadata=KEPT_REPLICA_METADATA,
            )
            set_conditions(
                rsp,
                *status.waiting_conditions(
                    f"asked for {' and '.join(missing)}; placing nothing new until they arrive"
                ),
            )
            return rsp
        fleet = self._read_fleet(
            rsp,
            name,
            deployment,
            cluster_items=asked_clusters.items,
            replica_items=asked_replicas.items,
            observed_own=observed_own,
        )
        clusters, holdings, frozen = fleet.clusters, fleet.holdings, fleet.frozen
        own = targets.own_holdings(holdings, deployment)
        previous = xr.get("status") or {}

        # 2. Decide: parking first, then placement (a parked model places nothing).
        decision = parking.decide(
            definition=deployment.definition_hash,
            retry=deployment.retry,
            records=[h.health for h in own if h.health is not None],
            previous=status.read_parked(previous),
            baseline=status.read_baseline(previous),
            max_consecutive_failures=deployment.parking.max_consecutive_failures,
            enabled=deployment.parking.enabled,
            now=status.format_time(now),
        )
        by_name = {c.name: c for c in clusters}
        existing_at = targets.existing_at(own, by_name, deployment)
        if decision.is_parked:
            plan = PlacementPlan((), 0, "")
            for h in targets.removed_when_parked(own, existing_at):
                response.warning(
                    rsp,
                    f"{name}: removing the parked model's ModelReplica on "
                    f"{h.cluster}/{h.pool}: the cluster or pool is gone or no longer selected",
                )
        else:
            frozen_replicas = sum(h.replicas for h in frozen)
            plan = place(
                deployment, clusters, holdings, max(0, deployment.replicas - frozen_replicas)
            )

        # 3. Compose one ModelReplica per cluster used.
        self._compose(
            rsp,
            deployment,
            targets.replica_targets(plan, decision, existing_at, by_name),
            fleet.frozen_keys,
        )

        # 4. Status, results and conditions.
        used = {p.cluster for p in plan.placements}
        ready_by_cluster = {h.cluster: h.ready_replicas for h in own if h.cluster in used}
        unplaceable = status.report_unplaceable(previous.get("unplaceable"), plan, now)
        resource.update(
            rsp.desired.composite,
            {
                "status": status.build_status(
                    desired=deployment.replicas,
                    plan=plan,
                    ready_by_cluster=ready_by_cluster,
                    unplaceable=unplaceable,
                    parking=decision,
                )
            },
        )
        for moved in plan.dropped:
            response.warning(
                rsp,
                f"moving {moved.replicas} replicas off {moved.cluster}/{moved.pool}: "
                f"{moved.reason}",
            )
        if decision.transition == "parked" and decision.parked:
            response.warning(rsp, f"{name} {status.parked_message(decision.parked)}")
        elif decision.transition == "unparked":
            response.normal(rsp, f"{name} unparked: {decision.why_unparked}")
        if unplaceable.warn:
            response.warning(rsp, f"{name}: {plan.unplaceable} replicas fit nowhere: {plan.reason}")
        _warn_served_name_mismatch(rsp, name, deployment)
        set_conditions(
            rsp,
            *status.derive_conditions(
                desired=deployment.replicas,
                plan=plan,
                ready=sum(ready_by_cluster.values()),
                parking=decision,
                parking_enabled=deployment.parking.enabled,
            ),
        )
        if plan.unplaceable or decision.is_parked:
            # Its ModelReplicas at 0 replicas are themselves ready (nothing to wait for),
            # so without this the deployment would read Ready while serving nothing.
            rsp.desired.composite.ready = fnv1.Ready.READY_FALSE
        self.log.debug(
            "placed",
            composite=name,
            placed=plan.placed,
            unplaceable=plan.unplaceable,
            parked=decision.is_parked,
        )
        return rsp

    def _read_fleet(
        self,
        rsp: fnv1.RunFunctionResponse,
        name: str,
        deployment: Deployment,
        *,
        cluster_items: tuple[struct_pb2.Struct, ...],
        replica_items: tuple[struct_pb2.Struct, ...],
        observed_own: dict[str, struct_pb2.Struct],
    ) -> _Fleet:
        """Every cluster and ModelReplica that can be read; what cannot is said in a
        warning and frozen: a cluster that cannot be read is never "gone" (that would move
        its replicas, a deletion), so this deployment's ModelReplica there is kept exactly
        as observed and nothing new is placed there until it can be read again."""
        clusters = []
        unreadable: dict[str, str] = {}  # cluster name -> why it cannot be read
        for item in cluster_items:
            try:
                clusters.append(self.clusters(item))
            except InputError as err:
                # One malformed cluster must not stop every model in the fleet, and it is
                # not gone either (treating it as gone would move its replicas: a
                # deletion). It offers no room; what runs there is kept as it is.
                unreadable[cluster_name(plain(item))] = str(err)
        unreadable.pop("", None)
        own_parsed: list[Holding] = []
        frozen_keys: set[str] = set()
        for key, struct in observed_own.items():
            try:
                own_parsed.append(self.holdings(struct))
            except InputError as err:
                frozen_keys.add(key)
                response.warning(rsp, f"{name}: keeping {key} as it is: {err}")
        listed: list[Holding] = []
        for struct in replica_items:
            try:
                listed.append(self.holdings(struct))
            except InputError as err:
                response.warning(rsp, f"{name}: not counting what it holds: {err}")
        holdings = targets.merge_ownership(own_parsed, listed, deployment)
        frozen = [
            h
            for h in targets.own_holdings(holdings, deployment)
            if h.cluster in unreadable or manifests.replica_key(h.cluster) in frozen_keys
        ]
        for h in frozen:
            frozen_keys.add(manifests.replica_key(h.cluster))
            if h.cluster in unreadable:
                response.warning(
                    rsp,
                    f"{name}: keeping {h.replicas} replicas on {h.cluster} as they are, placing "
                    f"nothing new there until it can be read: {unreadable[h.cluster]}",
                )
        for cluster, why in sorted(unreadable.items()):
            if all(h.cluster != cluster for h in frozen):
                response.warning(rsp, f"{name}: placing nothing on {cluster}: {why}")
        holdings = [h for h in holdings if h not in frozen]
        keep_observed(
            rsp,
            {key: plain(observed_own[key]) for key in sorted(frozen_keys) if key in observed_own},
            metadata=KEPT_REPLICA_METADATA,
        )
        return _Fleet(clusters, holdings, frozen, frozen_keys)

    @staticmethod
    def _compose(
        rsp: fnv1.RunFunctionResponse,
        deployment: Deployment,
        decided: targets.Targets,
        frozen_keys: set[str],
    ) -> None:
        autoscaling = manifests.autoscaling_spec(
            deployment, [(c, p) for c, p, _ in decided.replicas]
        )
        # Every ModelReplica of a deployment is the same but for a few per-cluster fields,
        # and the autoscaling member list in each grows with the clusters used (the output
        # grows with their square). Convert the first one to protobuf, then copy it (in C)
        # and set only what differs per cluster.
        first: struct_pb2.Struct | None = None
        for cluster, pool_name, replicas in decided.replicas:
            pool = cluster.pool(pool_name)
            if pool is None or manifests.replica_key(cluster.name) in frozen_keys:
                continue
            body = manifests.model_replica(
                deployment,
                cluster,
                pool,
                replicas,
                autoscaling=autoscaling,
                unavailable=decided.unavailable,
                fabrics=decided.fabrics.get(cluster.name, ()),
            )
            target = rsp.desired.resources[manifests.replica_key(cluster.name)].resource
            if first is None:
                target.update(body)
                first = target
                continue
            target.CopyFrom(first)
            for section, fields in manifests.PER_CLUSTER_FIELDS.items():
                for field in fields:
                    target[section][field] = body[section][field]
