"""What the on-demand activator does with one request, decided from plain values.

The route of an on-demand model leads here while the model has no ready replica on this
member. For a request whose model we can verify, the activator reads the
ModelDeployment on the control plane and either proxies (a replica is ready), or asks
for one placement attempt (sets a new `modelplane.ai/activate` value) and holds the
request only for that attempt's answer: Unplaceable or Parked is answered at once with
why; Placed holds it until the first replica is ready (at most
spec.onDemand.activationTimeout), then proxies.

Which model a request is for is decided by where it arrived, never by what the client
says. The gateway reaches the activator only through the HTTPRoute compose-model-replica
composes for an on-demand model, and that route *sets* HEADER_DEPLOYMENT to its own
`namespace/name` (RequestHeaderModifier `set` replaces any copy the client sent). A
NetworkPolicy admits only the gateway's proxies, so nothing else can send the header.
And the activator serves only identities the member's routes vouch for
(`RouteIndex`): an HTTPRoute in the identity's own namespace, ours (it carries
LABEL_SERVING), pointing at the activator, setting exactly that value; an identity that
a route in any *other* namespace also claims is refused (a forged claim makes the model
unreachable through the activator, never reachable by someone else). Everything else is
answered alike, 404 NotRouted, without a read of the control plane: the answer says
nothing about which models exist.

Everything a client sent is untrusted: the identity is checked as a Kubernetes name
before it reaches an API path, the request's framing before anything is read past the
headers, and every message goes out JSON-encoded. A message says what the caller can
do, never the fleet's detail: no other cluster's name, no DeviceClass, no spec path
(those stay in the ModelDeployment's status and `modelplane explain`).

Pure: plain dicts in, plain values out; the shell (server.py) does the I/O.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from functions.common import answers, contracts
from functions.common.durations import parse_duration

# RFC 1123 label (namespace) and subdomain (ModelDeployment name).
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

RESULT_PLACED: Final = contracts.ON_DEMAND_RESULT_PLACED
DEFAULT_ACTIVATION_TIMEOUT: Final = contracts.DEFAULT_ACTIVATION_TIMEOUT_SECONDS

# The `reason` of an answer the activator gives instead of a model's (besides the
# attempt's own Unplaceable and Parked); each has a runbook section.
REASON_NOT_FOUND: Final = "NotFound"
REASON_NOT_ON_DEMAND: Final = "NotOnDemand"
REASON_BAD_ROUTE: Final = "BadRoute"
REASON_NOT_READY: Final = "NotReady"
REASON_ATTEMPT_NOT_ANSWERED: Final = "AttemptNotAnswered"
REASON_ACTIVATION_TIMEOUT: Final = "ActivationTimeout"
REASON_ACTIVATION_FAILED: Final = "ActivationFailed"
REASON_SERVING_ELSEWHERE: Final = "ServingElsewhere"
REASON_NOT_ROUTED: Final = "NotRouted"
REASON_BAD_REQUEST: Final = "BadRequest"
REASON_METHOD: Final = "MethodNotAllowed"
REASON_TOO_LARGE: Final = "BodyTooLarge"
REASON_HEADERS_TOO_LARGE: Final = "HeadersTooLarge"
REASON_REQUEST_TIMEOUT: Final = "RequestTimeout"
REASON_OVERLOADED: Final = "Overloaded"
REASON_MODEL_BUSY: Final = "TooManyRequestsForModel"
REASON_CONTROL_PLANE: Final = "ControlPlaneUnavailable"
REASON_ROUTES_UNKNOWN: Final = "RoutesUnavailable"
REASON_UPSTREAM: Final = "UpstreamUnavailable"

STATUS_UNAVAILABLE: Final = 503
STATUS_TIMEOUT: Final = 504
STATUS_BAD_REQUEST: Final = 400
STATUS_NOT_FOUND: Final = 404
STATUS_METHOD: Final = 405
STATUS_REQUEST_TIMEOUT: Final = 408
STATUS_TOO_LARGE: Final = 413
STATUS_TOO_MANY: Final = 429
STATUS_HEADERS_TOO_LARGE: Final = 431
STATUS_BAD_GATEWAY: Final = 502

# What a request to the activator may be (the shell's flags can change the sizes).
METHODS: Final = ("GET", "POST")
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
DEFAULT_MAX_HEADER_BYTES: Final = 16 * 1024


class BadDeployment(ValueError):
    """The deployment header is missing or not a Kubernetes namespace/name."""


def parse_deployment(header: str | None) -> tuple[str, str]:
    """(namespace, name) from the route's `namespace/name` header."""
    if not header:
        raise BadDeployment("no deployment header: the request did not come through a route")
    namespace, sep, name = header.partition("/")
    if not sep or not _NAMESPACE.fullmatch(namespace) or not _NAME.fullmatch(name):
        raise BadDeployment("the deployment header is not namespace/name")
    return namespace, name


