"""The on-demand activator against real API servers (issue #34, item 3).

Two kube-apiservers of the runtime fleet play the control plane (member-0: the
ModelDeployments, a permissive CRD standing in for the XRD) and the member (member-1:
the HTTPRoutes compose-model-replica composes, under the real Gateway API CRD). The
activator runs in this process with the credentials it gets in a cluster: a
ServiceAccount token bound to CONTROL_PLANE_RULES on the control plane and to
MEMBER_RULES on the member, nothing more. A stand-in for compose-model-deployment
answers placement attempts the way it writes them (status.onDemand.attempt, then a
ready placement), and a local chat server stands in for the engine.

What is shown: a request carrying another namespace's identity neither reaches that
model nor activates it (whether no route here vouches for it, or a route in another
namespace claims it); the identity its own route vouches for is activated once and
served; the activator's credentials cannot list models; and a flood of slow clients
leaves the thread count where it was and the memory bounded, and is cleared by the
header timeout.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import resource
import socket
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from functions.common import contracts
from functions.runtime.activator import core
from functions.runtime.activator import server as shell
from functions.runtime.kube.clients import token_client
from tests.runtime.cluster import delete_crd
from tests.runtime.conftest import measured
from tests.runtime.test_hub_integration import install_crds
from tests.unit.chatserver import Answer, ChatServer
from tests.unit.test_activator import composed_route, token_of

GROUP, VERSION = contracts.API_GROUP_VERSION.split("/")
MODEL_DEPLOYMENTS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"modeldeployments.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": "modeldeployments",
            "singular": "modeldeployment",
            "kind": contracts.KIND_MODEL_DEPLOYMENT,
            "listKind": f"{contracts.KIND_MODEL_DEPLOYMENT}List",
        },
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
TEAMS = ("team-a", "team-b")
MODEL = "llm"
ACCOUNT = "modelplane-activator"
LIMITS = shell.Limits(
    idle_seconds=3,
    header_seconds=2,
    body_seconds=2,
    read_interval=0.2,
    routes_interval=0.5,
    routes_miss_interval=0.2,
)


def _established(api: client.ApiClient, name: str) -> None:
    extensions = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = extensions.read_custom_resource_definition(name)
        conditions = (crd.status.conditions or []) if crd.status else []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} not established")


def _namespace(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def _account_token(api: client.ApiClient, rules: tuple[dict, ...], role: str) -> str:
    """A token for the activator's ServiceAccount, bound to exactly `rules`."""
    core_api, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    namespace = contracts.SYSTEM_NAMESPACE
    _namespace(api, namespace)
    with contextlib.suppress(ApiException):
        core_api.create_namespaced_service_account(namespace, {"metadata": {"name": ACCOUNT}})
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role({"metadata": {"name": role}, "rules": list(rules)})
    binding = {
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role_binding(binding)
    request = core_api.create_namespaced_service_account_token(
        ACCOUNT, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return request.status.token


class Placer:
    """compose-model-deployment as the activator sees it: a new activate value is
    answered Placed, and the model is ready on the member a moment later."""

    def __init__(self, api: client.ApiClient, member: str) -> None:
        self.objects = client.CustomObjectsApi(api)
        self.member = member
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            for team in TEAMS:
                with contextlib.suppress(ApiException):
                    self._answer(team)

    def _answer(self, namespace: str) -> None:
        deployment = self.objects.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "modeldeployments", MODEL
        )
        asked = (deployment["metadata"].get("annotations") or {}).get(contracts.ANNOTATION_ACTIVATE)
        status = deployment.get("status") or {}
        answered = ((status.get("onDemand") or {}).get("attempt") or {}).get("id")
        if asked and asked != answered:
            status = {"onDemand": {"attempt": {"id": asked, "result": "Placed"}}}
        elif asked and not status.get("placements"):
            status = {**status, "placements": [{"cluster": self.member, "readyReplicas": 1}]}
        else:
            return
        self.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "modeldeployments", MODEL, {"status": status}
        )


