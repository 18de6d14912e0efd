"""The InferenceCluster plan without gRPC: inputs resolved, decisions typed."""

import importlib
import os
import re
from dataclasses import replace

import pytest
import yaml

from functions.common import contracts
from functions.common.cost import PoolPrice
from functions.common.inventory import fabric_labels_of_pools
from functions.common.metricmapping import ResolvedMappings
from functions.common.quantity import parse_quantity
from functions.compose_serving_stack import (
    adaptivepolicy_crd,
    collector,
    collector_objects,
    device_classes,
    runtime_hosting,
    substrate_targets,
)
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
    MODE_LOCAL,
    MODE_PUSH,
    gateway_address,
    readiness,
    replicas_needing_signals,
    unmapped_engine_types,
)
from functions.runtime import cli
from functions.runtime.cli import parse_fabric_labels, parse_pool_prices
from tests.unit.test_collector import REPO

XR = yaml.safe_load((REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml").read_text())
ACTIVE = GatewayDestination("fleet", "gw.example.com:4317", "crossplane-system", "token", "token")


def _plan(
    destination: DestinationState,
    *,
    node_tier=False,
    peers=("us-east-1", "eu-west-1"),
    signals_for=(),
):
    xr = yaml.safe_load(yaml.safe_dump(XR))
    xr["spec"]["telemetry"] = {"nodeTier": node_tier}
    return plan(
        parse_cluster(xr),
        ResolvedMappings((), ()),
        destination=destination,
        peers=list(peers),
        unmapped=["llamacpp"],
        runtime_image="img:1",
        signals_for=signals_for,
    )


def _collector_config(planned) -> dict:
    config_map = next(c for c in planned.composed if c.key == "collector-config")
    manifest = config_map.resource["spec"]["forProvider"]["manifest"]
    return yaml.safe_load(manifest["data"][collector_objects.CONFIG_KEY])


def _replica(name: str, cluster: str, autoscaling) -> dict:
    spec = {"cluster": {"name": cluster}}
    if autoscaling is not None:
        spec["autoscaling"] = autoscaling
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": spec}


def test_a_cluster_with_no_destination_and_no_autoscaled_replica_gets_no_collector():
    replicas = [
        _replica("a", "us-east-1", None),
        _replica("b", "us-east-1", {"mode": "off"}),
        _replica("c", "us-east-1", {"signals": {"demand": {"promql": "sum(x)"}}}),
        _replica("d", "eu-west-1", {"mode": "auto"}),  # another cluster's
    ]
    readers = replicas_needing_signals(replicas, "us-east-1")
    assert readers == ()
    planned = _plan(DestinationState(), signals_for=readers)
    assert planned.telemetry.mode == MODE_DISABLED
    assert planned.collector_keys == []


def test_a_replica_autoscaled_from_vocabulary_signals_gets_a_collector_that_pushes_nothing():
    readers = replicas_needing_signals([_replica("a", "us-east-1", {"mode": "auto"})], "us-east-1")
    assert readers == ("ml/a",)
    planned = _plan(DestinationState(), signals_for=readers)
    assert planned.telemetry.mode == MODE_LOCAL
    assert planned.telemetry.to_status()["signalsFor"] == ["ml/a"]
    keys = set(planned.collector_keys)
    assert {
        collector_objects.DEPLOYMENT_KEY,
        "collector-service",
        "collector-networkpolicy",
    } <= keys
    assert "collector-token" not in keys  # no destination, no token to mount
    config = _collector_config(planned)
    assert list(config["exporters"]) == [collector.SIGNALS_EXPORTER]
    assert collector.AUTHENTICATOR not in config["extensions"]
    deployment = next(c for c in planned.composed if c.key == collector_objects.DEPLOYMENT_KEY)
    pod = deployment.resource["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
    assert all(v["name"] != "gateway-token" for v in pod["volumes"])


def test_with_a_destination_the_signals_page_is_added_only_for_autoscaled_replicas():
    pushing = _collector_config(_plan(DestinationState(ACTIVE)))
    assert list(pushing["exporters"]) == [collector.EXPORTER]
    both = _plan(DestinationState(ACTIVE), signals_for=("ml/a",))
    assert list(_collector_config(both)["exporters"]) == [
        collector.EXPORTER,
        collector.SIGNALS_EXPORTER,
    ]
    assert both.telemetry.mode == MODE_PUSH


def test_only_the_agent_may_read_the_signals_page():
    planned = _plan(DestinationState(), signals_for=("ml/a",))
    policy = next(c for c in planned.composed if c.key == "collector-networkpolicy")
    rules = policy.resource["spec"]["forProvider"]["manifest"]["spec"]["ingress"]
    signals_rule = next(
        r for r in rules if {"protocol": "TCP", "port": contracts.PORT_NAME_SIGNALS} in r["ports"]
    )
    assert signals_rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": contracts.AGENT_SERVICE_NAME}}}
    ]


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


def test_the_collectors_go_runtime_collects_less_often_but_before_memory_limiter_refuses():
    planned = _plan(DestinationState(ACTIVE), node_tier=True)
    composed = {c.key: c.resource["spec"]["forProvider"].get("manifest") for c in planned.composed}
    tiers = (
        (collector_objects.DEPLOYMENT_KEY, "collector-config"),
        ("node-collector-daemonset", "node-collector-config"),
    )
    for workload, config_map in tiers:
        (container,) = composed[workload]["spec"]["template"]["spec"]["containers"]
        config = yaml.safe_load(composed[config_map]["data"][collector_objects.CONFIG_KEY])
        assert_go_runtime_below_memory_limiter(container, config["processors"]["memory_limiter"])


def assert_go_runtime_below_memory_limiter(container: dict, limiter: dict) -> None:
    """GOGC above Go's default (collect at twice the live heap), and GOMEMLIMIT under the
    share of the container's limit at which memory_limiter starts refusing data (limit -
    spike), so Go collects garbage before garbage alone makes the limiter refuse."""
    name = container["name"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert int(env["GOGC"]) > 100, name
    # Go writes binary sizes as MiB, Kubernetes as Mi.
    go_limit = parse_quantity(env["GOMEMLIMIT"].removesuffix("B"))
    share = limiter["limit_percentage"] - limiter["spike_limit_percentage"]
    refuses_above = parse_quantity(container["resources"]["limits"]["memory"]) * share / 100
    assert go_limit < refuses_above, (name, go_limit, refuses_above)


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
    assert set(services) == {
        contracts.SCALER_SERVICE_NAME,
        contracts.AGENT_SERVICE_NAME,
        contracts.ACTIVATOR_SERVICE_NAME,
    }
    assert {s["metadata"]["namespace"] for s in services.values()} == {contracts.SYSTEM_NAMESPACE}
    # The agent and the scaler have a metrics Service (what a scrape targets); the
    # activator's is what on-demand routes name.
    assert services.pop(contracts.ACTIVATOR_SERVICE_NAME)["spec"]["ports"] == [
        {"name": "http", "port": contracts.ACTIVATOR_PORT, "targetPort": "http"}
    ]
    for service in services.values():
        assert {"name": "metrics", "port": contracts.METRICS_PORT, "targetPort": "metrics"} in (
            service["spec"]["ports"]
        )


def test_keda_reaches_the_scaler_with_a_client_certificate():
    """The scaler serves TLS requiring client certificates from a Secret copied from the
    control plane, and KEDA's ClusterTriggerAuthentication hands it the client side under
    the auth parameter names KEDA v2.21's external scaler reads."""
    composed = runtime_hosting.runtime_hosting(Target("us-east-1", "us-east-1"), "img", [])
    objects = [c.resource["spec"] for c in composed]
    manifests = [o["forProvider"]["manifest"] for o in objects]
    scaler = next(
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == contracts.SCALER_SERVICE_NAME
    )
    pod = scaler["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    mount = args[args.index("--tls-cert-dir") + 1]
    assert {"name": contracts.SCALER_TLS_SECRET, "mountPath": mount, "readOnly": True} in pod[
        "containers"
    ][0]["volumeMounts"]
    assert {
        "name": contracts.SCALER_TLS_SECRET,
        "secret": {"secretName": contracts.SCALER_TLS_SECRET},
    } in pod["volumes"]

    def copied(name: str, namespace: str) -> dict[str, str]:
        (spec,) = [
            o
            for o in objects
            if o["forProvider"]["manifest"]["kind"] == "Secret"
            and o["forProvider"]["manifest"]["metadata"]["name"] == name
            and o["forProvider"]["manifest"]["metadata"]["namespace"] == namespace
        ]
        assert "data" not in spec["forProvider"]["manifest"]  # no credential in the manifest
        return {r["toFieldPath"]: r["patchesFrom"]["name"] for r in spec["references"]}

    keys = ("data[ca.crt]", "data[tls.crt]", "data[tls.key]")
    server = copied(contracts.SCALER_TLS_SECRET, contracts.SYSTEM_NAMESPACE)
    assert server == dict.fromkeys(keys, "modelplane-scaler-tls-us-east-1")
    client = copied(contracts.SCALER_CLIENT_SECRET, contracts.KEDA_NAMESPACE)
    assert client == dict.fromkeys(keys, "modelplane-scaler-client-us-east-1")
    auth = next(m for m in manifests if m["kind"] == "ClusterTriggerAuthentication")
    assert auth["metadata"]["name"] == contracts.SCALER_TRIGGER_AUTHENTICATION
    assert {(r["parameter"], r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]} == {
        ("caCert", contracts.SCALER_CLIENT_SECRET, "ca.crt"),
        ("tlsClientCert", contracts.SCALER_CLIENT_SECRET, "tls.crt"),
        ("tlsClientKey", contracts.SCALER_CLIENT_SECRET, "tls.key"),
    }


def _grants(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules
    )


@pytest.mark.parametrize(
    ("account", "group", "resource", "verb"),
    [
        # What the agent's report reads (functions/runtime/agent/collect.py).
        ("agent", "", "pods", "list"),
        ("agent", "", "nodes", "list"),
        ("agent", "karpenter.sh", "nodepools", "list"),
        ("agent", "karpenter.sh", "nodeclaims", "list"),
        ("agent", "resource.k8s.io", "resourceclaimtemplates", "list"),
        ("agent", "resource.k8s.io", "resourceslices", "list"),
        ("agent", "resource.k8s.io", "resourceclaims", "list"),
        ("agent", "resource.k8s.io", "deviceclasses", "list"),
        ("agent", "keda.sh", "scaledobjects", "get"),
        ("agent", "apps", "deployments/scale", "get"),
        ("agent", "apps", "deployments", "get"),
        ("agent", "leaderworkerset.x-k8s.io", "leaderworkersets", "get"),
        ("agent", "grove.io", "podcliquesets", "get"),
        ("agent", "leaderworkerset.x-k8s.io", "leaderworkersets/scale", "get"),
        ("agent", "grove.io", "podcliquesets/scale", "get"),
        # What the hub writes (functions/runtime/hub/acting.py), on its own member and peers.
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
        cluster.target,
        "img",
        [],
        prometheus_url=cluster.prometheus_url,
        fabric_labels=cluster.fabric_labels,
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


def test_the_agent_reads_each_pools_fabric_from_the_label_the_pool_declares():
    xr = _cluster_xr()
    xr["spec"]["nodePools"] = [
        {
            "name": "h100",
            "nodeSelector": {"karpenter.sh/nodepool": "h100"},
            "fabricNodeLabel": "network.example.com/fabric",
        },
        {"name": "a100"},
    ]
    args = _agent_args(xr)
    given = [args[i + 1] for i, a in enumerate(args) if a == "--fabric-label"]
    assert given == [
        "network.example.com/fabric:karpenter.sh/nodepool=h100",
        "modelplane.ai/fabric",
    ]
    # What the agent's command makes of them is the pools' labels again.
    parsed = parse_fabric_labels(None, None, tuple(given))
    assert parsed == fabric_labels_of_pools(xr["spec"]["nodePools"])


def test_pools_on_the_default_fabric_label_add_no_agent_argument():
    xr = _cluster_xr()
    xr["spec"]["nodePools"] = [{"name": "h100", "nodeSelector": {"pool": "h100"}}]
    assert "--fabric-label" not in _agent_args(xr)


def test_a_fabric_label_that_would_not_survive_the_argument_is_refused():
    xr = _cluster_xr()
    xr["spec"]["nodePools"] = [{"name": "h100", "nodeSelector": {"a": "b,c=d"}}]
    with pytest.raises(InvalidCluster) as refused:
        parse_cluster(xr)
    assert refused.value.field == "spec.nodePools[0]"


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
    provider_configs = [k for k in planned.always_ready if k.startswith("providerconfig-")]
    assert provider_configs == ["providerconfig-helm", "providerconfig-kubernetes"]
    assert not set(planned.always_ready) & set(planned.stack_keys)


def test_a_hand_made_provider_config_composes_none():
    planned = _plan(DestinationState())
    assert not [c for c in planned.composed if c.key.startswith("providerconfig-")]
    # Only the DeviceClass observers, which report and never gate readiness.
    assert all(k.startswith("deviceclass-") for k in planned.always_ready)


def test_a_cluster_may_not_name_both_a_provider_config_and_a_kubeconfig():
    both = {**KUBECONFIG_XR, "spec": {**KUBECONFIG_XR["spec"], "providerConfigRef": {"name": "x"}}}
    with pytest.raises(InvalidCluster, match=r"spec\.kubeconfigSecretRef"):
        parse_cluster(both)


def test_engines_are_told_where_to_send_traces_only_while_the_destination_carries_them():
    otlp = _plan(DestinationState(ACTIVE)).telemetry.to_status()
    assert otlp["tracesEndpoint"] == "modelplane-collector.modelplane-system.svc:4317"
    metrics_only = replace(ACTIVE, traces_and_logs=False)
    status = _plan(DestinationState(metrics_only)).telemetry.to_status()
    assert "tracesEndpoint" not in status


def test_the_substrate_components_no_mapping_covers_are_surfaced():
    status = _plan(DestinationState(ACTIVE)).telemetry.to_status()
    assert {"kube-scheduler", "cert-manager", "envoy-proxies"} <= set(status["unmappedComponents"])


def test_the_activator_reaches_the_control_plane_only_with_copied_credentials():
    """Its kubeconfig arrives from the control plane's per-member Secret by reference
    (no credential in a manifest); on the member it may list HTTPRoutes and nothing else,
    under a role named apart from the control plane's ClusterRole."""
    composed = runtime_hosting.runtime_hosting(Target("us-east-1", "us-east-1"), "img", [])
    objects = [c.resource["spec"] for c in composed]
    manifests = [o["forProvider"]["manifest"] for o in objects]
    (secret_object,) = [
        o
        for o in objects
        if o["forProvider"]["manifest"]["kind"] == "Secret"
        and o["forProvider"]["manifest"]["metadata"]["name"] == "modelplane-activator-control-plane"
    ]
    assert "data" not in secret_object["forProvider"]["manifest"]
    (reference,) = secret_object["references"]
    assert reference["patchesFrom"]["name"] == "modelplane-activator-us-east-1"
    (deployment,) = [
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == contracts.ACTIVATOR_SERVICE_NAME
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["runtime", "activator"]
    assert "--control-plane" in container["args"]
    bindings = [
        m
        for m in manifests
        if m["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["name"] == contracts.ACTIVATOR_SERVICE_NAME for s in m["subjects"])
    ]
    assert [(b["kind"], b["roleRef"]["name"]) for b in bindings] == [
        ("ClusterRoleBinding", "modelplane-activator-routes")
    ]
    assert contracts.ACTIVATOR_CLUSTER_ROLE != "modelplane-activator-routes"
    (role,) = [
        m
        for m in manifests
        if m["kind"] == "ClusterRole" and m["metadata"]["name"] == "modelplane-activator-routes"
    ]
    assert role["rules"] == [
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"], "verbs": ["list"]}
    ]


def test_only_the_gateways_proxies_reach_the_activator_and_probes_have_their_own_port():
    composed = runtime_hosting.runtime_hosting(Target("us-east-1", "us-east-1"), "img", [])
    manifests = [c.resource["spec"]["forProvider"]["manifest"] for c in composed]
    (policy,) = [
        m
        for m in manifests
        if m["kind"] == "NetworkPolicy"
        and m["metadata"]["name"] == contracts.ACTIVATOR_SERVICE_NAME
    ]
    assert policy["metadata"]["namespace"] == contracts.SYSTEM_NAMESPACE
    assert policy["spec"]["podSelector"] == {
        "matchLabels": runtime_hosting._labels(contracts.ACTIVATOR_SERVICE_NAME)
    }
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    serving, metrics, probes = policy["spec"]["ingress"]
    assert serving == {
        "from": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}
                },
                "podSelector": {
                    "matchLabels": {
                        "gateway.envoyproxy.io/owning-gateway-name": "modelplane-inference",
                        "gateway.envoyproxy.io/owning-gateway-namespace": "modelplane-system",
                    }
                },
            }
        ],
        "ports": [{"protocol": "TCP", "port": "http"}],
    }
    # The activator's own metrics: the cluster's collector, and no one else.
    assert metrics == {
        "from": [
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "modelplane-collector"}}}
        ],
        "ports": [{"protocol": "TCP", "port": "metrics"}],
    }
    assert probes == {"ports": [{"protocol": "TCP", "port": "health"}]}
    (deployment,) = [
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == contracts.ACTIVATOR_SERVICE_NAME
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": contracts.ACTIVATOR_PORT,
        "health": contracts.ACTIVATOR_HEALTH_PORT,
        "metrics": contracts.METRICS_PORT,
    }
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "health"


def test_the_collectors_runtime_scrape_finds_the_activators_metrics_port_and_may_reach_it():
    """The scrape target (substrate_targets.RUNTIME_TARGETS) selects the activator's pods
    by their labels and a port name its container declares, on the port the activator
    serves by default (`--metrics-port`), and its NetworkPolicy admits the collector's
    pods (as collector_objects labels them) to that port."""
    composed = runtime_hosting.runtime_hosting(Target("us-east-1", "us-east-1"), "img", [])
    manifests = [c.resource["spec"]["forProvider"]["manifest"] for c in composed]
    (target,) = [
        t for t in substrate_targets.RUNTIME_TARGETS if t.job == contracts.ACTIVATOR_SERVICE_NAME
    ]
    (deployment,) = [
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == contracts.ACTIVATOR_SERVICE_NAME
    ]
    pod = deployment["spec"]["template"]
    assert target.namespace == deployment["metadata"]["namespace"]
    assert set(target.pod_labels) <= set(pod["metadata"]["labels"].items())
    (container,) = pod["spec"]["containers"]
    (port,) = [p for p in container["ports"] if re.fullmatch(target.port_name, p["name"])]
    (served,) = [p.default for p in cli.activator.params if p.name == "metrics_port"]
    assert port["containerPort"] == served
    assert "--metrics-port" not in container["args"]  # the default is the declared port
    (policy,) = [
        m
        for m in manifests
        if m["kind"] == "NetworkPolicy"
        and m["metadata"]["name"] == contracts.ACTIVATOR_SERVICE_NAME
    ]
    collector_pod = collector_objects._labels(contracts.COLLECTOR_SERVICE_NAME)
    admitted = [
        rule
        for rule in policy["spec"]["ingress"]
        if {"protocol": "TCP", "port": port["name"]} in rule["ports"]
    ]
    assert admitted
    for rule in admitted:
        for peer in rule["from"]:
            assert "namespaceSelector" not in peer  # the collector's own namespace
            assert peer["podSelector"]["matchLabels"].items() <= collector_pod.items()


def test_each_priced_pool_reaches_the_agent_as_one_json_argument():
    xr = _cluster_xr()
    xr["spec"]["nodePools"] = [
        {
            "name": "h100",
            "nodeSelector": {"karpenter.sh/nodepool": "h100"},
            "devices": {"driver": "gpu.nvidia.com", "perNode": 8},
            "pricePerGPUHour": 3.5,
        },
        {"name": "l40s", "devices": {"driver": "gpu.nvidia.com", "perNode": 4}},
    ]
    # Through the whole plan, as the function composes the agent.
    composed = plan(
        parse_cluster(xr),
        ResolvedMappings((), ()),
        destination=DestinationState(),
        peers=[],
        unmapped=[],
        runtime_image="img:1",
    ).composed
    (agent,) = [
        m
        for m in (c.resource["spec"]["forProvider"].get("manifest") or {} for c in composed)
        if m.get("kind") == "Deployment" and m["metadata"]["name"] == contracts.AGENT_SERVICE_NAME
    ]
    args = agent["spec"]["template"]["spec"]["containers"][0]["args"]
    given = [args[i + 1] for i, a in enumerate(args) if a == "--pool-price"]
    # The unpriced pool gets no argument: no cost series, not a cost of 0.
    assert parse_pool_prices(None, None, tuple(given)) == (
        PoolPrice("h100", "gpu.nvidia.com", 3.5, (("karpenter.sh/nodepool", "h100"),)),
    )


def test_a_cluster_without_prices_gives_the_agent_no_price_argument():
    assert "--pool-price" not in _agent_args(_cluster_xr())


@pytest.mark.parametrize("price", [-1, "3.5", True, 2_000_000, float("inf")])
def test_a_price_the_schema_refuses_is_refused_with_its_field(price):
    xr = _cluster_xr()
    xr["spec"]["nodePools"] = [
        {"name": "a", "devices": {"driver": "gpu.nvidia.com", "perNode": 1}},
        {
            "name": "b",
            "devices": {"driver": "gpu.nvidia.com", "perNode": 1},
            "pricePerGPUHour": price,
        },
    ]
    with pytest.raises(InvalidCluster) as refused:
        parse_cluster(xr)
    assert refused.value.field == "spec.nodePools[1].pricePerGPUHour"


def test_a_price_on_a_cpu_only_pool_is_refused_with_its_field():
    xr = _cluster_xr()
    xr["spec"]["nodePools"] = [
        {"name": "c7i", "nodes": 2, "cpu": "31", "memory": "60Gi", "pricePerGPUHour": 1.0}
    ]
    with pytest.raises(InvalidCluster) as refused:
        parse_cluster(xr)
    assert refused.value.field == "spec.nodePools[0].pricePerGPUHour"
    assert "CPU-only pool" in str(refused.value)


def test_a_cpu_only_pool_names_no_device_class():
    xr = _cluster_xr()
    xr["spec"]["nodePools"] = [{"name": "c7i", "nodes": 2, "cpu": "31", "memory": "60Gi"}]
    parse_cluster(xr)
    assert device_classes.needed(xr["spec"]["nodePools"]) == ()
