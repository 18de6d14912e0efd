"""Tenancy in the fleet box (issue 34's acceptance): one ML team cannot reach another
team's model, the members' nodes or the platform's names.

- A privileged pod template is refused, and the ModelDeployment's Synced condition names
  the field and the rule; nothing reaches a member.
- An InferenceCluster named like a provider config that exists (the box's own
  `control-plane`, which the example destination's gateway goes through) does not take it
  over: the cluster is refused by name and the provider config is untouched.
- A request carrying another namespace's identity does not reach or activate that
  model: team-a's forged HTTPRoute claiming team-b's on-demand model makes the identity
  contested, so the real activator (our runtime's process, with the shipped RBAC) answers
  404 without a placement attempt.
- A benign deployment reconciles in its usual time while hostile CEL selectors are
  being evaluated by the same function.

What is real: the control plane (Crossplane core, our functions over mTLS,
provider-kubernetes), the members' API servers, the activator process. Each test applies
its own claims and removes them.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time

import pytest

from fleetbox import install_doc
from fleetbox.control_plane import CROSSPLANE_NAMESPACE
from fleetbox.process import Process
from fleetbox.wait import wait_for
from functions.common import contracts
from functions.runtime.activator import core as activator_core
from tests.e2e import claims
from tests.e2e.conftest import measured
from tests.e2e.test_on_demand import ENTRYPOINT, _token_kubeconfig, route_token
from tests.ports import free_port

TIER = "fleet.example.com/tier"
E2E_TIER = "e2e-tenancy"
SPARE = ("e2e-a", "e2e-b")
NAMESPACE = "ml-team"
TEAM_A, TEAM_B = "team-a", "team-b"
MEMBER = "us-east-1"  # where the activator runs (an example member with the Standard stack)
HERE_LABEL = "fleet.example.com/tenancy-e2e"
ON_DEMAND = "tenancy-od"


def _cluster(example: str, member: str) -> dict:
    """An example cluster on a spare member, named for it, in this module's tier."""
    document = claims.renamed(claims.example(f"inferenceclusters/{example}"), member)
    document["metadata"]["labels"] = {TIER: E2E_TIER}
    document["spec"]["providerConfigRef"] = {"name": member}
    return document


@pytest.fixture(scope="module")
def clusters(box):
    made = [_cluster("us-east-h100.yaml", SPARE[0]), _cluster("eu-west-b200.yaml", SPARE[1])]
    for cluster in made:
        claims.apply_document(box, cluster)
    yield E2E_TIER
    for cluster in made:
        claims.delete(box, "inferencecluster", cluster["metadata"]["name"])


def _deployment(name: str, tier: str = E2E_TIER, namespace: str = NAMESPACE) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    document["metadata"]["namespace"] = namespace
    document["spec"]["replicas"] = 1
    document["spec"].pop("autoscaling", None)
    document["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": {TIER: tier}}
    return document


def _conditions(xr: dict | None) -> dict[str, dict]:
    return {c["type"]: c for c in ((xr or {}).get("status") or {}).get("conditions") or []}


def _ensure_namespace(box, name: str) -> None:
    box.kubectl(claims.CONTROL, "create", "namespace", name, check=False)


# --- a privileged pod template ------------------------------------------------------------


