"""A ModelAdapter: whether it is admitted, where it is staged, and what each cluster says.

An adapter is staged on exactly the clusters its base ModelDeployment is placed on: one
per ModelReplica of the base (a deployment has one per cluster), read from the control
plane, so it follows placement as the replicas come and go — a cluster the base leaves
loses the adapter's objects at the next reconcile, and the base's adapter volume goes
there with the base's ModelReplica.

Staging reuses the ModelCache machinery (modelcache.py): the same source shapes, the
same pinned downloaders and the same Job, pointed at the base's adapter volume on that
cluster (functions.common.adapters.claim_name, composed by compose-model-replica) with
the adapter's own directory as the mount's subPath, so every adapter of a base shares
one volume and the engine pods' mount never changes. Fetching per pod was the other
way: it needs the downloaders inside every engine pod (credentials included), and a
pod started later would fetch again; a volume per cluster is filled once.

Per cluster the adapter also gets its own HTTPRoute: requests whose `"model"` is its
served name reach the base's InferencePool there once the files are staged, and a 503
with why (an Envoy Gateway direct response) before; a name no route matches is the
gateway's 404. Once a cluster's Job is complete, a ConfigMap (`lora-<base>-<adapter>`, labelled with
the base and the adapter) tells that member's runtime to load the adapter into every
engine pod of the base through the engine's own endpoint; deleting the ModelAdapter
deletes it, and the runtime unloads the adapter.

Admission, decided from the namespace alone (an ML team is trusted only there):
- the base must exist and accept adapters (spec.template.spec.adapters), with a maxRank
  of at least the adapter's rank;
- the served name (spec.servedName, default the adapter's name) is not a name any
  ModelDeployment in the namespace is served under, nor another adapter's that came
  first (older creationTimestamp, then name);
- at most the base's maxAdapters are admitted, oldest first: the engines' slots are
  sized from that limit, never from the current count.

Pure: plain dicts in, plain values out; nothing reads the clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic_core import PydanticCustomError

from functions.common import adapters as contract
from functions.common import conditions, contracts, tenancy
from functions.common.adaptivepolicy import endpoint_name
from functions.common.conditions import Condition
from functions.common.naming import dns_label, is_object_name, label_value, resource_key
from functions.common.objects import provider_object
from functions.common.reader import InputError
from functions.common.served_name import container_served_names, engine_container_index
from functions.compose_model_deployment import modelcache
from functions.compose_model_deployment.modelcache import ClusterPhase, ModelCache

REASON_NO_BASE: Final = "BaseNotFound"
REASON_BASE_TAKES_NONE: Final = "BaseTakesNoAdapters"
REASON_RANK: Final = "RankAboveBase"
REASON_NAME_TAKEN: Final = "ServedNameTaken"
REASON_OVER_LIMIT: Final = "OverPerBaseLimit"
REASON_NOT_PLACED: Final = "BaseNotPlaced"
REASON_STAGED: Final = "Staged"
REASON_STAGING: Final = "Staging"
REASON_LOAD_FAILED: Final = "LoadFailed"

UNAVAILABLE_STATUS: Final = 503


@dataclass(frozen=True)
class Adapter:
    name: str
    namespace: str
    base: str
    served_name: str
    rank: int
    source_kind: str
    source: dict
    created: str = ""  # metadata.creationTimestamp (RFC 3339 sorts as text)
    retry: str = ""

    @property
    def order(self) -> tuple[str, str]:
        """Who came first: the older, then the name (a render has no timestamps)."""
        return (self.created or "~", self.name)

    @property
    def path(self) -> str:
        return contract.adapter_path(self.name)

    def as_cache(self) -> ModelCache:
        """The adapter as the ModelCache downloader sees a source."""
        return ModelCache(
            name=self.name,
            namespace=self.namespace,
            source_kind=self.source_kind,
            source=self.source,
            size="",
            storage_class="",
            cluster_selector=None,  # type: ignore[arg-type]  # not read by the Job
            retry=self.retry,
        )


def read_adapter(xr: Mapping[str, Any]) -> Adapter:
    """A ModelAdapter as typed values; InputError naming the field and the rule."""
    meta = xr.get("metadata") if isinstance(xr.get("metadata"), dict) else {}
    spec = xr.get("spec") if isinstance(xr.get("spec"), dict) else {}
    namespace = str(meta.get("namespace") or "")
    problem = tenancy.namespace_problem(namespace, "serve adapters")
    if problem is not None:
        raise InputError("metadata.namespace", problem)
    name = str(meta.get("name") or "")
    if not contract.is_served_name(name):
        raise InputError("metadata.name", f"must match {contract.SERVED_NAME_PATTERN}")
    ref = spec.get("deploymentRef")
    base = ref.get("name") if isinstance(ref, dict) else None
    if not (isinstance(base, str) and is_object_name(base) and len(base) <= 63):
        raise InputError("spec.deploymentRef.name", "must name a ModelDeployment (a DNS label)")
    served = spec.get("servedName", name)
    if not contract.is_served_name(served):
        # Not echoed: it would reach a route, a header match and a request body.
        raise InputError("spec.servedName", f"must match {contract.SERVED_NAME_PATTERN}")
    rank = contract.whole_number(spec.get("rank"))
    if rank not in contract.LORA_RANKS:
        raise InputError(
            "spec.rank", f"must be one of {', '.join(str(r) for r in contract.LORA_RANKS)}"
        )
    if not isinstance(spec.get("source"), dict):
        raise InputError("spec.source", "must be an object")
    try:
        # The ModelCache's own source rules: the same shapes, checked the same way.
        kind, entry = modelcache._one_source(spec["source"])
    except PydanticCustomError as err:
        context = err.context or {}
        at = str(context.get("at") or "")
        raise InputError(
            f"spec.source.{at}" if at else "spec.source", str(context.get("rule"))
        ) from None
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    return Adapter(
        name=name,
        namespace=namespace,
        base=base,
        served_name=served,
        rank=rank,
        source_kind=kind,
        source=entry,
        created=str(meta.get("creationTimestamp") or ""),
        retry=str(annotations.get(contracts.ANNOTATION_RETRY, "")),
    )


# --- The base, as the adapter needs it ------------------------------------------------------


@dataclass(frozen=True)
class Base:
    name: str
    capacity: contract.Capacity | None
    served_names: frozenset[str]


def _object(value: Any) -> Mapping[str, Any]:
    """A JSON object as read, or an empty one for any other shape (a team's odd object
    never fails another adapter's reconcile)."""
    return value if isinstance(value, dict) else {}


def _template_spec(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    return _object(_object(_object(deployment.get("spec")).get("template")).get("spec"))


def served_names(deployment: Mapping[str, Any]) -> frozenset[str]:
    """Every name a ModelDeployment is served under: its name, and the names its engine
    containers' own `--served-model-name` set."""
    meta = _object(deployment.get("metadata"))
    names = {str(meta.get("name") or "")}
    engines = _template_spec(deployment).get("engines")
    for engine in engines if isinstance(engines, list) else []:
        if not isinstance(engine, dict):
            continue
        members = engine.get("members")
        for member in members if isinstance(members, list) else []:
            template = _object(member.get("template") if isinstance(member, dict) else None)
            containers = _object(template.get("spec")).get("containers")
            containers = (
                [c for c in containers if isinstance(c, dict)]
                if isinstance(containers, list)
                else []
            )
            if containers:
                engine_container = containers[engine_container_index(containers)]
                names.update(container_served_names(str(engine.get("type")), engine_container))
    return frozenset(n for n in names if n)


def read_base(deployment: Mapping[str, Any]) -> Base:
    meta = _object(deployment.get("metadata"))
    tspec = _template_spec(deployment)
    engines = tspec.get("engines")
    types = [
        (f"spec.template.spec.engines[{i}]", str(e.get("type")))
        for i, e in enumerate(engines if isinstance(engines, list) else [])
        if isinstance(e, dict)
    ]
    capacity = contract.read_capacity(tspec.get("adapters"), types, "spec.template.spec.adapters")
    return Base(str(meta.get("name") or ""), capacity, served_names(deployment))


@dataclass(frozen=True)
class Placement:
    """One cluster the base is placed on, as its ModelReplica says."""

    cluster: str
    provider_config_ref: dict


def read_placements(replicas: Iterable[Mapping[str, Any]], base: str) -> list[Placement]:
    """The clusters the base's ModelReplicas run on, by name; a replica of another
    deployment (a label that collides after shortening) or of a shape we cannot read is
    left out."""
    found: dict[str, Placement] = {}
    for replica in replicas:
        spec = replica.get("spec") if isinstance(replica.get("spec"), dict) else {}
        cluster = spec.get("cluster") if isinstance(spec, dict) else None
        if spec.get("deployment") != base or not isinstance(cluster, dict):
            continue
        name = cluster.get("name")
        ref = cluster.get("providerConfigRef")
        if not isinstance(name, str) or not name:
            continue
        ref = ref if isinstance(ref, dict) else {}
        found[name] = Placement(
            name,
            {
                "kind": str(ref.get("kind") or "ClusterProviderConfig"),
                "name": str(ref.get("name") or name),
            },
        )
    return [found[k] for k in sorted(found)]


# --- Admission ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def admit(
    adapter: Adapter,
    base: Base | None,
    deployments: Iterable[Base],
    siblings: Iterable[Adapter],
) -> Refusal | None:
    """Why the adapter is not served, or None. `deployments`: every ModelDeployment in
    the namespace; `siblings`: every other ModelAdapter there (any base)."""
    if base is None:
        return Refusal(
            REASON_NO_BASE,
            f"spec.deploymentRef.name: ModelDeployment {adapter.namespace}/{adapter.base} "
            "does not exist",
        )
    if base.capacity is None:
        return Refusal(
            REASON_BASE_TAKES_NONE,
            f"ModelDeployment {adapter.base} does not accept adapters: set its "
            "spec.template.spec.adapters (this restarts its engines once)",
        )
    if adapter.rank > base.capacity.max_rank:
        return Refusal(
            REASON_RANK,
            f"spec.rank {adapter.rank} is above ModelDeployment {adapter.base}'s "
            f"spec.template.spec.adapters.maxRank {base.capacity.max_rank}",
        )
    for other in sorted(deployments, key=lambda d: d.name):
        if adapter.served_name in other.served_names:
            return Refusal(
                REASON_NAME_TAKEN,
                f"spec.servedName: {adapter.served_name!r} is a name ModelDeployment "
                f"{other.name} is served under; clients could not tell them apart",
            )
    others = [s for s in siblings if s.name != adapter.name]
    for other in sorted(others, key=lambda s: s.order):
        if other.served_name == adapter.served_name and other.order < adapter.order:
            return Refusal(
                REASON_NAME_TAKEN,
                f"spec.servedName: {adapter.served_name!r} is already ModelAdapter "
                f"{other.name}'s served name",
            )
    same_base = sorted(
        [*(s for s in others if s.base == adapter.base), adapter], key=lambda s: s.order
    )
    admitted = same_base[: base.capacity.max_adapters]
    if adapter not in admitted:
        return Refusal(
            REASON_OVER_LIMIT,
            f"ModelDeployment {adapter.base} holds at most {base.capacity.max_adapters} "
            f"adapters (spec.template.spec.adapters.maxAdapters), taken by "
            f"{', '.join(s.name for s in admitted)}",
        )
    return None


# --- What each cluster gets -----------------------------------------------------------------


def labels(adapter: Adapter) -> dict[str, str]:
    return {
        contract.LABEL_ADAPTER: label_value(adapter.name),
        contracts.LABEL_DEPLOYMENT: label_value(adapter.base),
    }


def job_key(adapter: Adapter, cluster: str) -> str:
    return resource_key("download", cluster, adapter.as_cache().source_hash)


def loader_key(cluster: str) -> str:
    return resource_key("load", cluster)


def record_key(cluster: str) -> str:
    return resource_key("loaded", cluster)


OBSERVE_ONLY: Final = ("Observe",)


def loaded_record(adapter: Adapter) -> dict:
    """The member agent's record of what its engines hold (observed, never written)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": contract.loaded_record_name(adapter.base),
            "namespace": adapter.namespace,
        },
    }


@dataclass(frozen=True)
class Loaded:
    """On one cluster: how many of the base's engine pods hold the adapter, of how many,
    and the first error an engine gave loading it (its own words)."""

    loaded: int = 0
    replicas: int = 0
    error: str = ""
    reported: bool = False  # the agent has written a record for it there


def read_loaded(observed_object: dict | None, served_name: str) -> Loaded:
    """The adapter's entry in the observed record; not reported for any shape it cannot
    be read from (a member's odd answer never fails the adapter)."""
    manifest = modelcache._remote(observed_object)
    data = manifest.get("data") if isinstance(manifest, dict) else None
    raw = data.get(served_name) if isinstance(data, dict) else None
    try:
        entry = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        entry = None
    if not isinstance(entry, dict):
        return Loaded()
    loaded = contract.whole_number(entry.get("loaded"))
    replicas = contract.whole_number(entry.get("replicas"))
    error = entry.get("error")
    if loaded is None or replicas is None or not isinstance(error, str):
        return Loaded()
    return Loaded(loaded, replicas, error[:1024], reported=True)


def route_key(cluster: str) -> str:
    return resource_key("route", cluster)


def unavailable_key(cluster: str) -> str:
    return resource_key("unavailable", cluster)


def route_name(adapter: Adapter) -> str:
    return dns_label("lora", adapter.base, adapter.name)


def unavailable_body(adapter: Adapter, cluster: str, phase: ClusterPhase) -> str:
    """A client's 503 while the adapter is not on this cluster yet: what and why."""
    return json.dumps(
        {
            "error": {
                "code": UNAVAILABLE_STATUS,
                "type": "adapter_unavailable",
                "reason": f"Adapter{phase.phase}",
                "model": adapter.served_name,
                "message": (
                    f"adapter {adapter.served_name} (on {adapter.base}) is not loaded on "
                    f"cluster {cluster} yet: {phase.phase}: {phase.message}"
                ),
            }
        },
        sort_keys=True,
    )


def route(adapter: Adapter, staged: bool) -> dict:
    """The adapter's own route on a member: requests whose `"model"` is its served name
    reach the base's InferencePool there once its files are staged (the engines' gate
    keeps a pod out of the pool until it holds them), and a 503 saying why before."""
    rule: dict[str, Any] = {
        "matches": [
            {
                "path": {"type": "PathPrefix", "value": "/"},
                "headers": [
                    {
                        "type": "Exact",
                        "name": contracts.HEADER_MODEL_NAME,
                        "value": adapter.served_name,
                    }
                ],
            }
        ]
    }
    if staged:
        rule["backendRefs"] = [
            {
                "group": contracts.INFERENCE_POOL_GROUP,
                "kind": contracts.KIND_INFERENCE_POOL,
                "name": endpoint_name(adapter.base),
            }
        ]
    else:
        rule["filters"] = [
            {
                "type": "ExtensionRef",
                "extensionRef": {
                    "group": contracts.ENVOY_GATEWAY_GROUP,
                    "kind": "HTTPRouteFilter",
                    "name": route_name(adapter),
                },
            }
        ]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": route_name(adapter),
            "namespace": adapter.namespace,
            "labels": labels(adapter),
        },
        "spec": {
            "parentRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": contracts.INFERENCE_GATEWAY_NAME,
                    "namespace": contracts.INFERENCE_GATEWAY_NAMESPACE,
                }
            ],
            "rules": [rule],
        },
    }


