"""`modelplane suggest` on plain objects (functions/runtime/operator/suggest.py); the API server's
acceptance of the patch is tests/runtime/test_operator_cli.py."""

import yaml

from functions.runtime.operator import suggest
from tests.conftest import REPO

CLUSTERS = [
    d
    for d in yaml.safe_load_all(
        (REPO / "tests/render/testdata/model_deployment/clusters.yaml").read_text()
    )
    if d and d.get("kind") == "InferenceCluster"
]


def example(name: str) -> dict:
    return yaml.safe_load((REPO / "examples/modeldeployments" / name).read_text())


def autoscaling(deployment: dict) -> dict:
    return yaml.safe_load(suggest.render(deployment, CLUSTERS))["spec"]["autoscaling"]


def test_a_multi_node_replica_spans_its_leader_and_workers():
    assert suggest.replica_shape(example("deepseek-multinode.yaml")) == (8, 2)


def test_max_replicas_is_what_the_largest_eligible_pool_holds_at_its_limit():
    deployment = example("deepseek-multinode.yaml")
    per_node, span = suggest.replica_shape(deployment)
    pools = suggest.eligible_pools(deployment, CLUSTERS)
    expected = max((p.max_nodes // span) * (p.per_node // per_node) for p in pools)
    assert autoscaling(deployment)["maxReplicas"] == max(expected, 1)


def test_the_cluster_selector_limits_the_pools():
    deployment = example("llama-8b-vllm.yaml")
    wanted = deployment["spec"]["template"]["spec"]["clusterSelector"]["matchLabels"]
    chosen = {p.cluster for p in suggest.eligible_pools(deployment, CLUSTERS)}
    assert chosen == {
        c["metadata"]["name"]
        for c in CLUSTERS
        if all((c["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
    }


def test_a_value_already_set_is_kept_but_the_mode_is_always_shadow():
    deployment = example("llama-8b-vllm.yaml")
    assert deployment["spec"]["autoscaling"]["maxReplicas"] == 6
    deployment["spec"]["autoscaling"]["mode"] = "auto"
    suggested = autoscaling(deployment)
    assert suggested["mode"] == "shadow"
    assert suggested["maxReplicas"] == 6
    assert suggested["capacity"]["replicaCapacity"] == 4
    assert suggested["signals"]["demand"] == deployment["spec"]["autoscaling"]["signals"]["demand"]


def _with_limit(extra: int) -> list[dict]:
    return [
        {
            **c,
            "spec": {
                **c["spec"],
                "nodePools": [
                    {**p, "maxNodes": p["nodes"] + extra} for p in c["spec"]["nodePools"]
                ],
            },
        }
        for c in CLUSTERS
    ]


def test_a_growing_pool_adds_a_node_launch_to_escalation_after():
    deployment = example("qwen-sglang.yaml")
    deployment["spec"].pop("autoscaling", None)

    def after(clusters):
        return yaml.safe_load(suggest.render(deployment, clusters))["spec"]["autoscaling"][
            "escalation"
        ]["after"]

    assert after(_with_limit(0)) == "2m"
    assert after(_with_limit(4)) == "7m"


def test_a_cpu_models_ceiling_is_what_the_cpu_pools_hold_never_the_gpu_pools():
    deployment = example("qwen-cpu.yaml")  # 8 CPU and 16Gi per pod
    cpu_cluster = yaml.safe_load(
        (REPO / "examples/inferenceclusters/eu-central-cpu.yaml").read_text()
    )  # up to 6 nodes of 31 CPU and 60Gi: 3 pods a node
    gpu_cluster = {**CLUSTERS[0]}
    gpu_cluster["metadata"] = {
        **gpu_cluster["metadata"],
        "labels": cpu_cluster["metadata"]["labels"],
    }
    patch = yaml.safe_load(suggest.render(deployment, [cpu_cluster, gpu_cluster]))
    assert patch["spec"]["autoscaling"]["maxReplicas"] == 18
    text = " ".join(
        line.strip().removeprefix("# ")
        for line in suggest.render(deployment, [cpu_cluster, gpu_cluster]).splitlines()
    )
    assert "(8 CPU and 16Gi memory x 1 pod(s) each)" in text
