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

from functions.common import conditions, contracts
from functions.common.conditions import Condition
from functions.common.modelcache import user_model_flag
from functions.common.naming import deployment_pod_selector, dns_label, label_value
from functions.common.objects import provider_object
from functions.common.sdk import (
    GuardedRunner,
    Required,
    describe_composite,
    keep_observed,
    kept_manifest,
    not_fetched,
    required,
    set_conditions,
)
from functions.common.served_name import served_name_mismatch
from functions.common.structs import (
    entry_bytes,
    metadata_strings,
    nested_entry_bytes,
    plain,
    plain_only,
)
from functions.compose_model_deployment import (
    cel_env,
    manifests,
    modelcache,
    ondemand,
    parking,
    status,
    targets,
)
from functions.compose_model_deployment.devices import check_selectors
from functions.compose_model_deployment.model import (
    CLUSTER_FIELDS,
    HOLDING_FIELDS,
    Cluster,
    Deployment,
    Holding,
    InputError,
    LabelSelector,
    cluster_name,
    read_cluster,
    read_deployment,
    read_holding,
)
from functions.compose_model_deployment.placement import PlacementPlan, place

REQUIRED_CLUSTERS: Final = "inference-clusters"
REQUIRED_REPLICAS: Final = "model-replicas"
REQUIRED_CACHE: Final = "model-cache"
REQUIRED_DEPLOYMENTS: Final = "model-deployments"
# What a waiting result keeps of an observed ModelReplica's metadata (as it always has).
KEPT_REPLICA_METADATA: Final = ("name", "labels")
_CACHE_LIMIT: Final = 20000

T = TypeVar("T")


def _memo_key(struct: struct_pb2.Struct) -> object:
    """What identifies a resource's content: its uid and resourceVersion when the API
    server set them (any change bumps the version), else its exact bytes."""
    uid, version = metadata_strings(struct, "uid", "resourceVersion")
    if uid and version is not None:
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


def _warnings(rsp, name, deployment, cache, plan) -> None:
    """What a person should fix in the spec: a served-name mismatch, a cache not used."""
    _warn_served_name_mismatch(rsp, name, deployment)
    _warn_cache(rsp, name, deployment, cache, plan)


def _write_status(
    rsp: fnv1.RunFunctionResponse,
    *,
    plan: PlacementPlan,
    own: list[Holding],
    previous: dict,
    desired: int,
    deployment: Deployment,
    decision: parking.Decision,
    cache,
    activity,
    now,
) -> tuple[dict[str, int], status.UnplaceableReport]:
    """The deployment's status from this placement; returns the ready replicas per cluster
    used and the unplaceable record, which the conditions and events are built from."""
    used = {p.cluster for p in plan.placements}
    ready_by_cluster = {h.cluster: h.ready_replicas for h in own if h.cluster in used}
    # A fresh attempt is decided afresh: the earlier unplaceable record is not reused.
    unplaceable = status.report_unplaceable(
        None if activity and activity.fresh_attempt else previous.get("unplaceable"), plan, now
    )
    built = status.build_status(
        desired=desired,
        label_selector=deployment_pod_selector(deployment.name),
        plan=plan,
        ready_by_cluster=ready_by_cluster,
        unplaceable=unplaceable,
        parking=decision,
        cache=cache,
    )
    if activity is not None:
        built["onDemand"] = _on_demand_status(activity, decision, plan, status.format_time(now))
    resource.update(rsp.desired.composite, {"status": built})
    return ready_by_cluster, unplaceable


def _report(
    rsp: fnv1.RunFunctionResponse,
    name: str,
    plan: PlacementPlan,
    decision: parking.Decision,
    unplaceable: status.UnplaceableReport,
) -> None:
    """The results a person reads in events: moves, parking transitions, unplaceable."""
    for moved in plan.dropped:
        response.warning(
            rsp,
            f"moving {moved.replicas} replicas off {moved.cluster}/{moved.pool}: {moved.reason}",
        )
    if decision.transition == "parked" and decision.parked:
        response.warning(rsp, f"{name} {status.parked_message(decision.parked)}")
    elif decision.transition == "unparked":
        response.normal(rsp, f"{name} unparked: {decision.why_unparked}")
    if unplaceable.warn:
        response.warning(rsp, f"{name}: {plan.unplaceable} replicas fit nowhere: {plan.reason}")


