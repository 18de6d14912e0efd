"""The floor a scaler serves, for every reason it may refuse the hub."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    (
        "serves_nothing_for_a_negative_max_replicas",
        _policy(max_replicas=-3),
        LEASE,
        0,
        "spec.clusters[0].maxReplicas -3 is not a non-negative integer",
    ),
    (
        "serves_nothing_for_a_max_replicas_that_is_not_a_number",
        _policy(max_replicas="8"),
        LEASE,
        0,
        "spec.clusters[0].maxReplicas '8' is not",
    ),
    ("serves_zero_for_max_replicas_zero", _policy(max_replicas=0), LEASE, 0, "capped"),
    (
        "serves_nothing_when_spec_is_not_an_object",
        {"spec": ["auto"]},
        LEASE,
        0,
        "malformed AdaptivePolicy: spec is not an object",
    ),
    (
        "serves_nothing_when_clusters_is_not_a_list",
        {**_policy(), "spec": {"mode": "auto", "clusters": 7}},
        LEASE,
        0,
        "spec.clusters is not a list",
    ),
    (
        "skips_cluster_entries_that_are_not_objects",
        {**_policy(), "spec": {"mode": "auto", "clusters": ["eu-west-1", None]}},
        LEASE,
        0,
        "not in spec.clusters",
    ),
    (
        "serves_nothing_when_the_intent_is_not_an_object",
        {**_policy(), "status": {"intent": "floor 9"}},
        LEASE,
        0,
        "no intent",
    ),
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


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 50)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_field = st.one_of(_json, st.just("auto"), st.just(HUB), st.just("term-7"), st.just("eu-west-1"))


@st.composite
def _shaped_policy(draw):
    """A policy whose every field may be any JSON value, kept near the valid shape so the
    checks past mode and the lease are reached too."""
    entry = draw(st.one_of(_json, st.fixed_dictionaries({"name": _field, "maxReplicas": _json})))
    intent = draw(
        st.one_of(
            _json,
            st.fixed_dictionaries(
                {
                    "floor": _json,
                    "hub": _field,
                    "fencingToken": _field,
                    "expires": st.one_of(_json, st.just("2026-01-01T12:05:00Z")),
                }
            ),
        )
    )
    spec = draw(
        st.one_of(
            _json,
            st.fixed_dictionaries(
                {"mode": _field, "clusters": st.one_of(_json, st.lists(st.just(entry)))}
            ),
        )
    )
    return draw(st.one_of(_json, st.just({"spec": spec, "status": {"intent": intent}})))


@settings(max_examples=400, deadline=None)
@given(_shaped_policy())
def test_any_policy_shape_is_a_floor_never_an_error_and_never_negative(policy):
    served = served_floor(policy, LEASE, "eu-west-1", NOW)
    assert served.floor >= 0
    assert served.reason
    entries = ((policy or {}).get("spec") or {}) if isinstance(policy, dict) else {}
    if served.floor > 0:
        entry = next(c for c in entries["clusters"] if c.get("name") == "eu-west-1")
        assert served.floor <= entry["maxReplicas"]
