"""Carrying a hub decision out: intents on members, weights on routes, Events, status.fleet.

Fencing, on every write: before it writes an intent, a route's weights, its memory
(`status.fleet`) or an Event, the hub re-reads the *target* member's hub Lease and
writes only if that copy still names this hub (holder and current fencing token). The
scaler checks the same Lease copy before serving a floor, so an intent from a deposed
hub is refused at both ends. A route has no such second end — the gateway obeys any
weight — so for weights this check is the only fence, and a hub frozen after deciding
and resumed after a failover must meet it: the new hub has rewritten every Lease copy it
holds by then, so the deposed hub's write is refused ("does not hold the hub lease")
and counted as a step error. What is left is the instant between the Lease read and
the write itself; the election's renew deadline is far longer than that round trip.

Route weights: Gateway API declares `spec.rules` (and each rule's `backendRefs`) as
atomic lists, so a weight cannot be owned apart from the rules it sits in. The hub
therefore server-side-applies `spec.rules` alone, as its own field manager
(`modelplane-hub`), copied from the live route with only the weights changed. The
Composition keeps every other field it set (parentRefs, hostnames, labels) and can keep
re-applying them; a Composition that re-applies `spec.rules` itself gets a conflict
naming `modelplane-hub` instead of silently flipping the weights back.

Which backendRef is which member: the policy names each member's backend
(`clusters[].backendRef`, the member's name by default), and every member's copy of a
route carries the same names. One exception, because an InferencePool selects pods in
its own cluster only: on member M's copy, an InferencePool backendRef that no member
names is M's own pods and carries M's weight. That is how the routes the suite composes
look (compose-model-replica: own pool plus a ServiceImport per other member), so the
hub's weights land on every backend of every copy and each copy sums to 100.

Shadow mode writes nothing but `status.fleet` on the hub's own copy.
"""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from functions.common.contracts import (
    ANNOTATION_FENCING_TOKEN,
    API_VERSION,
    AUTOSCALING_GROUP,
    HUB_LEASE_NAME,
    INFERENCE_POOL_GROUP,
    KIND_ADAPTIVE_POLICY,
    KIND_INFERENCE_POOL,
    SYSTEM_NAMESPACE,
)
from functions.runtime.hub.decision import ACTIONS, Decision
from functions.runtime.kube.rest import kube_request
from functions.runtime.shared.policy import INTENT_TTL_SECONDS, Policy, rfc3339

FIELD_MANAGER: Final = "modelplane-hub"
GATEWAY_GROUP: Final = "gateway.networking.k8s.io"
GATEWAY_VERSION: Final = "v1"
PLURAL: Final = "adaptivepolicies"

log = logging.getLogger(__name__)


class NotHub(Exception):
    """The target member's Lease copy does not name this hub: do not write."""


@dataclass(frozen=True)
class LeaseCopy:
    holder: str
    token: str


def _call(api: ApiClient, path: str, method: str, *, body=None, content_type=None, query=None):
    return kube_request(api, method, path, query=query, body=body, content_type=content_type)


def _lease_from_object(lease: dict) -> LeaseCopy:
    spec = lease.get("spec") or {}
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    return LeaseCopy(
        spec.get("holderIdentity") or "", annotations.get(ANNOTATION_FENCING_TOKEN, "")
    )


def default_lease_reader(api: ApiClient) -> LeaseCopy:
    lease = _call(
        api,
        f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases/{HUB_LEASE_NAME}",
        "GET",
    )
    return _lease_from_object(lease)


def policy_path(policy: Policy) -> str:
    return (
        f"/apis/{AUTOSCALING_GROUP}/{API_VERSION}/namespaces/{policy.namespace}"
        f"/{PLURAL}/{policy.name}"
    )


def route_path(namespace: str, name: str) -> str:
    return f"/apis/{GATEWAY_GROUP}/{GATEWAY_VERSION}/namespaces/{namespace}/httproutes/{name}"


