"""The fuzz tier: hostile and malformed input to every function (issue 20's acceptance).

Seeded (derandomized) hypothesis runs over each function's inputs and observed state.
Each case starts from a real request built from examples/, lets the function compose
once, feeds what it composed back as observed, then breaks one value somewhere — in the
XR, in a required resource (another tenant's object) or in what is observed — with the
kind of value a tenant or a careless platform engineer can apply: wrong types, NaN and
infinities, huge numbers, a trailing newline, deep nesting, long strings, URLs that
carry a password. It checks:

- every request gets a response (the shell's guard turns an exception into a fatal
  result, so the stronger check is that another object's breakage is never fatal to
  this one: one bad object never stops the fleet);
- nothing composed before disappears because another object is unreadable, and a
  fatal result still carries everything observed;
- the planted password never appears anywhere in the response.

A few minutes at most in `make test` (30 examples per test); MODELPLANE_FUZZ_EXAMPLES
scales it: `make fuzz-long` runs 200 per test (tests/fuzz/profile.py).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given
from hypothesis import strategies as st

from functions.compose_model_deployment import cache_fn
from functions.compose_model_deployment import fn as deployment_fn
from functions.compose_model_deployment import main as deployment_main
from functions.compose_model_deployment.model import InputError, read_cluster
from functions.compose_model_replica import fn as replica_fn
from functions.compose_model_replica.cluster import REQUIRED_CLUSTER
from functions.compose_serving_stack import fn as stack_fn
from functions.compose_telemetry import main as telemetry_main
from tests.fuzz import profile
from tests.ledgers import with_ledgers

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SECRET = "hunter2-fuzz-password"
FUZZ = profile.FUZZ


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _deep(depth: int) -> dict:
    nested: dict = {"x": 1}
    for _ in range(depth):
        nested = {"x": nested}
    return nested


HOSTILE_VALUES = st.one_of(
    st.sampled_from(
        [
            None,
            "",
            True,
            0,
            -1,
            1.5,
            2**63,
            -(2**63),
            1e300,
            float("nan"),
            float("inf"),
            "1.2.3\n",
            "abc\n",
            "1e999999999",
            "535.129.03",
            "x" * 5000,
            "modelplane-system",
            "../../etc",
            "${env:HOME}",
            f"https://admin:{SECRET}@evil.example.com:443/v1",
            f"https://evil.example.com/v1?api_key={SECRET}",
            f"admin:{SECRET}@evil.example.com:4317",
            [],
            [1, "two", None],
            {},
            {"unexpected": {"shape": [1]}},
            _deep(60),
        ]
    ),
    st.text(max_size=40),
    st.integers(min_value=-(2**40), max_value=2**40),
)


def _paths(node, prefix=()) -> list[tuple]:
    """Every path to a value inside `node` (dict keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


def _set(node, path: tuple, value) -> None:
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


def _clean(value):
    """What a protobuf Struct can carry (no NaN keys, float infinities pass as floats)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@st.composite
def broken(draw, document: dict, *, keep_identity: bool = False) -> dict:
    """`document` with one value replaced by a hostile one. `keep_identity`: not its name
    or namespace, which the API server itself validates (a DNS name holds no URL)."""
    body = copy.deepcopy(document)
    paths = [
        p
        for p in _paths(body)
        if not (keep_identity and p[:2] in {("metadata", "name"), ("metadata", "namespace")})
        and p[:1] != ("kind",)
    ]
    path = draw(st.sampled_from(paths))
    _set(body, path, _clean(draw(HOSTILE_VALUES)))
    return body


def _struct_safe(body) -> bool:
    """Whether Crossplane could send it: JSON has no NaN or infinities."""
    try:
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update(body)
        resource.struct_to_dict(req.observed.composite.resource)
    except (ValueError, TypeError):
        return False
    return True


def _run(runner, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = asyncio.run(runner.RunFunction(req))
    assert isinstance(rsp, fnv1.RunFunctionResponse)
    assert SECRET not in str(rsp), "a planted password reached the response"
    return rsp


def _fatal(rsp) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def _observe(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> None:
    """What the function composed, fed back as observed (as Crossplane would)."""
    for key, desired in rsp.desired.resources.items():
        req.observed.resources[key].resource.CopyFrom(desired.resource)


def _kept_everything(req, rsp) -> None:
    missing = sorted(set(req.observed.resources) - set(rsp.desired.resources))
    assert not missing, f"composed resources dropped: {missing}"


# --- compose-model-deployment ---------------------------------------------------------

DEPLOYMENT = _load(EXAMPLES / "modeldeployments" / "llama-8b-vllm.yaml")
CLUSTERS = [_load(p) for p in sorted((EXAMPLES / "inferenceclusters").glob("*.yaml"))]


def _deployment_request(xr: dict, clusters: list[dict], replicas: list[dict]):
    """What the fleet's `replicas` hold reaches the function in the clusters' ledgers,
    as compose-serving-stack writes them (a broken replica is left out there, with a
    warning, before it could reach placement)."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    name = deployment_fn.REQUIRED_CLUSTERS
    req.required_resources[name].SetInParent()
    for item in with_ledgers(clusters, replicas):
        req.required_resources[name].items.add().resource.update(item)
    return req


def _composed_replicas(rsp) -> list[dict]:
    replicas = []
    for key, desired in rsp.desired.resources.items():
        body = resource.struct_to_dict(desired.resource)
        body.setdefault("metadata", {}).update(
            namespace=DEPLOYMENT["metadata"]["namespace"], uid=key, resourceVersion="1"
        )
        replicas.append(body)
    return replicas


def _deployment_baseline():
    runner = deployment_fn.FunctionRunner()
    first = _run(runner, _deployment_request(DEPLOYMENT, CLUSTERS, []))
    assert not _fatal(first)
    return runner, first, _composed_replicas(first)


@given(data=st.data())
@FUZZ
def test_model_deployment_survives_a_broken_cluster(data):
    runner, first, replicas = _deployment_baseline()
    which = data.draw(st.integers(0, len(CLUSTERS) - 1))
    cluster = data.draw(broken(CLUSTERS[which], keep_identity=True))
    if not _struct_safe(cluster):
        return
    clusters = [*CLUSTERS[:which], cluster, *CLUSTERS[which + 1 :]]
    req = _deployment_request(DEPLOYMENT, clusters, replicas)
    _observe(req, first)
    rsp = _run(runner, req)
    assert not _fatal(rsp), "another object's breakage was fatal to this deployment"
    try:
        read_cluster(
            resource.struct_to_dict(
                req.required_resources[deployment_fn.REQUIRED_CLUSTERS].items[which].resource
            )
        )
    except InputError:
        _kept_everything(req, rsp)  # unreadable is not gone


@given(data=st.data())
@FUZZ
def test_model_deployment_survives_a_broken_replica(data):
    runner, first, replicas = _deployment_baseline()
    if not replicas:
        return
    which = data.draw(st.integers(0, len(replicas) - 1))
    replica = data.draw(broken(replicas[which], keep_identity=True))
    if not _struct_safe(replica):
        return
    listed = [*replicas[:which], replica, *replicas[which + 1 :]]
    req = _deployment_request(DEPLOYMENT, CLUSTERS, listed)
    _observe(req, first)
    rsp = _run(runner, req)
    assert not _fatal(rsp), "another object's breakage was fatal to this deployment"


@given(data=st.data())
@FUZZ
def test_model_deployment_answers_a_broken_deployment(data):
    runner, first, replicas = _deployment_baseline()
    xr = data.draw(broken(DEPLOYMENT, keep_identity=True))
    if not _struct_safe(xr):
        return
    req = _deployment_request(xr, CLUSTERS, replicas)
    _observe(req, first)
    rsp = _run(runner, req)
    if _fatal(rsp):
        _kept_everything(req, rsp)


# --- compose-model-deployment: a ModelCache ------------------------------------------------

CACHE = _load(EXAMPLES / "modelcaches" / "llama-3-3-70b.yaml")


def _referencing(cache: dict) -> dict:
    """The example deployment, referencing the cache: it is staged only where one could
    be placed."""
    deployment = copy.deepcopy(DEPLOYMENT)
    deployment["metadata"]["namespace"] = cache["metadata"]["namespace"]
    deployment["spec"]["modelCacheRef"] = {"name": cache["metadata"]["name"]}
    return deployment


def _cache_request(xr: dict) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    req.required_resources[cache_fn.REQUIRED_CLUSTERS].SetInParent()
    for item in CLUSTERS:
        req.required_resources[cache_fn.REQUIRED_CLUSTERS].items.add().resource.update(item)
    referencing = req.required_resources[cache_fn.REQUIRED_DEPLOYMENTS]
    referencing.items.add().resource.update(_referencing(CACHE))
    return req


@given(data=st.data())
@FUZZ
def test_model_cache_answers_a_broken_cache_or_a_broken_observed_object(data):
    runner = deployment_main.runner()
    first = _run(runner, _cache_request(CACHE))
    assert not _fatal(first)
    assert first.desired.resources
    if data.draw(st.booleans()):
        xr = data.draw(broken(CACHE, keep_identity=True))
        if not _struct_safe(xr):
            return
        req = _cache_request(xr)
        _observe(req, first)
        rsp = _run(runner, req)
        if _fatal(rsp):
            _kept_everything(req, rsp)
        return
    # What a member returned, broken: the phase read from it never fails the cache.
    req = _cache_request(CACHE)
    _observe(req, first)
    key = data.draw(st.sampled_from(sorted(req.observed.resources)))
    body = resource.struct_to_dict(req.observed.resources[key].resource)
    body["status"] = {"atProvider": {"manifest": {"status": {"active": 1, "conditions": []}}}}
    body = data.draw(broken(body, keep_identity=True))
    if not _struct_safe(body):
        return
    req.observed.resources[key].resource.Clear()
    req.observed.resources[key].resource.update(body)
    rsp = _run(runner, req)
    assert not _fatal(rsp), "a member's odd answer was fatal to the cache"
    _kept_everything(req, rsp)


# --- compose-serving-stack --------------------------------------------------------------

DESTINATION = _load(EXAMPLES / "telemetrydestinations" / "fleet.yaml")
MAPPINGS = [_load(p) for p in sorted((REPO / "functions/common/builtin_mappings").glob("*.yaml"))]


def _stack_request(
    xr: dict,
    destination: dict,
    mappings: list[dict],
    peers: list[dict],
    replicas: Sequence[dict] = (),
):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for name, items in (
        (stack_fn.REQUIRED_MAPPINGS, mappings),
        (stack_fn.REQUIRED_DESTINATIONS, [destination]),
        (stack_fn.REQUIRED_CLUSTERS, peers),
        (stack_fn.REQUIRED_REPLICAS, replicas),
    ):
        req.required_resources[name].SetInParent()
        for item in items:
            req.required_resources[name].items.add().resource.update(item)
    return req


def _stack_case(data, break_what: Callable[[dict, list[dict], list[dict]], tuple]):
    runner = stack_fn.FunctionRunner()
    xr = CLUSTERS[0]
    first = _run(runner, _stack_request(xr, DESTINATION, MAPPINGS, CLUSTERS))
    assert not _fatal(first)
    xr, destination, mappings, peers = break_what(xr, MAPPINGS, CLUSTERS)
    if not all(_struct_safe(b) for b in (xr, destination, *mappings, *peers)):
        return None
    req = _stack_request(xr, destination, mappings, peers)
    _observe(req, first)
    return req, _run(runner, req)


@given(data=st.data())
@FUZZ
def test_serving_stack_survives_a_broken_mapping_destination_or_peer(data):
    target = data.draw(st.sampled_from(["destination", "mapping", "peer"]))

    def break_one(xr, mappings, peers):
        if target == "destination":
            return xr, data.draw(broken(DESTINATION, keep_identity=True)), mappings, peers
        if target == "mapping":
            return xr, DESTINATION, [data.draw(broken(mappings[0])), *mappings[1:]], peers
        return xr, DESTINATION, mappings, [*peers[:-1], data.draw(broken(peers[-1]))]

    case = _stack_case(data, break_one)
    if case is None:
        return
    _req, rsp = case
    assert not _fatal(rsp), "another object's breakage was fatal to this cluster"


@given(data=st.data())
@FUZZ
def test_serving_stack_answers_a_broken_cluster(data):
    case = _stack_case(
        data, lambda xr, m, p: (data.draw(broken(xr, keep_identity=True)), DESTINATION, m, p)
    )
    if case is None:
        return
    req, rsp = case
    if _fatal(rsp):
        _kept_everything(req, rsp)


@given(data=st.data())
@FUZZ
def test_serving_stack_survives_a_broken_replica(data):
    _, _, replicas = _deployment_baseline()
    which = data.draw(st.integers(0, len(replicas) - 1))
    cluster = replicas[which]["spec"]["cluster"]["name"]
    xr = next(c for c in CLUSTERS if c["metadata"]["name"] == cluster)
    runner = stack_fn.FunctionRunner()
    first = _run(runner, _stack_request(xr, DESTINATION, MAPPINGS, CLUSTERS, replicas))
    assert not _fatal(first)
    replica = data.draw(broken(replicas[which], keep_identity=True))
    if not _struct_safe(replica):
        return
    listed = [*replicas[:which], replica, *replicas[which + 1 :]]
    req = _stack_request(xr, DESTINATION, MAPPINGS, CLUSTERS, listed)
    _observe(req, first)
    rsp = _run(runner, req)
    assert not _fatal(rsp), "a replica's breakage was fatal to its cluster"


# --- compose-telemetry ----------------------------------------------------------------


@given(data=st.data())
@FUZZ
def test_telemetry_answers_a_broken_destination_or_mapping(data):
    runner = telemetry_main.runner()
    base = data.draw(st.sampled_from([DESTINATION, *MAPPINGS]))
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(base)
    first = _run(runner, req)
    xr = data.draw(broken(base, keep_identity=True))
    if not _struct_safe(xr):
        return
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    _observe(req, first)
    rsp = _run(runner, req)
    if _fatal(rsp):
        _kept_everything(req, rsp)


# --- compose-model-replica --------------------------------------------------------------

REPLICAS = [
    _load(p) for p in sorted((REPO / "tests/unit/testdata/model_replica/inputs").glob("*.yaml"))
]


def _replica_cluster(replica: dict) -> dict:
    """The InferenceCluster a replica names (compose-model-replica reads it): the example
    cluster under the replica's cluster name, through the provider config it names."""
    cluster = copy.deepcopy(CLUSTERS[0])
    named = replica["spec"]["cluster"]
    cluster["metadata"]["name"] = named["name"]
    cluster["spec"]["providerConfigRef"] = named["providerConfigRef"]
    return cluster


def _replica_request(xr: dict, cluster: dict) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    req.required_resources[REQUIRED_CLUSTER].items.add().resource.update(cluster)
    return req


@given(data=st.data())
@FUZZ
def test_model_replica_answers_a_broken_replica_cluster_or_observed_object(data):
    runner = replica_fn.FunctionRunner()
    base = data.draw(st.sampled_from(REPLICAS))
    cluster = _replica_cluster(base)
    first = _run(runner, _replica_request(base, cluster))
    assert not _fatal(first)
    assert first.desired.resources
    what = data.draw(st.sampled_from(["replica", "cluster", "observed"]))
    if what == "replica":
        xr = data.draw(broken(base, keep_identity=True))
        if not _struct_safe(xr):
            return
        req = _replica_request(xr, cluster)
        _observe(req, first)
    elif what == "cluster":
        # The platform's object, broken (or renamed away): the replica is refused or
        # composed, never dropped.
        broken_cluster = data.draw(broken(cluster))
        if not _struct_safe(broken_cluster):
            return
        req = _replica_request(base, broken_cluster)
        _observe(req, first)
    else:
        req = _replica_request(base, cluster)
        _observe(req, first)
        key = data.draw(st.sampled_from(sorted(first.desired.resources)))
        observed = resource.struct_to_dict(req.observed.resources[key].resource)
        observed = data.draw(broken(observed))
        if not _struct_safe(observed):
            return
        req.observed.resources[key].resource.Clear()
        req.observed.resources[key].resource.update(observed)
    rsp = _run(runner, req)
    if _fatal(rsp):
        _kept_everything(req, rsp)