def _hold(
    rsp: fnv1.RunFunctionResponse, observed_own: dict, message: str
) -> fnv1.RunFunctionResponse:
    """Keep every observed ModelReplica as it is and say why nothing new is placed: what
    this reconcile cannot read is never read as "nothing runs" (a dropped replica is a
    deleted workload)."""
    keep_observed(
        rsp,
        {key: plain(s) for key, s in observed_own.items()},
        metadata=KEPT_REPLICA_METADATA,
    )
    set_conditions(rsp, *status.waiting_conditions(message))
    return rsp


def _require_inputs(rsp: fnv1.RunFunctionResponse, deployment: Deployment) -> None:
    """Every InferenceCluster and ModelReplica, and the referenced ModelCache if any."""
    response.require_resources(
        rsp, REQUIRED_CLUSTERS, contracts.API_GROUP_VERSION, contracts.KIND_INFERENCE_CLUSTER
    )
    response.require_resources(
        rsp, REQUIRED_REPLICAS, contracts.API_GROUP_VERSION, contracts.KIND_MODEL_REPLICA
    )
    if deployment.model_cache:
        response.require_resources(
            rsp,
            REQUIRED_CACHE,
            contracts.API_GROUP_VERSION,
            contracts.KIND_MODEL_CACHE,
            match_name=deployment.model_cache,
            namespace=deployment.namespace,
        )


def _resolve_cache(
    rsp: fnv1.RunFunctionResponse, name: str, deployment: Deployment, asked: Required | None
) -> modelcache.CacheView | bool | None:
    """The referenced ModelCache; None without one; False after a fatal result."""
    if asked is None:
        return None
    where = f"ModelCache {deployment.namespace}/{deployment.model_cache}"
    if not asked.items:
        response.warning(
            rsp,
            f"{name}: spec.modelCacheRef.name: {where} does not exist; create it, or "
            "remove spec.modelCacheRef",
        )
        return modelcache.CacheView(deployment.model_cache, LabelSelector(), {}, exists=False)
    try:
        return modelcache.read_cache_view(asked.items[0])
    except InputError as err:
        response.fatal(rsp, f"{name}: spec.modelCacheRef: {where}: {err}")
        return False


def _warn_cache(
    rsp: fnv1.RunFunctionResponse,
    name: str,
    deployment: Deployment,
    cache: modelcache.CacheView | None,
    plan: PlacementPlan,
) -> None:
    """Say where replicas wait on weights that are not there, and where the user's own
    model flag keeps the engine from reading the cache at all."""
    if cache is None:
        return
    for p in plan.placements:
        phase = cache.phase(p.cluster)
        if phase == modelcache.PHASE_FAILED:
            response.warning(
                rsp,
                f"{name}: {p.replicas} replicas on {p.cluster}, where ModelCache {cache.name} "
                "failed to download; they cannot load the model until it is Ready there",
            )
    for engine in deployment.engines:
        for member in engine.members:
            flag = user_model_flag(engine.type, member.template)
            if flag:
                response.warning(
                    rsp,
                    f"{name}: {member.path}: the template sets {flag}, so the engine does not "
                    f"load ModelCache {cache.name} from {modelcache.mount_path(cache.name)}",
                )


class _Memo(Generic[T]):
    """Parsed values by the content they were parsed from (bounded); only the fields the
    parser reads (`fields`, a structs.plain_only shape) are converted."""

    def __init__(self, parse: Callable[[dict], T], fields: dict) -> None:
        self.parse = parse
        self.fields = fields
        self.values: dict[object, T] = {}

    def __call__(self, struct: struct_pb2.Struct) -> T:
        key = _memo_key(struct)
        found = self.values.get(key)
        if found is None:
            if len(self.values) >= _CACHE_LIMIT:
                self.values.clear()
            found = self.values[key] = self.parse(plain_only(struct, self.fields))
        return found


@dataclass(frozen=True)
class _Fleet:
    clusters: list[Cluster]
    holdings: list[Holding]
    frozen: list[Holding]  # this deployment's, on a cluster (or in a replica) not readable
    frozen_keys: set[str]  # their composed-resource keys, kept exactly as observed


