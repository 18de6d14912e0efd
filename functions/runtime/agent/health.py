"""The model health record: consecutive start failures per ModelReplica, counted from
what the member's pods show, written to the ConfigMap `functions/common/health.py`
defines (compose-model-replica observes it; compose-model-deployment parks on it).

A start failure is something that would happen again on the next start of the same
definition:
- a container that exits or is killed (OOMKilled included) before its pod was ever seen
  ready — each restart counts once;
- an image that cannot be pulled (ErrImagePull, ImagePullBackOff, InvalidImageName) —
  once per pod;
- a pod that cannot be scheduled for `UNSCHEDULABLE_AFTER_SECONDS` — once per pod (a
  shorter wait is a cluster still adding nodes, not a broken model).

Pods lost to their node or preempted (a `DisruptionTarget` condition, or a pod reason
such as NodeLost, Evicted, Preempting, Shutdown) are not start failures, whatever their
containers show. A pod that is ready resets the count: the definition can start.

Counting must be idempotent across polls and agent restarts, so what has been counted
(restarts per pod, pods seen ready) travels with the record as an annotation; the data
keys stay exactly those `functions/common/health.py` defines.
"""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from functions.common.conditions import is_ready
from functions.common.contracts import ANNOTATION_DEFINITION_HASH, LABEL_SERVING
from functions.common.health import (
    HEALTH_RECORD_API_VERSION,
    HEALTH_RECORD_KIND,
    HEALTH_RECORD_LABEL,
    HealthRecord,
    health_record_name,
)
from functions.common.redact import redact_text
from functions.runtime.kube.rest import APPLY_PATCH, kube_request
from functions.runtime.shared.control_chars import escape
from functions.runtime.shared.policy import parse_time, rfc3339

log = logging.getLogger(__name__)

ANNOTATION_COUNTED: Final = "modelplane.ai/health-counted"
UNSCHEDULABLE_AFTER_SECONDS: Final = 900.0
# PodScheduled=False reasons that keep a pod off every node: no node fits, or the
# scheduler cannot evaluate the pod at all (kube-scheduler reports a DRA selector's CEL
# runtime error, e.g. a version compared with a string, as SchedulerError, and retries
# forever).
_NOT_SCHEDULED: Final = frozenset({"Unschedulable", "SchedulerError"})
# lastError is at most 1 KiB of UTF-8, control characters escaped: a container's
# termination message is the container's own text (up to 4 KiB, any bytes), and it is
# printed by `modelplane status`/`explain` and `kubectl describe` on an operator's
# terminal.
LAST_ERROR_MAX: Final = 1024
_CUT: Final = "…"
# A long message keeps its head (which container, which exit) and its tail: with
# terminationMessagePolicy FallbackToLogsOnError the message is the log's last lines, and
# an engine says why it stopped at the very end.
_HEAD: Final = 256


def stored_error(text: str) -> str:
    """`text` as lastError stores it: every credential-looking value replaced
    (common/redact.py: a termination message is the container's own output, which may
    print its token), every control character escaped (`\x1b`, `\n`;
    shared/control_chars.py), then cut to LAST_ERROR_MAX bytes of UTF-8 at character
    boundaries: its first _HEAD bytes, "…", and as much of its end as fits."""
    safe = escape(redact_text(text))
    raw = safe.encode()
    if len(raw) <= LAST_ERROR_MAX:
        return safe
    tail = LAST_ERROR_MAX - _HEAD - len(_CUT.encode())
    return raw[:_HEAD].decode(errors="ignore") + _CUT + raw[-tail:].decode(errors="ignore")


_PULL_FAILURES: Final = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
_DISRUPTED_REASONS: Final = frozenset(
    {"NodeLost", "Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated"}
)


