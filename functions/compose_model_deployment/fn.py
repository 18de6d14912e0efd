"""The gRPC shell of compose-model-deployment: a ModelDeployment (a ModelCache has its own
shell, cache_fn.py; main.py picks one by kind).

Reads the ModelDeployment, asks for every InferenceCluster (the clusterSelector's
matchExpressions cannot be put in a required-resource selector, so all clusters are
fetched and the selector is applied in pure code), decides parking and placement in
pure code, composes one ModelReplica per cluster used, and writes status and
conditions. The wall clock is read here, once, and passed in.

What the rest of the fleet holds comes from each cluster's capacity ledger
(status.ledger, written by compose-serving-stack; ledger_view.py), and this
deployment's own ModelReplicas from the observed resources: a request grows with the
clusters, not with the models in the fleet.

Inputs are resolved explicitly: until the clusters have been fetched nothing new is
placed and every ModelReplica composed before is kept as it is; an empty answer is
"absent" (no clusters), never "not fetched yet". What cannot be read is frozen, never
read as gone (fleet.py).

Parsing a cluster (and replaying its ledger) or a replica is memoized by its uid and
resourceVersion (or, without them, its serialized bytes): the same fleet arrives on
every reconcile, and converting protobuf Structs is the costliest part of a request.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from functions.common import contracts
from functions.common.conditions import Event
from functions.common.sdk import (
    GuardedRunner,
    Required,
    call_back_within,
    describe_composite,
    emit,
    keep_observed,
    not_fetched,
    required,
    set_conditions,
)
from functions.common.structs import ParsedByContent, plain, plain_only, shared_struct_bytes
from functions.compose_model_deployment import (
    advice,
    cel_env,
    confirm,
    fleet,
    launch,
    ledger_view,
    manifests,
    modelcache,
    ondemand,
    parking,
    pod_security,
    rollout,
    status,
    targets,
)
from functions.compose_model_deployment.devices import check_selectors
from functions.compose_model_deployment.model import (
    HOLDING_FIELDS,
    Deployment,
    Holding,
    InputError,
    cluster_name,
    read_deployment,
    read_holding,
)
from functions.compose_model_deployment.placement import PlacementPlan, PoolRoom, place

REQUIRED_CLUSTERS: Final = "inference-clusters"
REQUIRED_CACHE: Final = "model-cache"
# What a waiting result keeps of an observed ModelReplica's metadata (as it always has).
KEPT_REPLICA_METADATA: Final = ("name", "labels")
# Core moves every requeue after a TTL by up to this fraction either way (requeue_ttl).
CORE_REQUEUE_JITTER: Final = 0.1
# The shortest call-back asked for: a timer closer than this is as good as ended.
MIN_REQUEUE_SECONDS: Final = 0.25


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
    """Every InferenceCluster (with its ledger), and the referenced ModelCache if any."""
    response.require_resources(
        rsp, REQUIRED_CLUSTERS, contracts.API_GROUP_VERSION, contracts.KIND_INFERENCE_CLUSTER
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
        return modelcache.absent_view(deployment.model_cache)
    try:
        return modelcache.read_cache_view(asked.items[0])
    except InputError as err:
        response.fatal(rsp, f"{name}: spec.modelCacheRef: {where}: {err}")
        return False


def _admitted(
    rsp: fnv1.RunFunctionResponse, name: str, deployment: Deployment, clusters: list
) -> bool:
    """The pod templates under every selected cluster's pod policy (pod_security.py);
    False after a fatal result, given before anything is placed, so nothing composed
    before changes."""
    try:
        pod_security.check(deployment, clusters)
    except InputError as err:
        response.fatal(rsp, f"{name}: {err}")
        return False
    return True


def _revisions(deployment: Deployment, previous: dict) -> tuple[rollout.State | None, dict, str]:
    """Where the rollout stood (status.rollout), the deployment's template and its
    revision, computed once per reconcile."""
    template = manifests.replica_template(deployment)
    return rollout.read_state(previous.get("rollout")), template, rollout.revision_of(template)


def _parking_definition(
    deployment: Deployment,
    revision: str,
    before: rollout.State | None,
    parked: parking.Parked | None,
) -> str:
    """What parking counts failures for: while a new revision rolls out (or was rolled
    back) the model still serves the last good one, and only its failures may park the
    model; the new revision's start failures fail its wave instead. A parked model
    serves nothing to protect: its new definition is counted (and unparks it) at once."""
    if (
        before is not None
        and parked is None
        and before.previous_definition
        and revision != before.previous
    ):
        return before.previous_definition
    return deployment.definition_hash


def _write_rollout(
    rsp: fnv1.RunFunctionResponse, name: str, rolled: rollout.Plan, written: dict
) -> None:
    """The status with status.rollout, an event per wave transition, and a call back
    when a bake or a deadline ends: time passing is no event, and a function is only
    called on one."""
    resource.update(
        rsp.desired.composite,
        {"status": {**written, "rollout": rollout.to_status(rolled.state)}},
    )
    emit(rsp, *(Event(warning, f"{name}: {message}") for warning, message in rolled.events))
    if rolled.requeue_after is not None:
        call_back_within(rsp, requeue_ttl(rolled.requeue_after))


def requeue_ttl(seconds: float) -> float:
    """The TTL that has core call again by the time `seconds` have passed. Core requeues
    an XR after the pipeline's TTL moved by a random ±10 % (its `jitter`, crossplane
    v2.3 internal/controller/apiextensions/composite): asked for the timer itself, a
    2-minute bake ends up to 12 s late. Asked for a tenth less, the call comes at the
    timer's end at the latest; one that comes early finds the rest of the timer and asks
    again for a tenth of what it asked before, so a couple of calls close it. Millisecond
    precision: a whole-second TTL would round a timer up by up to a second."""
    return max(MIN_REQUEUE_SECONDS, seconds / (1 + CORE_REQUEUE_JITTER))


def _read_spec(xr: dict) -> tuple[Deployment, list]:
    """The deployment, and the launch mistakes its spec itself shows (launch.py),
    refused (InputError) before anything is placed."""
    deployment = read_deployment(xr)
    check_selectors(deployment)
    return deployment, launch.check_spec(xr, deployment)


class FunctionRunner(GuardedRunner):
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self.clock = clock or (lambda: datetime.now(UTC))
        cel_env.warm_up()
        self.views = ParsedByContent(ledger_view.read_view, ledger_view.LEDGER_FIELDS)
        self.holdings = ParsedByContent(read_holding, HOLDING_FIELDS)

    def run(  # noqa: PLR0915 (the function's steps, read top to bottom)
        self, req: fnv1.RunFunctionRequest
    ) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        now = self.clock()
        xr = plain(req.observed.composite.resource)
        name = describe_composite(xr)

        # 1. Resolve inputs.
        try:
            deployment, spec_launch_warnings = _read_spec(xr)
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
        asked_cache = required(req, REQUIRED_CACHE) if deployment.model_cache else None
        missing = not_fetched(asked_clusters, *([asked_cache] if asked_cache is not None else []))
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
        readable, base_rooms, listed = self._read_fleet(
            rsp,
            name,
            deployment,
            cluster_items=asked_clusters.items,
            observed_own=observed_own,
        )
        clusters, holdings, frozen = readable.clusters, readable.holdings, readable.frozen
        if not _admitted(rsp, name, deployment, clusters):
            return rsp
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

        # 2. Decide: parking first, then placement (a parked model places nothing), then
        # which revision each placed cluster runs.
        before, template, revision = _revisions(deployment, previous)
        decision = parking.decide(
            definition=_parking_definition(
                deployment, revision, before, status.read_parked(previous)
            ),
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
                base_rooms=base_rooms,
            )
            answering = targets.answering_at(existing_at, clusters, deployment, plan.nearest)
        decided = targets.replica_targets(plan, decision, answering, by_name)
        if activity is not None and not decision.is_parked:
            decided = targets.on_demand_targets(
                decided, existing_at, clusters, deployment, idle=desired == 0
            )
        # A new placement its cluster's ledger does not list yet: back within seconds to
        # see the ledger it writes next, not a TTL later (confirm.py).
        if confirm.unconfirmed(
            ((c.name, pool, n) for c, pool, n in decided.replicas), listed, own, now
        ):
            call_back_within(rsp, confirm.CALL_BACK_SECONDS)

        rolled = self._rollout(
            deployment,
            frozen_keys=readable.frozen_keys,
            template=template,
            revision=revision,
            before=before,
            decided=decided,
            observed_own=observed_own,
            decision=decision,
            now=now,
        )

        # 3. Compose one ModelReplica per cluster used.
        self._compose(
            rsp,
            deployment,
            decided,
            readable.frozen_keys,
            cache_mount=modelcache.replica_mount(cache) if cache is not None else None,
            cache_ready_at=modelcache.ready_at(cache, own),
            activator_at=targets.activator_at(activity, decided, own),
            rollout_plan=rolled,
            template=template,
        )

        # 4. Status, results and conditions.
        outcome = status.deployment_status(
            name=deployment.name,
            plan=plan,
            own=own,
            previous=previous,
            desired=desired,
            decision=decision,
            cache=cache,
            activity=activity,
            now=now,
        )
        outcome.status.update(launch.status_warnings(own, spec_launch_warnings))
        emit(rsp, *status.events(name, plan, decision, outcome.unplaceable))
        _write_rollout(rsp, name, rolled, outcome.status)
        for message in [
            *advice.spec_warnings(deployment, cache, plan),
            *map(str, spec_launch_warnings),
        ]:
            response.warning(rsp, f"{name}: {message}")
        set_conditions(
            rsp,
            *status.derive_conditions(
                desired=desired,
                plan=plan,
                ready=outcome.ready,
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
    def _rollout(
        deployment: Deployment,
        *,
        template: dict,
        revision: str,
        frozen_keys: set[str],
        before: rollout.State | None,
        decided: targets.Targets,
        observed_own: dict[str, struct_pb2.Struct],
        decision: parking.Decision,
        now: datetime,
    ) -> rollout.Plan:
        """Which revision each placed cluster runs (rollout.py), from status.rollout and
        what the observed ModelReplicas report. Without a status.rollout (a deployment
        composed before rollouts), the template an observed ModelReplica carries is the
        last good one."""
        observed: dict[str, rollout.Observed] = {}
        for key in sorted(observed_own):
            seen = rollout.read_observed(plain_only(observed_own[key], rollout.OBSERVED_FIELDS))
            if seen is not None:
                observed.setdefault(seen.cluster, seen)
        observed_template = None
        if before is None and observed_own:
            first = plain(observed_own[sorted(observed_own)[0]])
            observed_template = rollout.template_of(first.get("spec") or {}) or None
        return rollout.plan(
            policy=deployment.rollout,
            previous=before,
            revision=revision,
            template=template,
            # A frozen ModelReplica is kept as observed whatever its revision: no wave
            # waits for a cluster that cannot be read, and none is given it.
            targets=[
                rollout.Target(c.name, c.labels)
                for c, _, _ in decided.replicas
                if manifests.replica_key(c.name) not in frozen_keys
            ],
            observed=observed,
            observed_template=observed_template,
            serving=not decision.is_parked and any(o.ready_replicas > 0 for o in observed.values()),
            paused=deployment.rollout_paused,
            undo=deployment.rollout_undo,
            now=now,
        )

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
        observed_own: dict[str, struct_pb2.Struct],
    ) -> tuple[fleet.Fleet, dict[tuple[str, str], PoolRoom], dict[tuple[str, str], int]]:
        """Every cluster (with its ledger) and own ModelReplica that can be read, each
        failure said in a warning; what cannot be read is frozen (fleet.py) and kept
        exactly as observed. Also the rooms of the pools this deployment holds nothing
        in, from the ledgers (ledger_view.py), and what the ledgers list for it
        (confirm.py)."""
        views = []
        unreadable: dict[str, str] = {}  # cluster name -> why it cannot be read
        for item in cluster_items:
            try:
                views.append(self.views(item))
            except InputError as err:
                # One malformed cluster must not stop every model in the fleet.
                unreadable[cluster_name(plain(item))] = str(err)
        own_parsed: list[Holding] = []
        unreadable_own: list[str] = []
        for key, struct in observed_own.items():
            try:
                own_parsed.append(self.holdings(struct))
            except InputError as err:
                unreadable_own.append(key)
                response.warning(rsp, f"{name}: keeping {key} as it is: {err}")
        counted = ledger_view.counted(views, own_parsed, deployment.namespace, deployment.name)
        readable = fleet.freeze(
            deployment,
            clusters=[v.cluster for v in views],
            unreadable_clusters=unreadable,
            own=own_parsed,
            unreadable_own=unreadable_own,
            listed=counted.listed,
        )
        for message in readable.warnings:
            response.warning(rsp, f"{name}: {message}")
        keep_observed(
            rsp,
            {
                key: plain(observed_own[key])
                for key in sorted(readable.frozen_keys)
                if key in observed_own
            },
            metadata=KEPT_REPLICA_METADATA,
        )
        return (
            readable,
            counted.rooms,
            confirm.ledgered(views, deployment.namespace, deployment.name),
        )

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
        rollout_plan: rollout.Plan | None = None,
        template: dict | None = None,
    ) -> None:
        """Write each ModelReplica (manifests.model_replicas). They are the same but for a
        few per-cluster fields, and the autoscaling member list in each grows with the
        clusters used (the output grows with their square): each shared entry's Struct
        bytes are written once, only what differs per cluster is written again, and upb
        parses each ModelReplica in one call. Mid-rollout the clusters carry one of two
        templates: what is shared is kept per revision."""
        shared_by_revision: dict[str, dict[tuple[str, ...], bytes]] = {}
        for key, body in manifests.model_replicas(
            deployment,
            decided,
            frozen_keys,
            cache_mount=cache_mount,
            cache_ready_at=cache_ready_at,
            activator_at=activator_at,
            rollout_plan=rollout_plan,
            template=template,
        ):
            target = rsp.desired.resources[key].resource
            shared = shared_by_revision.setdefault(body["spec"].get("revision", ""), {})
            target.MergeFromString(shared_struct_bytes(body, manifests.VARYING_FIELDS, shared))