def _cache_ready_at(cache: modelcache.CacheView | None, own: list[Holding]) -> frozenset[str]:
    """The clusters whose engine pods may start: the cache is Ready there, or replicas
    already serve there (weights in GPU memory; a cache re-downloading under a serving
    model does not stop it)."""
    if cache is None:
        return frozenset()
    return cache.ready | {h.cluster for h in own if h.ready_replicas > 0}


def _activator_at(
    activity: ondemand.Activity | None, decided: targets.Targets, own: list[Holding]
) -> set[str] | None:
    """For an on-demand model, the clusters whose route leads to the member's activator:
    those with no ready replica. None for any other model."""
    if activity is None:
        return None
    ready = {h.cluster: h.ready_replicas for h in own}
    return {c.name for c, _, _ in decided.replicas if not ready.get(c.name)}


def _on_demand_status(
    activity: ondemand.Activity, decision: parking.Decision, plan: PlacementPlan, stamp: str
) -> dict:
    result = ondemand.attempt_result(
        parked_message=status.parked_message(decision.parked) if decision.parked else "",
        unplaceable=plan.unplaceable,
        reason=plan.reason,
    )
    return ondemand.status(activity, result=result, stamp=stamp)


def _replica_bytes(body: dict, varying: dict[str, tuple[str, ...]], shared: dict) -> bytes:
    """A ModelReplica's Struct bytes: the entries outside `varying` come from `shared`
    (written by the first ModelReplica, identical in the others), the rest are written."""
    entries = []
    for section, value in body.items():
        fields = varying.get(section)
        if fields is None:
            written = shared.get((section,))
            if written is None:
                written = shared[(section,)] = entry_bytes(section, value)
            entries.append(written)
            continue
        inner = []
        for field, item in value.items():
            if field in fields:
                inner.append(entry_bytes(field, item))
                continue
            written = shared.get((section, field))
            if written is None:
                written = shared[(section, field)] = entry_bytes(field, item)
            inner.append(written)
        entries.append(nested_entry_bytes(section, b"".join(inner)))
    return b"".join(entries)


def _require_cache_inputs(rsp: fnv1.RunFunctionResponse, namespace: str) -> None:
    """Every InferenceCluster, and the ModelDeployments in the cache's namespace: it is
    staged only where one that references it could be placed."""
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


def _staging(
    rsp: fnv1.RunFunctionResponse, name: str, cache, clusters: list[Cluster], items: tuple
) -> tuple[list[Cluster], dict[str, str]]:
    """The clusters the cache is staged on, by name, and why each other selected one is
    not."""
    by_selector = sorted(
        (c for c in clusters if cache.cluster_selector.matches(c.labels)), key=lambda c: c.name
    )
    referencing = _referencing(rsp, name, cache, items)
    if referencing is None:
        # One that cannot be read might run anywhere: nothing is taken away.
        return by_selector, {}
    return modelcache.staging_clusters(by_selector, referencing)


def _referencing(
    rsp: fnv1.RunFunctionResponse, name: str, cache, items: tuple[dict, ...]
) -> list[Deployment] | None:
    """The ModelDeployments that reference the cache; None when one of them cannot be
    read (a warning says which)."""
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


