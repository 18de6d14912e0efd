"""The InferenceCluster plan without gRPC: inputs resolved, decisions typed."""

import importlib
import os

import pytest
import yaml

from functions.common import contracts
from functions.common.metricmapping import ResolvedMappings
from functions.compose_serving_stack import adaptivepolicy_crd, collector_objects, runtime_hosting
from functions.compose_serving_stack.compose import (
    DestinationState,
    GatewayDestination,
    InvalidCluster,
    parse_cluster,
    plan,
)
from functions.compose_serving_stack.envelope import Target
from functions.compose_serving_stack.status import (
    MODE_DISABLED,
    MODE_PUSH,
    gateway_address,
    readiness,
    unmapped_engine_types,
)
from tests.unit.test_collector import REPO

XR = yaml.safe_load((REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml").read_text())
ACTIVE = GatewayDestination("fleet", "gw.example.com:4317", "crossplane-system", "token", "token")


def _plan(destination: DestinationState, *, node_tier=False, peers=("us-east-1", "eu-west-1")):
    xr = yaml.safe_load(yaml.safe_dump(XR))
    xr["spec"]["telemetry"] = {"nodeTier": node_tier}
    return plan(
        parse_cluster(xr),
        ResolvedMappings((), ()),
        destination=destination,
        peers=list(peers),
        unmapped=["llamacpp"],
        runtime_image="img:1",
    )


def test_no_destination_plans_no_collector():
    planned = _plan(DestinationState())
    assert planned.telemetry.mode == MODE_DISABLED
    assert planned.collector_keys == []
    assert not planned.keep_observed_collector
    assert collector_objects.DEPLOYMENT_KEY not in {c.key for c in planned.composed}


def test_an_invalid_destination_keeps_the_running_collector():
    planned = _plan(DestinationState(problem="TelemetryDestination fleet is invalid: x"))
    assert planned.keep_observed_collector
    assert planned.telemetry.mode == MODE_PUSH
    assert "keeps its last config" in planned.telemetry.reason


def test_a_destination_plans_the_collector_and_the_node_tier_only_when_asked():
    keys = {c.key for c in _plan(DestinationState(ACTIVE)).composed}
    assert {collector_objects.DEPLOYMENT_KEY, "collector-token", "collector-config"} <= keys
    assert "node-collector-daemonset" not in keys
    assert "node-collector-daemonset" in {
        c.key for c in _plan(DestinationState(ACTIVE), node_tier=True).composed
    }


def test_peers_exclude_the_cluster_itself():
    profiles = [
        c.resource["spec"]["forProvider"]["manifest"]["metadata"]["name"]
        for c in _plan(DestinationState()).composed
        if c.resource["spec"]["forProvider"].get("manifest", {}).get("kind") == "ClusterProfile"
    ]
    assert profiles == ["eu-west-1"]


def test_composed_keys_are_unique():
    keys = [c.key for c in _plan(DestinationState(ACTIVE), node_tier=True).composed]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"metadata": {"name": "Bad_Name"}}, "metadata.name"),
        ({"spec": {"stack": "Other"}}, "spec.stack"),
        ({"spec": {"providerConfigRef": {}}}, "spec.providerConfigRef.name"),
        (
            {"spec": {"providerConfigRef": {"name": "x", "kind": "Secret"}}},
            "spec.providerConfigRef.kind",
        ),
    ],
)
def test_an_unusable_cluster_names_the_field(change, field):
    xr = yaml.safe_load(yaml.safe_dump(XR))
    for part, values in change.items():
        xr[part].update(values)
    with pytest.raises(InvalidCluster) as err:
        parse_cluster(xr)
    assert err.value.field == field


def test_unmapped_engine_types_count_only_this_clusters_replicas():
    replicas = [
        {"spec": {"cluster": {"name": "a"}, "engines": [{"type": "vllm"}, {"type": "tgi"}]}},
        {"spec": {"cluster": {"name": "b"}, "engines": [{"type": "other"}]}},
        {"spec": {"cluster": {"name": "a"}, "engines": [{"type": "tgi"}, {"type": "llamacpp"}]}},
    ]
    assert unmapped_engine_types(replicas, "a", {"vllm"}) == ("llamacpp", "tgi")


def test_readiness_names_what_is_not_ready():
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    waiting = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert readiness("X", ["a"], {"a": ready}, "w").status == "True"
    cond = readiness("X", ["a", "b", "c"], {"a": ready, "b": waiting}, "w")
    assert cond.status == "False"
    assert "b" in cond.message
    assert "c" in cond.message


