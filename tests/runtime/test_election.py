"""The fleet hub election against real API servers: one per simulated member.

Most tests run with short timings (FAST: 4 s / 3 s / 0.5 s, the defaults' shape);
`test_failover_with_default_timings` measures the defaults (15 s / 10 s / 2 s). Every
test samples which agents act as hub every 10 ms and fails on any instant with two.
"""

from __future__ import annotations

import logging
import time

import pytest
from kubernetes import client

from functions.common.contracts import ANNOTATION_FENCING_TOKEN, HUB_LEASE_NAME, SYSTEM_NAMESPACE
from functions.runtime.election.core import Timings
from tests.runtime.conftest import FAST, HubSampler, measured, wait_for

# Request round trips and thread scheduling on a loaded 2-core runner: make test runs
# these beside the end-to-end tier's fleet box (two workers), where an API server's answer
# can take seconds.
SLACK = 5.0


def _one_hub(group, timeout):
    hubs = wait_for(lambda: (h := group.hubs()) and len(h) == 1 and h, timeout)
    assert hubs, f"no hub within {timeout}s"
    return hubs[0]


def _lease(member) -> client.V1Lease:
    api = member.client()
    try:
        return client.CoordinationV1Api(api).read_namespaced_lease(HUB_LEASE_NAME, SYSTEM_NAMESPACE)
    finally:
        api.close()


def _holds_every_record(group, hub) -> bool:
    """A candidate that lost the start-up race releases what it got on its next round; the
    hub takes those records over in its following rounds. Until then the hub may hold a
    bare majority, and losing one of its members costs it the term: correct, but not the
    steady state the tests below start from."""
    return wait_for(
        lambda: all(_lease(m).spec.holder_identity == hub.identity for m in group.members), 3
    )


@pytest.mark.parametrize("size", [3, 5])
def test_one_hub_is_elected_and_every_member_names_it(agents, size):
    group = agents(size)
    with HubSampler(group) as sampler:
        group.start_all()
        hub = _one_hub(group, FAST.lease_duration)
        term = hub.hub_term()
        assert wait_for(lambda: all(a.observed_hub() == hub.identity for a in group.running), 3)
        assert _holds_every_record(group, hub)
    # Never two acting hubs. (<= 1, not == 1: that one hub exists is asserted above by
    # _one_hub; a sampler thread starved on a loaded runner must not fail the test.)
    assert sampler.samples > 0
    assert sampler.max_simultaneous <= 1, sampler.overlaps
    for member in group.members:
        lease = _lease(member)
        assert lease.metadata.annotations[ANNOTATION_FENCING_TOKEN] == term.fencing_token
    assert hub.identity == f"{hub.cluster}/agent-0"


@pytest.mark.parametrize("size", [3, 5])
def test_a_new_hub_within_lease_duration_and_retry_after_the_hub_crashes(agents, size):
    group = agents(size)
    with HubSampler(group) as sampler:
        group.start_all()
        old = _one_hub(group, FAST.lease_duration)
        old_term = old.hub_term()
        time.sleep(1.0)  # a few renewals
        crashed = time.monotonic()
        old.stop(release=False)  # silent, like a killed process
        new = _one_hub(group, FAST.lease_duration + FAST.retry_period + SLACK + 2)
        failover = measured(
            f"failover after a crash, {size} members, FAST timings", time.monotonic() - crashed
        )
    assert new is not old
    assert new.hub_term().fencing_token != old_term.fencing_token
    assert failover <= FAST.lease_duration + FAST.retry_period + SLACK
    # Never two acting hubs. (<= 1, not == 1: that one hub exists is asserted above by
    # _one_hub; a sampler thread starved on a loaded runner must not fail the test.)
    assert sampler.samples > 0
    assert sampler.max_simultaneous <= 1, sampler.overlaps


def test_graceful_shutdown_hands_the_hub_over_at_once(agents):
    group = agents(3)
    with HubSampler(group) as sampler:
        group.start_all()
        old = _one_hub(group, FAST.lease_duration)
        stopped = time.monotonic()
        old.stop(release=True)
        _one_hub(group, FAST.lease_duration)
        handover = measured(
            "hand-over after a graceful stop, 3 members, FAST timings", time.monotonic() - stopped
        )
    assert handover < FAST.lease_duration / 2
    # Never two acting hubs. (<= 1, not == 1: that one hub exists is asserted above by
    # _one_hub; a sampler thread starved on a loaded runner must not fail the test.)
    assert sampler.samples > 0
    assert sampler.max_simultaneous <= 1, sampler.overlaps


@pytest.mark.parametrize("size", [3, 5])
def test_the_hub_stays_while_a_majority_answers(fleet, agents, size):
    group = agents(size)
    group.start_all()
    hub = _one_hub(group, FAST.lease_duration)
    # Stopping a member while a start-up loser still holds another's record would leave
    # the hub short of a majority for a lease (seen in CI): not what this test is about.
    assert _holds_every_record(group, hub)
    index = next(i for i, m in enumerate(group.members) if m.name != hub.cluster)
    group.members[index].stop_apiserver()
    gaps = 0
    deadline = time.monotonic() + 2 * FAST.lease_duration
    while time.monotonic() < deadline:
        gaps += [a.identity for a in group.hubs()] != [hub.identity]
        time.sleep(0.01)
    assert gaps == 0, "the hub changed or lapsed although a majority answered"