def is_own_pool(ref: dict, weights_by_backend: dict[str, int]) -> bool:
    """An InferencePool backendRef no member names: the route's own member's pods."""
    return (
        ref.get("group") == INFERENCE_POOL_GROUP
        and ref.get("kind") == KIND_INFERENCE_POOL
        and ref.get("name") not in weights_by_backend
    )


def weighted_rules(
    route: dict, weights_by_backend: dict[str, int], own_weight: int | None = None
) -> list[dict]:
    """The live route's rules with the weights of the named backendRefs replaced, and
    `own_weight` (the route's member's) on its own InferencePool (see the docstring)."""
    rules = json.loads(json.dumps((route.get("spec") or {}).get("rules") or []))
    for rule in rules:
        for ref in rule.get("backendRefs") or []:
            if ref.get("name") in weights_by_backend:
                ref["weight"] = int(weights_by_backend[ref["name"]])
            elif own_weight is not None and is_own_pool(ref, weights_by_backend):
                ref["weight"] = int(own_weight)
    return rules


@dataclass
class ActResult:
    applied: bool
    errors: list[str]

    @property
    def error(self) -> str | None:
        return "; ".join(self.errors) or None


class Actor:
    """Writes one hub's decisions. `members` maps member name -> an API client for it."""

    def __init__(
        self,
        members: dict[str, ApiClient],
        hub_member: str,
        hub: str,
        term: Callable[[], str],
        *,
        lease_reader: Callable[[ApiClient], LeaseCopy] = default_lease_reader,
        intent_ttl: float = INTENT_TTL_SECONDS,
    ):
        self.members = members
        self.hub_member = hub_member
        self.hub = hub
        self.term = term
        self.lease_reader = lease_reader
        self.intent_ttl = intent_ttl
        self._events = 0

    # --- fencing ------------------------------------------------------------------------

    def check_lease(self, member: str) -> None:
        copy = self.lease_reader(self.members[member])
        token = self.term()
        if not token or copy.holder != self.hub or copy.token != token:
            raise NotHub(
                f"{member}: does not hold the hub lease (holder {copy.holder or 'none'!r},"
                f" this hub {self.hub!r}{'' if token else ', no current term'})"
            )

    # --- writes -------------------------------------------------------------------------

    def write_intent(
        self,
        member: str,
        policy: Policy,
        floor: int,
        tier: int | None,
        now: float,
        *,
        decision_id: str | None = None,
    ):
        self.check_lease(member)
        intent = {
            "floor": int(floor),
            "hub": self.hub,
            "fencingToken": self.term(),
            "expires": rfc3339(now + self.intent_ttl),
        }
        if tier is not None:
            intent["tier"] = int(tier)
        if decision_id is not None:
            intent["decisionId"] = decision_id
        _call(
            self.members[member],
            policy_path(policy) + "/status",
            "PATCH",
            body={"status": {"intent": intent}},
            content_type="application/merge-patch+json",
        )

    def write_fleet(self, policy: Policy, fleet: dict, anchor: str | None = None) -> None:
        # Fenced too: a deposed hub's status.fleet would be the freshest a new hub reads.
        self.check_lease(anchor or self.hub_member)
        _call(
            self.members[anchor or self.hub_member],
            policy_path(policy) + "/status",
            "PATCH",
            body={"status": {"fleet": fleet}},
            content_type="application/merge-patch+json",
        )

    def write_route_weights(
        self,
        member: str,
        namespace: str,
        name: str,
        weights_by_backend: dict[str, int],
        own_weight: int | None = None,
    ) -> bool:
        """Apply the weights on the member's route; False when it has no such route.

        Raises NotHub, writing nothing, when the member's Lease copy does not name this
        hub under its current term."""
        api = self.members[member]
        self.check_lease(member)
        try:
            route = _call(api, route_path(namespace, name), "GET")
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        body = {
            "apiVersion": f"{GATEWAY_GROUP}/{GATEWAY_VERSION}",
            "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"rules": weighted_rules(route, weights_by_backend, own_weight)},
        }
        _call(
            api,
            route_path(namespace, name),
            "PATCH",
            body=body,
            content_type="application/apply-patch+yaml",
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
        )
        return True

    def emit_event(
        self,
        policy: Policy,
        reason: str,
        type_: str,
        message: str,
        now: float,
        *,
        anchor: str | None = None,
    ):
        self._events += 1
        meta_name = f"{policy.name}.{int(now * 1000):x}{self._events:04x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": meta_name, "namespace": policy.namespace},
            "involvedObject": {
                "apiVersion": f"{AUTOSCALING_GROUP}/{API_VERSION}",
                "kind": KIND_ADAPTIVE_POLICY,
                "name": policy.name,
                "namespace": policy.namespace,
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": "modelplane-hub"},
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
        }
        try:
            _call(
                self.members[anchor or self.hub_member],
                f"/api/v1/namespaces/{policy.namespace}/events",
                "POST",
                body=body,
                content_type="application/json",
            )
        except ApiException as err:  # an Event is a courtesy; never fail the step for it
            log.warning("event %s on %s not written: %s", reason, policy.key, err.reason)

    # --- one decision -------------------------------------------------------------------

    def act(
        self,
        decision: Decision,
        policy: Policy,
        now: float,
        *,
        renew: bool,
        route_members: list[str] | None = None,
        anchor: str | None = None,
    ) -> ActResult:
        """Auto mode: intents (changed, or all with a floor when `renew`), weights, Events.

        Each write is independent: one member failing does not keep the others from
        their intents; every failure is returned for the step-error metric and the log.
        """
        errors: list[str] = []
        before = {c.name: c for c in decision.before.clusters}
        for c in decision.fleet.clusters:
            was = before.get(c.name)
            changed = was is None or was.floor != c.floor or was.tier != c.tier
            if not changed and not (renew and c.floor > 0):
                continue
            if c.name not in self.members:
                errors.append(f"{c.name}: not reachable from this hub")
                continue
            try:
                self.write_intent(c.name, policy, c.floor, c.tier, now, decision_id=c.decision_id)
            except NotHub as err:
                errors.append(str(err))
            except ApiException as err:
                errors.append(f"{c.name}: intent not written: {err.status} {err.reason}")
        if decision.weights_changed and policy.spec.manages_traffic:
            by_backend = {
                (policy.spec.cluster(n).backend_name if policy.spec.cluster(n) else n): w
                for n, w in decision.weights.items()
            }
            for route in policy.spec.routes:  # every route carries the same weights
                namespace = route.namespace or policy.namespace
                for member in route_members or sorted(self.members):
                    try:
                        self.write_route_weights(
                            member,
                            namespace,
                            route.name,
                            by_backend,
                            decision.weights.get(member),
                        )
                    except NotHub as err:
                        errors.append(str(err))
                    except ApiException as err:
                        errors.append(
                            f"{member}: route {namespace}/{route.name} update failed:"
                            f" {err.status} {err.reason}"
                        )
        try:
            self.check_lease(anchor or self.hub_member)
        except NotHub as err:  # a deposed hub's Events would tell the story wrong
            errors.append(str(err))
        except ApiException as err:
            errors.append(f"{anchor or self.hub_member}: events not written: {err.reason}")
        else:
            self.decision_events(decision, policy, now, failed=bool(errors), anchor=anchor)
        return ActResult(applied=not errors, errors=errors)

    def decision_events(
        self,
        decision: Decision,
        policy: Policy,
        now: float,
        failed: bool,
        anchor: str | None = None,
    ):
        if decision.changes:
            reason = decision.action
            if reason and all(a in ACTIONS for a in [c.action for c in decision.changes]):
                kind = "Warning" if failed else "Normal"
                self.emit_event(policy, reason, kind, decision.message, now, anchor=anchor)
        for event in decision.events:
            self.emit_event(policy, event.reason, event.type, event.message, now, anchor=anchor)
