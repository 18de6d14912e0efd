"""Which TelemetryDestination holds the fleet, and what each one's conditions say.

The fleet has one destination: the oldest (functions.common.telemetrydestination
.active_destination). A newer one composes nothing new, keeps what it composed before
and says which one holds the fleet (`Conflict`); the active one reports its gateway's
readiness from the Objects the member returned (`GatewayReady`). Until every
TelemetryDestination has been fetched, nothing is decided.

Pure: identities, observed dicts and the parsed destination in; conditions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from functions.common import conditions
from functions.common.conditions import Condition
from functions.common.telemetrydestination import (
    DestinationIdentity,
    TelemetryDestination,
    active_destination,
)

REASON_OLDEST: Final = "OldestDestination"
REASON_NEWER: Final = "NewerThanActive"
REASON_WAITING: Final = "WaitingForDestinations"
REASON_AVAILABLE: Final = "Available"
REASON_UNAVAILABLE: Final = "Unavailable"
REASON_CREATING: Final = "Creating"
REASON_COMPOSED: Final = "Composed"
REASON_NOT_COMPOSED: Final = "NotComposed"


def _condition(typ: str, status: bool | None, reason: str, message: str) -> Condition:
    return Condition(typ, conditions.truth(status), reason, message)


def waiting_conditions() -> list[Condition]:
    return [
        _condition(
            conditions.CONFLICT,
            None,
            REASON_WAITING,
            "asked for every TelemetryDestination; composing nothing new until they arrive",
        )
    ]


@dataclass(frozen=True)
class Standing:
    """Where this destination stands in the fleet."""

    winner: DestinationIdentity  # the destination the fleet sends to
    others: list[str]  # every other destination's name, sorted

    def active(self, me: DestinationIdentity) -> bool:
        return self.winner.name == me.name


def standing(me: DestinationIdentity, everyone: Iterable[DestinationIdentity]) -> Standing:
    """`everyone` as fetched; this destination counts even before the list shows it."""
    fleet = list(everyone)
    if all(d.name != me.name for d in fleet):
        fleet.append(me)
    return Standing(active_destination(fleet), sorted(d.name for d in fleet if d.name != me.name))


def not_used_message(winner: str, kept: int) -> str:
    """Why a newer destination composes nothing new; `kept`: the resources it keeps."""
    kept_text = f"; kept the {kept} resources it composed before" if kept else ""
    return (
        f"the fleet already sends its telemetry to TelemetryDestination {winner} "
        f"(the oldest); this one is not used{kept_text}. Delete one of them"
    )


def not_used_conditions(message: str) -> list[Condition]:
    return [
        _condition(conditions.CONFLICT, True, REASON_NEWER, message),
        _condition(conditions.COMPOSED, False, REASON_NOT_COMPOSED, message),
    ]


def object_ready(observed: Mapping[str, Any]) -> bool | None:
    """Ready=True or False as the gateway's Object says; None while it says nothing."""
    said = conditions.condition_status(observed, conditions.READY)
    return None if said is None else said == conditions.TRUE


def active_conditions(
    destination: TelemetryDestination,
    standing: Standing,
    *,
    composed_before: bool,
    not_ready: list[str],
) -> list[Condition]:
    """The fleet's destination: no conflict (naming the newer ones not used), its
    gateway's readiness (`not_ready`: the composed keys whose Object is not Ready), and
    what was composed."""
    conflict_message = (
        f"this is the fleet's destination; newer ones not used: {', '.join(standing.others)}"
        if standing.others
        else "this is the fleet's only destination"
    )
    if not composed_before:
        gateway_ready = _condition(
            conditions.GATEWAY_READY, False, REASON_CREATING, "the gateway is being created"
        )
    elif not_ready:
        gateway_ready = _condition(
            conditions.GATEWAY_READY,
            False,
            REASON_UNAVAILABLE,
            f"not ready yet: {', '.join(sorted(not_ready))}",
        )
    else:
        gateway_ready = _condition(
            conditions.GATEWAY_READY,
            True,
            REASON_AVAILABLE,
            f"{destination.gateway.replicas} gateway replicas accept OTLP at "
            f"{destination.gateway.endpoint}",
        )
    return [
        _condition(conditions.CONFLICT, False, REASON_OLDEST, conflict_message),
        gateway_ready,
        _condition(
            conditions.COMPOSED,
            True,
            REASON_COMPOSED,
            f"gateway on provider config {destination.gateway.provider_config_name}, "
            f"exporting {destination.exporter.type.value}",
        ),
    ]


def destination_status(destination: TelemetryDestination) -> dict:
    return {
        "endpoint": destination.gateway.endpoint,
        "exporter": destination.exporter.type.value,
    }
