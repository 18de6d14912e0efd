"""Signals from the vocabulary, computed from pages of the collector's merged series:
rates across counter resets, gauges, per-replica pressure, histogram quantiles and SLO
ratios, scoped to one deployment; what fails says why and has no value; a policy's
signals are checked against the vocabulary; and which replicas need the signals page."""

import math

import pytest
from pydantic import ValidationError

from functions.common.adaptivepolicy import needs_vocabulary_signals
from functions.runtime.agent.signals import (
    DEPLOYMENT_LABEL,
    NAMESPACE_LABEL,
    Scope,
    SignalHistory,
    evaluate,
    parse_page,
)
from functions.runtime.shared.policy import DEFAULT_SIGNALS, PolicySpec, VocabularySignal

NOW = 1_800_000_000.0
SCOPE = Scope("ml-team", "llama-8b")
INTERVAL = 10.0


def _labels(deployment="llama-8b", **extra) -> str:
    labels = {
        NAMESPACE_LABEL: "ml-team",
        DEPLOYMENT_LABEL: deployment,
        "modelplane_engine": "vllm",
        "model": "m",
        **extra,
    }
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def page(t: float, *, requests=0.0, waiting=0.0, buckets=(0, 0, 0), other_requests=0.0) -> str:
    """One collector page at time t: requests counter, waiting gauge, a TTFT histogram
    with bounds 0.1/0.5/+Inf (cumulative counts), and another tenant's deployment."""
    ms = int(t * 1000)
    b01, b05, inf = buckets
    lines = [
        "# TYPE modelplane_requests_total counter",
        f"modelplane_requests_total{{{_labels(finish_reason='stop')}}} {requests} {ms}",
        f"modelplane_requests_total{{{_labels(finish_reason='abort')}}} {requests / 10} {ms}",
        f"modelplane_requests_total{{{_labels('other', finish_reason='stop')}}} "
        f"{other_requests} {ms}",
        "# TYPE modelplane_requests_waiting gauge",
        f"modelplane_requests_waiting{{{_labels()}}} {waiting} {ms}",
        f"modelplane_requests_waiting{{{_labels(modelplane_engine='sglang')}}} {waiting} {ms}",
        "# TYPE modelplane_time_to_first_token histogram",
        f"modelplane_time_to_first_token_bucket{{{_labels(le='0.1')}}} {b01} {ms}",
        f"modelplane_time_to_first_token_bucket{{{_labels(le='0.5')}}} {b05} {ms}",
        f"modelplane_time_to_first_token_bucket{{{_labels(le='+Inf')}}} {inf} {ms}",
        f"modelplane_time_to_first_token_count{{{_labels()}}} {inf} {ms}",
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{block_size="16"} 1',
    ]
    return "\n".join(lines) + "\n"


def history(*pages: tuple[float, str]) -> SignalHistory:
    kept = SignalHistory(600.0)
    for t, text in pages:
        kept.add(parse_page(text, t))
    return kept


def value(signal: VocabularySignal, kept: SignalHistory, *, ready=1, now=NOW, window=60.0):
    result = evaluate(
        signal, kept, SCOPE, ready_replicas=ready, now=now, window=window, interval=INTERVAL
    )
    return result.single()


DEMAND = DEFAULT_SIGNALS["demand"]
PRESSURE = DEFAULT_SIGNALS["pressure"]
LATENCY = DEFAULT_SIGNALS["latency"]


def test_demand_is_the_deployments_request_rate_and_ignores_another_deployment():
    kept = history(
        (NOW - 20, page(NOW - 20, requests=100, other_requests=5)),
        (NOW, page(NOW, requests=300, other_requests=9000)),
    )
    # stop: 200 in 20 s, abort: 20 in 20 s.
    assert value(DEMAND, kept) == (pytest.approx(11.0), None)


def test_a_counter_reset_counts_only_the_increase_since_the_restart():
    kept = history(
        (NOW - 20, page(NOW - 20, requests=1000)),
        (NOW - 10, page(NOW - 10, requests=1100)),
        (NOW, page(NOW, requests=50)),  # the engine restarted
    )
    stop_rate = (100 + 50) / 20
    assert value(DEMAND, kept)[0] == pytest.approx(stop_rate * 1.1)


def test_pressure_sums_every_engines_waiting_requests_per_ready_replica():
    kept = history((NOW, page(NOW, waiting=3)))
    assert value(PRESSURE, kept, ready=2) == (3.0, None)
    assert value(PRESSURE, kept, ready=0) == (6.0, None)