def unavailable_filter(adapter: Adapter, cluster: str, phase: ClusterPhase) -> dict:
    return {
        "apiVersion": f"{contracts.ENVOY_GATEWAY_GROUP}/v1alpha1",
        "kind": "HTTPRouteFilter",
        "metadata": {
            "name": route_name(adapter),
            "namespace": adapter.namespace,
            "labels": labels(adapter),
        },
        "spec": {
            "directResponse": {
                "statusCode": UNAVAILABLE_STATUS,
                "contentType": "application/json",
                "body": {"type": "Inline", "inline": unavailable_body(adapter, cluster, phase)},
            }
        },
    }


def download_job(adapter: Adapter) -> dict:
    """The ModelCache download Job, writing into the adapter's own directory of its
    base's volume."""
    cache = adapter.as_cache()
    job = modelcache.download_job(cache)
    job["metadata"]["name"] = dns_label("lora", adapter.base, adapter.name, cache.source_hash)
    job["metadata"]["labels"] = labels(adapter)
    pod = job["spec"]["template"]
    pod["metadata"]["labels"] = labels(adapter)
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == "weights":
            volume["persistentVolumeClaim"] = {"claimName": contract.claim_name(adapter.base)}
    for mount in pod["spec"]["containers"][0]["volumeMounts"]:
        if mount["name"] == "weights":
            mount["subPath"] = adapter.name
    return job


