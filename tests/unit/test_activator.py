"""The on-demand activator binds a request to the model its route names, and is bounded
(issue #34, item 3).

The pure part first: which identities the member's HTTPRoutes vouch for (the route
compose-model-replica composes, built here by its own code), and what is wrong with a
request's head. Then the real server on loopback, with the control plane and the
member's routes as in-memory stand-ins that count what they are asked: every malformed
or oversized request gets its HTTP answer, slow clients get 408, the limits answer 429
and 503 with Retry-After, an identity no route vouches for gets 404 without a single
read, and a burst is one read and one activation. The same server against a real
kube-apiserver is tests/runtime/test_activator.py.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.common import contracts
from functions.compose_model_replica import serving
from functions.compose_model_replica.model import parse as parse_replica
from functions.runtime.activator import core
from functions.runtime.activator import server as shell
from tests.unit.chatserver import Answer, ChatServer

REPLICA_XR = Path(__file__).resolve().parents[1] / "render" / "testdata" / "modelreplica.yaml"


def uid_of(namespace: str, deployment: str) -> str:
    """The ModelReplica uid the test routes are composed with."""
    return f"uid-{namespace}-{deployment}"


def token_of(identity: str) -> str:
    """The route token our route for `identity` (namespace/name) sets."""
    namespace, _, name = identity.partition("/")
    return serving.route_token(uid_of(namespace, name))


def with_tokens(data: bytes) -> bytes:
    """`data` with, after each identity header, the token its route sets: what the
    Gateway's proxy sends for a request that came through the route."""
    return re.sub(
        # (not inside a folded header: the fold stays on the identity)
        rb"(X-Modelplane-Deployment: ([^\r]*)\r\n)(?![ \t])",
        lambda m: (
            m.group(1)
            + b"X-Modelplane-Route-Token: "
            + token_of(m.group(2).decode()).encode()
            + b"\r\n"
        ),
        data,
    )


def composed_route(namespace: str, deployment: str, uid: str | None = None) -> dict:
    """The HTTPRoute compose-model-replica composes for an on-demand model here."""
    xr = yaml.safe_load(REPLICA_XR.read_text())
    xr["metadata"]["namespace"] = namespace
    xr["metadata"]["uid"] = uid_of(namespace, deployment) if uid is None else uid
    xr["spec"]["deployment"] = deployment
    xr["spec"]["activator"] = True
    return serving.route(parse_replica(xr))


# --- Which identities the routes vouch for ------------------------------------------------


def test_the_route_we_compose_vouches_for_its_own_model_only():
    index = core.route_index([composed_route("team-a", "llm")])
    assert index.vouches_for("team-a", "llm")
    assert not index.vouches_for("team-b", "llm")
    assert not index.vouches_for("team-a", "other")


def _claiming(route: dict, identity: str) -> dict:
    forged = copy.deepcopy(route)
    forged["spec"]["rules"][0]["filters"][0]["requestHeaderModifier"]["set"][0]["value"] = identity
    return forged


def _without_label(route: dict) -> dict:
    plain = copy.deepcopy(route)
    plain["metadata"]["labels"].pop(contracts.LABEL_SERVING)
    return plain


ROUTE_CASES = {
    "a_route_in_another_namespace_makes_the_identity_contested_for_everyone": (
        [composed_route("team-b", "llm"), _claiming(composed_route("team-a", "x"), "team-b/llm")],
        set(),
        {("team-b", "llm")},
    ),
    "a_route_that_is_not_ours_vouches_for_nothing": (
        [_without_label(composed_route("team-a", "llm"))],
        set(),
        set(),
    ),
    "a_rule_that_adds_instead_of_setting_vouches_for_nothing": (
        [yaml.safe_load(yaml.safe_dump(composed_route("team-a", "llm")).replace("set:", "add:"))],
        set(),
        set(),
    ),
    "a_rule_that_leads_elsewhere_vouches_for_nothing": (
        [
            yaml.safe_load(
                yaml.safe_dump(composed_route("team-a", "llm")).replace(
                    "name: modelplane-activator", "name: something-else"
                )
            )
        ],
        set(),
        set(),
    ),
    "a_malformed_identity_is_ignored": (
        [_claiming(composed_route("team-a", "llm"), "team-a/../x")],
        set(),
        set(),
    ),
    "two_models_of_two_teams_each_vouched_for": (
        [composed_route("team-a", "llm"), composed_route("team-b", "llm")],
        {("team-a", "llm"), ("team-b", "llm")},
        set(),
    ),
}