def test_a_privileged_pod_template_is_refused_with_its_field_and_rule(box, clusters):
    name = "tenancy-privileged"
    document = _deployment(name)
    engine = document["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]
    engine["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    engine["spec"]["hostPID"] = True
    field = (
        "spec.template.spec.engines[0].members[0].template.spec.hostPID: "
        "host namespaces are not allowed (rule hostNamespaces)"
    )
    began = time.monotonic()
    claims.apply_document(box, document)
    try:

        def refused():
            synced = _conditions(claims.get(box, "modeldeployment", name, NAMESPACE)).get("Synced")
            assert synced is not None, "no Synced condition yet"
            assert synced["status"] == "False", synced
            assert field in synced["message"], synced["message"]
            assert "securityContext.privileged" in synced["message"], synced["message"]
            return synced

        synced = wait_for(f"{name} refused with its field", refused, claims.CONVERGE_SECONDS)
        measured(
            "privileged pod template: applied to refused on the deployment",
            time.monotonic() - began,
        )
        assert "baseline pod policy of InferenceCluster" in synced["message"]
        # Refused before placement: no ModelReplica, nothing on any member.
        assert claims.replicas_of(box, name, NAMESPACE) == []
        assert claims.composed_objects(box, name, NAMESPACE) == []
    finally:
        claims.delete(box, "modeldeployment", name, NAMESPACE)


def test_the_tenant_namespace_on_a_member_carries_the_pod_security_labels(box, clusters):
    name = "tenancy-benign-labels"
    claims.apply_document(box, _deployment(name))
    try:

        def placed_on() -> set[str]:
            xr = claims.get(box, "modeldeployment", name, NAMESPACE) or {}
            on = {p["cluster"] for p in (xr.get("status") or {}).get("placements") or []}
            assert on, "not placed yet"
            return on

        # The spare clusters are named for their members (their provider configs).
        members = wait_for(f"{name} placed", placed_on, claims.CONVERGE_SECONDS)

        def labelled():
            stub = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            for member in members:
                found = claims.remote_get(box, member, stub)
                assert found is not None, f"no Namespace {NAMESPACE} on {member} yet"
                labels = found["metadata"].get("labels") or {}
                assert labels.get("pod-security.kubernetes.io/enforce") == "baseline", labels
                assert labels.get("pod-security.kubernetes.io/warn") == "baseline", labels
            return True

        wait_for(f"{NAMESPACE} labelled on {sorted(members)}", labelled, claims.CONVERGE_SECONDS)
    finally:
        claims.delete(box, "modeldeployment", name, NAMESPACE)


# --- a cluster named like an existing provider config ---------------------------------------


def test_a_cluster_named_like_an_existing_provider_config_does_not_take_it_over(box):
    taken = claims.CONTROL  # the box's own, hand-made: the example gateway goes through it
    before = claims.get(box, "clusterproviderconfigs.kubernetes.m.crossplane.io", taken)
    assert before is not None
    document = claims.renamed(claims.example("inferenceclusters/us-east-h100.yaml"), taken)
    document["metadata"]["labels"] = {TIER: "e2e-takeover"}
    document["spec"].pop("providerConfigRef")
    # Were it composed, no example deployment could be placed on it.
    for pool in document["spec"]["nodePools"]:
        pool["taints"] = [{"key": "e2e-takeover", "effect": "NoSchedule"}]
    # A kubeconfig that reaches a spare member, from the platform's Secret namespace.
    document["spec"]["kubeconfigSecretRef"] = {
        "namespace": CROSSPLANE_NAMESPACE,
        "name": install_doc.secret_name(SPARE[1], "kubernetes"),
        "key": "kubeconfig",
    }
    claims.apply_document(box, document)
    try:

        def refused():
            synced = _conditions(claims.get(box, "inferencecluster", taken)).get("Synced")
            assert synced is not None, "no Synced condition yet"
            assert synced["status"] == "False", synced
            assert (
                "metadata.name: a ClusterProviderConfig named 'control-plane' already exists"
                in (synced["message"])
            ), synced["message"]
            return synced

        wait_for("the cluster refused by name", refused, claims.CONVERGE_SECONDS)
        for resource in (
            "clusterproviderconfigs.kubernetes.m.crossplane.io",
            "clusterproviderconfigs.helm.m.crossplane.io",
        ):
            after = claims.get(box, resource, taken)
            assert after is not None
            assert after["spec"]["credentials"]["secretRef"]["name"] == f"{taken}-kubeconfig"
            assert not after["metadata"].get("ownerReferences"), after["metadata"]
            assert "crossplane.io/composite" not in (after["metadata"].get("labels") or {})
        assert (
            claims.get(box, "clusterproviderconfigs.kubernetes.m.crossplane.io", taken)["metadata"][
                "resourceVersion"
            ]
            == before["metadata"]["resourceVersion"]
        )
        assert claims.composed_objects(box, taken) == []
    finally:
        claims.delete(box, "inferencecluster", taken)


# --- another namespace's identity at the activator ------------------------------------------


@contextlib.contextmanager
def _activator(box):
    """Our activator on MEMBER, with a control-plane token bound to the shipped role only.
    Started after the routes it is to see exist: its first listing has them all."""
    workdir = box.root / "tenancy-activator"
    workdir.mkdir(exist_ok=True)
    kubeconfig = _token_kubeconfig(box, workdir)
    port = free_port("127.0.0.1")
    process = Process(
        f"tenancy-activator-{MEMBER}",
        [
            *ENTRYPOINT, "activator", f"--cluster={MEMBER}", f"--control-plane={kubeconfig}",
            f"--member-api={box.kubeconfigs[MEMBER]}", "--health-listen=127.0.0.1:0",
            "--metrics-port=0",
            f"--listen=127.0.0.1:{port}", "--upstream=http://127.0.0.1:9",
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

    try:
        wait_for("the activator listening", ready, 60)
        yield port, process
    finally:
        process.stop(grace=5)
        box.processes.pop(process.name, None)


def _request(port: int, identity: str, token: str) -> tuple[int, dict]:
    body = json.dumps({"model": ON_DEMAND, "messages": [{"role": "user", "content": "hi"}]})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body,
            {
                "Content-Type": "application/json",
                contracts.HEADER_DEPLOYMENT: identity,
                contracts.HEADER_ROUTE_TOKEN: token,
            },
        )
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")
    finally:
        connection.close()


def _routes(box, namespace: str) -> list[dict]:
    listed = box.kubectl(MEMBER, "get", "httproutes", "-n", namespace, "-o", "json", check=False)
    return json.loads(listed.stdout).get("items", []) if listed.returncode == 0 else []


def test_a_request_with_another_namespaces_identity_does_not_reach_or_activate_it(box):
    _ensure_namespace(box, TEAM_B)
    box.kubectl(claims.CONTROL, "label", "inferencecluster", MEMBER, f"{HERE_LABEL}=yes")
    document = _deployment(ON_DEMAND, namespace=TEAM_B)
    document["spec"]["onDemand"] = {"activationTimeout": "60s"}
    document["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": {HERE_LABEL: "yes"}}
    claims.apply_document(box, document)
    try:

        def routed():
            routes = _routes(box, TEAM_B)
            assert activator_core.route_index(routes).vouches_for(TEAM_B, ON_DEMAND), [
                r["metadata"]["name"] for r in routes
            ]
            return routes

        (real, *_) = wait_for(
            f"{ON_DEMAND}'s route to the activator", routed, claims.CONVERGE_SECONDS
        )
        # team-a, with access to its own namespace on the member, copies the route there
        # claiming team-b's model (what the activator trusted before: the header).
        box.kubectl(MEMBER, "create", "namespace", TEAM_A, check=False)
        forged = {
            "apiVersion": real["apiVersion"],
            "kind": "HTTPRoute",
            "metadata": {
                "name": "forged",
                "namespace": TEAM_A,
                "labels": dict(real["metadata"].get("labels") or {}),
            },
            "spec": real["spec"],
        }
        claims.apply_document(box, forged, cluster=MEMBER)
        with _activator(box) as (port, process):
            # An identity no route vouches for: 404 without a read.
            token = route_token(real)  # the forged copy sets it too
            status, answer = _request(port, f"{TEAM_A}/{ON_DEMAND}", token)
            assert status == 404, answer
            # team-b's identity is claimed from team-a's namespace too: contested, served
            # to no one even with its own route's token, and nothing asks for a
            # placement attempt.
            status, answer = _request(port, f"{TEAM_B}/{ON_DEMAND}", token)
            assert status == 404, answer
            assert answer["error"]["reason"] == activator_core.REASON_NOT_ROUTED, answer
            xr = claims.get(box, "modeldeployment", ON_DEMAND, TEAM_B)
            assert contracts.ANNOTATION_ACTIVATE not in (xr["metadata"].get("annotations") or {})
            assert "asked for a placement attempt" not in process.tail(200)
            assert ((xr.get("status") or {}).get("onDemand") or {}).get("state") != "Active"
    finally:
        box.kubectl(MEMBER, "delete", "httproute", "forged", "-n", TEAM_A, "--ignore-not-found")
        remote = claims.everything_composed_for(box, ON_DEMAND, TEAM_B, deleted_with_it=True)
        claims.delete(box, "modeldeployment", ON_DEMAND, TEAM_B)
        claims.wait_gone(box, remote)
        box.kubectl(claims.CONTROL, "label", "inferencecluster", MEMBER, f"{HERE_LABEL}-")


# --- a benign reconcile while hostile selectors are evaluated ------------------------------

SIXTEEN = "[" + ", ".join(["1"] * 16) + "]"


def _doubling(times: int) -> str:
    expression = f"x{times}.all(e, e == 0)"
    for i in range(times, 0, -1):
        expression = f"cel.bind(x{i}, x{i - 1} + x{i - 1}, {expression})"
    return f"cel.bind(x0, {SIXTEEN}, {expression})"


def _placed(box, name: str) -> bool:
    xr = claims.get(box, "modeldeployment", name, NAMESPACE)
    scheduled = _conditions(xr).get("ReplicasScheduled") or {}
    assert scheduled.get("status") == "True", scheduled
    return True


def _time_to_placed(box, name: str) -> float:
    began = time.monotonic()
    claims.apply_document(box, _deployment(name))
    wait_for(f"{name} placed", lambda: _placed(box, name), claims.CONVERGE_SECONDS)
    return time.monotonic() - began


def test_a_benign_deployment_reconciles_in_its_usual_time_while_hostile_selectors_run(
    box, clusters
):
    hostile = [f"tenancy-hostile-{i}" for i in range(4)]
    benign = ["tenancy-benign-before", "tenancy-benign-during"]
    try:
        usual = measured("benign deployment: applied to placed", _time_to_placed(box, benign[0]))
        for name in hostile:
            document = _deployment(name)
            device = document["spec"]["template"]["spec"]["engines"][0]["members"][0]
            device["nodeSelector"]["devices"][0]["selectors"] = [
                {"cel": _doubling(12)} for _ in range(8)
            ]
            claims.apply_document(box, document)

        def hostile_refused():
            for name in hostile:
                synced = _conditions(claims.get(box, "modeldeployment", name, NAMESPACE)).get(
                    "Synced"
                )
                assert synced is not None, name
                assert synced["status"] == "False", (name, synced)
                assert "selectors[" in synced["message"], synced["message"]
            return True

        during = measured(
            "benign deployment: applied to placed, 4 hostile deployments reconciling",
            _time_to_placed(box, benign[1]),
        )
        # The hostile ones were refused by their budget, naming the selector.
        wait_for("hostile selectors refused", hostile_refused, claims.CONVERGE_SECONDS)
        print(f"benign reconcile: {usual:.1f}s alone, {during:.1f}s beside 4 hostile deployments")
        # Its usual time: well inside what any claim is given to converge.
        assert during < claims.CONVERGE_SECONDS
    finally:
        for name in (*hostile, *benign):
            claims.delete(box, "modeldeployment", name, NAMESPACE)
