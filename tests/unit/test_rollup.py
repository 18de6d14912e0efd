"""The fleet roll-up's processors and the read-time queries docs/telemetry.md documents."""

from hypothesis import given
from hypothesis import strategies as st

from functions.common.telemetrydestination import SloTargets
from functions.common.vocabulary import VOCABULARY
from functions.compose_telemetry import rollup


def test_every_vocabulary_metric_is_rolled_up_and_nothing_else():
    condition = rollup.processors()[rollup.FILTER_VOCABULARY]["metrics"]["metric"][0]
    for metric in VOCABULARY:
        assert f"|{metric.name}|" in condition.replace("^(", "|").replace(")$", "|")
    assert condition.startswith("not IsMatch(metric.name, ")


def test_every_vocabulary_metric_gets_its_unit_back_on_the_fleet_side():
    statements = rollup.processors()[rollup.TRANSFORM_AGGREGATE]["metric_statements"][0][
        "statements"
    ]
    for metric in VOCABULARY:
        assert (
            f'set(metric.unit, "{metric.unit}") where metric.name == "{metric.name}"' in statements
        )


def test_the_fleet_pipeline_turns_cumulatives_to_deltas_before_it_sums_them():
    order = rollup.fleet_pipeline_processors()
    assert order.index(rollup.CUMULATIVE_TO_DELTA) < order.index(rollup.TRANSFORM_STRIP)
    assert order.index(rollup.TRANSFORM_STRIP) < order.index(rollup.GROUP_FLEET)
    assert order.index(rollup.GROUP_FLEET) < order.index(rollup.TRANSFORM_AGGREGATE)
    assert order[-1] == rollup.DELTA_TO_CUMULATIVE


def test_a_source_adds_only_what_it_counts_after_a_replica_first_sees_it():
    # drop: the first point is a baseline, so a cluster moving between replicas is never
    # counted twice (sum over replicas at read time).
    assert rollup.processors()[rollup.SOURCE_TO_DELTA]["initial_value"] == "drop"
    # After the snapshot, per-source totals are already this replica's own.
    assert rollup.processors()[rollup.CUMULATIVE_TO_DELTA]["initial_value"] == "keep"


def test_each_source_is_made_monotonic_before_the_snapshot():
    assert rollup.snapshot_pipeline_processors() == [
        rollup.FILTER_VOCABULARY,
        rollup.SOURCE_TO_DELTA,
        rollup.SOURCE_TO_CUMULATIVE,
        rollup.TRANSFORM_SNAPSHOT,
    ]


def test_the_fleet_series_drop_the_cluster_and_every_per_source_label():
    for label in ("modelplane.cluster", "modelplane_cluster", "modelplane_serving", "job"):
        assert label in rollup.SOURCE_LABELS
    for kept in ("modelplane_engine", "modelplane_deployment", "model", "le"):
        assert kept not in rollup.SOURCE_LABELS


def test_the_snapshot_stays_on_loopback():
    assert rollup.snapshot_exporter()["endpoint"].startswith("127.0.0.1:")
    targets = rollup.snapshot_receiver()["config"]["scrape_configs"][0]["static_configs"]
    assert targets == [{"targets": [f"127.0.0.1:{rollup.SNAPSHOT_PORT}"]}]


def test_le_labels_are_written_the_way_prometheus_stores_them():
    assert rollup.le_label(0.5) == "0.5"
    assert rollup.le_label(0.05) == "0.05"
    assert rollup.le_label(1.0) == "1"
    assert rollup.le_label(2.5) == "2.5"
    assert rollup.le_label(1e-05) == "0.00001"
    assert rollup.le_label(100.0) == "100"


@given(st.floats(min_value=1e-9, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_le_labels_round_trip_and_never_use_an_exponent(bound):
    text = rollup.le_label(bound)
    assert "e" not in text.lower()
    assert float(text) == bound
    assert not text.endswith(".")
    assert not (("." in text) and text.endswith("0"))


def test_attainment_is_a_ratio_of_exact_buckets_on_fleet_series():
    query = rollup.attainment_query("modelplane_time_to_first_token", 0.5)
    assert query == (
        'sum(rate(modelplane_time_to_first_token_bucket{modelplane_scope="fleet",le="0.5"}[5m]))'
        ' / sum(rate(modelplane_time_to_first_token_count{modelplane_scope="fleet"}[5m]))'
    )


def test_quantile_sums_over_gateway_replicas_by_bucket():
    assert rollup.quantile_query("modelplane_time_to_first_token") == (
        "histogram_quantile(0.95, sum by (le) "
        '(rate(modelplane_time_to_first_token_bucket{modelplane_scope="fleet"}[5m])))'
    )


def test_slo_queries_cover_only_the_targets_set():
    queries = rollup.slo_queries(SloTargets(time_to_first_token=0.5))
    assert list(queries) == ["modelplane_time_to_first_token"]
    assert 'le="0.5"' in queries["modelplane_time_to_first_token"]
    assert rollup.slo_queries(SloTargets()) == {}


def test_histograms_without_the_slo_boundary_are_marked_not_merged():
    statements = rollup.slo_boundary_statements(
        SloTargets(time_to_first_token=0.5, time_per_output_token=1.0)
    )
    assert statements == [
        'set(datapoint.attributes["modelplane_slo_boundary"], "missing") where metric.name == '
        '"modelplane_time_to_first_token" and not ContainsValue(datapoint.explicit_bounds, 0.5)',
        'set(datapoint.attributes["modelplane_slo_boundary"], "missing") where metric.name == '
        '"modelplane_time_per_output_token" and not ContainsValue(datapoint.explicit_bounds, 1.0)',
    ]
    assert rollup.slo_boundary_statements(SloTargets()) == []


def test_the_cost_series_is_rolled_up_per_model_without_its_pool():
    condition = rollup.processors()[rollup.FILTER_VOCABULARY]["metrics"]["metric"][0]
    assert "|modelplane_model_cost_per_hour|" in condition.replace("^(", "|").replace(")$", "|")
    datapoint = next(
        group["statements"]
        for group in rollup.processors()[rollup.TRANSFORM_STRIP]["metric_statements"]
        if group["context"] == "datapoint"
    )
    assert (
        'delete_key(datapoint.attributes, "pool") where metric.name == '
        '"modelplane_model_cost_per_hour"'
    ) in datapoint
    # Summed over clusters, as every gauge but the ratios is.
    aggregate = rollup.processors()[rollup.TRANSFORM_AGGREGATE]
    summed = aggregate["metric_statements"][0]["statements"][0]
    assert summed.startswith('aggregate_on_attributes("sum")')
    assert "modelplane_model_cost_per_hour" not in summed