def test_latency_is_the_quantile_of_the_windows_observations():
    kept = history(
        (NOW - 30, page(NOW - 30, buckets=(100, 100, 100))),
        (NOW, page(NOW, buckets=(110, 190, 200))),
    )
    # 100 new observations: 10 <= 0.1 s, 80 in (0.1, 0.5], 10 above. p90 = 0.5 s.
    assert value(LATENCY, kept)[0] == pytest.approx(0.5)
    median = VocabularySignal(
        metric="modelplane_time_to_first_token", function="quantile", quantile=0.5
    )
    assert value(median, kept)[0] == pytest.approx(0.1 + 0.4 * 40 / 80)


def test_an_slo_ratio_is_the_share_of_observations_above_the_threshold():
    kept = history(
        (NOW - 30, page(NOW - 30, buckets=(0, 0, 0))),
        (NOW, page(NOW, buckets=(10, 90, 100))),
    )
    slow = VocabularySignal(
        metric="modelplane_time_to_first_token", function="fractionAbove", threshold=0.5
    )
    assert value(slow, kept)[0] == pytest.approx(0.1)


def test_an_error_ratio_is_the_share_of_matching_requests():
    kept = history(
        (NOW - 20, page(NOW - 20, requests=100)),
        (NOW, page(NOW, requests=300)),
    )
    aborted = VocabularySignal(
        metric="modelplane_requests_total", function="ratio", where={"finish_reason": ["abort"]}
    )
    assert value(aborted, kept)[0] == pytest.approx(20 / 220)


@pytest.mark.parametrize(
    ("kept", "signal", "why"),
    [
        (SignalHistory(60.0), DEMAND, "has not been read yet"),
        (history((NOW, page(NOW, requests=5))), DEMAND, "needs 2 points in the window"),
        (history((NOW - 200, page(NOW - 200))), PRESSURE, "newest point is 3m20s old"),
        (
            history(
                (NOW - 20, page(NOW - 20, buckets=(5, 5, 5))), (NOW, page(NOW, buckets=(5, 5, 5)))
            ),
            LATENCY,
            "no observations in the window",
        ),
        (
            history((NOW, "# TYPE modelplane_requests_waiting gauge\n")),
            PRESSURE,
            "no series of modelplane_requests_waiting for deployment ml-team/llama-8b",
        ),
    ],
    ids=["nothing_read", "one_point", "stale", "idle_histogram", "source_gone"],
)
def test_a_signal_that_cannot_be_computed_says_why_and_has_no_value(kept, signal, why):
    got, error = value(signal, kept)
    assert got is None
    assert why in error


def test_a_failed_read_of_the_page_fails_every_signal_rather_than_reusing_old_points():
    kept = history((NOW - 10, page(NOW - 10, waiting=2)))
    kept.failed("connection refused")
    got, error = value(PRESSURE, kept)
    assert got is None
    assert "connection refused" in error


def test_history_keeps_only_the_longest_window():
    kept = SignalHistory(30.0)
    for t in range(0, 100, 10):
        kept.add(parse_page(page(NOW + t), NOW + t))
    assert [p.read_at - NOW for p in kept.pages] == [60, 70, 80, 90]


def test_no_value_is_nan_or_negative_for_a_quiet_counter():
    kept = history((NOW - 10, page(NOW - 10, requests=7)), (NOW, page(NOW, requests=7)))
    got, error = value(DEMAND, kept)
    assert error is None
    assert got == 0.0
    assert not math.isnan(got)


# --- the policy's signals --------------------------------------------------------------


def _spec(signals=None) -> PolicySpec:
    raw = {
        "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
        "clusters": [{"name": "east", "maxReplicas": 4}],
    }
    if signals is not None:
        raw["signals"] = signals
    return PolicySpec.model_validate(raw)


def test_a_policy_naming_no_signal_gets_demand_pressure_and_latency():
    assert set(_spec().effective_signals) == {"demand", "pressure", "latency"}
    assert _spec().signal_window == 120.0


def test_a_policy_naming_one_signal_gets_only_that_one_and_its_window():
    spec = _spec(
        {"window": "5m", "demand": {"metric": "modelplane_requests_total", "function": "rate"}}
    )
    assert set(spec.effective_signals) == {"demand"}
    assert spec.signal_window == 300.0


def test_a_bare_promql_string_still_means_promql():
    spec = _spec({"demand": "sum(rate(x[1m]))"})
    assert spec.effective_signals["demand"].promql == "sum(rate(x[1m]))"