@pytest.mark.parametrize(
    ("routes", "served", "contested"), list(ROUTE_CASES.values()), ids=list(ROUTE_CASES)
)
def test_route_index(routes, served, contested):
    index = core.route_index(routes)
    assert set(index.served) == served
    assert set(index.contested) == contested


def test_garbage_routes_vouch_for_nothing_and_do_not_raise():
    garbage = [
        {},
        {"metadata": None, "spec": None},
        {"spec": {"rules": [None, "x", {"backendRefs": ["x"], "filters": [None, {"type": 1}]}]}},
    ]
    assert core.route_index(garbage) == core.EMPTY_ROUTES


# --- A request's head --------------------------------------------------------------------

IDENTITY = (core.HEADER_DEPLOYMENT_LOWER, "team-a/llm")
HEAD_CASES = {
    "a_post_with_one_identity_is_fine": ("POST", "/v1/chat", [IDENTITY], None),
    "put_is_not_served": ("PUT", "/v1/chat", [IDENTITY], 405),
    "an_absolute_target_is_refused": ("GET", "http://evil/", [IDENTITY], 400),
    "a_scheme_relative_target_is_refused": ("GET", "//evil/x", [IDENTITY], 400),
    "both_framings_are_refused": (
        "POST",
        "/",
        [IDENTITY, ("content-length", "3"), ("transfer-encoding", "chunked")],
        400,
    ),
    "a_declared_body_over_the_limit_is_refused_before_reading": (
        "POST",
        "/",
        [IDENTITY, ("content-length", str(core.DEFAULT_MAX_BODY_BYTES + 1))],
        413,
    ),
    "a_content_length_of_a_thousand_digits_is_refused": (
        "POST",
        "/",
        [IDENTITY, ("content-length", "9" * 1000)],
        413,
    ),
    "two_identities_are_refused": (
        "GET",
        "/",
        [IDENTITY, (core.HEADER_DEPLOYMENT_LOWER, "team-b/llm")],
        400,
    ),
    "no_identity_is_refused": ("GET", "/", [], 400),
    "an_identity_with_a_path_in_it_is_refused": (
        "GET",
        "/",
        [(core.HEADER_DEPLOYMENT_LOWER, "team-a/../../x")],
        400,
    ),
}


@pytest.mark.parametrize(
    ("method", "target", "headers", "status"), list(HEAD_CASES.values()), ids=list(HEAD_CASES)
)
def test_request_problem(method, target, headers, status):
    problem = core.request_problem(method, target, headers)
    assert (problem.status if problem else None) == status


# --- The server on loopback ---------------------------------------------------------------


