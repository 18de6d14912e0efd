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


def served_floor(
    policy: Mapping[str, Any] | None,
    lease: HubLeaseCopy | None,
    cluster: str,
    now: datetime,
) -> ServedFloor:
    """The replicas this member's scaler asks KEDA for at least, and why."""
    if policy is None:
        return ServedFloor(0, "no AdaptivePolicy")
    spec = policy.get("spec") or {}
    mode = spec.get("mode", "shadow")
    if mode != MODE_AUTO:
        return ServedFloor(0, f"mode is {mode}")
    intent = (policy.get("status") or {}).get("intent") or {}
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
    entry = next((c for c in spec.get("clusters") or [] if c.get("name") == cluster), None)
    if entry is None:
        return ServedFloor(0, f"{cluster} is not in spec.clusters")
    floor = intent.get("floor")
    if not isinstance(floor, int) or isinstance(floor, bool) or floor <= 0:
        return ServedFloor(0, "intent floor is 0", expires)
    cap = entry.get("maxReplicas", 0)
    if floor > cap:
        return ServedFloor(cap, f"floor {floor} capped at maxReplicas {cap}", expires)
    return ServedFloor(floor, f"floor {floor} from {hub}", expires)
