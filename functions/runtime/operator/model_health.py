"""Model health as metrics, for every model, present at 0.

On the live fleet the one alert for a model with nothing serving could not fire: its
series was published only while a replica was ready. These gauges are derived from the
same fleet summary `modelplane status` prints (the ModelDeployments' and ModelReplicas'
status on the control plane), one series per ModelDeployment whatever its state, so
"desired 1, ready 0" is a sample an alert can see, and parked / unplaceable are 0 or a
number rather than absent.

Labels are `namespace` and `deployment` (the ModelDeployment); the revision gauge adds
`cluster` (the ModelReplica's InferenceCluster) and `revision` (the revision its
ModelReplicas are composed with, spec.revision): one series at 1 per cluster the model is
on, so a rollout is seen moving cluster by cluster (a dashboard charts it) and two
revisions side by side are two series. It is exported here, on the control plane, because
that is where the ModelReplicas and their revisions are; a member's agent sees only the
workloads they compose. The per-cluster gauges the
agents export (`modelplane_model_*{namespace, model_replica}`) stay: they are what a
member sees; these are what the fleet should have. `deployment` is a new name, not a
second meaning of `model_replica`.

`samples` is pure; `ModelHealthMetrics` is the shell: observable gauges whose callbacks
read the control plane at scrape time (at most once per scrape, however many gauges).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from functions.runtime.operator.fleet_status import FleetStatus
from functions.runtime.operator.rollout import UNKNOWN_REVISION

DESIRED_REPLICAS: Final = "modelplane_deployment_desired_replicas"
READY_REPLICAS: Final = "modelplane_deployment_ready_replicas"
START_FAILURES: Final = "modelplane_deployment_consecutive_start_failures"
PARKED: Final = "modelplane_deployment_parked"
UNPLACEABLE_REPLICAS: Final = "modelplane_deployment_unplaceable_replicas"
REVISION_INFO: Final = "modelplane_model_revision_info"

DESCRIPTIONS: Final = {
    DESIRED_REPLICAS: "Replicas the model should have now (status.desiredReplicas)",
    READY_REPLICAS: "Replicas of the model serving, across the fleet (0 included)",
    START_FAILURES: "Consecutive start failures of the model's current definition, as"
    " parking counts them",
    PARKED: "1 while the model is parked after repeated start failures",
    UNPLACEABLE_REPLICAS: "Replicas of the model that fit on no cluster now",
    REVISION_INFO: "1 per cluster the model is on, labelled with the revision its"
    " ModelReplicas there are composed with (spec.revision)",
}
MODEL_HEALTH_METRICS: Final = tuple(DESCRIPTIONS)

log = logging.getLogger("modelplane.runtime.model_health")


@dataclass(frozen=True)
class Sample:
    metric: str
    labels: dict[str, str]
    value: int


def samples(fleet: FleetStatus) -> list[Sample]:
    """Every model-health series, one of each metric per ModelDeployment, 0 included."""
    found = []
    for model in fleet.model_list:
        labels = {"namespace": model.namespace, "deployment": model.name}
        found += [
            Sample(DESIRED_REPLICAS, labels, model.desired),
            Sample(READY_REPLICAS, labels, model.ready),
            Sample(START_FAILURES, labels, model.start_failures),
            Sample(PARKED, labels, int(model.parked is not None)),
            Sample(
                UNPLACEABLE_REPLICAS,
                labels,
                model.unplaceable.replicas if model.unplaceable else 0,
            ),
        ]
        found += [
            Sample(REVISION_INFO, {**labels, "cluster": c.cluster, "revision": revision}, 1)
            for c in model.revisions
            # A cluster on two revisions (one per pool) is two series; a ModelReplica
            # composed before revisions has none to say.
            for revision in c.revision.split("+")
            if revision != UNKNOWN_REVISION
        ]
    return found


class ModelHealthMetrics:
    """The gauges, read from `read_fleet` at scrape time.

    A scrape asks each gauge's callback in turn; the fleet is read once and reused for
    `reuse_for` seconds so one scrape is one set of list calls. A failed read exports no
    model series (Prometheus marks them stale) rather than freezing the last values: an
    alert must not keep reading "ready 2" from a control plane it cannot reach.
    """

    def __init__(
        self,
        meter: Meter,
        read_fleet: Callable[[], FleetStatus],
        reuse_for: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_fleet = read_fleet
        self._reuse_for = reuse_for
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._samples: list[Sample] = []
        for metric, description in DESCRIPTIONS.items():
            meter.create_observable_gauge(metric, [self._observe(metric)], description=description)

    def _current(self) -> list[Sample]:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._reuse_for:
                self._read_at = now
                try:
                    self._samples = samples(self._read_fleet())
                except Exception:
                    log.exception("reading the control plane for model health failed")
                    self._samples = []
            return self._samples

    def _observe(self, metric: str):
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(s.value, s.labels) for s in self._current() if s.metric == metric]

        return observe
