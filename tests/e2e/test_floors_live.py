"""Floors through real KEDA from a real burst (tests/e2e/floors.py has the scenario).

A burst on us-east-1 (its one replica's worth of load tripled) makes the hub raise a
floor on eu-west-1; KEDA, through the HPA, raises eu-west-1's Deployment; the scheduler
and KWOK run the pods; the hub shifts traffic onto eu-west-1 on the route. Calm returns
the traffic and releases the floor. Then the same burst with the hub's agent killed
once the floor is up: the floor survives the failover and nobody acts twice.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.e2e.floors import BURST, CALM, HELPER, HOME, Burst

# A report, a hub step, a KEDA poll, an HPA sync (15 s), a bind and a start, on a
# loaded machine; the window the demand's rate climbs over.
RAISE_SECONDS = 240.0
# Calm: calmFor per step back home, then the release; KEDA's poll.
CALM_SECONDS = 240.0
# After the release: the HPA's next sync (15 s) and the pods' deletion, loaded machine.
GIVE_BACK_SECONDS = 90.0
# How long the new hub's floor is watched after the failover.
HOLD_SECONDS = 30.0


@pytest.fixture
def burst(box, runtime, tmp_path, request):
    # A namespace per test: the last one's is still terminating.
    namespace = "burst-" + request.node.name.removeprefix("test_a_").split("_")[0]
    running = Burst(box, runtime, tmp_path, namespace=namespace).start()
    try:
        running.settle()
        yield running
    finally:
        running.close()


def _raised(burst: Burst) -> int:
    """Once the hub raised a floor on the helper and KEDA moved its workload there, Ready:
    the floor."""
    floor = burst.floor(HELPER)
    assert floor > 1, f"no floor on {HELPER}: {burst.status(HELPER).get('intent')}"
    assert burst.keda_floor(HELPER) == float(floor), f"KEDA serves {burst.keda_floor(HELPER)}"
    replicas, ready = burst.replicas(HELPER)
    # At least the floor (the HPA keeps more for its scale-down window after a release).
    assert replicas >= floor, f"{HELPER}: {replicas} replicas under the floor {floor}"
    assert ready >= floor, f"{HELPER}: {ready} ready under the floor {floor}"
    return floor


def test_a_burst_raises_a_floor_on_a_helper_through_keda_and_calm_releases_it(burst):
    burst.total = BURST
    floor = burst.runtime.wait_for(
        "the helper's raised floor Ready", lambda: _raised(burst), RAISE_SECONDS
    )
    assert burst.floor(HOME) <= 1, "the hub raised the short member, not a helper"

    def shifted():
        weights = burst.weights()
        assert weights[HELPER] > 0, weights
        return weights

    weights = burst.runtime.wait_for("traffic shifted to the helper", shifted, RAISE_SECONDS)
    assert sum(weights.values()) == 100
    adds = [d for d in burst.decisions() if "AddCapacity" in d["action"]]
    assert adds, burst.summary()
    assert all(d["applied"] for d in adds), burst.summary()
    assert any(HELPER in d["message"] and HOME in d["message"] for d in adds), burst.summary()

    burst.total = CALM

    def home_again():
        assert burst.weights() == {HOME: 100, HELPER: 0}, burst.weights()
        assert burst.floor(HELPER) == 0, burst.status(HELPER).get("intent")
        assert burst.keda_floor(HELPER) == 0.0, f"KEDA still serves {burst.keda_floor(HELPER)}"
        return True

    burst.runtime.wait_for("traffic home and the floor released", home_again, CALM_SECONDS)

    # The GPUs come back: KEDA and the HPA follow the released floor down to the
    # workload's minimum at once (no 5-minute scale-down window on top of calmFor).
    def given_back():
        replicas, _ready = burst.replicas(HELPER)
        assert replicas == 1, f"{HELPER} still runs {replicas} replicas after the release"
        return True

    burst.runtime.wait_for(f"{HELPER}'s extra replicas given back", given_back, GIVE_BACK_SECONDS)
    actions = [(d["action"], d["message"]) for d in burst.decisions()]
    returns = [i for i, (_, m) in enumerate(actions) if "back home" in m]
    releases = [i for i, (a, _) in enumerate(actions) if "ReleaseCapacity" in a]
    assert returns, burst.summary()
    assert releases, burst.summary()
    assert returns[0] <= releases[0], burst.summary()  # traffic goes home before the floor
    assert floor >= 2


def _accounted(burst: Burst, old_floor: int, new_hub: str) -> bool:
    """The helper's floor, as the new hub's intent says, KEDA serves and the workload
    holds, equals the old floor plus the new hub's own changes on the helper."""
    changes = [
        int(change)
        for d in burst.decisions()
        if d["hub"] == new_hub
        for change in re.findall(rf"([+-]\d+) on {re.escape(HELPER)}\b", d["message"])
    ]
    floor = burst.floor(HELPER)
    summary = f"old floor {old_floor}, the new hub's changes {changes}, floor {floor}"
    if floor == 0:  # released: the new hub's own decision did it
        assert any(
            "floor released" in d["message"] for d in burst.decisions() if d["hub"] == new_hub
        ), summary
        return True
    assert floor == old_floor + sum(changes), summary
    assert burst.keda_floor(HELPER) == float(floor), f"KEDA serves {burst.keda_floor(HELPER)}"
    _, ready = burst.replicas(HELPER)
    assert ready >= min(floor, old_floor), f"{HELPER}: {ready} ready, {summary}"
    return True


def test_a_raised_floor_survives_the_hub_agent_killed_and_nothing_acts_twice(burst, runtime):
    burst.total = BURST
    floor = burst.runtime.wait_for(
        "the helper's raised floor Ready", lambda: _raised(burst), RAISE_SECONDS
    )
    adds_before = [d for d in burst.decisions() if "AddCapacity" in d["action"]]
    old_hub = burst.hub()
    hub_member = old_hub.split("/")[0]
    agent = runtime.process("agent", hub_member)
    os.killpg(agent.popen.pid, signal.SIGKILL)  # no chance to release its Leases
    agent.popen.wait()
    try:
        new_hub = burst.runtime.wait_for(
            "another hub", lambda: (h := burst.hub()) and h != old_hub and h, RAISE_SECONDS
        )

        # The new hub carries the floor on under its own term, and acts once: the floor
        # it serves is the old one plus exactly what its own decisions changed on the
        # helper (a shortage raised again, or an intent written twice, would show).
        def carried():
            intent = burst.status(HELPER).get("intent") or {}
            assert intent.get("hub") == new_hub, intent
            return intent

        burst.runtime.wait_for("the floor under the new hub", carried, RAISE_SECONDS)
        began = time.monotonic()
        while time.monotonic() - began < HOLD_SECONDS:
            burst.runtime.wait_for(
                "the helper's floor accounted for by the decisions",
                lambda: _accounted(burst, floor, new_hub), 30,
            )  # fmt: skip
            time.sleep(3)
        ids = [d["decisionId"] for d in burst.decisions()]
        assert len(ids) == len(set(ids)), f"a decision logged twice:\n{burst.summary()}"
        added = [
            d for d in burst.decisions() if d["hub"] == new_hub and "AddCapacity" in d["action"]
        ]
        assert all(d["decisionId"] not in {a["decisionId"] for a in adds_before} for d in added)
    finally:
        agent.start()  # the tier's runtime goes on with both agents