@dataclass
class Counted:
    """What has already been counted for one ModelReplica (the record's annotation)."""

    restarts: dict[str, int] = field(default_factory=dict)  # "<pod uid>/<container>" -> n
    pulls: set[str] = field(default_factory=set)  # pod uids whose pull failure counted
    unschedulable: set[str] = field(default_factory=set)  # pod uids counted as unschedulable
    ready: set[str] = field(default_factory=set)  # pod uids seen ready

    def to_annotation(self) -> str:
        return json.dumps(
            {
                "restarts": dict(sorted(self.restarts.items())),
                "pulls": sorted(self.pulls),
                "unschedulable": sorted(self.unschedulable),
                "ready": sorted(self.ready),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_annotation(cls, text: str | None) -> "Counted":
        try:
            raw = json.loads(text or "{}")
            return cls(
                restarts={str(k): int(v) for k, v in (raw.get("restarts") or {}).items()},
                pulls=set(raw.get("pulls") or ()),
                unschedulable=set(raw.get("unschedulable") or ()),
                ready=set(raw.get("ready") or ()),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def forget_except(self, live_uids: set[str]) -> None:
        """Drop deleted pods, so the annotation does not grow with every rollout."""
        self.restarts = {k: v for k, v in self.restarts.items() if k.split("/")[0] in live_uids}
        self.pulls &= live_uids
        self.unschedulable &= live_uids
        self.ready &= live_uids


def _disrupted(pod: dict) -> bool:
    status = pod.get("status") or {}
    if status.get("reason") in _DISRUPTED_REASONS:
        return True
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _terminated_text(name: str, terminated: dict) -> str:
    reason = terminated.get("reason") or "Error"
    code = terminated.get("exitCode")
    text = f"container {name} exited {code} ({reason}) before ready"
    if terminated.get("message"):
        text += f": {terminated['message'].strip()}"
    return text


@dataclass(frozen=True)
class Tally:
    record: HealthRecord
    counted: Counted
    new_failures: int


def count_start_failures(
    previous: HealthRecord | None,
    counted: Counted,
    pods: list[dict],
    definition_hash: str,
    now: float,
) -> Tally:
    """Fold the pods' current state into the record (pure; `counted` is copied)."""
    counted = Counted(
        dict(counted.restarts), set(counted.pulls), set(counted.unschedulable), set(counted.ready)
    )
    if previous is None or previous.definition_hash != definition_hash:
        # A new definition starts from zero; what the old one's pods did is not its fault.
        previous = HealthRecord(definition_hash, 0, "", rfc3339(now))
        counted = Counted()
    current = [
        p
        for p in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", ""))
        # Unstamped pods count as definition "": a record nobody can match to a definition
        # is still visible, but parking needs compose-model-replica's stamp.
        if (
            ((p.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DEFINITION_HASH)
            or ""
        )
        == definition_hash
    ]
    failures = previous.consecutive_start_failures
    last_error = previous.last_error
    new = 0
    any_ready = False
    for pod in current:
        uid = (pod.get("metadata") or {}).get("uid") or (pod.get("metadata") or {}).get("name")
        status = pod.get("status") or {}
        if is_ready(pod):
            counted.ready.add(uid)
            any_ready = True
        if uid in counted.ready or _disrupted(pod):
            # Crashes after a pod was ready are not start failures; node loss never is.
            for cs in status.get("containerStatuses") or []:
                counted.restarts[f"{uid}/{cs.get('name')}"] = int(cs.get("restartCount") or 0)
            continue
        for cs in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            name = cs.get("name", "")
            key = f"{uid}/{name}"
            restarts = int(cs.get("restartCount") or 0)
            state = cs.get("state") or {}
            terminated = state.get("terminated")
            failed_now = terminated is not None and (
                terminated.get("exitCode") not in (0, None)
                or terminated.get("reason") == "OOMKilled"
            )
            # Each restart is one failed start; a container that failed and stays down
            # (restartPolicy Never) counts once more.
            seen = restarts + (1 if failed_now and status.get("phase") == "Failed" else 0)
            fresh = seen - counted.restarts.get(key, 0)
            if fresh > 0:
                new += fresh
                last = terminated if failed_now else (cs.get("lastState") or {}).get("terminated")
                last_error = _terminated_text(name, last or {})
            counted.restarts[key] = max(seen, counted.restarts.get(key, 0))
            waiting = state.get("waiting") or {}
            if waiting.get("reason") in _PULL_FAILURES and uid not in counted.pulls:
                counted.pulls.add(uid)
                new += 1
                message = (waiting.get("message") or "").strip()
                last_error = f"image pull failed for container {name}: {waiting['reason']}" + (
                    f": {message}" if message else ""
                )
        for condition in status.get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") in _NOT_SCHEDULED
                and uid not in counted.unschedulable
                and condition.get("lastTransitionTime")
                and now - parse_time(condition["lastTransitionTime"]) >= UNSCHEDULABLE_AFTER_SECONDS
            ):
                counted.unschedulable.add(uid)
                new += 1
                last_error = (
                    f"pod could not be scheduled for {int(UNSCHEDULABLE_AFTER_SECONDS // 60)}m: "
                    + (condition.get("message") or "Unschedulable").strip()
                )
    if any_ready:
        failures, last_error = 0, ""
    else:
        failures += new
    counted.forget_except(
        {
            (p.get("metadata") or {}).get("uid") or (p.get("metadata") or {}).get("name")
            for p in pods
        }
    )
    record = HealthRecord(definition_hash, failures, stored_error(last_error), rfc3339(now))
    return Tally(record, counted, 0 if any_ready else new)


def record_object(namespace: str, model_replica: str, tally: Tally) -> dict:
    """The ConfigMap the agent applies for one ModelReplica."""
    return {
        "apiVersion": HEALTH_RECORD_API_VERSION,
        "kind": HEALTH_RECORD_KIND,
        "metadata": {
            "name": health_record_name(model_replica),
            "namespace": namespace,
            "labels": {HEALTH_RECORD_LABEL: "true", LABEL_SERVING: model_replica},
            "annotations": {ANNOTATION_COUNTED: tally.counted.to_annotation()},
        },
        "data": tally.record.to_data(),
    }


def group_by_replica(pods: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(namespace, ModelReplica) -> its pods, from the `modelplane.ai/serving` label."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        serving = (meta.get("labels") or {}).get(LABEL_SERVING)
        if serving:
            groups.setdefault((meta.get("namespace", ""), serving), []).append(pod)
    return dict(sorted(groups.items()))


def current_definition(pods: list[dict]) -> str:
    """The definition the newest pod runs (a rollout's pods all carry the new one)."""
    stamped = [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DEFINITION_HASH)
    ]
    if not stamped:
        return ""
    newest = max(
        stamped,
        key=lambda p: (
            (p.get("metadata") or {}).get("creationTimestamp", ""),
            (p.get("metadata") or {}).get("name", ""),
        ),
    )
    return newest["metadata"]["annotations"][ANNOTATION_DEFINITION_HASH]


class HealthAgent:
    """The shell: list the serving pods, fold them into each record, apply changed records."""

    FIELD_MANAGER: Final = "modelplane-health"

    def __init__(self, core_v1, namespace: str | None = None):
        self.core = core_v1
        self.namespace = namespace

    def _list(self, method_all, method_ns, **kwargs):
        if self.namespace:
            return method_ns(self.namespace, **kwargs)
        return method_all(**kwargs)

    def sync(self, now: float) -> dict[tuple[str, str], HealthRecord]:
        api = self.core.api_client
        pods = self._list(
            self.core.list_pod_for_all_namespaces,
            self.core.list_namespaced_pod,
            label_selector=LABEL_SERVING,
        )
        records = self._list(
            self.core.list_config_map_for_all_namespaces,
            self.core.list_namespaced_config_map,
            label_selector=HEALTH_RECORD_LABEL,
        )
        existing = {(cm.metadata.namespace, cm.metadata.name): cm for cm in records.items}
        out: dict[tuple[str, str], HealthRecord] = {}
        plain = [api.sanitize_for_serialization(p) for p in pods.items]
        for (namespace, replica), group in group_by_replica(plain).items():
            definition = current_definition(group)
            cm = existing.get((namespace, health_record_name(replica)))
            previous = HealthRecord.from_data(cm.data or {}) if cm is not None else None
            counted = Counted.from_annotation(
                ((cm.metadata.annotations or {}) if cm is not None else {}).get(ANNOTATION_COUNTED)
            )
            tally = count_start_failures(previous, counted, group, definition, now)
            out[(namespace, replica)] = tally.record
            unchanged = (
                cm is not None
                and previous is not None
                and previous.consecutive_start_failures == tally.record.consecutive_start_failures
                and previous.last_error == tally.record.last_error
                and previous.definition_hash == tally.record.definition_hash
                and (cm.metadata.annotations or {}).get(ANNOTATION_COUNTED)
                == tally.counted.to_annotation()
            )
            if unchanged:
                continue
            body = record_object(namespace, replica, tally)
            try:
                kube_request(
                    api,
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/configmaps/{body['metadata']['name']}",
                    query=[("fieldManager", self.FIELD_MANAGER), ("force", "true")],
                    body=body,
                    content_type=APPLY_PATCH,
                )
            except ApiException as err:
                # One record not written never stops the others. A replica new on this
                # member is refused (403) until compose-serving-stack names its record in
                # the namespace's health Role; nothing counted is lost: the pods' restart
                # counts are read again next pass against the last record written.
                log.warning(
                    "health record %s/%s not written: %s %s",
                    namespace,
                    body["metadata"]["name"],
                    err.status,
                    err.reason,
                )
        return out


class HealthStep:
    """The agent's health step: sync the records, then hand each replica's consecutive
    start failures and ready pods to `export` (the hub metrics' `model_health`)."""

    def __init__(
        self, api: ApiClient, export: Callable[[dict[tuple[str, str], tuple[int, int]]], None]
    ):
        self.api = api
        self.export = export

    def step(self, now: float) -> None:
        core = CoreV1Api(self.api)
        records = HealthAgent(core).sync(now)
        pods = core.list_pod_for_all_namespaces(label_selector=LABEL_SERVING)
        plain = [self.api.sanitize_for_serialization(p) for p in pods.items]
        ready = {
            key: sum(1 for p in group if is_ready(p))
            for key, group in group_by_replica(plain).items()
        }
        self.export(
            {key: (r.consecutive_start_failures, ready.get(key, 0)) for key, r in records.items()}
        )