class FunctionRunner(GuardedRunner):
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self.clock = clock or (lambda: datetime.now(UTC))
        cel_env.warm_up()
        self.clusters = _Memo(read_cluster, CLUSTER_FIELDS)
        self.holdings = _Memo(read_holding, HOLDING_FIELDS)

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        now = self.clock()
        xr = plain(req.observed.composite.resource)
        name = describe_composite(xr)
        if xr.get("kind") == contracts.KIND_MODEL_CACHE:
            return self._run_cache(req, rsp, xr, name)

        # 1. Resolve inputs.
        try:
            deployment = read_deployment(xr)
            check_selectors(deployment)
        except InputError as err:
            response.fatal(rsp, f"{name}: {err}")
            return rsp
        _require_inputs(rsp, deployment)
        observed_own = {
            key: r.resource
            for key, r in req.observed.resources.items()
            if r.resource["kind"] == contracts.KIND_MODEL_REPLICA
        }
        # Raw Structs: parsing is memoized on them (see the module docstring).
        asked_clusters = required(req, REQUIRED_CLUSTERS, convert=lambda s: s)
        asked_replicas = required(req, REQUIRED_REPLICAS, convert=lambda s: s)
        asked_cache = required(req, REQUIRED_CACHE) if deployment.model_cache else None
        missing = not_fetched(
            asked_clusters, asked_replicas, *([asked_cache] if asked_cache is not None else [])
        )
        if missing:
            return _hold(
                rsp,
                observed_own,
                f"asked for {' and '.join(missing)}; placing nothing new until they arrive",
            )
        cache = _resolve_cache(rsp, name, deployment, asked_cache)
        if cache is False:
            return rsp
        if cache is not None and not cache.exists and observed_own:
            # A cache that went away is not "no cluster holds the weights" for what runs:
            # moving or removing replicas on that reading would be a deletion. Keep them.
            return _hold(
                rsp,
                observed_own,
                f"ModelCache {cache.name} (spec.modelCacheRef.name) does not exist; "
                "keeping every ModelReplica as it is and placing nothing new",
            )
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
        activity = self._activity(
            deployment=deployment,
            previous=previous,
            own=own,
            cluster_items=asked_clusters.items,
            now=now,
        )
        desired = deployment.replicas if activity is None else activity.desired(deployment.replicas)

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
            answering = targets.answering_at(existing_at, clusters, deployment)
            for h in targets.removed_when_parked(own, answering):
                response.warning(
                    rsp,
                    f"{name}: removing the parked model's ModelReplica on "
                    f"{h.cluster}/{h.pool}: the cluster is gone or no longer selected",
                )
        else:
            frozen_replicas = sum(h.replicas for h in frozen)
            plan = place(
                deployment,
                clusters,
                holdings,
                max(0, desired - frozen_replicas),
                cache=cache,
            )
            answering = targets.answering_at(existing_at, clusters, deployment, plan.nearest)

        # 3. Compose one ModelReplica per cluster used.
        decided = targets.replica_targets(plan, decision, answering, by_name)
        if activity is not None and not decision.is_parked:
            decided = targets.on_demand_targets(
                decided, existing_at, clusters, deployment, idle=desired == 0
            )
        self._compose(
            rsp,
            deployment,
            decided,
            fleet.frozen_keys,
            cache_mount=modelcache.replica_mount(cache) if cache is not None else None,
            cache_ready_at=_cache_ready_at(cache, own),
            activator_at=_activator_at(activity, decided, own),
        )

        # 4. Status, results and conditions.
        ready_by_cluster, unplaceable = _write_status(
            rsp,
            plan=plan,
            own=own,
            previous=previous,
            desired=desired,
            deployment=deployment,
            decision=decision,
            cache=cache,
            activity=activity,
            now=now,
        )
        _report(rsp, name, plan, decision, unplaceable)
        _warnings(rsp, name, deployment, cache, plan)
        set_conditions(
            rsp,
            *status.derive_conditions(
                desired=desired,
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

    @staticmethod
    def _activity(
        *,
        deployment: Deployment,
        previous: dict,
        own: list[Holding],
        cluster_items: tuple[struct_pb2.Struct, ...],
        now: datetime,
    ) -> ondemand.Activity | None:
        """An on-demand model's activity (None for any other model). The clusters' idle
        records are read only here: converting every cluster's status costs, and only an
        on-demand model needs them."""
        if deployment.on_demand is None:
            return None
        return ondemand.decide(
            policy=deployment.on_demand,
            activate=deployment.activate,
            previous=previous.get("onDemand") or {},
            ready_by_cluster={h.cluster: h.ready_replicas for h in own},
            idle_by_cluster=ondemand.idle_seconds_by_cluster(
                (plain(item) for item in cluster_items), deployment.namespace, deployment.name
            ),
            now=now,
            stamp=status.format_time(now),
        )

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
        *,
        cache_mount: dict | None,
        cache_ready_at: frozenset[str],
        activator_at: set[str] | None,
    ) -> None:
        """`activator_at`: for an on-demand model, the clusters whose route goes through
        the member's activator (no ready replica there); None for any other model."""
        autoscaling = manifests.autoscaling_spec(
            deployment, [(c, p) for c, p, _ in decided.replicas]
        )
        # Every ModelReplica of a deployment is the same but for a few per-cluster fields,
        # and the autoscaling member list in each grows with the clusters used (the output
        # grows with their square). Write each shared entry's Struct bytes once, write only
        # what differs per cluster, and let upb parse each ModelReplica in one call.
        varying = {
            section: (*fields, *(("modelCache", "activator") if section == "spec" else ()))
            for section, fields in manifests.PER_CLUSTER_FIELDS.items()
        }
        shared: dict[tuple[str, ...], bytes] = {}
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
                model_cache=(
                    {**cache_mount, "ready": cluster.name in cache_ready_at}
                    if cache_mount is not None
                    else None
                ),
            )
            if activator_at is not None:
                body["spec"]["activator"] = cluster.name in activator_at
            target = rsp.desired.resources[manifests.replica_key(cluster.name)].resource
            target.MergeFromString(_replica_bytes(body, varying, shared))

    # --- ModelCache -------------------------------------------------------------------

    def _run_cache(
        self, req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, xr: dict, name: str
    ) -> fnv1.RunFunctionResponse:
        """A ModelCache: per selected cluster its volume and download Job, and the phase
        each cluster's Job reports. A cluster not fetched yet or not readable is never
        read as "not selected" (that would delete its weights): its objects are kept."""
        try:
            cache = modelcache.read_cache(xr)
        except InputError as err:
            response.fatal(rsp, f"{name}: {err}")
            return rsp
        _require_cache_inputs(rsp, cache.namespace)
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
                Condition(modelcache.CACHE_READY, conditions.UNKNOWN, "WaitingForInputs", message),
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
        selected, skipped = _staging(rsp, name, cache, clusters, asked_deployments.items)
        phases = []
        desired: set[str] = set()
        for cluster in selected:
            provider = manifests.member_provider_config(cluster)
            job_key = modelcache.job_key(cache, cluster.name)
            volume_key = modelcache.volume_key(cluster.name)
            phase = modelcache.observe_cluster(
                cluster.name, observed.get(job_key), observed.get(volume_key)
            )
            phases.append(phase)
            for key, manifest, extra in (
                (
                    modelcache.namespace_key(cluster.name),
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": cache.namespace},
                    },
                    {"management_policies": modelcache.KEEP_ON_DELETE},
                ),
                (volume_key, modelcache.volume_claim(cache), {}),
                (job_key, modelcache.download_job(cache), {"ready_cel": modelcache.JOB_READY_CEL}),
            ):
                desired.add(key)
                resource.update(
                    rsp.desired.resources[key],
                    provider_object(
                        name=dns_label("modelcache", cache.name, key),
                        namespace=cache.namespace,
                        labels={
                            contracts.LABEL_MODEL_CACHE: label_value(cache.name),
                            contracts.LABEL_CLUSTER: label_value(cluster.name),
                        },
                        manifest=manifest,
                        provider_config_ref=provider,
                        **extra,
                    ),
                )
            if phase.phase == modelcache.PHASE_READY:
                rsp.desired.resources[job_key].ready = fnv1.Ready.READY_TRUE
        kept, removed = [], []
        for key, obj in sorted(observed.items()):
            if key in desired:
                continue
            meta = obj.get("metadata")
            labels = meta.get("labels") if isinstance(meta, dict) else None
            owner = labels.get(contracts.LABEL_CLUSTER) if isinstance(labels, dict) else None
            (kept if owner in unreadable else removed).append(key)
        for key in kept:
            resource.update(rsp.desired.resources[key], kept_manifest(observed[key]))
        if removed:
            # Deliberate, never silent: a cluster left the selector (or the source changed).
            response.normal(
                rsp, f"{name}: removing {', '.join(removed)}: no longer part of this cache"
            )
        ready = [p for p in phases if p.phase == modelcache.PHASE_READY]
        resource.update(
            rsp.desired.composite,
            {
                "status": {
                    "selectedClusters": len(selected),
                    "readyClusters": len(ready),
                    "clusters": [p.to_status(cache) for p in phases],
                }
            },
        )
        for p in phases:
            if p.phase == modelcache.PHASE_FAILED:
                response.warning(rsp, f"{name}: download on {p.cluster} failed: {p.message}")
        set_conditions(rsp, modelcache.cache_condition(phases, skipped))
        rsp.desired.composite.ready = (
            fnv1.Ready.READY_TRUE
            if phases and len(ready) == len(phases)
            else fnv1.Ready.READY_FALSE
        )
        return rsp
