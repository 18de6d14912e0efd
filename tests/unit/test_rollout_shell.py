"""compose-model-deployment's shell around the rollout planner, in process with a fixed
clock: time passing is no event, so while a wave bakes or waits for its deadline the
response asks to be called again when that timer ends (response.meta.ttl, which core
honours as the XR's requeue), never later than the SDK's default. (The composed output
itself is checked through the real `crossplane render` in tests/render/test_rollout.py.)"""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.common import contracts
from functions.compose_model_deployment import fn as deployment_fn
from tests.ledgers import with_ledgers

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DEPLOYMENT = yaml.safe_load((EXAMPLES / "modeldeployments" / "llama-8b-vllm.yaml").read_text())
CLUSTERS = [
    yaml.safe_load(p.read_text()) for p in sorted((EXAMPLES / "inferenceclusters").glob("*.yaml"))
]
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def request(xr: dict, observed: list[dict]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    name = deployment_fn.REQUIRED_CLUSTERS
    req.required_resources[name].SetInParent()
    for item in with_ledgers(CLUSTERS, observed):
        req.required_resources[name].items.add().resource.update(item)
    for body in observed:
        key = body["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        req.observed.resources[key].resource.update(body)
    return req


def run(runner, xr: dict, observed: list[dict]) -> fnv1.RunFunctionResponse:
    rsp = asyncio.run(runner.RunFunction(request(xr, observed)))
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    return rsp


def composed(rsp, *, rolled: bool) -> list[dict]:
    """The ModelReplicas as observed next time; `rolled`: each has rolled its revision
    and is Ready."""
    out = []
    for key, desired in sorted(rsp.desired.resources.items()):
        body = resource.struct_to_dict(desired.resource)
        body["metadata"].update(
            namespace=DEPLOYMENT["metadata"]["namespace"],
            annotations={"crossplane.io/composition-resource-name": key},
            uid=key,
            resourceVersion="1",
            creationTimestamp="2026-01-01T00:00:00Z",
        )
        spec = body["spec"]
        body["status"] = (
            {"readyReplicas": spec["replicas"], "revision": spec["revision"]}
            if rolled
            else {"readyReplicas": spec["replicas"]}
        )
        out.append(body)
    return out


def with_status(xr: dict, rsp) -> dict:
    xr = copy.deepcopy(xr)
    xr["status"] = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    return xr


def changed(xr: dict) -> dict:
    xr = copy.deepcopy(xr)
    engine = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]
    engine["containers"][0]["args"] = [*engine["containers"][0]["args"], "--max-num-seqs", "128"]
    return xr


def test_a_baking_wave_asks_to_be_called_when_its_bake_ends():
    clock = Clock()
    runner = deployment_fn.FunctionRunner(clock=clock)
    first = run(runner, DEPLOYMENT, [])
    serving = composed(first, rolled=True)
    settled = run(runner, with_status(DEPLOYMENT, first), serving)
    assert settled.meta.ttl.seconds == 60  # nothing pending: the SDK's default

    new = changed(DEPLOYMENT)
    started = run(runner, with_status(new, settled), serving)
    rollout = resource.struct_to_dict(started.desired.composite.resource)["status"]["rollout"]
    assert rollout["phase"] == contracts.ROLLOUT_PHASE_PROGRESSING
    # Waiting for the first wave to roll: the deadline (15m + 2m) is far; the default stays.
    assert started.meta.ttl.seconds == 60

    clock.now = T0 + timedelta(seconds=20)
    baking = run(runner, with_status(new, started), composed(started, rolled=True))
    assert (
        resource.struct_to_dict(baking.desired.composite.resource)["status"]["rollout"][
            "bakingSince"
        ]
        == "2026-06-01T12:00:20Z"
    )
    clock.now = T0 + timedelta(seconds=20 + 100)
    later = run(runner, with_status(new, baking), composed(baking, rolled=True))
    # 2m bake from 12:00:20, now 12:02:00: called again by 12:02:20, not at the next
    # minute, however core's ±10 % jitter moves the TTL.
    ttl = later.meta.ttl.ToTimedelta().total_seconds()
    assert 18 < ttl < 20
    assert ttl * (1 + deployment_fn.CORE_REQUEUE_JITTER) <= 20


@given(st.floats(min_value=0.0, max_value=3600.0), st.floats(min_value=-1.0, max_value=1.0))
def test_a_timer_ends_on_time_whichever_way_cores_jitter_moves_each_call(remaining, draws):
    """Core calls again after the TTL moved by up to ±10 %: never after the timer's end
    (what is asked for is a tenth short), and a call that comes early asks again for what
    is left: within a few calls the timer has ended, never more than the floor late."""
    now = 0.0
    calls = 0
    while now < remaining:
        ttl = deployment_fn.requeue_ttl(remaining - now)
        jitter = draws * deployment_fn.CORE_REQUEUE_JITTER
        now += ttl * (1 + jitter)
        calls += 1
        assert calls <= 8, (remaining, now)
    assert now - remaining <= deployment_fn.MIN_REQUEUE_SECONDS * 1.1


# --- the whole function, restarted at every reconcile ---------------------------------

TEMPLATE_KEYS = ("definitionHash", "source", "profile", "servingMode", "engines")


def template_bytes(body: dict) -> str:
    """A composed ModelReplica's revision part, as canonical bytes: every value exactly,
    keys sorted. An object's key order is not content (the API server and every
    controller read it as a map), and a Struct's map does not keep one: compared with
    the order kept, the same template failed in one CI run in several."""
    return json.dumps(
        {k: body["spec"][k] for k in TEMPLATE_KEYS if k in body["spec"]}, sort_keys=True
    )


def observed_from(rsp, failing_revisions: set[str], rolls: bool) -> list[dict]:
    out = []
    for body in composed(rsp, rolled=False):
        spec = body["spec"]
        if spec["revision"] in failing_revisions:
            body["status"] = {
                "readyReplicas": 0,
                "health": {
                    "definitionHash": spec["definitionHash"],
                    "consecutiveStartFailures": 7,
                    "lastError": "engine: unrecognized arguments",
                    "observedAt": "2026-01-01T00:00:00Z",
                },
            }
        elif rolls:
            body["status"] = {"readyReplicas": spec["replicas"], "revision": spec["revision"]}
        out.append(body)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "", "good", "bad", "third"]),  # a spec change
            st.booleans(),  # the members roll what they were given before this reconcile
            st.sampled_from([5, 60, 200]),  # seconds since the last reconcile
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_restarted_function_continues_and_keeps_the_last_good_spec_byte_for_byte(events):
    simulate(events)


