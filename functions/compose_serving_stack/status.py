"""What an operator reads on an InferenceCluster: `status.telemetry`, `status.gateway`,
`status.deviceClasses`, and the StackReady / CollectorReady / MappingsAccepted
conditions, all derived from typed inputs and the observed composed resources, never
from the wall clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from functions.common import conditions
from functions.common.adaptivepolicy import needs_vocabulary_signals
from functions.common.conditions import Condition, Event
from functions.common.inventory import inventory_from_record
from functions.common.metricmapping import (
    SOURCE_BUILTIN,
    MappingInUse,
    RefusedMapping,
    ResolvedMappings,
)
from functions.compose_serving_stack import (
    collector_objects,
    device_classes,
    runtime_hosting,
    substrate,
)

if TYPE_CHECKING:  # compose.py builds its Plan from this module's Telemetry
    from functions.compose_serving_stack.compose import Cluster, Plan

MODE_PUSH: Final = "Push"
MODE_LOCAL: Final = "Local"  # no destination: the collector serves the agent's signals only
MODE_DISABLED: Final = "Disabled"


class Reason(StrEnum):
    READY = "Ready"
    NOT_READY = "NotReady"
    CREATING = "Creating"
    NO_DESTINATION = "NoTelemetryDestination"
    DESTINATION_INVALID = "TelemetryDestinationInvalid"
    PUSHING = "Pushing"
    ALL_ACCEPTED = "AllAccepted"
    REFUSED = "MappingRefused"
    COMPOSED = "Composed"
    WAITING = "WaitingForInputs"
    DISABLED = "TelemetryDisabled"


@dataclass(frozen=True)
class Telemetry:
    mode: str
    reason: str
    destination: str = ""
    unmapped_engine_types: tuple[str, ...] = ()
    # Per engine type, the mapping its metrics are normalized by: a built-in, or the
    # platform team's MetricMapping that replaced it.
    mappings: tuple[MappingInUse, ...] = ()
    # The ModelReplicas here whose agent reads the collector's signals page.
    signals_for: tuple[str, ...] = ()
    # Substrate components scraped here (by job name) that no MetricMapping maps: their
    # series arrive under their own names.
    unmapped_components: tuple[str, ...] = ()
    # Where engines here send OTLP traces (the collector's receiver), while the
    # destination carries them; compose-model-deployment hands it to each ModelReplica.
    traces_endpoint: str = ""

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "mode": self.mode,
            "reason": self.reason,
            "mappings": [m.to_status() for m in self.mappings],
            "unmappedEngineTypes": list(self.unmapped_engine_types),
        }
        if self.traces_endpoint:
            status["tracesEndpoint"] = self.traces_endpoint
        if self.unmapped_components:
            status["unmappedComponents"] = list(self.unmapped_components)
        if self.signals_for:
            status["signalsFor"] = list(self.signals_for)
        if self.destination:
            status["destination"] = self.destination
        return status


def _spec_on(replica: object, cluster: str) -> Mapping[str, Any] | None:
    """The spec of a ModelReplica that names `cluster` (spec.cluster.name), or None: a
    replica of another cluster, or one whose shape cannot say (one broken replica must
    not fail its cluster's reconcile; the ledger warns about it, ledger.py)."""
    spec = replica.get("spec") if isinstance(replica, Mapping) else None
    ref = spec.get("cluster") if isinstance(spec, Mapping) else None
    return spec if isinstance(ref, Mapping) and ref.get("name") == cluster else None


def unmapped_engine_types(
    replicas: Iterable[Mapping[str, Any]], cluster: str, mapped_engines: Iterable[str]
) -> tuple[str, ...]:
    """Engine types of the ModelReplicas on this cluster that no accepted mapping covers."""
    mapped = set(mapped_engines)
    seen: set[str] = set()
    for replica in replicas:
        spec = _spec_on(replica, cluster)
        engines = spec.get("engines") if spec is not None else None
        if not isinstance(engines, list):
            continue
        for engine in engines:
            engine_type = engine.get("type") if isinstance(engine, Mapping) else None
            if isinstance(engine_type, str) and engine_type and engine_type not in mapped:
                seen.add(engine_type)
    return tuple(sorted(seen))


def replicas_needing_signals(
    replicas: Iterable[Mapping[str, Any]], cluster: str
) -> tuple[str, ...]:
    """`namespace/name` of the ModelReplicas on this cluster whose agent computes
    vocabulary signals (functions/common/adaptivepolicy.py decides per replica)."""
    found = []
    for replica in replicas:
        spec = _spec_on(replica, cluster)
        if spec is not None and needs_vocabulary_signals(spec.get("autoscaling")):
            meta = replica.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            found.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return tuple(sorted(found))


def replicas_on(replicas: Iterable[Mapping[str, Any]], cluster: str) -> tuple[tuple[str, str], ...]:
    """(namespace, name) of the ModelReplicas on this cluster: where the agent keeps a
    health record for each (runtime_hosting's per-namespace health Roles)."""
    found = set()
    for replica in replicas:
        if _spec_on(replica, cluster) is None:
            continue
        meta = replica.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if isinstance(namespace, str) and namespace and isinstance(name, str) and name:
            found.add((namespace, name))
    return tuple(sorted(found))


def is_ready(observed: Mapping[str, Any] | None) -> bool | None:
    """A composed resource's Ready condition: True, False, or None when not observed yet."""
    return None if not observed else conditions.is_ready(observed)


def _names(keys: Sequence[str], limit: int = 5) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:limit])
    return f"{shown} and {len(keys) - limit} more" if len(keys) > limit else shown


