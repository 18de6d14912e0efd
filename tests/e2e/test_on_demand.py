"""On-demand models in the fleet box: a request to a scaled-to-zero model that fits is
served after one placement attempt; one that fits nowhere is answered at once with why.

What is real: the control plane (Crossplane core, our functions, provider-kubernetes),
the ModelDeployment's decision (Idle at 0, a fresh attempt per activate value), the
activator (our runtime's process, with a control-plane ServiceAccount bound only to
docs/activator-rbac.yaml's ClusterRole), the member's kube-scheduler binding the engine
pod to a KWOK GPU node with its DRA devices, and readiness reaching the control plane
through provider-kubernetes. What is not: the box has no Gateway data plane and KWOK pods
have no network, so the test sends the request the way the model's route does (the
`X-Modelplane-Deployment` header the route sets, to the activator's address), and the
activator's upstream is a local OpenAI-style server standing in for the engine pod.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from fleetbox.control_plane import CROSSPLANE_NAMESPACE
from fleetbox.process import Process
from fleetbox.wait import wait_for
from functions.common import answers, contracts
from functions.runtime.activator import core as activator_core
from functions.runtime.operator import fleet_status
from tests.e2e import claims
from tests.e2e.conftest import measured
from tests.ports import free_port
from tests.unit.chatserver import Answer, ChatServer

NAMESPACE = "ml-team"
MEMBER = "us-east-1"  # where the request arrives (a GPU member of the examples)
FITS = "ondemand-llama"
NOWHERE = "ondemand-h200"
HERE_LABEL = "fleet.example.com/on-demand-e2e"
ACTIVATOR_SA = f"{contracts.ACTIVATOR_SECRET_PREFIX}{MEMBER}"
RBAC = claims.REPO / "docs" / "activator-rbac.yaml"
ENTRYPOINT = [sys.executable, "-m", "functions.entrypoint", "runtime"]
# From the request to the first byte: one attempt, a pod bound and Ready, provider-kubernetes
# (poll 30 s) and core (poll 15 s) carrying readiness back; generous for a loaded machine.
ACTIVATION_TIMEOUT = "10m"
FIRST_BYTE_SECONDS = 600.0
# "At once": one reconcile of the deployment after the annotation, not the activation window.
AT_ONCE_SECONDS = 60.0


def _deployment(name: str, *, product: str | None = None) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    spec = document["spec"]
    spec["replicas"] = 1
    spec.pop("autoscaling", None)
    spec["onDemand"] = {"activationTimeout": ACTIVATION_TIMEOUT}
    # Only the Standard-stack member: its Deployments run pods here (the Dynamo member's
    # PodCliqueSets have no Grove controller in the box).
    spec["template"]["spec"]["clusterSelector"] = {"matchLabels": {HERE_LABEL: "yes"}}
    if product:
        (device,) = spec["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
        device["selectors"] = [
            {"cel": f'device.attributes["gpu.nvidia.com"].productName == "{product}"'}
        ]
    return document


def _token_kubeconfig(box, workdir: Path) -> Path:
    """A control-plane kubeconfig for the activator's own ServiceAccount (a TokenRequest
    token), bound to nothing but the shipped ClusterRole."""
    box.kubectl(claims.CONTROL, "apply", "-f", str(RBAC))
    box.kubectl(
        claims.CONTROL, "create", "serviceaccount", ACTIVATOR_SA, "-n",
        CROSSPLANE_NAMESPACE, check=False,
    )  # fmt: skip
    box.kubectl(
        claims.CONTROL, "create", "clusterrolebinding", ACTIVATOR_SA,
        f"--clusterrole={contracts.ACTIVATOR_CLUSTER_ROLE}",
        f"--serviceaccount={CROSSPLANE_NAMESPACE}:{ACTIVATOR_SA}", check=False,
    )  # fmt: skip
    token = box.kubectl(
        claims.CONTROL, "create", "token", ACTIVATOR_SA, "-n", CROSSPLANE_NAMESPACE,
        "--duration=2h",
    ).stdout.strip()  # fmt: skip
    config = yaml.safe_load(box.kubeconfigs[claims.CONTROL].read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path = workdir / "activator-kubeconfig.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def activator(box):
    engine = ChatServer(script=[Answer(content="served by the engine")] * 4)
    workdir = box.root / "activator"
    workdir.mkdir(exist_ok=True)
    kubeconfig = _token_kubeconfig(box, workdir)
    box.kubectl(claims.CONTROL, "label", "inferencecluster", MEMBER, f"{HERE_LABEL}=yes")
    port = free_port("127.0.0.1")
    upstream = engine.url.removesuffix("/v1")
    process = Process(
        f"activator-{MEMBER}",
        [
            *ENTRYPOINT, "activator", f"--cluster={MEMBER}", f"--control-plane={kubeconfig}",
            f"--member-api={box.kubeconfigs[MEMBER]}", "--health-listen=127.0.0.1:0",
            "--metrics-port=0",
            f"--listen=127.0.0.1:{port}", f"--upstream={upstream}",
        ],
        workdir / "activator.log",
        cwd=claims.REPO,
    )  # fmt: skip
    box.processes[process.name] = process
    process.start()

    def ready():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", contracts.READYZ_PATH)
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    wait_for("the activator listening", ready, 60)
    try:
        yield port, engine, process
    finally:
        process.stop(grace=5)
        box.processes.pop(process.name, None)
        engine.close()
        # Gone from the member before the next module looks at its GPUs.
        remote = [
            pair
            for name in (FITS, NOWHERE)
            for pair in claims.everything_composed_for(box, name, NAMESPACE, deleted_with_it=True)
        ]
        for name in (FITS, NOWHERE):
            claims.delete(box, "modeldeployment", name, NAMESPACE)

        claims.wait_gone(box, remote)
        box.kubectl(claims.CONTROL, "label", "inferencecluster", MEMBER, f"{HERE_LABEL}-")


def _status(box, name: str) -> dict:
    return (claims.get(box, "modeldeployment", name, NAMESPACE) or {}).get("status") or {}


def route_token(route: dict) -> str:
    """The route token the model's composed route sets (what the Gateway's proxy sends
    the activator with the identity)."""
    (token,) = {
        header["value"]
        for rule in route["spec"]["rules"]
        for rule_filter in rule.get("filters") or []
        for header in (rule_filter.get("requestHeaderModifier") or {}).get("set") or []
        if header["name"] == contracts.HEADER_ROUTE_TOKEN
    }
    return token


def _wait_idle(box, name: str) -> str:
    """Until the model is idle and its route on MEMBER leads to the activator; that
    route's token."""

    def idle():
        status = _status(box, name)
        assert (status.get("onDemand") or {}).get("state") == "Idle", status.get("onDemand")
        assert status.get("desiredReplicas") == 0, status
        replicas = claims.replicas_of(box, name, NAMESPACE)
        at_member = [r for r in replicas if r["spec"]["cluster"]["name"] == MEMBER]
        assert at_member, f"no ModelReplica of {name} on {MEMBER} for its route"
        assert all(r["spec"]["replicas"] == 0 for r in replicas)
        assert all(r["spec"].get("activator") is True for r in replicas)
        return status

    wait_for(f"{name} idle at zero, routed to the activator", idle, claims.CONVERGE_SECONDS)

    # A client's request reaches the activator only through the model's route on the
    # member, and the activator serves only identities those routes set: wait until
    # provider-kubernetes has put the route there, as a request would find it.
    def routed():
        listed = box.kubectl(MEMBER, "get", "httproutes", "-n", NAMESPACE, "-o", "json")
        routes = json.loads(listed.stdout).get("items", [])
        index = activator_core.route_index(routes)
        assert index.vouches_for(NAMESPACE, name), [
            (r["metadata"]["name"], r["spec"].get("rules")) for r in routes
        ]
        (token,) = index.tokens[(NAMESPACE, name)]
        return token

    return wait_for(f"{name}'s route to the activator on {MEMBER}", routed, claims.CONVERGE_SECONDS)


