"""The fuzz tier, for the two inputs a tenant writes as a language: CEL device selectors
and HTTP requests to the activator (issue 34, item 7).

CEL: generated selectors (the known bombs, recursive combinations of list, string and
comprehension builders, token soup, deep nesting, a planted password) in the example
ModelDeployment, through compose-model-deployment's gRPC shell as Crossplane calls it.
Every request is answered; a refusal is a fatal naming the selector's field (or the
deployment's engines, for the total) and never an unexpected error; counted work stops at
the budget; no planted password is echoed.

Activator: generated requests (methods, targets, repeated and forged identity headers,
framing and length headers, bodies) to the real server on loopback, with in-memory
stand-ins for the control plane and the member's routes (tests/unit/test_activator.py).
Every request gets an HTTP answer (never a 500, never a hang), the pure head check
agrees with the server, and a request carrying another namespace's identity (or one no
route vouches for) is 404 and activates nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import socket
import time
from pathlib import Path

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given
from hypothesis import strategies as st

from functions.compose_model_deployment import fn as deployment_fn
from functions.runtime.activator import core
from tests.fuzz import profile
from tests.unit.chatserver import Answer, ChatServer
from tests.unit.test_activator import Plane, Routes, composed_route, post, start, token_of

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SECRET = "hunter2-fuzz-password"
DEPLOYMENT = yaml.safe_load((EXAMPLES / "modeldeployments" / "llama-8b-vllm.yaml").read_text())
CLUSTERS = [
    yaml.safe_load(p.read_text()) for p in sorted((EXAMPLES / "inferenceclusters").glob("*.yaml"))
]
SELECTOR_FIELD = re.compile(r"nodeSelector\.devices\[\d+\]\.selectors\[\d+\]\.cel: ")

# --- CEL ----------------------------------------------------------------------------------

SIXTEEN = "[" + ", ".join(["1"] * 16) + "]"
_cel_atoms = st.sampled_from(
    [
        SIXTEEN,
        "[1, 2, 3]",
        "[]",
        '"' + "a" * 64 + '"',
        "device.driver",
        'device.attributes["gpu.nvidia.com"].productName',
        'device.capacity["gpu.nvidia.com"].memory',
        'quantity("80Gi")',
        'semver("1.2.3")',
        "1",
        "-9223372036854775808",
        "1e308",
        "x",
        "true",
        f'"https://admin:{SECRET}@evil.example.com/"',
        "{'a': [1, 2]}",
        "b'\\xff'",
    ]
)


def _cel_combine(parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pair = st.tuples(parts, parts)
    return st.one_of(
        pair.map(lambda p: f"({p[0]} + {p[1]})"),
        pair.map(lambda p: f"({p[0]} == {p[1]})"),
        pair.map(lambda p: f"({p[0]} in {p[1]})"),
        pair.map(lambda p: f"({p[0]} && {p[1]})"),
        pair.map(lambda p: f"({p[0]} ? {p[1]} : {p[0]})"),
        pair.map(lambda p: f"cel.bind(x, {p[0]}, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.map(x, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.filter(x, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.all(x, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.exists_one(x, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.compareTo({p[1]})"),
        parts.map(lambda p: f"size({p})"),
        parts.map(lambda p: f"string({p}).matches('(a|aa)*b')"),
        parts.map(lambda p: f"cel.bind(x, {p}, x + x)"),
        parts.map(lambda p: f"!{p}"),
    )


def _doubling(levels: int) -> str:
    """16 x 2^levels elements, built in a few dozen steps (the estimator's blind spot)."""
    body = "x{n}.size() > 0"
    expression = "{body}"
    for i in range(1, levels + 1):
        expression = expression.format(body=f"cel.bind(x{i}, x{i - 1} + x{i - 1}, {{body}})")
    return f"cel.bind(x0, {SIXTEEN}, " + expression.format(body=body.format(n=levels)) + ")"


_cel_tokens = st.sampled_from(
    ["(", ")", "[", "]", "{", "}", ".", ",", "+", "==", "&&", "?", ":", "!", "in", "x",
     "device", "map", "1", '"', "'", "\\", "\x00", "\u202e", "cel", "bind", " "]
)  # fmt: skip

SELECTORS = st.one_of(
    st.recursive(_cel_atoms, _cel_combine, max_leaves=24),
    st.integers(1, 16).map(_doubling),
    st.lists(_cel_tokens, max_size=80).map("".join),
    st.integers(1, 2000).map(lambda n: "(" * n + "1" + ")" * n),
    st.integers(1, 3000).map(lambda n: "!" * n + "true"),
    st.text(max_size=200),
    st.just("x" * 5000),
)


def _deployment_with(selectors: list[str]) -> dict:
    xr = copy.deepcopy(DEPLOYMENT)
    device = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
    device[0]["selectors"] = [{"cel": s} for s in selectors]
    return xr


def _run_deployment(xr: dict) -> fnv1.RunFunctionResponse:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for name, items in ((deployment_fn.REQUIRED_CLUSTERS, CLUSTERS),):
        req.required_resources[name].SetInParent()
        for item in items:
            req.required_resources[name].items.add().resource.update(item)
    return asyncio.run(deployment_fn.FunctionRunner().RunFunction(req))


@given(st.lists(SELECTORS, min_size=1, max_size=8))
@profile.FUZZ
def test_any_generated_selector_is_answered_refused_by_field_or_placed(selectors):
    rsp = _run_deployment(_deployment_with(selectors))
    assert SECRET not in str(rsp), "a planted password reached the response"
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    for message in fatal:
        assert "unexpected error" not in message, message
        assert SELECTOR_FIELD.search(message) or "spec.template.spec.engines: " in message, message


# --- The activator ------------------------------------------------------------------------

IDENTITY = core.HEADER_DEPLOYMENT_LOWER
ROUTE_TOKEN = token_of("team-a/llm")
# Served here: team-a/llm only. team-b/other is another namespace's model, not routed here.
_identities = st.one_of(
    st.sampled_from(
        [
            "team-a/llm",
            "team-b/other",
            "team-b/llm",
            "team-a/../llm",
            "team-a/llm\r\nX-Injected: 1",
            "/llm",
            "team-a/",
            "TEAM-A/llm",
            "team-a/llm ",
            "team-a/" + "l" * 300,
            f"admin:{SECRET}@team-a/llm",
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40),
)
_methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "G"])
_targets = st.one_of(
    st.sampled_from(
        [
            "/v1/chat/completions",
            "/",
            "*",
            "http://evil/",
            "//evil/x",
            "/%2e%2e/%2e%2e/etc/passwd",
            "/v1/" + "a" * 20000,
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60).map(
        lambda t: "/" + t
    ),
)
_framing = st.sampled_from(
    [
        [],
        [("Content-Length", "{n}")],
        [("Content-Length", "{n}"), ("Content-Length", "{n}")],
        [("Content-Length", "-1")],
        [("Content-Length", "99999999999999999999")],
        [("Content-Length", "0x10")],
        [("Transfer-Encoding", "chunked")],
        [("Transfer-Encoding", "gzip")],
        [("Transfer-Encoding", "chunked"), ("Content-Length", "{n}")],
    ]
)


@st.composite
def _requests(draw) -> tuple[bytes, tuple[list[str], str | None]]:
    """A request's bytes, and the identity headers and the route token it carries."""
    method = draw(_methods)
    target = draw(_targets)
    identities = draw(st.lists(_identities, max_size=3))
    body = draw(st.one_of(st.just(b"{}"), st.binary(max_size=300), st.just(b"x" * 5000)))
    headers = [("Host", "x")]
    headers += [("X-Modelplane-Deployment", i) for i in identities]
    # The route's token for team-a/llm (as the Gateway's proxy adds it), none (a direct
    # call), or a wrong one.
    token = draw(st.sampled_from([ROUTE_TOKEN, None, "wrong", token_of("team-b/other")]))
    if token is not None:
        headers.append(("X-Modelplane-Route-Token", token))
    for name, value in draw(_framing):
        headers.append((name, value.replace("{n}", str(len(body)))))
    if draw(st.booleans()):
        headers.append(("X-Padding", "p" * draw(st.integers(0, 20000))))
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode(errors="surrogateescape") + b"\r\n" + body, (identities, token)


@pytest.fixture(scope="module")
def activator():
    engine = ChatServer(script=[Answer(content="ok")] * 100_000)
    plane = Plane()
    served = start(plane, Routes([composed_route("team-a", "llm")]), engine)
    yield served, plane
    served.shutdown()
    engine.close()


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    return answer


@given(_requests())
@profile.FUZZ
def test_any_generated_request_gets_an_http_answer_and_reaches_only_its_own_model(
    activator, request_and_identities
):
    served, plane = activator
    data, (identities, token) = request_and_identities
    activated_before = len(plane.activations)
    began = time.monotonic()
    answer = _exchange(served.port, data)
    assert time.monotonic() - began < 8
    if answer:
        match = re.match(rb"HTTP/1\.1 ([1-5]\d\d) ", answer)
        assert match, answer[:80]
        status = int(match.group(1))
        assert status != 500, answer[:300]
        if status == 200:
            # Only the identity a route of its own namespace vouches for is served, and
            # only with the token that route sets.
            assert identities == ["team-a/llm"], identities
            assert token == ROUTE_TOKEN, token
    # Nothing activates a model but its own identity, and never another namespace's.
    for namespace, name, _attempt in plane.activations[activated_before:]:
        assert (namespace, name) == ("team-a", "llm")
    assert ("team-b", "other") not in plane.reads
    assert SECRET.encode() not in answer
    # Whatever it was sent, the server still serves its model.
    assert post(served.port, "team-a/llm")[0] == 200


@given(
    _methods,
    _targets,
    st.lists(st.tuples(st.sampled_from(["content-length", "transfer-encoding", IDENTITY, "x"]),
                       st.text(max_size=30)), max_size=6),
)  # fmt: skip
@profile.FUZZ
def test_the_head_check_never_raises_and_admits_only_one_wellformed_identity(
    method, target, headers
):
    headers = [(n, v) for n, v in headers if n != "content-length" or v.isdigit()]
    problem = core.request_problem(method, target, headers)
    if problem is None:
        identities = [v for n, v in headers if n == IDENTITY]
        assert len(identities) == 1
        core.parse_deployment(identities[0])  # does not raise
        assert method in core.METHODS
    else:
        assert 400 <= problem.status < 500
