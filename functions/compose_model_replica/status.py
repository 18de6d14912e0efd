"""What the ModelReplica reports, from what the member cluster shows.

Every fact comes from an observed Object's `status.atProvider.manifest` (the object as
the member's API server returned it): ready replicas from the workloads, start failures
from the health record the member's agent keeps. "Not observed yet" is never read as
"zero ready" in a message: the conditions say which it is, so a person knows whether to
wait or to look at the pods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from functions.common import conditions
from functions.common.adaptivepolicy import ROLLOUT_SIGNALS
from functions.common.conditions import Condition
from functions.common.contracts import LABEL_REVISION
from functions.common.health import HealthRecord
from functions.compose_model_replica.backends.base import Workload
from functions.compose_model_replica.model import REASON_WAITING_FOR_CACHE, ModelReplica

REASON_AVAILABLE = "Available"
REASON_CREATING = "Creating"
REASON_PROGRESSING = "Progressing"
REASON_START_FAILING = "StartFailing"
REASON_SERVING = "Serving"
REASON_NO_READY_REPLICAS = "NoReadyReplicas"


@dataclass(frozen=True)
class ReplicaStatus:
    observed: bool  # every workload has been read back from the cluster
    ready_replicas: int
    desired_replicas: int
    health: HealthRecord | None
    conditions: tuple[Condition, ...]
    ready_objects: frozenset[str]  # keys of composed Objects whose Ready is True
    # The revision every workload has fully rolled to and is Ready at ("" otherwise): what
    # a rollout's Ready gate reads (old pods still ready mid-roll do not count).
    revision: str = ""
    # The rollout gates' signals (ModelReplica status.signals), from the AdaptivePolicy
    # copy's report on the member; empty without autoscaling or before a report.
    signals: dict = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.observed and self.ready_replicas >= self.desired_replicas

    def to_status(self) -> dict:
        status: dict = {"readyReplicas": self.ready_replicas}
        if self.revision:
            status["revision"] = self.revision
        if self.signals:
            status["signals"] = dict(self.signals)
        if self.health is not None:
            status["health"] = self.health.to_status()
        return status


def remote(observed_object: dict | None) -> dict | None:
    """The member's object inside an observed provider-kubernetes Object, if seen."""
    if not observed_object:
        return None
    manifest = (observed_object.get("status") or {}).get("atProvider", {}).get("manifest")
    return manifest or None


def object_ready(observed_object: dict) -> bool:
    return conditions.is_ready(observed_object)