def test_gateway_address_comes_from_the_observed_gateway():
    observed = {
        "status": {"atProvider": {"manifest": {"status": {"addresses": [{"value": "10.0.0.7"}]}}}}
    }
    assert gateway_address(observed) == "10.0.0.7"
    assert gateway_address(None) == ""


def test_the_embedded_crd_is_the_apis_file():
    # One source: apis/adaptivepolicies/definition.yaml. UPDATE_GOLDEN=1 refreshes the copy.
    source = REPO / "apis" / "adaptivepolicies" / "definition.yaml"
    copy = REPO / "functions" / "compose_serving_stack" / adaptivepolicy_crd.CRD_FILE
    if os.environ.get("UPDATE_GOLDEN") == "1":
        copy.write_bytes(source.read_bytes())
        importlib.reload(adaptivepolicy_crd)
    assert copy.read_bytes() == source.read_bytes(), (
        "apis/adaptivepolicies/definition.yaml changed; refresh the copy the function image "
        "carries: UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_serving_stack_compose.py "
        "-k embedded_crd"
    )
    assert adaptivepolicy_crd.crd() == yaml.safe_load(source.read_text())


def test_the_runtime_uses_the_shared_names():
    composed = runtime_hosting.runtime_hosting(Target("a", "a"), "img", [])
    manifests = [c.resource["spec"]["forProvider"]["manifest"] for c in composed]
    services = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Service"}
    assert set(services) == {contracts.SCALER_SERVICE_NAME, contracts.AGENT_SERVICE_NAME}
    assert {s["metadata"]["namespace"] for s in services.values()} == {contracts.SYSTEM_NAMESPACE}
    # Both components have a metrics Service (what a scrape targets).
    for service in services.values():
        assert {"name": "metrics", "port": contracts.METRICS_PORT, "targetPort": "metrics"} in (
            service["spec"]["ports"]
        )


def _grants(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules
    )


@pytest.mark.parametrize(
    ("account", "group", "resource", "verb"),
    [
        # What the agent's report reads (functions/runtime/report.py).
        ("agent", "", "pods", "list"),
        ("agent", "", "nodes", "list"),
        ("agent", "karpenter.sh", "nodepools", "list"),
        ("agent", "karpenter.sh", "nodeclaims", "list"),
        ("agent", "keda.sh", "scaledobjects", "get"),
        ("agent", "apps", "deployments/scale", "get"),
        ("agent", "leaderworkerset.x-k8s.io", "leaderworkersets/scale", "get"),
        ("agent", "grove.io", "podcliquesets/scale", "get"),
        # What the hub writes (functions/runtime/acting.py), on its own member and peers.
        ("agent", "gateway.networking.k8s.io", "httproutes", "patch"),
        ("agent", "", "events", "create"),
        ("peer", "gateway.networking.k8s.io", "httproutes", "patch"),
        ("peer", "", "events", "create"),
        ("peer", "autoscaling.modelplane.ai", "adaptivepolicies/status", "patch"),
    ],
)
def test_the_runtime_roles_grant_what_the_runtime_calls(account, group, resource, verb):
    composed = runtime_hosting.runtime_hosting(Target("a", "a"), "img", ["b"])
    manifests = [c.resource["spec"]["forProvider"]["manifest"] for c in composed]
    cluster_roles = [
        m
        for m in manifests
        if m["kind"] == "ClusterRole" and m["metadata"]["name"].endswith(account)
    ]
    assert cluster_roles, f"no ClusterRole for {account}"
    assert any(_grants(r["rules"], group, resource, verb) for r in cluster_roles)


def _agent_args(xr: dict) -> list[str]:
    cluster = parse_cluster(xr)
    composed = runtime_hosting.runtime_hosting(
        cluster.target, "img", [], prometheus_url=cluster.prometheus_url
    )
    manifests = [c.resource["spec"]["forProvider"]["manifest"] for c in composed]
    agent = next(
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == "modelplane-agent"
    )
    return agent["spec"]["template"]["spec"]["containers"][0]["args"]


def _cluster_xr(**runtime) -> dict:
    return {
        "metadata": {"name": "us-east-1"},
        "spec": {"providerConfigRef": {"name": "us-east-1"}, "runtime": runtime},
    }


