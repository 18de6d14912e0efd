"""The election and the scalers together: a hub's intents are obeyed only in its term,
and only until they expire.

The intents here are written the way the hub writes them (status.intent stamped with
`Agent.hub_term()`), so these tests hold whatever decides the floors.
"""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest
from kubernetes.client.exceptions import ApiException
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from functions.runtime.agent.loop import Agent, AgentConfig
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.metrics import HUB_STEP_ERRORS_TOTAL, HubMetrics
from functions.runtime.kube.rest import kube_request
from functions.runtime.shared.policy import PolicySpec, rfc3339, spec_hash
from functions.runtime.shared.report import Report
from tests.runtime.conftest import FAST, wait_for
from tests.runtime.test_election import SLACK, _lease, _one_hub
from tests.runtime.test_hub_integration import (
    COMPOSITION_MANAGER,
    NS,
    POLICY_PATH,
    ROUTE_PATH,
    apply,
    install_crds,
    policy,
    route_object,
)
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


# --- route weights: the one write with no second fence ---------------------------------


class PausableRole:
    """The hub loop's view of its election, which a test can freeze: once frozen it keeps
    answering with the term it last saw — what a process paused right after reading its
    term believes when it resumes, however long the pause was."""

    def __init__(self, election):
        self.election = election
        self.identity = election.identity
        self.frozen_term = ""

    def freeze(self) -> None:
        self.frozen_term = self.election.hub_term().fencing_token

    def leading(self) -> bool:
        return bool(self.frozen_term) or self.election.hub_term() is not None

    def term(self) -> str:
        if self.frozen_term:
            return self.frozen_term
        current = self.election.hub_term()
        return current.fencing_token if current else ""


def _counter(reader, name: str) -> int:
    return int(
        sum(
            point.value
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == name
            for point in metric.data.data_points
        )
    )


def _short_home_statuses(apis, names, hub_member: str) -> None:
    """Every member reports now: home (the first) short with high pressure, the others
    idle with static room; the hub's copy remembers home short for long enough."""

    spec = PolicySpec.model_validate(policy(names)["spec"])
    now = time.time()
    for i, name in enumerate(names):
        home = i == 0
        report = Report(
            time=now,
            spec_hash=spec_hash(spec, name),
            ready=3 if home else 4,
            desired=3 if home else 4,
            scheduled=3 if home else 4,
            needed=4 if home else 0,
            static_room=0 if home else 4,
            node_pool_headroom=0,
            pressure=20.0 if home else 1.0,
            demand=60.0 if home else 4.0,
        ).to_status()
        status: dict = {"report": report}
        if name == hub_member and not _status(apis[name], POLICY_PATH).get("fleet"):
            status["fleet"] = {
                "phase": "Steady",
                "clusters": [
                    {"name": n, "floor": 0, "weight": 100 if n == names[0] else 0}
                    | ({"shortSince": rfc3339(now - 300)} if n == names[0] else {})
                    for n in names
                ],
            }
        kube_request(
            apis[name],
            "PATCH",
            POLICY_PATH + "/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )


def _status(api, path) -> dict:
    return kube_request(api, "GET", path).get("status") or {}


def test_a_hub_frozen_replaced_and_resumed_moves_no_weight(agents):
    """The old hub decides and moves weight; it freezes (its election goes silent, its
    belief stays); a new hub takes every Lease copy; the old one resumes and decides to
    move more weight: every route stays as it was, and each refusal is a step error
    saying "does not hold the hub lease"."""

    group = agents(3)
    names = [m.name for m in group.members]
    apis = {m.name: m.client() for m in group.members}
    for api in apis.values():
        install_crds(api)
        with contextlib.suppress(ApiException):
            kube_request(api, "DELETE", ROUTE_PATH)
        apply(
            api,
            ROUTE_PATH,
            route_object(names, dict.fromkeys(names, 0) | {names[0]: 100}),
            COMPOSITION_MANAGER,
        )
        kube_request(
            api,
            "POST",
            f"/apis/autoscaling.modelplane.ai/v1alpha1/namespaces/{NS}/adaptivepolicies",
            body=policy(names),
            content_type="application/json",
        )

    def weights(name: str) -> dict[str, int]:
        refs = kube_request(apis[name], "GET", ROUTE_PATH)["spec"]["rules"][0]["backendRefs"]
        return {r["name"]: r.get("weight") for r in refs}

    group.start_all()
    old = _one_hub(group, FAST.lease_duration)
    assert wait_for(
        lambda: all(_lease(m).spec.holder_identity == old.identity for m in group.members), 3
    )
    role = PausableRole(old)
    reader = InMemoryMetricReader()
    stream = io.StringIO()
    hub_loop = Agent(
        AgentConfig(cluster=old.cluster),
        apis,
        role,
        HubMetrics(MeterProvider(metric_readers=[reader]).get_meter("test")),
        DecisionLog(stream),
    )

    # While it holds the Lease copies, the old hub's step moves weight on every route.
    _short_home_statuses(apis, names, old.cluster)
    hub_loop.hub_step(time.time())
    moved = {n: weights(n) for n in names}
    assert all(w[names[0]] < 100 for w in moved.values()), (moved, stream.getvalue())
    assert _counter(reader, HUB_STEP_ERRORS_TOTAL) == 0, stream.getvalue()

    # Frozen: its election goes silent, its belief does not; a new hub takes over.
    role.freeze()
    old.stop(release=False)
    new = _one_hub(group, FAST.lease_duration + FAST.retry_period + SLACK + 2)
    assert new is not old
    assert wait_for(
        lambda: all(_lease(m).spec.holder_identity == new.identity for m in group.members),
        FAST.lease_duration + SLACK,
    )
    _short_home_statuses(apis, names, old.cluster)  # still short: the old hub would shift
    versions = {
        n: (
            kube_request(apis[n], "GET", ROUTE_PATH)["metadata"]["resourceVersion"],
            kube_request(apis[n], "GET", POLICY_PATH)["metadata"]["resourceVersion"],
        )
        for n in names
    }

    # Resumed: it decides to move more weight, and nothing moves.
    hub_loop.hub_step(time.time())
    line = json.loads(stream.getvalue().splitlines()[-1])
    assert "ShiftTraffic" in line["action"], line
    assert line["applied"] is False
    assert "does not hold the hub lease" in line["error"]
    assert {n: weights(n) for n in names} == moved
    # Not a weight, an intent, its memory or an Event: no object changed at all.
    assert {
        n: (
            kube_request(apis[n], "GET", ROUTE_PATH)["metadata"]["resourceVersion"],
            kube_request(apis[n], "GET", POLICY_PATH)["metadata"]["resourceVersion"],
        )
        for n in names
    } == versions
    refused = line["error"].count("does not hold the hub lease")
    assert refused >= len(names)  # at least one route per member
    assert _counter(reader, HUB_STEP_ERRORS_TOTAL) >= refused
    for api in apis.values():
        api.close()
