"""Model-health metrics: every model, every gauge, present at 0, as Prometheus scrapes them."""

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry

from functions.runtime.operator import model_health
from functions.runtime.operator.fleet_status import summarize
from functions.runtime.operator.model_health import (
    DESIRED_REPLICAS,
    PARKED,
    READY_REPLICAS,
    START_FAILURES,
    UNPLACEABLE_REPLICAS,
    ModelHealthMetrics,
)
from tests.unit.test_fleet_status import (
    PARKED as PARKED_MODEL,
)
from tests.unit.test_fleet_status import (
    PENDING,
    PLACED,
    SHORT,
    UNPLACEABLE,
    health,
    replica,
)
from tests.unit.test_hub_metrics import scrape

FLEET = summarize(
    [],
    [PLACED, PARKED_MODEL, UNPLACEABLE, SHORT, PENDING],
    [replica("qwen", "eu", health=health(2))],
)


def by_model(metric: str) -> dict[str, int]:
    return {
        s.labels["deployment"]: s.value for s in model_health.samples(FLEET) if s.metric == metric
    }


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        (DESIRED_REPLICAS, {"kev": 1, "llama": 2, "new": 0, "phi": 1, "qwen": 3}),
        (READY_REPLICAS, {"kev": 0, "llama": 2, "new": 0, "phi": 0, "qwen": 1}),
        (START_FAILURES, {"kev": 5, "llama": 0, "new": 0, "phi": 0, "qwen": 2}),
        (PARKED, {"kev": 1, "llama": 0, "new": 0, "phi": 0, "qwen": 0}),
        (UNPLACEABLE_REPLICAS, {"kev": 0, "llama": 0, "new": 0, "phi": 1, "qwen": 0}),
    ],
)
def test_every_model_has_every_gauge_zero_included(metric, expected):
    assert by_model(metric) == expected


def exporter(read_fleet, clock=None):
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    kwargs = {"clock": clock} if clock else {}
    ModelHealthMetrics(provider.get_meter("test"), read_fleet, **kwargs)
    return registry


def test_gauges_are_scraped_with_namespace_and_deployment_labels():
    got = scrape(exporter(lambda: FLEET))
    assert ({"namespace": "ml", "deployment": "kev"}, 1.0) in got[PARKED]
    assert ({"namespace": "ml", "deployment": "phi"}, 0.0) in got[READY_REPLICAS]
    assert len(got[DESIRED_REPLICAS]) == 5


def test_one_scrape_reads_the_control_plane_once():
    reads = []

    def read():
        reads.append(1)
        return FLEET

    registry = exporter(read, clock=lambda: 100.0)
    scrape(registry)
    assert len(reads) == 1


def test_an_unreadable_control_plane_exports_no_model_series():
    def read():
        raise RuntimeError("connection refused")

    got = scrape(exporter(read))
    assert not any(name.startswith("modelplane_deployment_") for name in got)


def test_each_cluster_exports_the_revision_its_model_replicas_carry():
    from functions.runtime.operator.model_health import REVISION_INFO  # noqa: PLC0415
    from tests.unit.test_operator_rollout import (  # noqa: PLC0415
        NEW,
        OLD,
        deployment,
        status_rollout,
    )
    from tests.unit.test_operator_rollout import replica as revised  # noqa: PLC0415

    fleet = summarize(
        [],
        [deployment(status_rollout("Progressing"))],
        [
            revised("eu-west", NEW),
            revised("us-east", OLD),
            revised("us-east", NEW, pool="a100"),  # two pools, two revisions
            revised("dev", None),  # composed before revisions: nothing to say
        ],
    )
    got = scrape(exporter(lambda: fleet))
    assert sorted(
        (labels["cluster"], labels["revision"], v) for labels, v in got[REVISION_INFO]
    ) == [
        ("eu-west", NEW, 1.0),
        ("us-east", OLD, 1.0),
        ("us-east", NEW, 1.0),
    ]
    assert all(
        labels.keys() == {"namespace", "deployment", "cluster", "revision"}
        for labels, _ in got[REVISION_INFO]
    )
    # The status names us-west too, but no ModelReplica is there now: the gauge follows
    # the ModelReplicas, what each cluster is composed with.
    assert "us-west" not in {labels["cluster"] for labels, _ in got[REVISION_INFO]}