def request_problem(
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> Refuse | None:
    """What is wrong with a request's head (None: nothing), decided before its body is
    read: its size, the method, the target, the framing and the body size it declares,
    and exactly one identity header. `headers` are (lowercase name, value) as received."""
    head_bytes = len(target) + sum(len(name) + len(value) + 4 for name, value in headers)
    if head_bytes > max_header_bytes:
        return Refuse(
            STATUS_HEADERS_TOO_LARGE,
            REASON_HEADERS_TOO_LARGE,
            f"the request's head is {head_bytes} bytes; at most {max_header_bytes}",
        )
    if method not in METHODS:
        return Refuse(STATUS_METHOD, REASON_METHOD, f"only {', '.join(METHODS)} are served")
    if not target.startswith("/") or target.startswith("//"):
        return Refuse(STATUS_BAD_REQUEST, REASON_BAD_REQUEST, "the target is not a path")
    names = [name for name, _ in headers]
    if "transfer-encoding" in names and "content-length" in names:
        # RFC 9112 6.3: a request with both is an attack on whoever forwards it.
        return Refuse(
            STATUS_BAD_REQUEST,
            REASON_BAD_REQUEST,
            "both Transfer-Encoding and Content-Length: refused",
        )
    lengths = [value for name, value in headers if name == "content-length"]
    # h11 has checked it is one number; 19 digits or more is past any limit here.
    if lengths and (len(lengths[0]) > 18 or int(lengths[0]) > max_body_bytes):
        return Refuse(
            STATUS_TOO_LARGE,
            REASON_TOO_LARGE,
            f"the body is {lengths[0][:20]} bytes; at most {max_body_bytes}",
        )
    identities = [value for name, value in headers if name == HEADER_DEPLOYMENT_LOWER]
    if len(identities) > 1:
        return Refuse(STATUS_BAD_REQUEST, REASON_BAD_ROUTE, "more than one deployment header")
    try:
        parse_deployment(identities[0] if identities else None)
    except BadDeployment as err:
        return Refuse(STATUS_BAD_REQUEST, REASON_BAD_ROUTE, str(err))
    return None


HEADER_DEPLOYMENT_LOWER: Final = contracts.HEADER_DEPLOYMENT.lower()
HEADER_ROUTE_TOKEN_LOWER: Final = contracts.HEADER_ROUTE_TOKEN.lower()


# --- Which identities the member's routes vouch for ---------------------------------------


@dataclass(frozen=True)
class RouteIndex:
    """The identities this member's HTTPRoutes lead to the activator with, and the
    route token each of our routes sets beside it."""

    served: frozenset[tuple[str, str]]  # (namespace, name) we serve
    contested: frozenset[tuple[str, str]]  # claimed from another namespace: refused
    # (namespace, name) -> the HEADER_ROUTE_TOKEN values our routes set with it
    tokens: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def vouches_for(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.served

    def admits(self, namespace: str, name: str, token: str | None) -> bool:
        """The identity is ours and the request carries the token its route sets: it
        came through that route (the Gateway's proxy sets both, overwriting a client's
        copies), or from someone who can read the model's namespace."""
        if token is None or not self.vouches_for(namespace, name):
            return False
        given = token.encode("latin-1", "replace")
        # Every candidate compared in full (constant time for each).
        return any(
            [
                hmac.compare_digest(given, known.encode("latin-1", "replace"))
                for known in self.tokens.get((namespace, name), frozenset())
            ]
        )


EMPTY_ROUTES: Final = RouteIndex(frozenset(), frozenset())


def _leads_to_activator(rule: Mapping[str, Any], route_namespace: str) -> bool:
    for ref in rule.get("backendRefs") or []:
        if not isinstance(ref, Mapping):
            continue
        if (
            ref.get("kind", "Service") == "Service"
            and ref.get("group", "") in ("", "core")
            and ref.get("name") == contracts.ACTIVATOR_SERVICE_NAME
            and ref.get("namespace", route_namespace) == contracts.SYSTEM_NAMESPACE
        ):
            return True
    return False


def _set_headers(rule: Mapping[str, Any], lower_name: str) -> list[str]:
    """The values a rule's RequestHeaderModifier filters set for one header."""
    found = []
    for rule_filter in rule.get("filters") or []:
        if not isinstance(rule_filter, Mapping):
            continue
        if rule_filter.get("type") != "RequestHeaderModifier":
            continue
        modifier = rule_filter.get("requestHeaderModifier") or {}
        for header in modifier.get("set") or []:
            if isinstance(header, Mapping) and str(header.get("name", "")).lower() == lower_name:
                found.append(str(header.get("value", "")))
    return found


def route_index(routes: list[Mapping[str, Any]]) -> RouteIndex:
    """The identities the member's HTTPRoutes vouch for.

    A rule that leads to the activator without *setting* the identity (the client's copy
    would pass) vouches for nothing; a route without LABEL_SERVING is not ours and
    vouches for nothing, but its claims still contest; an identity claimed by a route in
    any namespace but its own is contested and served to nobody."""
    vouched: set[tuple[str, str]] = set()
    contested: set[tuple[str, str]] = set()
    tokens: dict[tuple[str, str], set[str]] = {}
    for route in routes:
        meta = route.get("metadata") or {}
        route_namespace = str(meta.get("namespace", ""))
        ours = contracts.LABEL_SERVING in (meta.get("labels") or {})
        for rule in (route.get("spec") or {}).get("rules") or []:
            if not isinstance(rule, Mapping) or not _leads_to_activator(rule, route_namespace):
                continue
            # A rule without a (non-empty) token admits no request for its identity.
            rule_tokens = {t for t in _set_headers(rule, HEADER_ROUTE_TOKEN_LOWER) if t}
            for value in _set_headers(rule, HEADER_DEPLOYMENT_LOWER):
                try:
                    identity = parse_deployment(value)
                except BadDeployment:
                    continue
                if identity[0] != route_namespace:
                    contested.add(identity)
                elif ours:
                    vouched.add(identity)
                    tokens.setdefault(identity, set()).update(rule_tokens)
    served = frozenset(vouched - contested)
    return RouteIndex(
        served,
        frozenset(contested),
        {identity: frozenset(tokens.get(identity, ())) for identity in served},
    )


@dataclass(frozen=True)
class Proxy:
    cluster: str  # where a replica is ready


@dataclass(frozen=True)
class Activate:
    pass


@dataclass(frozen=True)
class Refuse:
    status: int
    reason: str
    message: str
    retry_after: int = 0  # seconds for a Retry-After header (overload only); 0: none


Step = Proxy | Activate | Refuse


def ready_cluster(deployment: Mapping[str, Any], own: str) -> str:
    """A cluster with a ready replica ("" if none): this member's first, then by name."""
    placements = (deployment.get("status") or {}).get("placements") or []
    ready = sorted(
        str(p.get("cluster", ""))
        for p in placements
        if isinstance(p, Mapping) and int(p.get("readyReplicas") or 0) > 0
    )
    if own in ready:
        return own
    return ready[0] if ready else ""


def first_step(deployment: Mapping[str, Any] | None, own: str) -> Step:
    """What a new request gets: proxied, an attempt, or an answer at once."""
    if deployment is None:
        return Refuse(STATUS_NOT_FOUND, REASON_NOT_FOUND, "no such ModelDeployment")
    if not (deployment.get("spec") or {}).get("onDemand"):
        return Refuse(
            STATUS_UNAVAILABLE,
            REASON_NOT_ON_DEMAND,
            "the model is not on-demand and has no ready replica",
        )
    cluster = ready_cluster(deployment, own)
    return Proxy(cluster) if cluster else Activate()


def attempt_answer(deployment: Mapping[str, Any], attempt_id: str) -> Step | None:
    """The answer to attempt `attempt_id` once compose-model-deployment wrote it (None
    while it has not): a refusal with why, or Activate (placed: wait for a ready replica)."""
    attempt = ((deployment.get("status") or {}).get("onDemand") or {}).get("attempt") or {}
    if attempt.get("id") != attempt_id:
        return None
    result = str(attempt.get("result", ""))
    if result == RESULT_PLACED:
        return Activate()
    # The attempt's reason (which pools lacked what, a start failure's log) is the
    # operator's, in the deployment's status; the client is told what it can do.
    reason = result or "Unknown"
    return Refuse(STATUS_UNAVAILABLE, reason, answers.caller_message(reason))


def activation_timeout(deployment: Mapping[str, Any]) -> float:
    raw = ((deployment.get("spec") or {}).get("onDemand") or {}).get("activationTimeout")
    try:
        return parse_duration(raw) if raw else DEFAULT_ACTIVATION_TIMEOUT
    except ValueError:
        return DEFAULT_ACTIVATION_TIMEOUT


def not_routed() -> Refuse:
    """The one answer for every identity no route here vouches for (no read was made)."""
    return Refuse(
        STATUS_NOT_FOUND,
        REASON_NOT_ROUTED,
        "no on-demand route on this member leads here for this model",
    )


def error_body(status: int, reason: str, model: str, message: str) -> bytes:
    """The same JSON shape the route's direct response uses (functions/common/answers.py),
    so clients parse one form."""
    return answers.body(status, reason, model, message).encode()


def activate_patch(attempt_id: str, annotation: str) -> dict:
    """The activator's only write: one annotation (a merge patch touches nothing else)."""
    return {"metadata": {"annotations": {annotation: attempt_id}}}
