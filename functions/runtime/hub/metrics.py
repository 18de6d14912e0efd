"""The agent's own metrics for reports, hub decisions and model health, on an
OpenTelemetry meter (the runtime's Prometheus exporter serves them on :8080/metrics).

Names and labels are the operations guide's table. Gauges are observable, read from
the latest values at each scrape: a policy that goes away (or a hub that steps down,
for the hub-only gauges) stops exporting its series instead of freezing at the last
value. Counters are created at 0 for every policy the agent serves, and model-health
gauges exist at 0 for every ModelReplica the agent sees, so an alert on them can fire
from the first failure and `absent()` is never needed.
"""

from collections.abc import Iterable
from typing import Final

from opentelemetry.metrics import CallbackOptions, Meter, Observation

FLEET_ESCALATED: Final = "plumb_fleet_escalated"
FLEET_MEMBERS_OUT_OF_SYNC: Final = "plumb_fleet_members_out_of_sync"
HUB_DECISIONS_TOTAL: Final = "plumb_hub_decisions_total"
HUB_STEP_ERRORS_TOTAL: Final = "plumb_hub_step_errors_total"
DECISION_TIME_TO_READY: Final = "plumb_decision_time_to_ready_seconds"
MEMBER_NEEDED_REPLICAS: Final = "plumb_member_needed_replicas"
MEMBER_STATIC_ROOM_REPLICAS: Final = "plumb_member_static_room_replicas"
MODEL_START_FAILURES: Final = "modelplane_model_consecutive_start_failures"
MODEL_READY_REPLICAS: Final = "modelplane_model_ready_replicas"
MODEL_REQUEST_DURATION: Final = "plumb_model_request_duration_seconds"
PLANNER_REQUEST_DURATION: Final = "plumb_planner_request_duration_seconds"

HUB_METRICS: Final = (
    FLEET_ESCALATED,
    FLEET_MEMBERS_OUT_OF_SYNC,
    HUB_DECISIONS_TOTAL,
    HUB_STEP_ERRORS_TOTAL,
    DECISION_TIME_TO_READY,
    MEMBER_NEEDED_REPLICAS,
    MEMBER_STATIC_ROOM_REPLICAS,
    MODEL_START_FAILURES,
    MODEL_READY_REPLICAS,
    MODEL_REQUEST_DURATION,
    PLANNER_REQUEST_DURATION,
)
HUB_HISTOGRAMS: Final = (DECISION_TIME_TO_READY, MODEL_REQUEST_DURATION, PLANNER_REQUEST_DURATION)
# Seconds a ranking or planner call took (the timeout bounds it).
REQUEST_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)

# Seconds from a raised floor to ready replicas: node launch plus model load.
TIME_TO_READY_BUCKETS: Final = (5, 15, 30, 60, 120, 180, 300, 450, 600, 900, 1200, 1800, 3600)


