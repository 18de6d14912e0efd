"""Where a model's ModelReplicas go beyond placement: ownership, what exists where, a
parked model's replicas, and the unplaceable fallback — on plain values, no request."""

from dataclasses import replace

from functions.compose_model_deployment import targets
from functions.compose_model_deployment.parking import Decision, Parked
from functions.compose_model_deployment.placement import Placement, PlacementPlan
from tests.unit.test_placement import cluster, deployment, holding, pool

EAST = cluster("east", pool("h100"))
WEST = cluster("west", pool("h100"), pool("a100", product="A100"))
DEV = cluster("dev", pool("h100"), labels={"tier": "dev"})
BY_NAME = {c.name: c for c in (EAST, WEST, DEV)}
PROD_ONLY = {"matchLabels": {"tier": "prod"}}

NOT_PARKED = Decision(parked=None, baseline=None, failures=0, last_error="", transition="")
PARKED = Decision(
    parked=Parked("2026-12-01T00:00:00Z", 5, "boom", "abc", ""),
    baseline=None,
    failures=5,
    last_error="boom",
    transition="",
)


def at(found):
    return [(c.name, p) for c, p in found]


def test_own_replicas_are_ours_whatever_their_fields_say():
    dep = deployment("m")
    observed = replace(holding("stale", "east", "h100", 1), deployment="someone-else")
    merged = targets.merge_ownership([observed], [], dep)
    assert [(h.namespace, h.deployment) for h in merged] == [("ns", "m")]


def test_the_fleet_list_adds_others_but_not_a_second_copy_of_ours():
    dep = deployment("m")
    ours = holding("m", "east", "h100", 1)
    listed = [replace(ours, replicas=9), holding("other", "east", "h100", 2)]
    merged = targets.merge_ownership([ours], listed, dep)
    assert [(h.name, h.replicas) for h in merged] == [("m-east", 1), ("other-east", 2)]


def test_own_holdings_are_this_deployments_in_its_namespace():
    dep = deployment("m")
    mine, other = holding("m", "east", "h100", 1), holding("n", "east", "h100", 1)
    elsewhere = replace(mine, namespace="other")
    assert targets.own_holdings([mine, other, elsewhere], dep) == [mine]


def test_exists_where_the_cluster_and_pool_remain_and_are_selected_sorted_by_cluster():
    dep = deployment("m", cluster_selector=PROD_ONLY)
    own = [
        holding("m", "west", "a100", 1),
        holding("m", "east", "h100", 1),
        holding("m", "gone", "h100", 1),  # the cluster went away
        holding("m", "east", "l40", 1),  # the pool went away
        holding("m", "dev", "h100", 1),  # no longer selected
    ]
    assert at(targets.existing_at(own, BY_NAME, dep)) == [("east", "h100"), ("west", "a100")]


def test_a_parked_model_removes_its_replicas_on_clusters_no_longer_selected():
    dep = deployment("m", cluster_selector=PROD_ONLY)
    own = [holding("m", "east", "h100", 1), holding("m", "dev", "h100", 1)]
    answering = targets.answering_at(targets.existing_at(own, BY_NAME, dep), BY_NAME.values(), dep)
    assert [h.cluster for h in targets.removed_when_parked(own, answering)] == ["dev"]


def test_placements_become_targets_with_their_replicas():
    plan = PlacementPlan((Placement("east", "h100", 2), Placement("west", "a100", 1)), 0, "")
    decided = targets.replica_targets(plan, NOT_PARKED, [], BY_NAME)
    assert [(c.name, p, n) for c, p, n in decided.replicas] == [
        ("east", "h100", 2),
        ("west", "a100", 1),
    ]
    assert decided.unavailable is None


def answering(kept_at=(), selector=None, nearest=None):
    dep = deployment("m", cluster_selector=selector)
    return targets.answering_at(list(kept_at), BY_NAME.values(), dep, nearest)


def test_a_parked_model_answers_at_zero_on_every_selected_cluster():
    decided = targets.replica_targets(
        PlacementPlan((), 0, ""), PARKED, answering([(WEST, "h100")]), BY_NAME
    )
    assert [(c.name, p, n) for c, p, n in decided.replicas] == [
        ("dev", "h100", 0),
        ("east", "h100", 0),
        ("west", "h100", 0),
    ]
    assert decided.unavailable["reason"] == targets.REASON_PARKED
    assert "parked after 5 consecutive start failures" in decided.unavailable["message"]


def test_a_parked_model_answers_only_where_the_cluster_selector_selects():
    decided = targets.replica_targets(
        PlacementPlan((), 0, ""), PARKED, answering(selector=PROD_ONLY), BY_NAME
    )
    assert [c.name for c, _, _ in decided.replicas] == ["east", "west"]


def test_an_unplaceable_model_answers_on_every_selected_cluster_not_only_the_first():
    plan = PlacementPlan((), 2, "no H100 left", nearest=("west", "a100"))
    decided = targets.replica_targets(
        plan, NOT_PARKED, answering([(EAST, "h100")], PROD_ONLY, plan.nearest), BY_NAME
    )
    # Where it has a ModelReplica, in that pool; the nearest pool where it is nearest.
    assert [(c.name, p, n) for c, p, n in decided.replicas] == [
        ("east", "h100", 0),
        ("west", "a100", 0),
    ]
    assert decided.unavailable == {"reason": "Unplaceable", "message": "no H100 left"}


def test_an_unplaceable_model_with_no_replica_answers_in_the_first_pool_by_name():
    plan = PlacementPlan((), 2, "no H100 left", nearest=None)
    decided = targets.replica_targets(plan, NOT_PARKED, answering(selector=PROD_ONLY), BY_NAME)
    assert [(c.name, p) for c, p, _ in decided.replicas] == [("east", "h100"), ("west", "a100")]


def test_an_unplaceable_model_with_nowhere_to_answer_composes_nothing():
    plan = PlacementPlan((), 2, "no cluster matches")
    decided = targets.replica_targets(
        plan, NOT_PARKED, answering(selector={"matchLabels": {"tier": "none"}}), BY_NAME
    )
    assert decided.replicas == ()
    assert decided.unavailable is None


def test_the_unavailable_message_is_bounded_by_the_xrd():
    plan = PlacementPlan((), 1, "x" * 5000, nearest=("east", "h100"))
    decided = targets.replica_targets(plan, NOT_PARKED, answering(), BY_NAME)
    assert len(decided.unavailable["message"]) == targets.UNAVAILABLE_MESSAGE_LIMIT