@pytest.mark.parametrize(
    ("signal", "message"),
    [
        ({"metric": "vllm:num_requests_waiting", "function": "gauge"}, "not in the vocabulary"),
        (
            {"metric": "modelplane_requests_waiting", "function": "quantile", "quantile": 0.9},
            "does not apply",
        ),
        (
            {"metric": "modelplane_time_to_first_token", "function": "quantile"},
            "`quantile` is set exactly",
        ),
        ({"metric": "modelplane_requests_total", "function": "ratio"}, "needs `where`"),
        (
            {"metric": "modelplane_requests_total", "function": "ratio", "where": {"pod": ["a"]}},
            "pod is not a label of modelplane_requests_total",
        ),
        ({"metric": "modelplane_requests_total", "function": "rate", "promql": "x"}, "not both"),
        ({"metric": "modelplane_requests_total"}, "`function` is required"),
    ],
    ids=[
        "engine_name",
        "wrong_type",
        "no_quantile",
        "ratio_without_where",
        "unknown_label",
        "both",
        "no_function",
    ],
)
def test_a_signal_outside_the_rules_is_refused_naming_the_rule(signal, message):
    with pytest.raises(ValidationError, match=message):
        _spec({"demand": signal})


# --- which replicas need the signals page ----------------------------------------------


@pytest.mark.parametrize(
    ("autoscaling", "needs"),
    [
        (None, False),
        ({"mode": "off", "minReplicas": 1, "maxReplicas": 2}, False),
        ({"mode": "shadow", "minReplicas": 1, "maxReplicas": 2}, True),
        (
            {"signals": {"demand": {"metric": "modelplane_requests_total", "function": "rate"}}},
            True,
        ),
        ({"signals": {"demand": {"promql": "sum(x)"}}}, False),
        ({"signals": {"demand": "sum(x)"}}, False),
        ({"signals": {"window": "1m"}}, False),
    ],
    ids=["no_autoscaling", "off", "defaults", "vocabulary", "promql", "bare_string", "none_named"],
)
def test_a_replica_needs_the_signals_page_only_for_vocabulary_signals(autoscaling, needs):
    assert needs_vocabulary_signals(autoscaling) is needs


def test_histograms_with_different_buckets_merge_at_every_bound():
    def engine_page(t, engine, bounds, counts):
        ms = int(t * 1000)
        lines = ["# TYPE modelplane_time_to_first_token histogram"]
        for bound, count in zip((*bounds, "+Inf"), counts, strict=True):
            labels = _labels(modelplane_engine=engine, le=bound)
            lines.append(f"modelplane_time_to_first_token_bucket{{{labels}}} {count} {ms}")
        return "\n".join(lines) + "\n"

    def both(t, vllm, sglang):
        return engine_page(t, "vllm", ("0.1", "1"), vllm) + engine_page(
            t, "sglang", ("0.2",), sglang
        )

    kept = history(
        (NOW - 10, both(NOW - 10, (0, 0, 0), (0, 0))), (NOW, both(NOW, (10, 10, 10), (0, 10)))
    )
    # vLLM: 10 observations <= 0.1 s; SGLang: 10 above 0.2 s. The median is the top of
    # vLLM's, not a sum of unequal buckets.
    median = VocabularySignal(
        metric="modelplane_time_to_first_token", function="quantile", quantile=0.5
    )
    assert value(median, kept)[0] == pytest.approx(0.1)
    slow = VocabularySignal(
        metric="modelplane_time_to_first_token", function="fractionAbove", threshold=0.2
    )
    assert value(slow, kept)[0] == pytest.approx(0.5)


def test_a_merged_point_that_briefly_dips_is_not_read_as_a_restart():
    kept = history(
        (NOW - 20, page(NOW - 20, requests=1000)),
        (NOW - 10, page(NOW - 10, requests=600)),  # one pod missed this batch
        (NOW, page(NOW, requests=1200)),
    )
    assert value(DEMAND, kept)[0] == pytest.approx(200 / 20 * 1.1)


def test_the_crd_and_xrd_offer_exactly_the_vocabulary_and_the_functions():
    """The schemas repeat the vocabulary's names and the functions as enums (what the API
    server checks on apply); this keeps them the same lists as the code's."""
    from pathlib import Path  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    from functions.common import vocabulary  # noqa: PLC0415
    from functions.runtime.shared.policy import SIGNAL_FUNCTIONS  # noqa: PLC0415

    repo = Path(__file__).resolve().parents[2]
    crd = yaml.safe_load((repo / "apis/adaptivepolicies/definition.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    xrd = yaml.safe_load((repo / "apis/modeldeployments/definition.yaml").read_text())
    md = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for signals in (
        spec["properties"]["signals"],
        md["properties"]["autoscaling"]["properties"]["signals"],
    ):
        for name in ("demand", "pressure", "latency", "errorRate"):
            fields = signals["properties"][name]["properties"]
            # The KV-cache sums derived for the fleet ratio are not signals of their own.
            assert fields["metric"]["enum"] == [
                m.name for m in vocabulary.VOCABULARY if m.derived_from is None
            ]
            assert fields["function"]["enum"] == list(SIGNAL_FUNCTIONS)