def test_no_hub_within_the_renew_deadline_when_a_majority_stops(agents, caplog):
    caplog.set_level(logging.WARNING, logger="modelplane.election")
    group = agents(3)
    group.start_all()
    hub = _one_hub(group, FAST.lease_duration)
    others = [m for m in group.members if m.name != hub.cluster]
    for member in others:
        member.stop_apiserver()
    stopped = time.monotonic()
    assert wait_for(lambda: not group.hubs(), FAST.renew_deadline + SLACK)
    measured(
        "hub steps down after a majority stops, 3 members, FAST timings", time.monotonic() - stopped
    )
    assert wait_for(lambda: not any(a.is_hub() for a in group.running), 0.1)
    time.sleep(FAST.lease_duration)
    assert group.hubs() == []
    assert any("1 of 3 members reachable, need 2" in r.getMessage() for r in caplog.records)
    for member in others:
        member.start_apiserver()
    assert _one_hub(group, FAST.lease_duration + FAST.retry_period + SLACK + 5)


def test_two_member_fleet_needs_both(agents):
    group = agents(2)
    group.start_all()
    hub = _one_hub(group, FAST.lease_duration)
    other = next(m for m in group.members if m.name != hub.cluster)
    other.stop_apiserver()
    assert wait_for(lambda: not group.hubs(), FAST.renew_deadline + SLACK)


@pytest.mark.parametrize("frozen", ["hub's own member", "a majority"])
def test_frozen_api_servers_never_make_two_hubs(agents, frozen):
    group = agents(3)
    with HubSampler(group) as sampler:
        group.start_all()
        hub = _one_hub(group, FAST.lease_duration)
        if frozen == "a majority":
            targets = [m for m in group.members if m.name != hub.cluster]
        else:
            targets = [m for m in group.members if m.name == hub.cluster]
        for member in targets:
            member.freeze()
        # Requests pile up in the frozen servers' sockets for two lease durations...
        time.sleep(2 * FAST.lease_duration)
        if frozen == "a majority":
            assert group.hubs() == []
        else:
            assert hub not in group.hubs()
        for member in targets:
            member.thaw()
        # ...and land late after the thaw: they may delay the next hub, never add one.
        assert _one_hub(group, 2 * FAST.lease_duration + SLACK)
        time.sleep(FAST.lease_duration)
    assert sampler.overlaps == []
    # Never two acting hubs. (<= 1, not == 1: that one hub exists is asserted above by
    # _one_hub; a sampler thread starved on a loaded runner must not fail the test.)
    assert sampler.samples > 0
    assert sampler.max_simultaneous <= 1, sampler.overlaps


def test_clocks_skewed_by_five_seconds_stay_safe(agents):
    group = agents(3)
    with HubSampler(group) as sampler:
        group.start_all(wall_offsets=[-5.0, 0.0, 5.0])
        old = _one_hub(group, FAST.lease_duration)
        time.sleep(1.0)
        crashed = time.monotonic()
        old.stop(release=False)
        _one_hub(group, FAST.lease_duration + FAST.retry_period + SLACK + 2)
        failover = measured(
            "failover with wall clocks skewed -5/0/+5 s, 3 members, FAST",
            time.monotonic() - crashed,
        )
    assert failover <= FAST.lease_duration + FAST.retry_period + SLACK
    # Never two acting hubs. (<= 1, not == 1: that one hub exists is asserted above by
    # _one_hub; a sampler thread starved on a loaded runner must not fail the test.)
    assert sampler.samples > 0
    assert sampler.max_simultaneous <= 1, sampler.overlaps


def test_one_agent_replica_per_member_takes_part(agents):
    group = agents(3)
    first = group.start(0, pod="agent-0")
    time.sleep(0.5)
    second = group.start(0, pod="agent-1")
    group.start(1)
    group.start(2)
    _one_hub(group, FAST.lease_duration)
    assert first.replica.leading()
    assert not second.replica.leading()
    assert second.observed_hub() == ""  # a standby replica does not even read the hub Leases
    first.stop(release=True)
    assert wait_for(second.replica.leading, FAST.lease_duration / 2)


def test_failover_with_default_timings(agents):
    defaults = Timings()
    group = agents(3, timings=defaults)
    with HubSampler(group) as sampler:
        group.start_all()
        started = time.monotonic()
        old = _one_hub(group, defaults.lease_duration)
        measured("first hub elected, 3 members, default timings", time.monotonic() - started)
        time.sleep(defaults.retry_period * 2)
        crashed = time.monotonic()
        old.stop(release=False)
        _one_hub(group, defaults.lease_duration + defaults.retry_period + SLACK + 5)
        failover = measured(
            "failover after a crash, 3 members, default timings (15/10/2 s)",
            time.monotonic() - crashed,
        )
    assert failover <= defaults.lease_duration + defaults.retry_period + SLACK
    # Never two acting hubs. (<= 1, not == 1: that one hub exists is asserted above by
    # _one_hub; a sampler thread starved on a loaded runner must not fail the test.)
    assert sampler.samples > 0
    assert sampler.max_simultaneous <= 1, sampler.overlaps
