"""Idle replicas: serving, yet their request counter has not moved for `idle_after`
seconds — GPUs held for nothing, the part of the inventory an operator acts on first.

The clock is kept per replica as (counter last seen, since when it has not moved) and
travels with the inventory record (an annotation, `IdleMemory`), so an agent restart or a
failover to the standby agent does not reset it. The counters come from the collector's
signals page the agent samples (per deployment: a cluster runs one ModelReplica of a
deployment) or, without one, from an instant query to the operator's Prometheus; when
they cannot be read nobody is named idle — unknown is not idle.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

ANNOTATION_IDLE_MEMORY: Final = "modelplane.ai/idle-memory"
# Requests finished per replica, as the vocabulary's counter reaches a Prometheus-compatible
# endpoint (resource attributes become labels with `.` as `_`).
LABEL_COUNTER_NAMESPACE: Final = "k8s_namespace_name"
LABEL_COUNTER_SERVING: Final = "modelplane_serving"
REQUEST_COUNTER: Final = "modelplane_requests_total"
REQUEST_COUNTER_QUERY: Final = (
    f"sum by ({LABEL_COUNTER_NAMESPACE}, {LABEL_COUNTER_SERVING}) (modelplane_requests_total)"
)


ReplicaKey = tuple[str, str]  # (namespace, ModelReplica)


@dataclass
class IdleMemory:
    """Per replica: the request counter last seen and when it last moved."""

    counters: dict[ReplicaKey, tuple[float, float]] = field(default_factory=dict)

    def to_annotation(self) -> str:
        return json.dumps(
            {
                f"{ns}/{name}": [value, since]
                for (ns, name), (value, since) in sorted(self.counters.items())
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_annotation(cls, text: str | None) -> IdleMemory:
        try:
            raw = json.loads(text or "{}")
            counters = {}
            for key, (value, since) in raw.items():
                namespace, name = key.split("/", 1)
                counters[(namespace, name)] = (float(value), float(since))
            return cls(counters)
        except (ValueError, TypeError, AttributeError):
            return cls()


@dataclass(frozen=True)
class Counters:
    """The request counters read this time: per replica, requests finished so far; or why
    they could not be read (then no replica is named idle — unknown is not idle)."""

    by_replica: Mapping[ReplicaKey, float] = field(default_factory=dict)
    error: str = ""
    # Or per deployment (namespace, ModelDeployment), as the collector's signals page
    # counts: a cluster runs one ModelReplica of a deployment, so it is the same count.
    by_deployment: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def of(self, key: ReplicaKey, deployment: str) -> float | None:
        """The replica's count, or None when the source has no series for it (its engine
        is not scraped, or its type exports no request counter): unknown, not zero."""
        if key in self.by_replica:
            return self.by_replica[key]
        return self.by_deployment.get((key[0], deployment))


def idle_replicas(
    serving: set[ReplicaKey],
    counters: Counters,
    memory: IdleMemory,
    now: float,
    idle_after: float,
    *,
    deployment_of: Mapping[ReplicaKey, str],
    gpus_held: Mapping[ReplicaKey, int],
) -> tuple[list[dict[str, Any]], IdleMemory]:
    """The idle clock: a counter that moved (or was never seen) restarts it; a replica no
    longer serving is forgotten, so its next start is not read as long idle. Counters that
    could not be read name nobody idle and keep the clocks as they were; so does a replica
    the source has no counter for (a page that does not carry it says nothing about it)."""
    if counters.error:
        kept = {k: v for k, v in memory.counters.items() if k in serving}
        return [], IdleMemory(kept)
    kept = IdleMemory()
    idle = []
    for key in sorted(serving):
        value = counters.of(key, deployment_of.get(key, ""))
        previous = memory.counters.get(key)
        if value is None:
            if previous is not None:
                kept.counters[key] = previous
            continue
        since = previous[1] if previous is not None and previous[0] == value else now
        kept.counters[key] = (value, since)
        if now - since >= idle_after:
            idle.append(
                {
                    "namespace": key[0],
                    "name": key[1],
                    "deployment": deployment_of.get(key, ""),
                    "idleSeconds": int(now - since),
                    "gpus": gpus_held.get(key, 0),
                }
            )
    idle.sort(key=lambda r: (-r["idleSeconds"], r["namespace"], r["name"]))
    return idle, kept


def counters_from_prometheus(base_url: str | None, timeout: float = 5.0) -> Counters:
    """The request counters from an instant query; why not, when they cannot be read."""
    if not base_url:
        return Counters(error="no request-counter source (--prometheus-url is not set)")
    url = (
        base_url.rstrip("/")
        + "/api/v1/query?"
        + urllib.parse.urlencode({"query": REQUEST_COUNTER_QUERY})
    )
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.load(response)
        samples = body["data"]["result"]
        by_replica = {
            (
                s["metric"].get(LABEL_COUNTER_NAMESPACE, ""),
                s["metric"][LABEL_COUNTER_SERVING],
            ): float(s["value"][1])
            for s in samples
            if s["metric"].get(LABEL_COUNTER_SERVING)
        }
    except (OSError, ValueError, KeyError, TypeError) as err:
        return Counters(error=f"request counters not read: {err}")
    return Counters(by_replica)


def counters_from_signals(history) -> Counters:
    """The request counters from the newest read of the collector's signals page (the
    agent's `SignalHistory`), summed per deployment; why not, when there is none."""
    if history.last_error:
        return Counters(error=f"request counters not read: {history.last_error}")
    if not history.pages:
        return Counters(error="request counters not read: no signals page read yet")
    by_deployment: dict[tuple[str, str], float] = {}
    for scope, samples in history.pages[-1].samples.items():
        counted = [v for (name, _), (v, _) in samples.items() if name == REQUEST_COUNTER]
        if counted:  # a deployment with gauges only has no counter here, not a zero one
            by_deployment[(scope.namespace, scope.deployment)] = sum(counted)
    return Counters(by_deployment=by_deployment)


def request_counters(history, prometheus_url: str | None) -> Callable[[], Counters]:
    """Where the inventory reads its counters: the signals page the agent samples (its
    `SignalHistory`), else the operator's Prometheus."""
    if history is not None:
        return lambda: counters_from_signals(history)
    return lambda: counters_from_prometheus(prometheus_url)
