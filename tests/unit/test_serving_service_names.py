"""No Service we compose takes the name a workload controller needs, on any shape.

The LeaderWorkerSet controller (sigs.k8s.io/lws v0.8.0, subdomain policy Shared) gives
every pod the subdomain `<lws>` and creates a headless Service of that name only when
no Service of the name exists; Grove's headless Service is `<podcliqueset>-<replica
index>`. The leader address every worker is launched with names that subdomain, so a
composed Service under it leaves the address without DNS records (issue 45).
"""

import re
from pathlib import Path

import pytest
import yaml

from functions.common.contracts import ENV_LEADER_ADDRESS
from functions.common.naming import serving_service_name
from functions.compose_model_replica.compose import SERVING_SERVICE_KEY, compose
from functions.compose_model_replica.model import parse
from functions.runtime.activator.server import DEFAULT_UPSTREAM, Upstreams

INPUTS = sorted((Path(__file__).parent / "testdata/model_replica/inputs").glob("*.yaml"))


def _composed(xr_path: Path) -> dict[str, dict]:
    plan = compose(parse(yaml.safe_load(xr_path.read_text())))
    return {c.key: c.object["spec"]["forProvider"]["manifest"] for c in plan.composed}


def _workloads(composed: dict[str, dict]) -> list[dict]:
    return [m for key, m in composed.items() if key.startswith("workload")]


def _leader_addresses(workload: dict) -> set[str]:
    return {
        e["value"]
        for spec in _pod_specs(workload)
        for c in spec["containers"]
        for e in c.get("env") or []
        if e["name"] == ENV_LEADER_ADDRESS
    }


def _pod_specs(workload: dict) -> list[dict]:
    if workload["kind"] == "LeaderWorkerSet":
        template = workload["spec"]["leaderWorkerTemplate"]
        return [t["spec"] for k, t in template.items() if k.endswith("Template")]
    if workload["kind"] == "PodCliqueSet":
        return [c["spec"]["podSpec"] for c in workload["spec"]["template"]["cliques"]]
    return [workload["spec"]["template"]["spec"]]


def _controller_service_pattern(workload: dict) -> str:
    """The names the workload's controller gives its headless Services."""
    name = re.escape(workload["metadata"]["name"])
    if workload["kind"] == "LeaderWorkerSet":
        return name
    if workload["kind"] == "PodCliqueSet":
        return rf"{name}-[0-9]+"
    return r"(?!)"  # a Deployment's controller makes no Service


# The shapes whose pods are launched with a leader address (one replica across nodes).
MULTI_NODE = [p for p in INPUTS if any(_leader_addresses(w) for w in _workloads(_composed(p)))]


@pytest.mark.parametrize("xr_path", INPUTS, ids=lambda p: p.stem)
def test_no_composed_service_takes_a_name_the_workload_controller_needs(xr_path):
    composed = _composed(xr_path)
    services = {m["metadata"]["name"] for m in composed.values() if m["kind"] == "Service"}
    for workload in _workloads(composed):
        pattern = _controller_service_pattern(workload)
        taken = {s for s in services if re.fullmatch(pattern, s)}
        assert not taken, f"{workload['kind']} {workload['metadata']['name']}: {sorted(taken)}"


@pytest.mark.parametrize("xr_path", INPUTS, ids=lambda p: p.stem)
def test_the_model_service_is_named_apart_from_the_deployment(xr_path):
    composed = _composed(xr_path)
    service = composed[SERVING_SERVICE_KEY]
    deployment = yaml.safe_load(xr_path.read_text())["spec"]["deployment"]
    assert service["metadata"]["name"] == serving_service_name(deployment)
    assert "service" not in composed  # the key that took the LWS's name is gone


@pytest.mark.parametrize("xr_path", MULTI_NODE, ids=lambda p: p.stem)
def test_the_leader_address_names_the_controllers_headless_service(xr_path):
    """`<host>.<subdomain>.<namespace>`: the subdomain is the workload controller's
    headless Service, never one of ours."""
    composed = _composed(xr_path)
    services = {m["metadata"]["name"] for m in composed.values() if m["kind"] == "Service"}
    for workload in _workloads(composed):
        name = workload["metadata"]["name"]
        for address in _leader_addresses(workload):
            _, subdomain, namespace = address.split(".")
            assert namespace == workload["metadata"]["namespace"]
            if workload["kind"] == "LeaderWorkerSet":
                assert subdomain == name
                assert workload["spec"]["networkConfig"]["subdomainPolicy"] == "Shared"
            else:
                assert workload["kind"] == "PodCliqueSet"
                assert re.fullmatch(rf"{re.escape(name)}-\$\([A-Z_]+\)", subdomain), subdomain
            assert subdomain not in services


def test_every_multi_node_shape_is_checked():
    assert {p.stem for p in MULTI_NODE} >= {
        "leader-worker",
        "cpu-leader-worker",
        "grove-leader-worker",
        "grove-leader-worker-vllm",
    }


def test_the_activator_forwards_to_the_service_we_compose():
    """The activator's default upstream (`--upstream`) is this member's model Service:
    the one compose-model-replica composes, not the LeaderWorkerSet's headless one."""
    xr_path = next(p for p in INPUTS if p.stem == "leader-worker")
    spec = yaml.safe_load(xr_path.read_text())
    composed = _composed(xr_path)
    service = composed[SERVING_SERVICE_KEY]["metadata"]
    url = Upstreams("here", DEFAULT_UPSTREAM, {}).url(
        spec["metadata"]["namespace"], spec["spec"]["deployment"], "here"
    )
    assert url == f"http://{service['name']}.{service['namespace']}.svc:8000"