@pytest.fixture(scope="module")
def planes(fleet_processes):
    control, member = fleet_processes.members[0], fleet_processes.members[1]
    control_api, member_api = control.client(), member.client()
    client.ApiextensionsV1Api(control_api).create_custom_resource_definition(MODEL_DEPLOYMENTS_CRD)
    _established(control_api, MODEL_DEPLOYMENTS_CRD["metadata"]["name"])
    install_crds(member_api)
    for team in TEAMS:
        _namespace(control_api, team)
        _namespace(member_api, team)
        client.CustomObjectsApi(control_api).create_namespaced_custom_object(
            GROUP,
            VERSION,
            team,
            "modeldeployments",
            {
                "apiVersion": contracts.API_GROUP_VERSION,
                "kind": contracts.KIND_MODEL_DEPLOYMENT,
                "metadata": {"name": MODEL, "namespace": team},
                "spec": {"onDemand": {"activationTimeout": "60s"}},
            },
        )
    control_token = _account_token(control_api, shell.CONTROL_PLANE_RULES, "activator-control")
    member_token = _account_token(member_api, shell.MEMBER_RULES, "activator-routes")
    placer = Placer(control_api, member.name)
    placer.thread.start()
    try:
        yield control, member, control_api, member_api, control_token, member_token
    finally:
        placer.stop.set()
        placer.thread.join(5)
        # The API servers are the session's: leave no ModelDeployment CRD for the modules
        # after this one (test_policy_crd creates the real one on the same member).
        delete_crd(
            client.ApiextensionsV1Api(control_api), MODEL_DEPLOYMENTS_CRD["metadata"]["name"]
        )
        control_api.close()
        member_api.close()


@pytest.fixture
def engine():
    server = ChatServer(script=[Answer(content="served by the engine")] * 100)
    yield server
    server.close()


@pytest.fixture
def activator(planes, engine):
    control, member, _, _, control_token, member_token = planes
    plane = shell.ControlPlane(token_client(control.server, control_token, str(control.ca_file)))
    routes = shell.MemberRoutes(token_client(member.server, member_token, str(member.ca_file)))
    served = shell.serve(
        plane,
        routes,
        member.name,
        "127.0.0.1:0",
        shell.Upstreams(member.name, engine.url.removesuffix("/v1"), {}),
        health_listen="127.0.0.1:0",
        limits=LIMITS,
        attempt_timeout=30,
    )
    yield served
    served.shutdown()


def _apply_route(member_api: client.ApiClient, route: dict) -> None:
    objects = client.CustomObjectsApi(member_api)
    meta = route["metadata"]
    with contextlib.suppress(ApiException):
        objects.delete_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", meta["namespace"], "httproutes", meta["name"]
        )
    objects.create_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", meta["namespace"], "httproutes", route
    )


def _delete_routes(member_api: client.ApiClient) -> None:
    objects = client.CustomObjectsApi(member_api)
    for team in TEAMS:
        objects.delete_collection_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", team, "httproutes"
        )


def _activate_value(control_api: client.ApiClient, namespace: str) -> str | None:
    deployment = client.CustomObjectsApi(control_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "modeldeployments", MODEL
    )
    return (deployment["metadata"].get("annotations") or {}).get(contracts.ANNOTATION_ACTIVATE)


def _post(port: int, identity: str, model: str, timeout: float = 60) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({"model": model, "messages": []}),
            {
                contracts.HEADER_DEPLOYMENT: identity,
                # What the identity's own route sets (as the Gateway's proxy sends it).
                contracts.HEADER_ROUTE_TOKEN: token_of(identity),
                "Content-Type": "application/json",
            },
        )
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")
    finally:
        connection.close()


def test_another_namespaces_identity_neither_reaches_nor_activates_that_model(
    planes, activator, engine
):
    _, _, control_api, member_api, _, _ = planes
    _delete_routes(member_api)
    # team-a's on-demand model has its route here; team-b's does not.
    _apply_route(member_api, composed_route("team-a", MODEL))

    status, body = _post(activator.port, f"team-b/{MODEL}", "team-b-model")
    assert (status, body["error"]["reason"]) == (404, core.REASON_NOT_ROUTED)
    assert _activate_value(control_api, "team-b") is None
    assert not [r for r in engine.requests if r.get("model") == "team-b-model"]

    # Now team-b's route is here too, but a route in team-a claims team-b's identity (as
    # a team-a member with rights on its own namespace's routes could write): refused for
    # everyone rather than served to a route that cannot speak for it.
    _apply_route(member_api, composed_route("team-b", MODEL))
    forged = copy.deepcopy(composed_route("team-a", "forger"))
    forged["spec"]["rules"][0]["filters"][0]["requestHeaderModifier"]["set"][0]["value"] = (
        f"team-b/{MODEL}"
    )
    _apply_route(member_api, forged)
    time.sleep(LIMITS.routes_interval + 0.1)  # the next read of the routes sees it
    status, body = _post(activator.port, f"team-b/{MODEL}", "team-b-model")
    assert (status, body["error"]["reason"]) == (404, core.REASON_NOT_ROUTED)
    assert _activate_value(control_api, "team-b") is None
    assert not [r for r in engine.requests if r.get("model") == "team-b-model"]

    # The identity team-a's own route vouches for is activated once and served.
    began = time.monotonic()
    status, body = _post(activator.port, f"team-a/{MODEL}", "team-a-model")
    measured("activator: one placement attempt to the first answer", time.monotonic() - began)
    assert status == 200, body
    assert _activate_value(control_api, "team-a") is not None
    assert [r["model"] for r in engine.requests] == ["team-a-model"]
    assert _activate_value(control_api, "team-b") is None