def simulate(events) -> tuple[set[str], dict]:
    """Reconciles of the example deployment through the real function, a new runner each
    time, the members rolling (or failing) what they were given; the invariants checked at
    every step. The phases it went through, and the last status.rollout."""
    phases: set[str] = set()
    clock = Clock()
    specs = {"": DEPLOYMENT, "good": changed(DEPLOYMENT), "bad": changed(DEPLOYMENT)}
    bad_spec = copy.deepcopy(DEPLOYMENT)
    engine = bad_spec["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]
    engine["containers"][0]["args"] = [*engine["containers"][0]["args"], "--max-num-seqz", "1"]
    specs["bad"] = bad_spec
    third = copy.deepcopy(DEPLOYMENT)
    third["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][
        0
    ]["image"] = "vllm/vllm-openai:v0.33.0"
    specs["third"] = third

    rsp = run(deployment_fn.FunctionRunner(clock=clock), DEPLOYMENT, [])
    observed = observed_from(rsp, set(), rolls=True)
    spec = DEPLOYMENT
    good_bytes = {b["spec"]["revision"]: template_bytes(b) for b in observed}
    failing: set[str] = set()
    for change, rolls, gap in events:
        clock.now += timedelta(seconds=gap)
        if change:
            spec = specs[change]
        xr = with_status(spec, rsp)
        # A new runner each time: nothing but the status and the observed replicas carries on.
        rsp = run(deployment_fn.FunctionRunner(clock=clock), xr, observed)
        rollout = resource.struct_to_dict(rsp.desired.composite.resource)["status"]["rollout"]
        bodies = composed(rsp, rolled=False)
        revisions = {b["spec"]["revision"] for b in bodies}
        assert revisions <= {rollout["previous"], rollout["revision"]}
        for body in bodies:
            if (
                body["spec"]["revision"] == rollout["previous"]
                and rollout["previous"] in good_bytes
            ):
                # The last good revision, exactly as it was composed when it was proven.
                assert template_bytes(body) == good_bytes[rollout["previous"]]
        phases.add(rollout["phase"])
        if rollout["phase"] == contracts.ROLLOUT_PHASE_ROLLED_BACK:
            assert revisions == {rollout["previous"]}
            assert "parked" not in resource.struct_to_dict(rsp.desired.composite.resource)["status"]
        if rollout["phase"] == contracts.ROLLOUT_PHASE_COMPLETE:
            good_bytes.setdefault(rollout["revision"], template_bytes(bodies[0]))
        if spec is specs["bad"]:
            failing.add(rollout["revision"])
        observed = observed_from(rsp, failing, rolls)
    return phases, rollout


def test_the_simulation_goes_through_every_phase():
    """The property above is only as good as the paths it can take."""
    phases, rollout = simulate([("good", True, 60)] + [("", True, 200)] * 4)
    assert contracts.ROLLOUT_PHASE_PROGRESSING in phases
    assert rollout["phase"] == contracts.ROLLOUT_PHASE_COMPLETE
    assert rollout["waves"] == 2
    assert rollout["revision"] == rollout["previous"]
    phases, rollout = simulate([("bad", True, 60), ("", True, 60), ("", True, 60)])
    assert rollout["phase"] == contracts.ROLLOUT_PHASE_ROLLED_BACK
    assert rollout["failedGate"]["name"] == "StartFailures"