def _request(port: int, name: str, token: str | None) -> tuple[int, bytes, float, float]:
    """A chat completion as the route forwards it (with its token), or with `token`
    None as a client connecting directly sends it: (status, body, seconds to the first
    byte of the answer, seconds in all)."""
    body = json.dumps({"model": name, "messages": [{"role": "user", "content": "hi"}]})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=FIRST_BYTE_SECONDS + 60)
    began = time.monotonic()
    connection.request(
        "POST",
        "/v1/chat/completions",
        body,
        {
            "Content-Type": "application/json",
            contracts.HEADER_DEPLOYMENT: f"{NAMESPACE}/{name}",
            contracts.HEADER_MODEL_NAME: name,
            **({contracts.HEADER_ROUTE_TOKEN: token} if token is not None else {}),
        },
    )
    reply = connection.getresponse()
    first = reply.read(1)
    first_byte = time.monotonic() - began
    rest = reply.read()
    connection.close()
    return reply.status, first + rest, first_byte, time.monotonic() - began


def _modelplane_status(box, name: str) -> fleet_status.ModelSummary:
    deployment = claims.get(box, "modeldeployment", name, NAMESPACE)
    return fleet_status.read_model(deployment, claims.replicas_of(box, name, NAMESPACE))


def test_a_request_to_a_scaled_to_zero_model_that_fits_is_served_after_one_attempt(box, activator):
    port, engine, process = activator
    claims.apply_document(box, _deployment(FITS))
    token = _wait_idle(box, FITS)
    assert _modelplane_status(box, FITS).state == fleet_status.STATE_SATISFIED  # idle at 0

    # A client that connects to the activator directly (the box's members enforce no
    # NetworkPolicy) names the model, but not with its route's token: refused as an
    # unknown identity, and nothing is asked of the control plane.
    status, body, _first_byte, _total = _request(port, FITS, None)
    assert status == 404, body
    assert json.loads(body)["error"]["reason"] == activator_core.REASON_NOT_ROUTED
    xr = claims.get(box, "modeldeployment", FITS, NAMESPACE)
    assert contracts.ANNOTATION_ACTIVATE not in (xr["metadata"].get("annotations") or {})

    status, body, first_byte, _total = _request(port, FITS, token)
    assert status == 200, (body, process.tail())
    answer = json.loads(body)
    assert answer["choices"][0]["message"]["content"] == "served by the engine"
    measured("on-demand: time to first byte, scaled to zero to served", first_byte)

    xr = claims.get(box, "modeldeployment", FITS, NAMESPACE)
    activate = xr["metadata"]["annotations"][contracts.ANNOTATION_ACTIVATE]
    attempt = xr["status"]["onDemand"]["attempt"]
    # One attempt: the one value the activator set is the one answered, and it placed.
    assert (attempt["id"], attempt["result"]) == (activate, "Placed")
    assert xr["status"]["readyReplicas"] >= 1
    assert xr["status"]["onDemand"]["state"] == "Active"
    assert process.tail(200).count("asked for a placement attempt") == 1
    # The engine got the request as the client sent it.
    assert engine.requests[-1]["model"] == FITS
    assert engine.requests[-1]["_path"] == "/v1/chat/completions"
    # Served and ready: no longer routed to the activator on the member it runs on.
    ready_on = {p["cluster"] for p in xr["status"]["placements"] if p["readyReplicas"]}

    def routed_direct():
        replicas = claims.replicas_of(box, FITS, NAMESPACE)
        on = [r for r in replicas if r["spec"]["cluster"]["name"] in ready_on]
        assert on, ready_on
        assert all(r["spec"]["activator"] is False for r in on), [
            (r["spec"]["cluster"]["name"], r["spec"].get("activator")) for r in replicas
        ]
        return True

    wait_for(f"{FITS}'s route off the activator", routed_direct, claims.CONVERGE_SECONDS)


