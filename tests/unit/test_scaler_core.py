"""The floor a scaler serves, for every reason it may refuse the hub."""

from datetime import UTC, datetime, timedelta

import pytest

from functions.runtime.scaler.core import HubLeaseCopy, parse_time, served_floor

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HUB = "us-east-1/agent-0"
LEASE = HubLeaseCopy(holder=HUB, token="term-7")


def _policy(mode="auto", max_replicas=8, cluster="eu-west-1", **intent):
    fields = {
        "floor": 5,
        "hub": HUB,
        "fencingToken": "term-7",
        "expires": (NOW + timedelta(minutes=5)).isoformat().replace("+00:00", "Z"),
    }
    fields.update(intent)
    return {
        "spec": {"mode": mode, "clusters": [{"name": cluster, "maxReplicas": max_replicas}]},
        "status": {"intent": {k: v for k, v in fields.items() if v is not None}},
    }


CASES = [
    ("serves_the_floor_in_auto_mode", _policy(), LEASE, 5, "floor 5 from"),
    ("caps_the_floor_at_max_replicas", _policy(max_replicas=3), LEASE, 3, "capped"),
    ("serves_nothing_in_shadow_mode", _policy(mode="shadow"), LEASE, 0, "mode is shadow"),
    ("serves_nothing_when_off", _policy(mode="off"), LEASE, 0, "mode is off"),
    (
        "serves_nothing_after_the_intent_expires",
        _policy(expires="2026-01-01T11:59:59Z"),
        LEASE,
        0,
        "expired",
    ),
    (
        "serves_nothing_at_the_expiry_instant",
        _policy(expires="2026-01-01T12:00:00Z"),
        LEASE,
        0,
        "expired",
    ),
    ("serves_nothing_without_an_expiry", _policy(expires=None), LEASE, 0, "no valid expires"),
    ("serves_nothing_with_a_garbled_expiry", _policy(expires="soon"), LEASE, 0, "no valid"),
    (
        "refuses_an_intent_from_a_hub_that_does_not_hold_the_lease",
        _policy(hub="us-west-2/agent-1"),
        LEASE,
        0,
        "does not hold the Lease",
    ),
    (
        "refuses_a_deposed_hubs_stale_term",
        _policy(fencingToken="term-6"),
        LEASE,
        0,
        "fencing token",
    ),
    ("refuses_everything_when_the_lease_is_missing", _policy(), None, 0, "no hub Lease"),
    (
        "refuses_everything_when_the_lease_is_released",
        _policy(),
        HubLeaseCopy("", ""),
        0,
        "nobody",
    ),
    ("serves_nothing_when_not_a_member", _policy(cluster="ap-south-1"), LEASE, 0, "not in spec"),
    ("serves_nothing_without_a_policy", None, LEASE, 0, "no AdaptivePolicy"),
    ("serves_nothing_without_an_intent", {"spec": {"mode": "auto"}}, LEASE, 0, "no intent"),
    ("serves_nothing_for_a_zero_floor", _policy(floor=0), LEASE, 0, "floor is 0"),
    ("serves_nothing_for_a_negative_floor", _policy(floor=-2), LEASE, 0, "floor is 0"),
]


@pytest.mark.parametrize(
    ("policy", "lease", "floor", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_served_floor(policy, lease, floor, reason):
    served = served_floor(policy, lease, "eu-west-1", NOW)
    assert served.floor == floor
    assert reason in served.reason
    assert served.active is (floor > 0)


def test_a_served_floor_says_when_it_expires():
    served = served_floor(_policy(), LEASE, "eu-west-1", NOW)
    assert served.changes_at == NOW + timedelta(minutes=5)


def test_timestamps_without_a_zone_are_not_trusted():
    assert parse_time("2026-01-01T12:00:00") is None
    assert parse_time("2026-01-01T12:00:00.123456Z") == NOW + timedelta(microseconds=123456)