def loader_config(adapter: Adapter) -> dict:
    """What the member's runtime loads into every engine pod of the base: present only
    once the adapter's files are complete on that cluster."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": dns_label("lora", adapter.base, adapter.name),
            "namespace": adapter.namespace,
            "labels": labels(adapter),
        },
        "data": {
            contract.CONFIG_SERVED_NAME: adapter.served_name,
            contract.CONFIG_PATH: adapter.path,
            contract.CONFIG_RANK: str(adapter.rank),
        },
    }


@dataclass(frozen=True)
class Composed:
    key: str
    body: dict
    ready: bool = False


@dataclass(frozen=True)
class AdapterPlan:
    placements: list[Placement]
    phases: list[ClusterPhase]
    composed: list[Composed]
    removed: list[str] = field(default_factory=list)
    refusal: Refusal | None = None
    loaded: list[Loaded] = field(default_factory=list)  # one per phase, in its order

    @property
    def staged(self) -> list[ClusterPhase]:
        return [p for p in self.phases if p.phase == modelcache.PHASE_READY]

    @property
    def all_staged(self) -> bool:
        return bool(self.phases) and len(self.staged) == len(self.phases)

    def status(self, adapter: Adapter) -> dict:
        return {
            "servedName": adapter.served_name,
            "base": adapter.base,
            "selectedClusters": len(self.placements),
            "stagedClusters": len(self.staged),
            "clusters": [
                {
                    "cluster": p.cluster,
                    "phase": p.phase,
                    "reason": p.reason,
                    "message": p.message,
                    "path": adapter.path,
                    **(
                        {
                            "loadedReplicas": held.loaded,
                            "replicas": held.replicas,
                            **({"loadError": held.error} if held.error else {}),
                        }
                        if held.reported
                        else {}
                    ),
                }
                for p, held in zip(
                    self.phases, self.loaded or [Loaded()] * len(self.phases), strict=True
                )
            ],
        }

    def condition(self) -> Condition:
        if self.refusal is not None:
            return Condition(
                contract.ADAPTER_READY, conditions.FALSE, self.refusal.reason, self.refusal.message
            )
        if not self.placements:
            return Condition(
                contract.ADAPTER_READY,
                conditions.FALSE,
                REASON_NOT_PLACED,
                "the base ModelDeployment is placed on no cluster yet",
            )
        failed = [
            f"{p.cluster}: loaded on {held.loaded} of {held.replicas} replicas: {held.error}"
            for p, held in zip(self.phases, self.loaded, strict=False)
            if held.error
        ]
        if self.all_staged and failed:
            return Condition(
                contract.ADAPTER_READY, conditions.FALSE, REASON_LOAD_FAILED, "; ".join(failed)
            )
        if self.all_staged:
            return Condition(
                contract.ADAPTER_READY,
                conditions.TRUE,
                REASON_STAGED,
                f"staged on {', '.join(p.cluster for p in self.phases)}",
            )
        waiting = [
            f"{p.cluster}: {p.phase} ({p.message})"
            for p in self.phases
            if p.phase != modelcache.PHASE_READY
        ]
        return Condition(
            contract.ADAPTER_READY, conditions.FALSE, REASON_STAGING, "; ".join(waiting)
        )


def plan_adapter(
    adapter: Adapter,
    refusal: Refusal | None,
    placements: list[Placement],
    observed: Mapping[str, dict],
) -> AdapterPlan:
    """Per cluster the base is placed on: the download Job, and once it is complete the
    loader's ConfigMap. A refused adapter composes nothing (what it composed before is
    removed: it must not be served), and says why."""
    if refusal is not None:
        return AdapterPlan([], [], [], sorted(observed), refusal)
    phases: list[ClusterPhase] = []
    loaded: list[Loaded] = []
    composed: list[Composed] = []
    for placement in placements:
        key = job_key(adapter, placement.cluster)
        phase = modelcache.observe_cluster(placement.cluster, observed.get(key), None)
        phases.append(phase)
        staged = phase.phase == modelcache.PHASE_READY
        loaded.append(read_loaded(observed.get(record_key(placement.cluster)), adapter.served_name))
        objects: list[tuple[str, dict, dict]] = [
            # What the member's engines hold, as its agent writes it: read as it changes.
            (
                record_key(placement.cluster),
                loaded_record(adapter),
                {"management_policies": OBSERVE_ONLY, "watch": True},
            ),
            # Watched: a finished download is read as it happens, not at the next poll.
            (key, download_job(adapter), {"ready_cel": modelcache.JOB_READY_CEL, "watch": True}),
            (route_key(placement.cluster), route(adapter, staged), {}),
        ]
        if staged:
            objects.append((loader_key(placement.cluster), loader_config(adapter), {}))
        else:
            objects.append(
                (
                    unavailable_key(placement.cluster),
                    unavailable_filter(adapter, placement.cluster, phase),
                    {},
                )
            )
        for object_key, manifest, extra in objects:
            body = provider_object(
                name=dns_label("lora", adapter.name, object_key),
                namespace=adapter.namespace,
                labels={
                    **labels(adapter),
                    contracts.LABEL_CLUSTER: label_value(placement.cluster),
                },
                manifest=manifest,
                provider_config_ref=placement.provider_config_ref,
                **extra,
            )
            composed.append(Composed(object_key, body, ready=staged))
    desired = {c.key for c in composed}
    removed = sorted(k for k in observed if k not in desired)
    return AdapterPlan(placements, phases, composed, removed, loaded=loaded)
