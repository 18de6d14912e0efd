"""The election and the scalers together: a hub's intents are obeyed only in its term,
and only until they expire.

The intents here are written the way the hub writes them (status.intent stamped with
`Agent.hub_term()`), so these tests hold whatever decides the floors.
"""

from __future__ import annotations

import time

import pytest

from tests.runtime.conftest import FAST, wait_for
from tests.runtime.test_election import SLACK, _lease, _one_hub
from tests.runtime.test_scaler import Member, Scaler, in_seconds


@pytest.fixture
def scalers(fleet):
    running: list[Scaler] = []

    def start(size: int) -> list[Scaler]:
        for member in fleet.members[:size]:
            running.append(Scaler(member))
        assert wait_for(lambda: all(s.cache.synced for s in running), 10)
        return running

    yield start
    for scaler in running:
        scaler.close()


@pytest.fixture
def writers(fleet):
    made: list[Member] = []

    def make(size: int) -> list[Member]:
        made.extend(Member(m) for m in fleet.members[:size])
        names = [m.name for m in fleet.members[:size]]
        for writer, name in zip(made, names, strict=True):
            writer.policy(cluster=name)
        return made

    yield make
    for writer in made:
        writer.api.close()


def _write_intents(writers, term, floor=4, expires_in=300.0) -> None:
    for writer in writers:
        writer.intent(
            floor=floor, hub=term.hub, token=term.fencing_token, expires=in_seconds(expires_in)
        )


def _all_serve(scalers, floor, timeout=3.0) -> bool:
    return bool(wait_for(lambda: all(s.floor() == floor for s in scalers), timeout))


def test_a_deposed_hubs_intents_are_refused_by_every_scaler(agents, scalers, writers):
    group = agents(3)
    members = writers(3)
    served = scalers(3)
    group.start_all()
    old = _one_hub(group, FAST.lease_duration)
    old_term = old.hub_term()
    _write_intents(members, old_term)
    assert _all_serve(served, 4), [s.floor() for s in served]

    old.stop(release=False)
    new = _one_hub(group, FAST.lease_duration + FAST.retry_period + SLACK + 2)
    assert wait_for(
        lambda: all(_lease(m).spec.holder_identity == new.identity for m in group.members), 3
    )
    assert _all_serve(served, 0), "an intent of the deposed hub was still obeyed"

    # The deposed hub wakes up (a long pause) and writes again with its old term.
    _write_intents(members, old_term, floor=6)
    time.sleep(0.5)
    assert [s.floor() for s in served] == [0, 0, 0]

    _write_intents(members, new.hub_term(), floor=6)
    assert _all_serve(served, 6)


def test_scalers_fall_to_zero_when_intents_expire_without_a_hub(agents, scalers, writers):
    group = agents(3)
    members = writers(3)
    served = scalers(3)
    group.start_all()
    hub = _one_hub(group, FAST.lease_duration)
    lifetime = 2 * FAST.lease_duration
    _write_intents(members, hub.hub_term(), expires_in=lifetime)
    expires = time.monotonic() + lifetime
    assert _all_serve(served, 4)

    for member in group.members:
        if member.name != hub.cluster:
            member.stop_apiserver()
    assert wait_for(lambda: not group.hubs(), FAST.renew_deadline + SLACK)
    # No hub renews the intents; every scaler, even those whose API server is gone,
    # still serves them until they expire, then nothing.
    assert all(s.floor() == 4 for s in served)
    time.sleep(max(0.0, expires - time.monotonic()))
    assert _all_serve(served, 0, timeout=1.0)
    assert group.hubs() == []