class Plane:
    """The control plane: one on-demand model per name; counts reads and activations.
    The attempt is answered Placed on the first read after the annotation, and a
    replica is ready on the next."""

    def __init__(self, ready_cluster: str = "here", delay: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.reads: dict[tuple[str, str], int] = {}
        self.activations: list[tuple[str, str, str]] = []
        self.ready_cluster = ready_cluster
        self.delay = delay
        self.fail = False

    def get(self, namespace: str, name: str) -> dict | None:
        time.sleep(self.delay)
        with self.lock:
            self.reads[(namespace, name)] = self.reads.get((namespace, name), 0) + 1
            if self.fail:
                raise ConnectionError("control plane down")
            mine = [a for a in self.activations if a[:2] == (namespace, name)]
            status: dict = {}
            if mine:
                status["onDemand"] = {"attempt": {"id": mine[-1][2], "result": "Placed"}}
                if self.reads[(namespace, name)] > 2:
                    status["placements"] = [{"cluster": self.ready_cluster, "readyReplicas": 1}]
        return {"spec": {"onDemand": {"activationTimeout": "30s"}}, "status": status}

    def activate(self, namespace: str, name: str, attempt_id: str) -> None:
        with self.lock:
            self.activations.append((namespace, name, attempt_id))


class Routes:
    def __init__(self, routes: list[dict]) -> None:
        self.routes = routes
        self.lists = 0

    def list(self) -> list[dict]:
        self.lists += 1
        return self.routes


FAST = shell.Limits(
    idle_seconds=2,
    header_seconds=0.5,
    body_seconds=0.5,
    write_seconds=2,
    max_connections=64,
    max_in_flight=8,
    max_per_model=4,
    read_interval=0.2,
    routes_interval=0.5,
    routes_miss_interval=0.2,
    max_body_bytes=4096,
)


@pytest.fixture
def engine():
    server = ChatServer(script=[Answer(content="served by the engine")] * 200)
    yield server
    server.close()


def start(plane, routes, engine, limits=FAST, **kwargs) -> shell.Served:
    upstream = engine.url.removesuffix("/v1")
    return shell.serve(
        plane,
        routes,
        "here",
        "127.0.0.1:0",
        shell.Upstreams("here", upstream, {}),
        health_listen="127.0.0.1:0",
        limits=limits,
        attempt_timeout=5,
        **kwargs,
    )


@pytest.fixture
def activator(engine):
    plane = Plane()
    routes = Routes([composed_route("team-a", "llm"), composed_route("team-b", "other")])
    served = start(plane, routes, engine)
    yield served, plane, routes
    served.shutdown()


def post(
    port: int, identity: str | None, body: bytes = b"{}", extra=None, timeout=10, *, routed=True
):
    """A request as the route sends it (its identity and token), or, `routed=False`, as
    a client that connects directly sends it (the identity alone)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json", **(extra or {})}
    if identity is not None:
        headers[contracts.HEADER_DEPLOYMENT] = identity
        if routed:
            headers[contracts.HEADER_ROUTE_TOKEN] = token_of(identity)
    try:
        connection.request("POST", "/v1/chat/completions", body, headers)
        reply = connection.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        connection.close()


def raw(port: int, data: bytes, *, read_timeout: float = 5.0) -> bytes:
    """Send `data` (with the route's token after each identity) and read everything the
    server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(with_tokens(data))
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def reason_of(body: bytes) -> str:
    return json.loads(body)["error"]["reason"]


def test_a_vouched_model_is_activated_once_and_proxied(activator):
    served, plane, _ = activator
    status, _, body = post(served.port, "team-a/llm", json.dumps({"model": "llm"}).encode())
    assert status == 200, body
    assert b"served by the engine" in body
    assert [a[:2] for a in plane.activations] == [("team-a", "llm")]


def test_a_direct_call_without_the_routes_token_is_404_without_a_read(activator):
    """A client that reaches the activator without going through the route (no
    NetworkPolicy enforcement on its member) names a model our route vouches for, but
    cannot present that route's token: the same 404 as an unknown identity, nothing read,
    nothing activated."""
    served, plane, _ = activator
    for extra in (
        {},  # the identity alone
        {contracts.HEADER_ROUTE_TOKEN: ""},
        {contracts.HEADER_ROUTE_TOKEN: "0" * 64},
        {contracts.HEADER_ROUTE_TOKEN: token_of("team-b/other")},  # another model's
        {contracts.HEADER_ROUTE_TOKEN: serving.route_token("")},
    ):
        status, _, body = post(served.port, "team-a/llm", extra=extra, routed=False)
        assert (status, reason_of(body)) == (404, core.REASON_NOT_ROUTED), extra
    # Two tokens, one of them right: not what a route sends.
    answer = raw(
        served.port,
        b"POST / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Route-Token: x\r\n"
        b"X-Modelplane-Deployment: team-a/llm\r\nContent-Length: 2\r\n\r\n{}",
    )
    assert status_of(answer) == 404, answer[:200]
    assert plane.reads == {}
    assert plane.activations == []
    # Through the route, the same model is served.
    assert post(served.port, "team-a/llm")[0] == 200


def test_a_route_composed_without_a_uid_admits_no_request():
    """A render without a uid composes no token: its identity is refused to everyone."""
    route = composed_route("team-a", "llm", uid="")
    (header,) = route["spec"]["rules"][0]["filters"][0]["requestHeaderModifier"]["set"]
    assert header["name"] == contracts.HEADER_DEPLOYMENT
    index = core.route_index([route])
    assert index.vouches_for("team-a", "llm")
    for token in (None, "", serving.route_token("")):
        assert not index.admits("team-a", "llm", token)


def test_each_route_admits_its_own_token_only():
    index = core.route_index([composed_route("team-a", "llm"), composed_route("team-b", "x")])
    assert index.admits("team-a", "llm", token_of("team-a/llm"))
    assert not index.admits("team-a", "llm", token_of("team-b/x"))
    assert not index.admits("team-b", "x", token_of("team-a/llm"))
    assert token_of("team-a/llm") != token_of("team-b/x")


def test_an_identity_no_route_vouches_for_is_404_without_a_read(activator):
    served, plane, _ = activator
    for identity in ("team-b/llm", "team-c/anything", "kube-system/coredns"):
        status, _, body = post(served.port, identity)
        assert (status, reason_of(body)) == (404, core.REASON_NOT_ROUTED)
    assert plane.reads == {}
    assert plane.activations == []


def test_the_answer_for_an_unknown_model_is_the_same_as_for_a_model_elsewhere(activator):
    served, _, _ = activator
    answers = {post(served.port, i)[2] for i in ("team-a/nope", "team-b/llm", "x/y")}
    assert len(answers) == 1


def test_a_burst_for_one_model_is_one_activation_and_few_reads(engine):
    plane = Plane(delay=0.05)
    routes = Routes([composed_route("team-a", "llm")])
    limits = shell.Limits(**{**FAST.__dict__, "max_in_flight": 64, "max_per_model": 64})
    served = start(plane, routes, engine, limits=limits)
    try:
        results = []
        threads = [
            threading.Thread(target=lambda: results.append(post(served.port, "team-a/llm")[0]))
            for _ in range(40)
        ]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        elapsed = time.monotonic() - began
        assert results == [200] * 40
        assert len(plane.activations) == 1
        # One read per model per interval at most, however many requests.
        allowed = elapsed / limits.read_interval + 2
        assert plane.reads[("team-a", "llm")] <= allowed, (plane.reads, elapsed)
        assert routes.lists <= elapsed / limits.routes_miss_interval + 2
    finally:
        served.shutdown()


MALFORMED = {
    "not_http_at_all": (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\r\n\r\n", 400),
    "a_bad_request_line": (b"GET\r\n\r\n", 400),
    "headers_over_the_limit": (
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n",
        431,
    ),
    "a_transfer_encoding_it_does_not_speak": (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        501,
    ),
    "two_content_lengths": (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        400,
    ),
    "both_framings": (
        b"POST / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n"
        b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    "a_method_it_does_not_serve": (
        b"DELETE / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n\r\n",
        405,
    ),
    "a_declared_body_too_large": (
        b"POST / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n"
        b"Content-Length: 999999\r\n\r\n",
        413,
    ),
    "a_chunked_body_that_grows_too_large": (
        b"POST / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
        + b"1000\r\n"
        + b"a" * 4096
        + b"\r\n" * 1
        + b"1000\r\n"
        + b"a" * 4096
        + b"\r\n0\r\n\r\n",
        413,
    ),
    "a_broken_chunk": (
        b"POST / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
        400,
    ),
    "http_0_9": (b"GET /\r\n\r\n", 400),
    "an_identity_header_with_a_newline_folded_in": (
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n x\r\n\r\n",
        400,
    ),
}


@pytest.mark.parametrize(("data", "status"), list(MALFORMED.values()), ids=list(MALFORMED))
def test_every_malformed_request_gets_an_http_answer(activator, data, status):
    served, plane, _ = activator
    answer = raw(served.port, data)
    assert answer.startswith(b"HTTP/1.1 "), answer[:100]
    assert status_of(answer) == status, answer[:300]
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["error"]["code"] == status
    assert plane.activations == []


def test_headers_that_trickle_in_get_408(activator):
    served, _, _ = activator
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\n")
        began = time.monotonic()
        answer = b""
        for _ in range(20):  # a byte every 0.1 s: each read in time, the whole too slow
            try:
                sock.sendall(b"X")
            except OSError:
                break
            time.sleep(0.1)
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            answer = sock.recv(65536)
    assert status_of(answer) == 408
    assert time.monotonic() - began < FAST.header_seconds + 2


def test_a_body_that_trickles_in_gets_408_and_frees_its_slot(activator):
    served, _, _ = activator
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        sock.sendall(
            with_tokens(
                b"POST / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n"
                b"Content-Length: 100\r\n\r\n{"
            )
        )
        answer = sock.recv(65536)
    assert status_of(answer) == 408
    assert _settles(lambda: served.activator.in_flight == 0)


def _settles(condition, seconds: float = 2.0) -> bool:
    """The server's bookkeeping runs just after its answer is written: wait for it."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_an_idle_connection_is_closed_without_an_answer(engine):
    limits = shell.Limits(**{**FAST.__dict__, "idle_seconds": 0.3})
    served = start(Plane(), Routes([]), engine, limits=limits)
    try:
        with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
            began = time.monotonic()
            assert sock.recv(100) == b""
            assert time.monotonic() - began < 2
    finally:
        served.shutdown()


def test_past_the_in_flight_limit_is_503_and_past_the_models_share_429(engine):
    slow = Plane(delay=0.5)
    routes = Routes([composed_route("team-a", "llm"), composed_route("team-a", "other")])
    limits = shell.Limits(**{**FAST.__dict__, "max_in_flight": 6, "max_per_model": 3})
    served = start(slow, routes, engine, limits=limits)
    try:
        results: list[tuple[int, dict, bytes]] = []
        lock = threading.Lock()

        def one(identity):
            answer = post(served.port, identity)
            with lock:
                results.append(answer)

        threads = [
            threading.Thread(target=one, args=(i,))
            for i in ["team-a/llm"] * 8 + ["team-a/other"] * 8
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        statuses = sorted(r[0] for r in results)
        refused = [r for r in results if r[0] in (429, 503)]
        assert statuses.count(200) <= 6
        assert any(r[0] == 429 for r in refused)
        for _status, headers, body in refused:
            assert headers.get("retry-after") == "1"
            assert reason_of(body) in (core.REASON_MODEL_BUSY, core.REASON_OVERLOADED)
        assert _settles(lambda: served.activator.in_flight == 0)
    finally:
        served.shutdown()


def test_past_the_connection_limit_is_503_before_anything_is_read(engine):
    limits = shell.Limits(**{**FAST.__dict__, "max_connections": 3, "idle_seconds": 5})
    served = start(Plane(), Routes([]), engine, limits=limits)
    held = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(3)]
    try:
        time.sleep(0.2)
        answer = raw(served.port, b"")
        assert status_of(answer) == 503
        assert b"retry-after: 1" in answer.lower()
    finally:
        for sock in held:
            sock.close()
        served.shutdown()


def test_a_held_request_whose_client_hangs_up_frees_its_slot(engine):
    class NeverReady(Plane):
        def get(self, namespace, name):
            super().get(namespace, name)
            return {"spec": {"onDemand": {"activationTimeout": "30s"}}, "status": {}}

    served = start(NeverReady(), Routes([composed_route("team-a", "llm")]), engine)
    try:
        sock = socket.create_connection(("127.0.0.1", served.port))
        sock.sendall(
            with_tokens(
                b"POST / HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n"
                b"Content-Length: 2\r\n\r\n{}"
            )
        )
        deadline = time.monotonic() + 5
        while served.activator.in_flight != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert served.activator.in_flight == 1
        sock.close()
        while served.activator.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        assert served.activator.in_flight == 0
    finally:
        served.shutdown()


def test_a_control_plane_that_does_not_answer_is_503_with_retry_after_and_read_once(engine):
    plane = Plane()
    plane.fail = True
    served = start(plane, Routes([composed_route("team-a", "llm")]), engine)
    try:
        answers = [post(served.port, "team-a/llm") for _ in range(5)]
        for status, headers, body in answers:
            assert (status, reason_of(body)) == (503, core.REASON_CONTROL_PLANE)
            assert headers.get("retry-after")
        assert plane.reads[("team-a", "llm")] <= 2  # the failure is cached for the interval
    finally:
        served.shutdown()


def test_a_request_that_was_proxied_once_is_answered_not_looped(activator):
    served, plane, _ = activator
    status, _, body = post(served.port, "team-a/llm", extra={contracts.HEADER_ACTIVATED: "1"})
    assert (status, reason_of(body)) == (503, core.REASON_NOT_READY)
    assert plane.activations == []


def test_the_health_port_answers_probes_and_nothing_else(activator):
    served, _, _ = activator
    for path, status in ((contracts.READYZ_PATH, 200), (contracts.HEALTHZ_PATH, 200), ("/", 404)):
        connection = http.client.HTTPConnection("127.0.0.1", served.health_port, timeout=5)
        connection.request("GET", path)
        assert connection.getresponse().status == status
        connection.close()


def test_the_health_port_holds_few_connections_briefly(activator):
    served, _, _ = activator
    held = [
        socket.create_connection(("127.0.0.1", served.health_port))
        for _ in range(shell.HEALTH_CONNECTIONS)
    ]
    try:
        assert _settles(lambda: served.activator.health_connections == shell.HEALTH_CONNECTIONS)
        assert raw(served.health_port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n") == b""
        # The silent ones are dropped after HEALTH_SECONDS; probes are answered again.
        assert _settles(lambda: served.activator.health_connections == 0, shell.HEALTH_SECONDS + 2)
        answer = raw(served.health_port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer) == 200
    finally:
        for sock in held:
            sock.close()


def test_keep_alive_serves_several_requests_on_one_connection(activator):
    served, _, _ = activator
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        for _ in range(3):
            connection.request(
                "POST",
                "/v1/chat/completions",
                b"{}",
                {
                    contracts.HEADER_DEPLOYMENT: "team-a/llm",
                    contracts.HEADER_ROUTE_TOKEN: token_of("team-a/llm"),
                },
            )
            reply = connection.getresponse()
            assert reply.status == 200
            reply.read()
    finally:
        connection.close()


# --- Generated input ----------------------------------------------------------------------

_VALID = with_tokens(
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Modelplane-Deployment: team-a/llm\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)


@st.composite
def _mangled(draw) -> bytes:
    """A valid request cut, spliced with noise, or bytes of any kind."""
    shape = draw(st.sampled_from(["noise", "cut", "splice", "repeat_header"]))
    if shape == "noise":
        return draw(st.binary(min_size=1, max_size=600))
    if shape == "cut":
        return _VALID[: draw(st.integers(1, len(_VALID) - 1))]
    if shape == "splice":
        at = draw(st.integers(0, len(_VALID)))
        return _VALID[:at] + draw(st.binary(min_size=1, max_size=60)) + _VALID[at:]
    line = draw(st.sampled_from([b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n"]))
    return _VALID.replace(b"Host: x\r\n", b"Host: x\r\n" + line * draw(st.integers(1, 3)))


@pytest.fixture(scope="module")
def fuzzed_activator():
    engine = ChatServer(script=[Answer(content="ok")] * 10_000)
    plane = Plane()
    served = start(plane, Routes([composed_route("team-a", "llm")]), engine)
    yield served, plane
    served.shutdown()
    engine.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mangled())
def test_any_bytes_get_http_answers_or_a_close_never_a_hang(fuzzed_activator, data):
    served, _ = fuzzed_activator
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # the client is done: a partial request ends here
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert time.monotonic() - began < 5
    if answer:
        assert re.match(rb"HTTP/1\.1 [1-5]\d\d ", answer), answer[:80]
    # Whatever it was sent, the server still answers a normal request.
    assert post(served.port, "team-a/llm")[0] == 200


_route_values = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.sampled_from(["team-a/llm", "team-b/llm", "team-a/../x", contracts.ACTIVATOR_SERVICE_NAME]),
)


@st.composite
def _route(draw) -> dict:
    route = composed_route(draw(st.sampled_from(["team-a", "team-b"])), "llm")
    rule = route["spec"]["rules"][0]
    if draw(st.booleans()):
        rule["filters"][0]["requestHeaderModifier"]["set"][0]["value"] = draw(_route_values)
    if draw(st.booleans()):
        rule["backendRefs"][0]["namespace"] = draw(_route_values)
    if draw(st.booleans()):
        route["metadata"]["labels"] = draw(
            st.dictionaries(st.text(max_size=5), st.text(max_size=5))
        )
    if draw(st.booleans()):
        route["spec"] = draw(st.one_of(st.none(), st.just({"rules": draw(_route_values)})))
    return route


@settings(max_examples=200, deadline=None)
@given(st.lists(_route(), max_size=6))
def test_a_served_identity_is_vouched_for_by_a_route_of_its_own_namespace(routes):
    index = core.route_index(routes)
    assert not index.served & index.contested
    for namespace, name in index.served:
        assert any(
            (route.get("metadata") or {}).get("namespace") == namespace
            and contracts.LABEL_SERVING in ((route.get("metadata") or {}).get("labels") or {})
            for route in routes
        ), (namespace, name)


# --- The activator's own metrics (issue #35, item 4) -------------------------------------


def _points(reader) -> dict[str, list]:
    """Each metric's data points, by name."""
    found: dict[str, list] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def _value(reader, name: str, **attributes) -> float | None:
    """The value (a histogram: its count) of the one point with exactly `attributes`."""
    for point in _points(reader).get(name, []):
        if dict(point.attributes) == attributes:
            return getattr(point, "count", None) or getattr(point, "value", None) or 0
    return None


@pytest.fixture
def metered():
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415

    from functions.runtime.activator.metrics import ActivatorMetrics  # noqa: PLC0415

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield reader, ActivatorMetrics(provider.get_meter("test"))
    provider.shutdown()


def test_a_held_request_moves_the_held_gauge_and_the_time_to_first_byte(engine, metered):
    from functions.runtime.activator import metrics as names  # noqa: PLC0415

    reader, metrics = metered
    ready = threading.Event()

    class ReadyWhenLetGo(Plane):
        def get(self, namespace, name):
            deployment = super().get(namespace, name)
            if not ready.is_set():
                deployment["status"].pop("placements", None)
            return deployment

    served = start(
        ReadyWhenLetGo(), Routes([composed_route("team-a", "llm")]), engine, metrics=metrics
    )
    model = {"namespace": "team-a", "deployment": "llm"}
    try:
        answers: list = []
        client = threading.Thread(target=lambda: answers.append(post(served.port, "team-a/llm")))
        client.start()
        assert _settles(lambda: _value(reader, names.REQUESTS_HELD, **model) == 1, 5)
        assert _value(reader, names.TIME_TO_FIRST_BYTE, **model, held="true") is None
        ready.set()
        client.join(10)
        assert answers, "the held request got no answer"
        assert answers[0][0] == 200, answers
        assert _value(reader, names.REQUESTS_HELD, **model) == 0
        assert _value(reader, names.TIME_TO_FIRST_BYTE, **model, held="true") == 1
        assert _settles(lambda: _value(reader, names.REQUESTS_TOTAL, **model, outcome="Proxied"))
        ttfb = next(
            p for p in _points(reader)[names.TIME_TO_FIRST_BYTE] if p.attributes["held"] == "true"
        )
        assert ttfb.sum > 0
        assert _value(reader, names.REQUESTS_TOTAL, **model, outcome="Proxied") == 1
        assert _value(reader, names.ACTIVATIONS_TOTAL, **model, result="Ready") == 1
        # Now ready: the next request is proxied at once, not held.
        assert post(served.port, "team-a/llm")[0] == 200
        assert _value(reader, names.TIME_TO_FIRST_BYTE, **model, held="false") == 1
        assert _value(reader, names.ACTIVATIONS_TOTAL, **model, result="Ready") == 1
    finally:
        served.shutdown()


def test_a_request_no_route_vouches_for_makes_no_series_of_its_own(engine, metered):
    from functions.runtime.activator import metrics as names  # noqa: PLC0415

    reader, metrics = metered
    plane = Plane()
    served = start(plane, Routes([composed_route("team-a", "llm")]), engine, metrics=metrics)
    try:
        for identity in ("team-c/made-up", "team-b/llm", "kube-system/coredns"):
            assert post(served.port, identity)[0] == 404
        assert post(served.port, None)[0] == 400
        # Counted just after the answer is written.
        assert _settles(
            lambda: _value(reader, names.REQUESTS_TOTAL, outcome=core.REASON_NOT_ROUTED) == 3
        )
        assert _settles(
            lambda: _value(reader, names.REQUESTS_TOTAL, outcome=core.REASON_BAD_ROUTE) == 1
        )
        # The model the routes vouch for is on the held gauge at 0 from the first read
        # of the routes; no identity a client made up is on anything.
        assert _settles(
            lambda: _value(reader, names.REQUESTS_HELD, namespace="team-a", deployment="llm") == 0
        )
        models = {
            (p.attributes.get("namespace"), p.attributes.get("deployment"))
            for points in _points(reader).values()
            for p in points
        }
        assert models == {(None, None), ("team-a", "llm")}
        assert plane.reads == {}
    finally:
        served.shutdown()


def test_the_held_gauge_follows_the_routes_and_keeps_a_model_while_it_holds(metered):
    from functions.runtime.activator import metrics as names  # noqa: PLC0415

    reader, metrics = metered
    metrics.routed([("team-a", "llm"), ("team-b", "other")])
    metrics.hold("team-b", "other")
    metrics.routed([("team-a", "llm")])  # team-b's route went away mid-activation
    assert _value(reader, names.REQUESTS_HELD, namespace="team-b", deployment="other") == 1
    metrics.release("team-b", "other")
    metrics.routed([("team-a", "llm")])
    held = {(p.attributes["namespace"], p.value) for p in _points(reader)[names.REQUESTS_HELD]}
    assert held == {("team-a", 0)}