class HubMetrics:
    def __init__(self, meter: Meter):
        self._escalated: dict[str, int] = {}
        self._out_of_sync: dict[str, int] = {}
        self._needed: dict[str, int] = {}
        self._static_room: dict[str, int] = {}
        self._start_failures: dict[tuple[str, str], int] = {}
        self._ready: dict[tuple[str, str], int] = {}
        self._known_policies: set[str] = set()

        meter.create_observable_gauge(
            FLEET_ESCALATED,
            [self._policy_gauge(self._escalated)],
            description="1 while the policy's fleet is escalated (hub only)",
        )
        meter.create_observable_gauge(
            FLEET_MEMBERS_OUT_OF_SYNC,
            [self._policy_gauge(self._out_of_sync)],
            description="Members whose report the hub ignores because their copy of the"
            " policy differs (hub only)",
        )
        meter.create_observable_gauge(
            MEMBER_NEEDED_REPLICAS,
            [self._policy_gauge(self._needed)],
            description="Replicas this cluster needs beyond what it runs",
        )
        meter.create_observable_gauge(
            MEMBER_STATIC_ROOM_REPLICAS,
            [self._policy_gauge(self._static_room)],
            description="Replicas that still fit on this cluster's existing nodes",
        )
        meter.create_observable_gauge(
            MODEL_START_FAILURES,
            [self._replica_gauge(self._start_failures)],
            description="Consecutive start failures of a model's replicas on this cluster",
        )
        meter.create_observable_gauge(
            MODEL_READY_REPLICAS,
            [self._replica_gauge(self._ready)],
            description="Ready pods serving a ModelReplica on this cluster (0 included)",
        )
        self._decisions = meter.create_counter(
            HUB_DECISIONS_TOTAL, description="Hub decisions that changed something"
        )
        self._step_errors = meter.create_counter(
            HUB_STEP_ERRORS_TOTAL,
            description="Hub steps that failed to read or write a member or route",
        )
        self._time_to_ready = meter.create_histogram(
            DECISION_TIME_TO_READY,
            unit="s",
            description="From a decision raising a floor to the cluster having that many"
            " ready replicas",
            explicit_bucket_boundaries_advisory=list(TIME_TO_READY_BUCKETS),
        )
        self._model_requests = meter.create_histogram(
            MODEL_REQUEST_DURATION,
            unit="s",
            description="Model ranking calls (ok, error)",
            explicit_bucket_boundaries_advisory=list(REQUEST_BUCKETS),
        )
        self._planner_requests = meter.create_histogram(
            PLANNER_REQUEST_DURATION,
            unit="s",
            description="Experimental planner calls (ok, error)",
            explicit_bucket_boundaries_advisory=list(REQUEST_BUCKETS),
        )

    @staticmethod
    def _policy_gauge(values: dict[str, int]):
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(v, {"policy": p}) for p, v in sorted(values.items())]

        return observe

    @staticmethod
    def _replica_gauge(values: dict[tuple[str, str], int]):
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(v, {"namespace": ns, "model_replica": name})
                for (ns, name), v in sorted(values.items())
            ]

        return observe

    # --- what the agent calls ---------------------------------------------------------

    def serve_policy(self, policy: str) -> None:
        """Counters exist at 0 from the first step for every policy."""
        if policy not in self._known_policies:
            self._known_policies.add(policy)
            self._step_errors.add(0, {"policy": policy})

    def forget_policy(self, policy: str) -> None:
        for values in (self._escalated, self._out_of_sync, self._needed, self._static_room):
            values.pop(policy, None)

    def member_report(self, policy: str, needed: int, static_room: int) -> None:
        self._needed[policy] = needed
        self._static_room[policy] = static_room

    def hub_view(self, policy: str, escalated: bool, out_of_sync: int) -> None:
        self._escalated[policy] = int(escalated)
        self._out_of_sync[policy] = out_of_sync

    def not_hub(self) -> None:
        self._escalated.clear()
        self._out_of_sync.clear()

    def decision(self, policy: str, action: str, source: str, applied: bool) -> None:
        attributes = {
            "policy": policy,
            "action": action,
            "source": source,
            "applied": "true" if applied else "false",
        }
        self._decisions.add(1, attributes)

    def step_error(self, policy: str) -> None:
        self._step_errors.add(1, {"policy": policy})

    def model_request(self, seconds: float, result: str) -> None:
        self._model_requests.record(seconds, {"result": result})

    def planner_request(self, seconds: float, result: str) -> None:
        self._planner_requests.record(seconds, {"result": result})

    def time_to_ready(self, policy: str, seconds: float) -> None:
        self._time_to_ready.record(seconds, {"policy": policy})

    def model_health(self, records: dict[tuple[str, str], tuple[int, int]]) -> None:
        """(namespace, ModelReplica) -> (consecutive start failures, ready pods); replaces all."""
        # The callbacks close over these dicts: replace their contents, not the dicts.
        self._start_failures.clear()
        self._start_failures.update({k: v[0] for k, v in records.items()})
        self._ready.clear()
        self._ready.update({k: v[1] for k, v in records.items()})