def test_the_agent_queries_the_clusters_own_prometheus():
    args = _agent_args(_cluster_xr(prometheusURL="http://prometheus.monitoring:9090"))
    assert args[args.index("--prometheus-url") + 1] == "http://prometheus.monitoring:9090"


def test_without_a_prometheus_the_agent_gets_no_url():
    assert "--prometheus-url" not in _agent_args(_cluster_xr())


def test_a_prometheus_url_that_could_break_out_of_an_argument_is_refused():
    with pytest.raises(InvalidCluster) as refused:
        parse_cluster(_cluster_xr(prometheusURL='http://x" --kubeconfig=/etc/evil'))
    assert refused.value.field == "spec.runtime.prometheusURL"


def _manifest(composed) -> dict:
    spec = composed.resource["spec"]
    return spec["forProvider"].get("manifest") or spec["forProvider"]


def test_requests_are_routed_by_the_model_name_in_their_body():
    """The body-based router runs in the Gateway's namespace and every request through
    the Gateway goes to it first, so the header each model's route matches is set."""
    by_key = {c.key: c for c in _plan(DestinationState()).composed}
    chart = _manifest(by_key["body-based-router"])
    assert chart["chart"]["name"] == "body-based-routing"
    assert chart["chart"]["version"] == "v1.3.0"
    assert chart["namespace"] == contracts.INFERENCE_GATEWAY_NAMESPACE
    service = chart["values"]["bbr"]["name"]
    backend = _manifest(by_key["body-based-router-backend"])
    (endpoint,) = backend["spec"]["endpoints"]
    assert endpoint["fqdn"]["hostname"] == (
        f"{service}.{contracts.INFERENCE_GATEWAY_NAMESPACE}.svc.cluster.local"
    )
    policy = _manifest(by_key["body-based-router-policy"])
    assert policy["metadata"]["namespace"] == contracts.INFERENCE_GATEWAY_NAMESPACE
    (target,) = policy["spec"]["targetRefs"]
    assert (target["kind"], target["name"]) == ("Gateway", contracts.INFERENCE_GATEWAY_NAME)
    (ext_proc,) = policy["spec"]["extProc"]
    (ref,) = ext_proc["backendRefs"]
    assert (ref["kind"], ref["name"], ref["port"]) == (
        "Backend",
        backend["metadata"]["name"],
        endpoint["fqdn"]["port"],
    )


KUBECONFIG_XR = yaml.safe_load(
    (REPO / "examples" / "inferenceclusters" / "kubeconfig" / "ap-south-1.yaml").read_text()
)


def test_a_cluster_from_a_kubeconfig_composes_the_provider_configs_everything_uses():
    cluster = parse_cluster(KUBECONFIG_XR)
    planned = plan(
        cluster,
        ResolvedMappings((), ()),
        destination=DestinationState(),
        peers=[],
        unmapped=[],
        runtime_image="img:1",
    )
    by_key = {c.key: c.resource for c in planned.composed}
    secret = {
        "namespace": "crossplane-system",
        "name": "ap-south-1-kubeconfig",
        "key": "kubeconfig",
    }
    configs = [by_key["providerconfig-kubernetes"], by_key["providerconfig-helm"]]
    assert {c["apiVersion"] for c in configs} == {
        "kubernetes.m.crossplane.io/v1alpha1",
        "helm.m.crossplane.io/v1beta1",
    }
    for config in configs:
        assert config["kind"] == "ClusterProviderConfig"
        assert config["metadata"]["name"] == "ap-south-1"
        assert config["spec"]["credentials"] == {"source": "Secret", "secretRef": secret}
    # Every Object and Release goes through them; they are ready by being there.
    sent = [c for k, c in by_key.items() if not k.startswith("providerconfig-")]
    assert {c["spec"]["providerConfigRef"]["name"] for c in sent} == {"ap-south-1"}
    assert sorted(planned.always_ready) == ["providerconfig-helm", "providerconfig-kubernetes"]
    assert not set(planned.always_ready) & set(planned.stack_keys)


def test_a_hand_made_provider_config_composes_none():
    planned = _plan(DestinationState())
    assert not [c for c in planned.composed if c.key.startswith("providerconfig-")]
    assert planned.always_ready == []


def test_a_cluster_may_not_name_both_a_provider_config_and_a_kubeconfig():
    both = {**KUBECONFIG_XR, "spec": {**KUBECONFIG_XR["spec"], "providerConfigRef": {"name": "x"}}}
    with pytest.raises(InvalidCluster, match=r"spec\.kubeconfigSecretRef"):
        parse_cluster(both)
