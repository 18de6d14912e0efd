"""The member report: for every AdaptivePolicy copy on this member, read what the report
needs from the member (the workload, its pods, nodes, NodePools and signals), compute
the report (functions/runtime/shared/report.py) and write it with the copy's Ready
condition to the copy's status — the hub reads every member's copy.

Each policy is independent: one whose spec is invalid gets `Ready=False/InvalidSpec`, one
whose workload cannot be read gets `Ready=False/ObservationFailed`, and the others carry
on. Only failing to list the policies at all fails the step (the member did not answer).
"""

import logging
from typing import Final

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from functions.common.conditions import Condition
from functions.common.contracts import API_VERSION, AUTOSCALING_GROUP
from functions.runtime.agent.collect import read_member_inputs
from functions.runtime.agent.signal_sampling import SignalSampler
from functions.runtime.hub.acting import PLURAL
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.kube.rest import kube_request
from functions.runtime.shared.policy import DEFAULT_SIGNAL_WINDOW_SECONDS, Policy, rfc3339
from functions.runtime.shared.report import (
    CONDITION_READY,
    REASON_OBSERVATION_FAILED,
    REPORT_OPTIONAL_KEYS,
    compute_report,
)

REASON_INVALID_SPEC: Final = "InvalidSpec"
# Every copy on a member (the hub's step lists each member's the same way).
POLICIES_PATH: Final = f"/apis/{AUTOSCALING_GROUP}/{API_VERSION}/{PLURAL}"

log = logging.getLogger(__name__)


def validation_message(err: ValidationError) -> str:
    """The first problem of an invalid spec, as `field.path: what is wrong`."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first.get("loc") or ())
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))


def merged_conditions(existing: list[dict], condition: Condition, now: float, generation) -> list:
    """Set one condition, keeping its transition time when its status did not change."""
    out = [c for c in existing or [] if c.get("type") != condition.type]
    previous = next((c for c in existing or [] if c.get("type") == condition.type), None)
    since = (
        previous.get("lastTransitionTime")
        if previous and previous.get("status") == condition.status
        else rfc3339(now)
    )
    entry = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        entry["observedGeneration"] = int(generation)
    return sorted([*out, entry], key=lambda c: c["type"])


class MemberReporter:
    """Writes this member's report on each of its policy copies."""

    def __init__(
        self,
        api: ApiClient,
        sampler: SignalSampler,
        metrics: HubMetrics,
        *,
        cluster: str,
        prometheus_url: str | None,
        collector_interval: float,
    ):
        self.api = api
        self.cluster = cluster
        self.prometheus_url = prometheus_url
        self.collector_interval = collector_interval
        self.sampler = sampler
        self.metrics = metrics
        # For the readiness probe: the last time this member's API server listed them.
        self.reported_at: float | None = None

    def policies(self) -> list[dict]:
        listed = kube_request(self.api, "GET", POLICIES_PATH)
        return sorted(
            listed.get("items") or [],
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )

    def step(self, now: float) -> None:
        policies = self.policies()
        self.reported_at = now
        windows = [DEFAULT_SIGNAL_WINDOW_SECONDS]
        for obj in policies:
            window = self._report(obj, now)
            if window is not None:
                windows.append(window)
        self.sampler.keep_for(windows)

    def _report(self, obj: dict, now: float) -> float | None:
        """Report on one copy; the signal window its policy names (None: invalid spec)."""
        meta, status = obj["metadata"], obj.get("status") or {}
        path = (
            f"/apis/{AUTOSCALING_GROUP}/{API_VERSION}/namespaces/{meta['namespace']}"
            f"/{PLURAL}/{meta['name']}"
        )
        report_status, window = None, None
        try:
            policy = Policy.from_object(obj)
        except ValidationError as err:
            condition = Condition(
                CONDITION_READY, "False", REASON_INVALID_SPEC, validation_message(err)
            )
        else:
            self.metrics.serve_policy(policy.key)
            window = policy.spec.signal_window
            condition, report_status = self._observe(policy, status, now)
        new_status: dict = {
            "conditions": merged_conditions(
                status.get("conditions") or [], condition, now, meta.get("generation")
            )
        }
        if report_status is not None:
            # A merge patch keeps what it does not name: a signal this report left
            # out (it failed) must go, not stay at its last value for the hub.
            cleared = {k: None for k in REPORT_OPTIONAL_KEYS if k not in report_status}
            new_status["report"] = {**report_status, **cleared}
        try:
            kube_request(
                self.api,
                "PATCH",
                path + "/status",
                body={"status": new_status},
                content_type="application/merge-patch+json",
            )
        except ApiException as err:
            log.warning("report for %s not written: %s %s", meta["name"], err.status, err.reason)
        return window

    def _observe(self, policy: Policy, status: dict, now: float) -> tuple[Condition, dict | None]:
        """The copy's Ready condition and its report (None when there is none to write)."""
        previous_safe = (status.get("report") or {}).get("safePressure")
        try:
            inputs = read_member_inputs(
                self.api,
                policy.spec,
                policy.namespace,
                self.prometheus_url,
                now,
                history=self.sampler.sampling,
                interval=self.collector_interval,
                cluster=self.cluster,
            )
        except ApiException as err:
            return Condition(
                CONDITION_READY,
                "False",
                REASON_OBSERVATION_FAILED,
                f"workload {policy.spec.workload.kind}/{policy.spec.workload.name}:"
                f" {err.status} {err.reason}",
            ), None
        result = compute_report(inputs, policy.spec, self.cluster, previous_safe, now)
        report_status = None
        if result.report is not None:
            report_status = result.report.to_status()
            self.metrics.member_report(policy.key, result.report.needed, result.report.static_room)
        if result.static is not None:
            log.debug(
                "static diagnostics %s: %d registered nodes, %d filtered, %d pods fit",
                policy.key,
                result.static.registered_nodes,
                result.static.filtered_nodes,
                result.static.pods_fitting,
            )
        return result.condition, report_status