def test_a_request_to_a_model_that_fits_nowhere_is_answered_at_once(box, activator):
    port, engine, _process = activator
    served_before = len(engine.requests)
    claims.apply_document(box, _deployment(NOWHERE, product="NVIDIA H200"))
    token = _wait_idle(box, NOWHERE)

    status, body, _first_byte, total = _request(port, NOWHERE, token)
    measured("on-demand: answer for a model that fits nowhere", total)
    assert status == 503, body
    error = json.loads(body)["error"]
    assert error["reason"] == "Unplaceable"
    assert error["model"] == NOWHERE
    # What the caller can do; why (no pool has an H200) is the operator's, in status.
    assert error["message"] == answers.caller_message("Unplaceable"), error
    assert b"NVIDIA H200" not in body
    attempt = claims.get(box, "modeldeployment", NOWHERE, NAMESPACE)["status"]["onDemand"]
    assert "NVIDIA H200" in attempt["attempt"]["reason"], attempt
    assert total < AT_ONCE_SECONDS, f"held {total:.1f}s, not answered at once"
    assert len(engine.requests) == served_before  # nothing was proxied

    # Asked for and fits nowhere: short, not satisfied.
    summary = _modelplane_status(box, NOWHERE)
    assert summary.state == fleet_status.STATE_UNPLACEABLE
    assert not summary.satisfied
    assert summary.on_demand == "Active"