def readiness(
    condition_type: str, keys: Sequence[str], observed: Mapping[str, Mapping[str, Any]], what: str
) -> Condition:
    """One condition over a set of composed resources: ready only when all of them are."""
    unseen = [k for k in keys if is_ready(observed.get(k)) is None]
    waiting = [k for k in keys if is_ready(observed.get(k)) is False]
    if not unseen and not waiting:
        return Condition(
            condition_type,
            conditions.TRUE,
            Reason.READY,
            f"{what}: all {len(keys)} resources are ready",
        )
    if waiting:
        return Condition(
            condition_type,
            conditions.FALSE,
            Reason.NOT_READY,
            f"{what}: not ready yet: {_names(waiting + unseen)}",
        )
    return Condition(
        condition_type,
        conditions.FALSE,
        Reason.CREATING,
        f"{what}: being created: {_names(unseen)}",
    )


def observed_inventory(observed_record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The agent's inventory document, from the Observe-only Object's atProvider."""
    if not observed_record:
        return None
    manifest = ((observed_record.get("status") or {}).get("atProvider") or {}).get("manifest") or {}
    return inventory_from_record(manifest.get("data"))


def gateway_address(observed_gateway: Mapping[str, Any] | None) -> str:
    """The first address the member's Gateway reports (through the Object's atProvider)."""
    if not observed_gateway:
        return ""
    manifest = ((observed_gateway.get("status") or {}).get("atProvider") or {}).get(
        "manifest"
    ) or {}
    for address in (manifest.get("status") or {}).get("addresses") or []:
        if isinstance(address, Mapping) and address.get("value"):
            return str(address["value"])
    return ""


def _in_use_summary(in_use: Sequence[MappingInUse]) -> str:
    builtin = sum(1 for m in in_use if m.source == SOURCE_BUILTIN)
    return (
        f"{len(in_use)} mappings are in the collector "
        f"({builtin} built-in, {len(in_use) - builtin} MetricMappings)"
    )


def mappings_condition(
    condition_type: str, refused: Sequence[RefusedMapping], in_use: Sequence[MappingInUse]
) -> Condition:
    if not refused:
        return Condition(
            condition_type, conditions.TRUE, Reason.ALL_ACCEPTED, _in_use_summary(in_use)
        )
    return Condition(
        condition_type,
        conditions.FALSE,
        Reason.REFUSED,
        "refused (the rest of the collector config still renders, and a built-in keeps "
        "its engine type): "
        + "; ".join(r.message for r in refused)
        + f"; {_in_use_summary(in_use)}",
    )


def cluster_status(
    telemetry: Telemetry,
    observed: Mapping[str, Mapping[str, Any]],
    needed_classes: Sequence[str] = (),
) -> dict:
    """status: telemetry, the member Gateway's address, the inventory record and the
    DeviceClasses the pools need (whether the member has each)."""
    status: dict = {"telemetry": telemetry.to_status()}
    if needed_classes:
        status["deviceClasses"] = device_classes.report(needed_classes, observed)
    gateway = gateway_address(observed.get(substrate.GATEWAY_KEY))
    if gateway:
        status["gateway"] = {"address": gateway}
    inventory = observed_inventory(observed.get(runtime_hosting.INVENTORY_KEY))
    if inventory is not None:
        status["inventory"] = inventory
    return status


def waiting_condition(missing: Sequence[str]) -> Condition:
    """Inputs not fetched yet: nothing is composed anew, and Composed says so."""
    return Condition(
        conditions.COMPOSED, conditions.FALSE, Reason.WAITING, f"waiting for {', '.join(missing)}"
    )


def derive_conditions(
    composite: str,
    cluster: Cluster,
    decided: Plan,
    mappings: ResolvedMappings,
    observed: Mapping[str, Mapping[str, Any]],
) -> list[Condition]:
    """StackReady, CollectorReady, MappingsAccepted and Composed, in that order;
    `composite` is the XR as messages name it."""
    stack_ready = readiness(
        conditions.STACK_READY,
        # The inventory record's absence (no agent turn yet) is not an unready stack.
        [k for k in decided.stack_keys if k != runtime_hosting.INVENTORY_KEY],
        observed,
        f"{cluster.stack} stack",
    )
    if decided.collector_keys:
        collector_ready = readiness(
            conditions.COLLECTOR_READY,
            [collector_objects.DEPLOYMENT_KEY],
            observed,
            "collector",
        )
    elif decided.keep_observed_collector:
        collector_ready = Condition(
            conditions.COLLECTOR_READY,
            conditions.truth(is_ready(observed.get(collector_objects.DEPLOYMENT_KEY))),
            Reason.DESTINATION_INVALID,
            decided.telemetry.reason,
        )
    else:
        collector_ready = Condition(
            conditions.COLLECTOR_READY,
            conditions.FALSE,
            Reason.DISABLED,
            decided.telemetry.reason,
        )
    refusals = mappings_condition(conditions.MAPPINGS_ACCEPTED, mappings.refused, mappings.in_use)
    composed_message = (
        f"{composite} (stack {cluster.stack}, region {cluster.region}): "
        f"{len(decided.composed)} resources; telemetry {decided.telemetry.mode}"
    )
    return [
        stack_ready,
        collector_ready,
        refusals,
        Condition(conditions.COMPOSED, conditions.TRUE, Reason.COMPOSED, composed_message),
    ]


def events(
    composite: str,
    cluster: str,
    mappings: ResolvedMappings,
    telemetry: Telemetry,
    reported_classes: Iterable[Mapping[str, str]] = (),
) -> list[Event]:
    """Each DeviceClass the member lacks and each refused mapping (warnings), and the
    engine types passing through unmapped; `composite` is the XR as messages name it."""
    found = [
        Event(
            True,
            f"{composite}: DeviceClass {missing_class} (a node pool's devices.driver or "
            "additionalDevices driver) does not exist on the cluster: no model is placed "
            "in a pool that would claim it (its pods would stay pending); install the "
            "DRA driver's DeviceClass or correct the driver",
        )
        for missing_class in device_classes.missing(reported_classes)
    ]
    found += [
        Event(True, f"{refused.message}: left out of the collector on {cluster}")
        for refused in mappings.refused
    ]
    if telemetry.unmapped_engine_types:
        found.append(
            Event(
                False,
                "engine types without a MetricMapping pass through under their own names: "
                + ", ".join(telemetry.unmapped_engine_types),
            )
        )
    return found