def _count(value) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def rollout_signals(policy_copy: dict | None) -> dict[str, float]:
    """The rollout signals (adaptivepolicy.ROLLOUT_SIGNALS) the member's agent reported
    in the AdaptivePolicy copy's status.report.extra, under the ModelReplica's names. A
    value that is not a finite number is left out (the gate reading it is Unmeasured)."""
    if policy_copy is None:
        return {}
    extra = ((policy_copy.get("status") or {}).get("report") or {}).get("extra") or {}
    out = {}
    for name, (status_name, _signal) in ROLLOUT_SIGNALS.items():
        value = extra.get(name) if isinstance(extra, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[status_name] = float(value)
    return out


def rolled(manifest: dict, revision: str, ready_field: str) -> bool:
    """Whether an observed workload runs `revision` on every pod and all are ready: the
    revision was applied (its label), the controller has seen that spec (observed
    generation), every pod is of it (updated = wanted, no old pod left) and ready. A
    count the kind does not report is not required."""
    meta = manifest.get("metadata") or {}
    status = manifest.get("status") or {}
    if not revision or (meta.get("labels") or {}).get(LABEL_REVISION) != revision:
        return False
    generation, seen = meta.get("generation"), status.get("observedGeneration")
    if generation is not None and (seen is None or _count(seen) < _count(generation)):
        return False
    wanted = _count((manifest.get("spec") or {}).get("replicas", 1))
    if "updatedReplicas" in status and _count(status["updatedReplicas"]) < wanted:
        return False
    if "replicas" in status and _count(status["replicas"]) > wanted:
        return False
    return _count(status.get(ready_field)) >= wanted


def observe(
    replica: ModelReplica,
    workloads: list[Workload],
    observed: dict[str, dict],
    health_key: str,
    policy_key: str = "",
) -> ReplicaStatus:
    """Status and conditions from the observed Objects, by resource key."""
    ready_counts = []
    for workload in workloads:
        manifest = remote(observed.get(workload.key))
        if manifest is None:
            ready_counts.append(None)
        else:
            ready_counts.append(_count((manifest.get("status") or {}).get(workload.ready_field)))
    seen = [c for c in ready_counts if c is not None]
    all_observed = len(seen) == len(workloads)
    # A replica is ready only when every role's workload is (prefill and decode alike).
    ready = min(seen) if all_observed else 0
    desired = replica.desired_replicas

    health = None
    record = remote(observed.get(health_key))
    if record is not None:
        health = HealthRecord.from_data(record.get("data") or {})
    failing = (
        health is not None
        and health.consecutive_start_failures > 0
        and health.definition_hash == replica.definition_hash
    )

    where = f"on cluster {replica.cluster.name}"
    if replica.unavailable is not None:
        workload_ready = Condition(
            conditions.WORKLOAD_READY,
            "False",
            replica.unavailable.reason,
            f"no replicas run {where}: {replica.unavailable.message}",
        )
    elif replica.waiting_for_cache:
        assert replica.model_cache is not None
        workload_ready = Condition(
            conditions.WORKLOAD_READY,
            "False",
            REASON_WAITING_FOR_CACHE,
            f"no replicas run {where} until ModelCache {replica.model_cache.name} is Ready "
            "here (no engine pod holds a GPU while the weights download)",
        )
    elif not all_observed:
        workload_ready = Condition(
            conditions.WORKLOAD_READY,
            "False",
            REASON_CREATING,
            f"the workload {where} has not been observed yet",
        )
    elif ready >= desired:
        workload_ready = Condition(
            conditions.WORKLOAD_READY,
            "True",
            REASON_AVAILABLE,
            f"{ready} of {desired} replicas ready {where}",
        )
    elif failing:
        assert health is not None
        workload_ready = Condition(
            conditions.WORKLOAD_READY,
            "False",
            REASON_START_FAILING,
            f"{ready} of {desired} replicas ready {where}; "
            f"{health.consecutive_start_failures} consecutive start failures, last: "
            f"{health.last_error or 'unknown'}",
        )
    else:
        workload_ready = Condition(
            conditions.WORKLOAD_READY,
            "False",
            REASON_PROGRESSING,
            f"{ready} of {desired} replicas ready {where}; models take minutes to load",
        )

    # An on-demand model's route leads to the activator instead (compose.py).
    answer = replica.unavailable or (None if replica.activator else replica.answer)
    if answer is not None:
        serving = Condition(
            conditions.SERVING,
            "False",
            answer.reason,
            f"requests are answered at once with 503: {answer.message}",
        )
    elif ready > 0:
        serving = Condition(
            conditions.SERVING, "True", REASON_SERVING, f"{ready} replicas serving {where}"
        )
    else:
        serving = Condition(
            conditions.SERVING,
            "False",
            REASON_NO_READY_REPLICAS,
            f"no replica is ready {where} yet",
        )

    manifests = [remote(observed.get(w.key)) for w in workloads]
    return ReplicaStatus(
        signals=rollout_signals(remote(observed.get(policy_key))) if policy_key else {},
        revision=replica.revision
        if all_observed
        and all(
            m is not None and rolled(m, replica.revision, w.ready_field)
            for m, w in zip(manifests, workloads, strict=True)
        )
        else "",
        observed=all_observed,
        ready_replicas=ready,
        desired_replicas=desired,
        health=health,
        conditions=(workload_ready, serving),
        ready_objects=frozenset(k for k, o in observed.items() if object_ready(o)),
    )
