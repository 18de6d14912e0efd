"""The floor a member's scaler serves to KEDA, decided from plain values.

The scaler obeys the hub only while everything that makes the hub's word valid holds
*on this member*: the policy is in `auto` mode, the intent has not expired by this
member's clock, and the intent was stamped by the holder of this member's own hub Lease
copy in that holder's current term (the fencing token the hub writes on the Lease in
the same compare-and-swap as its identity). A deposed hub cannot pass the last check on
any member it no longer holds, however late its writes land. Anything short of that is
floor 0, which to KEDA means "no influence": the cluster's own triggers scale it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

MODE_AUTO = "auto"


@dataclass(frozen=True)
class HubLeaseCopy:
    """This member's hub Lease: who holds it, in which term."""

    holder: str
    token: str


@dataclass(frozen=True)
class ServedFloor:
    floor: int
    reason: str  # why this floor, for logs and for a person reading them
    changes_at: datetime | None = None  # when this answer turns by itself (the expiry)

    @property
    def active(self) -> bool:
        return self.floor > 0


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it; None when absent or invalid."""
    if isinstance(value, datetime):
        return value if value.tzinfo else None
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    """`value` if it is an object; a policy's fields are read only through this."""
    return value if isinstance(value, Mapping) else None


def _count(value: Any) -> int | None:
    """A replica count: a non-negative integer (not a bool, not a float), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def served_floor(
    policy: Mapping[str, Any] | None,
    lease: HubLeaseCopy | None,
    cluster: str,
    now: datetime,
) -> ServedFloor:
    """The replicas this member's scaler asks KEDA for at least, and why.

    Total over any shape: a policy the API server should have refused (a field of the
    wrong type, a negative maxReplicas) is floor 0 with the field named, never an
    exception: to KEDA a scaler error is a failed trigger, while floor 0 leaves the
    cluster's own triggers in charge, which is what "no influence" means."""
    if _mapping(policy) is None:
        return ServedFloor(0, "no AdaptivePolicy")
    spec = _mapping(policy.get("spec", {}))
    if spec is None:
        return ServedFloor(0, "malformed AdaptivePolicy: spec is not an object")
    mode = spec.get("mode", "shadow")
    if mode != MODE_AUTO:
        return ServedFloor(0, f"mode is {mode}")
    intent = _mapping((_mapping(policy.get("status")) or {}).get("intent")) or {}
    if not intent:
        return ServedFloor(0, "no intent")
    expires = parse_time(intent.get("expires"))
    if expires is None:
        return ServedFloor(0, "intent has no valid expires")
    if now >= expires:
        return ServedFloor(0, f"intent expired at {intent.get('expires')}")
    hub = intent.get("hub") or ""
    if lease is None:
        return ServedFloor(0, "this member has no hub Lease")
    if not lease.holder or lease.holder != hub:
        held = lease.holder or "nobody"
        return ServedFloor(0, f"intent's hub {hub or '(none)'} does not hold the Lease ({held})")
    if not lease.token or intent.get("fencingToken") != lease.token:
        return ServedFloor(0, f"intent's fencing token is not {hub}'s current term")
    clusters = spec.get("clusters") or []
    if not isinstance(clusters, list):
        return ServedFloor(0, "malformed AdaptivePolicy: spec.clusters is not a list")
    index, entry = next(
        ((i, c) for i, c in enumerate(clusters) if (_mapping(c) or {}).get("name") == cluster),
        (-1, None),
    )
    if entry is None:
        return ServedFloor(0, f"{cluster} is not in spec.clusters")
    floor = intent.get("floor")
    if not isinstance(floor, int) or isinstance(floor, bool) or floor <= 0:
        return ServedFloor(0, "intent floor is 0", expires)
    cap = _count(entry.get("maxReplicas", 0))
    if cap is None:
        return ServedFloor(
            0,
            f"malformed AdaptivePolicy: spec.clusters[{index}].maxReplicas "
            f"{entry.get('maxReplicas')!r} is not a non-negative integer",
            expires,
        )
    if floor > cap:
        return ServedFloor(cap, f"floor {floor} capped at maxReplicas {cap}", expires)
    return ServedFloor(floor, f"floor {floor} from {hub}", expires)
