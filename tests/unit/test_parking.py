"""Parking: a model that fails every time it starts stops being placed, until it changes."""

import pytest

from functions.common.health import HealthRecord
from functions.compose_model_deployment.parking import (
    Baseline,
    Parked,
    count_failures,
    decide,
    definition_hash,
)

DEF = "def-1"
NOW = "2026-12-01T10:00:00Z"
LATER = "2026-12-01T11:00:00Z"


def record(failures, definition=DEF, error="unknown model architecture 'kev'", at=NOW):
    return HealthRecord(definition, failures, error if failures else "", at)


def run(records, *, previous=None, baseline=None, retry="", definition=DEF, now=NOW, **kw):
    return decide(
        definition=definition,
        retry=retry,
        records=records,
        previous=previous,
        baseline=baseline,
        now=now,
        **kw,
    )


def test_five_consecutive_failures_park_the_model():
    decision = run([record(5)])
    assert decision.is_parked
    assert decision.transition == "parked"
    assert decision.parked == Parked(NOW, 5, "unknown model architecture 'kev'", DEF, "")


def test_four_failures_do_not():
    decision = run([record(4)])
    assert not decision.is_parked
    assert decision.failures == 4


def test_failures_are_summed_across_the_models_clusters():
    decision = run([record(2, at="2026-12-01T09:00:00Z", error="old"), record(3, error="newest")])
    assert decision.is_parked
    assert decision.parked.last_error == "newest"


def test_failures_of_another_definition_do_not_count():
    decision = run([record(9, definition="def-0"), record(1)])
    assert not decision.is_parked
    assert decision.failures == 1


def test_the_threshold_is_configurable():
    assert run([record(3)], max_consecutive_failures=3).is_parked
    assert not run([record(3)], max_consecutive_failures=4).is_parked


def test_disabled_parking_never_parks_and_releases_a_parked_model():
    assert not run([record(50)], enabled=False).is_parked
    parked = Parked(NOW, 5, "e", DEF, "")
    decision = run([record(5)], previous=parked, enabled=False)
    assert not decision.is_parked
    assert decision.transition == "unparked"


def test_a_parked_model_stays_parked_while_nothing_changes():
    parked = Parked(NOW, 5, "e", DEF, "")
    # Its replicas are at 0 now, and the agent's records may even reset: still parked.
    decision = run([record(0)], previous=parked, now=LATER)
    assert decision.parked == parked  # `since` is when it was parked, not now
    assert decision.transition == ""


def test_a_new_definition_unparks():
    parked = Parked(NOW, 5, "e", DEF, "")
    decision = run([record(5)], previous=parked, definition="def-2")
    assert not decision.is_parked
    assert decision.transition == "unparked"
    assert "definition changed" in decision.why_unparked
    assert decision.failures == 0  # the old definition's failures are not the new one's


def test_the_retry_annotation_unparks_without_the_old_failures_reparking():
    parked = Parked(NOW, 5, "e", DEF, "")
    retried = run([record(5)], previous=parked, retry="1")
    assert not retried.is_parked
    assert retried.baseline == Baseline(DEF, "1", 5, NOW)
    # Next reconcile: the same five failures are still on the replicas' status.
    again = run([record(5)], baseline=retried.baseline, retry="1", now=LATER)
    assert not again.is_parked
    assert again.failures == 0


def test_failures_after_a_retry_park_again():
    baseline = Baseline(DEF, "1", 5)
    assert not run([record(9)], baseline=baseline, retry="1").is_parked
    decision = run([record(10)], baseline=baseline, retry="1", now=LATER)
    assert decision.is_parked
    assert decision.parked == Parked(LATER, 5, "unknown model architecture 'kev'", DEF, "1")


def test_failures_observed_before_a_retry_that_arrive_after_it_are_spent_too():
    """The record travels from the member's agent through provider-kubernetes and the
    ModelReplica: crashes the agent saw before the retry can reach the decision after it
    (the live tier's fixed model was parked again by them)."""
    before, retry_at, after = "2026-12-01T09:59:50Z", NOW, "2026-12-01T10:00:30Z"
    parked = Parked("2026-12-01T09:59:00Z", 12, "e", DEF, "")
    retried = run([record(12, at="2026-12-01T09:59:00Z")], previous=parked, retry="1")
    assert retried.baseline == Baseline(DEF, "1", 12, retry_at)
    # Five more crashes, observed before the retry, arrive later: not counted.
    late = run([record(17, at=before)], baseline=retried.baseline, retry="1", now=after)
    assert not late.is_parked
    assert late.failures == 0
    assert late.baseline == Baseline(DEF, "1", 17, retry_at)
    # Crashes observed after the retry count, from the raised baseline.
    decision = run([record(21, at=after)], baseline=late.baseline, retry="1", now=LATER)
    assert not decision.is_parked
    assert decision.failures == 4
    assert run([record(22, at=after)], baseline=late.baseline, retry="1", now=LATER).is_parked


def test_a_record_observed_after_the_retry_keeps_the_baseline_where_it_was():
    baseline = Baseline(DEF, "1", 5, NOW)
    decision = run([record(7, at=LATER)], baseline=baseline, retry="1", now=LATER)
    assert decision.baseline == baseline
    assert decision.failures == 2
    # One cluster reporting after the retry is enough: the others' counts are current.
    mixed = [record(4, at=LATER), record(3, at="2026-12-01T09:00:00Z")]
    assert run(mixed, baseline=baseline, retry="1", now=LATER).failures == 2


def test_a_started_replica_ends_the_run_the_baseline_was_taken_from():
    # The agent resets its count when a replica becomes ready: the baseline lapses.
    decision = run([record(2)], baseline=Baseline(DEF, "1", 5), retry="1")
    assert decision.baseline is None
    assert decision.failures == 2


def test_the_same_retry_value_does_not_unpark():
    parked = Parked(NOW, 5, "e", DEF, "1")
    assert run([record(5)], previous=parked, retry="1").is_parked


def test_replicas_lost_to_node_loss_are_not_start_failures():
    # A replica that was serving and vanished (node loss, preemption) is reported by the
    # agent with no start failure; only records' failure counts are read. Four real
    # start failures plus any number of lost replicas stay below the threshold.
    decision = run([record(4), record(0), record(0)])
    assert not decision.is_parked
    assert decision.failures == 4


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ({"replicas": 9}, True),
        ({"autoscaling": {"maxReplicas": 3}}, True),
        ({"source": {"uri": "hf://x/other"}}, False),
        ({"profile": "latency"}, False),
        (
            {"engines": [{"name": "e", "type": "vllm", "members": [{"template": {"spec": {}}}]}]},
            False,
        ),
    ],
)
def test_the_definition_is_source_profile_and_engines(change, same):
    base = {"source": {"uri": "hf://x/y"}, "profile": "default", "engines": [{"name": "e"}]}
    changed = {**base, **{k: v for k, v in change.items() if k in base}}
    before = definition_hash(base["source"], base["profile"], base["engines"])
    after = definition_hash(changed["source"], changed["profile"], changed["engines"])
    assert (before == after) is same


def test_count_failures_ignores_records_without_errors_for_the_last_error():
    total, last = count_failures([record(3, error="boom"), record(0, at=LATER)], DEF)
    assert (total, last) == (3, "boom")