def test_the_activators_credentials_read_one_model_and_list_none(planes):
    control, member, _, _, control_token, member_token = planes
    on_control = client.CustomObjectsApi(
        token_client(control.server, control_token, str(control.ca_file))
    )
    on_control.get_namespaced_custom_object(GROUP, VERSION, "team-a", "modeldeployments", MODEL)
    for forbidden in (
        lambda: on_control.list_cluster_custom_object(GROUP, VERSION, "modeldeployments"),
        lambda: on_control.list_namespaced_custom_object(
            GROUP, VERSION, "team-a", "modeldeployments"
        ),
        lambda: on_control.delete_namespaced_custom_object(
            GROUP, VERSION, "team-a", "modeldeployments", MODEL
        ),
    ):
        with pytest.raises(ApiException) as refused:
            forbidden()
        assert refused.value.status == 403
    on_member = client.CustomObjectsApi(
        token_client(member.server, member_token, str(member.ca_file))
    )
    on_member.list_cluster_custom_object("gateway.networking.k8s.io", "v1", "httproutes")
    with pytest.raises(ApiException) as refused:
        on_member.delete_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", "team-a", "httproutes", MODEL
        )
    assert refused.value.status == 403


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


FLOOD = 1500  # slow clients, past max_connections (1024)


def test_a_slow_client_flood_grows_no_threads_and_bounded_memory(planes, activator):
    _, _, _, member_api, _, _ = planes
    _apply_route(member_api, composed_route("team-a", MODEL))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    threads_before, rss_before = threading.active_count(), _rss_kib()
    sockets: list[socket.socket] = []
    peak_threads, peak_rss = threads_before, rss_before
    try:
        for i in range(FLOOD):
            sock = socket.create_connection(("127.0.0.1", activator.port), timeout=5)
            # Half send the start of a request and stop; half send nothing at all.
            if i % 2:
                # Past max_connections the server answers 503 and closes at once: the
                # write may meet a closed socket.
                with contextlib.suppress(OSError):
                    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            sockets.append(sock)
            if i % 100 == 0:
                peak_threads = max(peak_threads, threading.active_count())
                peak_rss = max(peak_rss, _rss_kib())
        time.sleep(0.5)
        peak_threads = max(peak_threads, threading.active_count())
        peak_rss = max(peak_rss, _rss_kib())
        open_connections = activator.activator.connections
        # A request in the middle of the flood gets an HTTP answer: served, or a clear 503.
        status, body = _post(activator.port, f"team-a/{MODEL}", "during-flood", timeout=30)
        assert status == 200 or (status, body["error"]["reason"]) == (503, core.REASON_OVERLOADED)
        # The header timeout clears the slow ones; the idle timeout the silent ones.
        deadline = time.monotonic() + LIMITS.idle_seconds + LIMITS.header_seconds + 5
        while activator.activator.connections and time.monotonic() < deadline:
            time.sleep(0.1)
        cleared = activator.activator.connections
    finally:
        for sock in sockets:
            sock.close()
    growth_mib = (peak_rss - rss_before) / 1024
    assert LIMITS.max_connections // 2 < open_connections <= LIMITS.max_connections
    # The flood's sockets are ours (client side) too: what grows on the server side is
    # bounded by max_connections' buffers; no thread is made per connection.
    assert peak_threads <= threads_before + shell.KUBE_THREADS
    assert growth_mib < 64, f"RSS grew {growth_mib:.1f} MiB under {FLOOD} slow clients"
    assert cleared == 0
    status, _ = _post(activator.port, f"team-a/{MODEL}", "after-flood")
    assert status == 200
