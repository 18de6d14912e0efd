"""compose-serving-stack under the real `crossplane render`, with its inputs given as
required resources the way Crossplane fetches them.

Each case renders an example InferenceCluster with a folder of required resources built
from the shipped files (the built-in MetricMappings, the example TelemetryDestination)
plus tests/render/testdata/serving_stack/inputs, and compares the whole output with
tests/render/testdata/serving_stack/<case>.yaml. Regenerate the golden files with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/render/test_compose_serving_stack.py

and read the diff before committing it.
"""

import os
import shutil
from pathlib import Path

import pytest
import yaml

import render
from functions.common import conditions, contracts
from functions.common import metricmapping as mappings
from functions.compose_serving_stack import (
    adaptivepolicy_crd,
    collector,
    collector_objects,
)
from functions.compose_serving_stack.status import MODE_DISABLED, MODE_LOCAL, MODE_PUSH
from tests.conftest import require_tool
from tests.schemas.test_composed_manifests import core_schemas, validate_objects

REPO = render.REPO
TESTDATA = Path(__file__).parent / "testdata" / "serving_stack"
INPUTS = TESTDATA / "inputs"
US_EAST = REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml"
EU_WEST = REPO / "examples" / "inferenceclusters" / "eu-west-b200.yaml"
FROM_KUBECONFIG = REPO / "examples" / "inferenceclusters" / "kubeconfig" / "ap-south-1.yaml"
DESTINATION = REPO / "examples" / "telemetrydestinations" / "fleet.yaml"
BUILTIN = sorted((REPO / "functions" / "common" / "builtin_mappings").glob("*.yaml"))
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

CASES = {
    # case: (xr, required files). No MetricMapping is applied in most cases: the
    # built-ins are in effect on a fresh install with nothing applied by hand.
    "without-destination": (US_EAST, [INPUTS / "peer-cluster.yaml"]),
    # No destination, but a replica autoscaled from vocabulary signals: a collector
    # that serves only the agent's signals page.
    "signals-without-destination": (
        US_EAST,
        [INPUTS / "peer-cluster.yaml", INPUTS / "replica-autoscaled.yaml"],
    ),
    "with-destination": (
        US_EAST,
        [DESTINATION, INPUTS / "peer-cluster.yaml", INPUTS / "replica-llamacpp.yaml"],
    ),
    "unsafe-mapping": (US_EAST, [DESTINATION, INPUTS / "mapping-unsafe.yaml"]),
    "dynamo-with-destination": (EU_WEST, [DESTINATION]),
    "mapping-replaces-builtin": (US_EAST, [DESTINATION, INPUTS / "mapping-vllm-fork.yaml"]),
    "kubeconfig": (FROM_KUBECONFIG, [INPUTS / "peer-cluster.yaml"]),
}


def _render(function_servers, tmp_path: Path, case: str) -> list[dict]:
    xr, files = CASES[case]
    required = tmp_path / case
    required.mkdir()
    for i, path in enumerate(files):
        shutil.copy(path, required / f"{i:02d}-{path.name}")
    result = render.render(function_servers, xr, required=required)
    assert result.returncode == 0, result.stderr + function_servers.logs()
    return result.documents


def _composed(documents: list[dict]) -> dict[str, dict]:
    return {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d
        for d in documents[1:]
        if d.get("kind") != "Result"
    }


def _condition(documents: list[dict], typ: str) -> dict:
    return next(c for c in documents[0]["status"]["conditions"] if c["type"] == typ)


def _manifest(composed: dict) -> dict:
    return composed["spec"]["forProvider"]["manifest"]


@pytest.fixture(scope="module")
def rendered(function_servers, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serving-stack")
    return {case: _render(function_servers, folder, case) for case in CASES}


CRD_SOURCE = REPO / "apis" / "adaptivepolicies" / "definition.yaml"


def _without_crd_body(documents: list[dict]) -> list[dict]:
    """The AdaptivePolicy CRD is checked against its source file apart (below), so an edit
    to that API does not churn these golden files."""
    out = yaml.safe_load_all(yaml.safe_dump_all(documents))
    out = list(out)
    for document in out:
        manifest = document.get("spec", {}).get("forProvider", {}).get("manifest", {})
        if manifest.get("kind") == "CustomResourceDefinition":
            document["spec"]["forProvider"]["manifest"]["spec"] = (
                f"<{CRD_SOURCE.relative_to(REPO)}>"
            )
    return out


def test_the_adaptivepolicy_crd_is_composed_from_its_source(rendered):
    crd = next(
        _manifest(c)
        for c in _composed(rendered["with-destination"]).values()
        if c["kind"] == "Object" and _manifest(c)["kind"] == "CustomResourceDefinition"
    )
    # The function composes its embedded copy; tests/unit/test_serving_stack_compose.py
    # holds that copy to CRD_SOURCE.
    assert crd == adaptivepolicy_crd.crd()


@pytest.mark.parametrize("case", sorted(CASES))
def test_whole_output_matches_the_golden_file(rendered, case):
    golden = TESTDATA / f"{case}.yaml"
    text = yaml.safe_dump_all(_without_crd_body(rendered[case]), sort_keys=True)
    if UPDATE:
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with UPDATE_GOLDEN=1"
    assert list(yaml.safe_load_all(golden.read_text())) == list(yaml.safe_load_all(text))


def test_an_autoscaled_replica_without_a_destination_gets_a_local_collector(rendered):
    documents = rendered["signals-without-destination"]
    telemetry = documents[0]["status"]["telemetry"]
    assert telemetry["mode"] == MODE_LOCAL
    assert telemetry["signalsFor"] == ["ml-team/llama-3-1-8b-us-east-1"]
    manifests = {
        (m["kind"], m["metadata"]["name"])
        for m in (_manifest(c) for c in _composed(documents).values() if c["kind"] == "Object")
    }
    assert ("Deployment", collector_objects.COLLECTOR) in manifests
    assert ("Service", collector_objects.COLLECTOR) in manifests
    assert ("NetworkPolicy", collector_objects.COLLECTOR) in manifests
    assert ("Secret", contracts.TELEMETRY_TOKEN_SECRET_NAME) not in manifests


def test_no_destination_means_no_collector_and_says_why(rendered):
    documents = rendered["without-destination"]
    telemetry = documents[0]["status"]["telemetry"]
    assert telemetry["mode"] == MODE_DISABLED
    assert "no TelemetryDestination" in telemetry["reason"]
    kinds = {
        _manifest(c)["kind"]
        for c in _composed(documents).values()
        if c["kind"] == "Object" and c["spec"].get("managementPolicies") != ["Observe"]
    }
    assert "ConfigMap" not in kinds
    assert "DaemonSet" not in kinds
    names = {
        _manifest(c)["metadata"]["name"]
        for c in _composed(documents).values()
        if c["kind"] == "Object"
    }
    assert collector_objects.COLLECTOR not in names
    assert contracts.TELEMETRY_TOKEN_SECRET_NAME not in names
    ready = _condition(documents, conditions.COLLECTOR_READY)
    assert ready["status"] == "False"
    assert ready["reason"] == "TelemetryDisabled"


def test_a_destination_composes_the_collector_with_the_rendered_config(rendered):
    documents = rendered["with-destination"]
    composed = _composed(documents)
    telemetry = documents[0]["status"]["telemetry"]
    assert telemetry["mode"] == MODE_PUSH
    assert (
        telemetry["destination"]
        == yaml.safe_load(DESTINATION.read_text())["spec"]["gateway"]["endpoint"]
    )

    config_map = _manifest(composed["collector-config"])
    config = yaml.safe_load(config_map["data"][collector_objects.CONFIG_KEY])
    # The same config the pure renderer gives for these inputs, whole: no MetricMapping
    # was applied, so that is the built-ins'. The example destination remote-writes to
    # Prometheus, which carries no traces or logs, so none are collected.
    parsed = mappings.parse_mappings([yaml.safe_load(p.read_text()) for p in BUILTIN])
    expected = collector.render_cluster_collector_config(
        collector.CollectorCluster("us-east-1", contracts.STACK_STANDARD),
        parsed.accepted,
        collector.CollectorDestination(telemetry["destination"], traces_and_logs=False),
    )
    assert collector.OTLP_RECEIVER not in config["receivers"]
    assert config == expected
    deployment = _manifest(composed[collector_objects.DEPLOYMENT_KEY])
    mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {
        "name": "gateway-token",
        "mountPath": collector.TOKEN_MOUNT_DIR,
        "readOnly": True,
    } in mounts


def test_the_token_travels_by_secret_reference_only(rendered):
    composed = _composed(rendered["with-destination"])
    token = composed["collector-token"]
    manifest = _manifest(token)
    assert manifest["kind"] == "Secret"
    assert "data" not in manifest
    assert "stringData" not in manifest
    source = yaml.safe_load(DESTINATION.read_text())["spec"]["gateway"]["tokenSecretRef"]
    reference = token["spec"]["references"][0]["patchesFrom"]
    assert (reference["name"], reference["namespace"]) == (source["name"], source["namespace"])
    assert reference["fieldPath"] == f"data[{source['key']}]"
    # The copy lives beside its source, so the reference stays in its namespace.
    assert token["metadata"]["namespace"] == source["namespace"]
    text = yaml.safe_dump(_manifest(composed["collector-config"]))
    assert collector.TOKEN_FILE in text
    assert "tokenSecretRef" not in text
    assert source["name"] not in text


def test_the_builtin_mappings_are_in_effect_with_nothing_applied(rendered):
    telemetry = rendered["with-destination"][0]["status"]["telemetry"]
    assert telemetry["mappings"] == [
        {"engineType": engine, "mapping": engine, "source": mappings.SOURCE_BUILTIN}
        for engine in ("sglang", "triton-trtllm", "trtllm", "vllm")
    ]
    config_text = _manifest(_composed(rendered["with-destination"])["collector-config"])["data"][
        collector_objects.CONFIG_KEY
    ]
    for source in (
        "vllm:num_requests_running",
        "sglang:num_queue_reqs",
        "trtllm_kv_cache_utilization",
        "nv_trt_llm_request_metrics",
    ):
        assert f'"{source}"' in config_text
    accepted = _condition(rendered["with-destination"], conditions.MAPPINGS_ACCEPTED)
    assert accepted["status"] == "True"
    assert "4 built-in, 0 MetricMappings" in accepted["message"]


def test_a_platform_teams_mapping_replaces_the_builtin_for_its_engine_type(rendered):
    documents = rendered["mapping-replaces-builtin"]
    in_use = {m["engineType"]: m for m in documents[0]["status"]["telemetry"]["mappings"]}
    assert in_use["vllm"] == {
        "engineType": "vllm",
        "mapping": "vllm-fork",
        "source": mappings.SOURCE_METRIC_MAPPING,
    }
    assert in_use["sglang"]["source"] == mappings.SOURCE_BUILTIN
    config_text = _manifest(_composed(documents)["collector-config"])["data"][
        collector_objects.CONFIG_KEY
    ]
    # Replaced whole: the fork's names are renamed, the built-in's vLLM names are not.
    assert '"acme_vllm:num_requests_running"' in config_text
    assert '"vllm:num_requests_running"' not in config_text
    assert '"sglang:num_queue_reqs"' in config_text


def test_unmapped_engine_types_on_the_cluster_are_listed(rendered):
    telemetry = rendered["with-destination"][0]["status"]["telemetry"]
    assert telemetry["unmappedEngineTypes"] == ["llamacpp"]
    assert rendered["without-destination"][0]["status"]["telemetry"]["unmappedEngineTypes"] == []


def test_an_unsafe_mapping_is_refused_and_the_rest_still_renders(rendered):
    documents = rendered["unsafe-mapping"]
    refused = _condition(documents, conditions.MAPPINGS_ACCEPTED)
    assert refused["status"] == "False"
    assert "MetricMapping sneaky: spec.metrics[0].from[0]" in refused["message"]
    config_text = _manifest(_composed(documents)["collector-config"])["data"][
        collector_objects.CONFIG_KEY
    ]
    assert "sneaky" not in config_text
    assert 'IsMatch(metric.name, ""' not in config_text
    assert '"vllm:num_requests_running"' in config_text
    results = [d for d in documents if d.get("kind") == "Result"]
    assert any(
        "sneaky" in r.get("message", "") and r.get("severity") == "SEVERITY_WARNING"
        for r in results
    )


def test_every_member_gets_the_runtime_and_a_profile_per_peer(rendered):
    composed = _composed(rendered["with-destination"])
    manifests = [_manifest(c) for c in composed.values() if c["kind"] == "Object"]
    by_kind: dict[str, list[dict]] = {}
    for m in manifests:
        by_kind.setdefault(m["kind"], []).append(m)
    assert [c["metadata"]["name"] for c in by_kind["CustomResourceDefinition"]] == [
        "adaptivepolicies.autoscaling.modelplane.ai"
    ]
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    assert deployments["modelplane-agent"]["spec"]["replicas"] == 2
    agent = deployments["modelplane-agent"]["spec"]["template"]["spec"]
    # Every member, this one in-cluster and each peer through its mounted kubeconfig.
    assert agent["containers"][0]["args"] == [
        "runtime",
        "agent",
        "--member",
        "us-east-1=in-cluster",
        "--member",
        "eu-west-1=/etc/modelplane/peers/eu-west-1/kubeconfig",
        # No --prometheus-url: the example names no PromQL endpoint, and vocabulary
        # signals come from the collector in-cluster (the agent's default --signals-url).
        # Each pool's fabric label, for the inventory (the L40S pool declares none).
        "--fabric-label",
        "network.example.com/fabric:karpenter.sh/nodepool=h100",
        "--fabric-label",
        "modelplane.ai/fabric:node.kubernetes.io/instance-type=g6e.12xlarge",
        # Each priced pool (both are, in the example), for the cost series.
        "--pool-price",
        '{"driver":"gpu.nvidia.com","nodeSelector":{"karpenter.sh/nodepool":"h100"},'
        '"pool":"h100","pricePerDeviceHour":4.5}',
        "--pool-price",
        '{"driver":"gpu.nvidia.com","nodeSelector":{"node.kubernetes.io/instance-type":'
        '"g6e.12xlarge"},"pool":"l40s","pricePerDeviceHour":1.8}',
    ]
    assert agent["volumes"] == [
        {"name": "modelplane-peer-eu-west-1", "secret": {"secretName": "modelplane-peer-eu-west-1"}}
    ]
    assert deployments[contracts.SCALER_SERVICE_NAME]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ] == [
        "runtime",
        "scaler",
        # KEDA authenticates with a client certificate (the copied modelplane-scaler-tls).
        "--tls-cert-dir",
        "/etc/modelplane/scaler-tls",
    ]
    service = next(
        s for s in by_kind["Service"] if s["metadata"]["name"] == contracts.SCALER_SERVICE_NAME
    )
    assert service["metadata"]["namespace"] == contracts.SYSTEM_NAMESPACE
    assert {p["port"] for p in service["spec"]["ports"]} == {
        contracts.SCALER_PORT,
        contracts.METRICS_PORT,
    }
    profiles = by_kind["ClusterProfile"]
    assert [p["metadata"]["name"] for p in profiles] == ["eu-west-1"]
    secret = profiles[0]["metadata"]["annotations"]["modelplane.ai/credentials-secret"]
    copies = [s for s in by_kind["Secret"] if s["metadata"]["name"] == secret]
    assert copies
    assert "data" not in copies[0]


def test_no_composed_rbac_reads_secrets_or_grants_everything(rendered):
    for case in CASES:
        for c in _composed(rendered[case]).values():
            if c["kind"] != "Object" or _manifest(c)["kind"] not in {"Role", "ClusterRole"}:
                continue
            for rule in _manifest(c)["rules"]:
                assert "secrets" not in rule.get("resources", []), (case, _manifest(c)["metadata"])
                assert "*" not in rule.get("verbs", [])
                assert "*" not in rule.get("resources", [])


def test_each_stack_gets_its_substrate(rendered):
    standard = {
        c["spec"]["forProvider"]["chart"]["name"]
        for c in _composed(rendered["with-destination"]).values()
        if c["kind"] == "Release"
    }
    dynamo_composed = _composed(rendered["dynamo-with-destination"])
    dynamo = {
        c["spec"]["forProvider"]["chart"]["name"]
        for c in dynamo_composed.values()
        if c["kind"] == "Release"
    }
    assert {"lws", "cert-manager", "gateway-helm", "nvidia-dra-driver-gpu"} <= standard
    assert not {"grove-charts", "kai-scheduler"} & standard
    assert {"grove-charts", "kai-scheduler", "modelexpress"} <= dynamo
    assert "lws" not in dynamo
    queues = [
        _manifest(c)
        for c in dynamo_composed.values()
        if c["kind"] == "Object" and _manifest(c)["kind"] == "Queue"
    ]
    assert {q["metadata"]["name"]: q["spec"].get("parentQueue") for q in queues} == {
        "modelplane-root": None,
        "modelplane": "modelplane-root",
    }
    for documents in rendered.values():
        for c in _composed(documents).values():
            if c["kind"] == "ClusterProviderConfig":
                continue  # cluster-scoped, as the XR is
            # A cluster-scoped XR composing namespaced resources must name a namespace.
            assert c["metadata"].get("namespace"), c["metadata"]["name"]


def test_composed_manifests_match_the_published_schemas(rendered, tmp_path):
    """Objects (and the Gateway API kinds inside them) against their CRDs with `crossplane
    beta validate`; core kinds against Kubernetes' OpenAPI document, strictly. Kinds whose
    schemas the schemas tool does not fetch (provider-helm's Release, ClusterProfile, KAI's
    Queue) are left out and named here."""
    schemas = require_tool("schemas").resolve()
    core = core_schemas(schemas / "openapi")
    unchecked = {"Release", "ClusterProfile", "Queue"}
    objects, custom, seen = [], [], set()
    for documents in rendered.values():
        for c in _composed(documents).values():
            if c["kind"] != "Object":
                seen.add(c["kind"])
                continue
            objects.append(c)
            manifest = _manifest(c)
            seen.add(manifest["kind"])
            if core.knows(manifest):
                assert core.errors(manifest) == [], (manifest["kind"], manifest["metadata"]["name"])
            elif manifest["kind"] not in unchecked:
                custom.append(manifest)
    assert {"Gateway", "GatewayClass"} <= {m["kind"] for m in custom}
    assert unchecked <= seen
    files = [tmp_path / "objects.yaml", tmp_path / "custom.yaml"]
    files[0].write_text(yaml.safe_dump_all(objects))
    files[1].write_text(yaml.safe_dump_all(custom))
    done = validate_objects(schemas, files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_invalid_destination_keeps_the_running_collector(function_servers, rendered, tmp_path):
    # The collector composed while the destination was valid is observed; then the
    # destination breaks. The collector keeps running its last config; status says why.
    observed = tmp_path / "observed.yaml"
    running = [d for d in rendered["with-destination"][1:] if d.get("kind") != "Result"]
    observed.write_text(yaml.safe_dump_all(running))
    required = tmp_path / "required"
    required.mkdir()
    for i, path in enumerate([*BUILTIN, INPUTS / "destination-invalid.yaml"]):
        shutil.copy(path, required / f"{i:02d}-{path.name}")
    result = render.render(function_servers, US_EAST, required=required, observed=observed)
    assert result.returncode == 0, result.stderr
    composed = _composed(result.documents)
    kept = _manifest(composed["collector-config"])["data"][collector_objects.CONFIG_KEY]
    before = _manifest(_composed(rendered["with-destination"])["collector-config"])
    assert kept == before["data"][collector_objects.CONFIG_KEY]
    assert collector_objects.DEPLOYMENT_KEY in composed
    ready = _condition(result.documents, conditions.COLLECTOR_READY)
    assert ready["reason"] == "TelemetryDestinationInvalid"
    assert "spec.gateway.endpoint" in ready["message"]
    assert "keeps its last config" in result.documents[0]["status"]["telemetry"]["reason"]


INVENTORY = {
    "observedAt": "2026-12-01T10:00:00Z",
    "nodes": {"total": 3, "ready": 2, "cordoned": 0, "draining": 0, "unreachable": 1},
    "gpus": [{"deviceClass": "NVIDIA H100", "total": 24, "used": 8, "unhealthy": 8}],
    "fabrics": [{"name": "nvl-a", "nodes": 3, "largestFreeBlock": 1}],
    "replicas": {"ready": 1, "starting": 0, "draining": 0, "failed": 0},
    "idleReplicas": [
        {"namespace": "ml", "name": "llama-x", "deployment": "llama", "idleSeconds": 900, "gpus": 8}
    ],
    "idleAfterSeconds": 600,
    "requestCounters": "Available",
}


def test_the_agents_inventory_record_reaches_the_cluster_status(function_servers, tmp_path):
    """The agent's record, as provider-kubernetes reports the observed ConfigMap, is the
    InferenceCluster's status.inventory, valid for the XRD; the record never gates the
    cluster's readiness."""
    import json  # noqa: PLC0415

    from functions.common.inventory import INVENTORY_RECORD_NAME, KEY_INVENTORY  # noqa: PLC0415
    from functions.compose_serving_stack.runtime_hosting import INVENTORY_KEY  # noqa: PLC0415

    first = _render(function_servers, tmp_path, "without-destination")
    observed_object = _composed(first)[INVENTORY_KEY]
    assert observed_object["spec"]["managementPolicies"] == ["Observe"]
    assert _manifest(observed_object)["metadata"]["name"] == INVENTORY_RECORD_NAME
    observed_object["status"] = {
        "atProvider": {
            "manifest": {
                **_manifest(observed_object),
                "data": {KEY_INVENTORY: json.dumps(INVENTORY)},
            }
        }
    }
    observed = tmp_path / "observed.yaml"
    observed.write_text(yaml.safe_dump(observed_object))
    required = tmp_path / "required"
    required.mkdir()
    shutil.copy(INPUTS / "peer-cluster.yaml", required / "peer-cluster.yaml")
    result = render.render(function_servers, US_EAST, required=required, observed=observed)
    assert result.returncode == 0, result.stderr + function_servers.logs()
    assert result.documents[0]["status"]["inventory"] == INVENTORY
    xrd = yaml.safe_load((REPO / "apis" / "inferenceclusters" / "definition.yaml").read_text())
    schema = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    import jsonschema  # noqa: PLC0415

    declared = schema["properties"]["status"]["properties"]["inventory"]
    jsonschema.validate(result.documents[0]["status"]["inventory"], declared)
    # The API server prunes what the XRD does not declare: every field the agent writes
    # must be declared, or it never reaches `modelplane status`.
    assert set(INVENTORY) <= set(declared["properties"])


def test_a_cluster_from_a_kubeconfig_is_reached_through_provider_configs_it_composes(rendered):
    composed = _composed(rendered["kubeconfig"])
    configs = {k: c for k, c in composed.items() if c["kind"] == "ClusterProviderConfig"}
    assert sorted(configs) == ["providerconfig-helm", "providerconfig-kubernetes"]
    for config in configs.values():
        assert config["metadata"]["name"] == "ap-south-1"
        assert config["spec"]["credentials"]["secretRef"]["name"] == "ap-south-1-kubeconfig"
    others = [c for k, c in composed.items() if k not in configs]
    assert others
    assert {
        (c["spec"]["providerConfigRef"]["kind"], c["spec"]["providerConfigRef"]["name"])
        for c in others
    } == {("ClusterProviderConfig", "ap-south-1")}


def test_a_device_class_the_member_lacks_is_reported_and_warned(function_servers, tmp_path):
    """The member answered for gpu.nvidia.com and has no dra.net: the status says which,
    a warning says what it means, and neither gates the cluster's readiness."""
    from functions.compose_serving_stack import device_classes  # noqa: PLC0415

    first = _render(function_servers, tmp_path, "without-destination")
    composed = _composed(first)
    present = composed[device_classes.key("gpu.nvidia.com")]
    missing = composed[device_classes.key("dra.net")]
    assert present["spec"]["managementPolicies"] == ["Observe"]
    present["status"] = {"atProvider": {"manifest": _manifest(present)}}
    missing["status"] = {
        "conditions": [
            {
                "type": "Synced",
                "status": "False",
                "reason": "ReconcileError",
                "message": "cannot observe external resource: external resource does not exist",
            }
        ]
    }
    observed = tmp_path / "observed.yaml"
    observed.write_text(yaml.safe_dump_all([present, missing]))
    required = tmp_path / "required"
    required.mkdir()
    shutil.copy(INPUTS / "peer-cluster.yaml", required / "peer-cluster.yaml")
    result = render.render(function_servers, US_EAST, required=required, observed=observed)
    assert result.returncode == 0, result.stderr + function_servers.logs()
    assert result.documents[0]["status"]["deviceClasses"] == [
        {"name": "dra.net", "state": "Missing"},
        {"name": "gpu.nvidia.com", "state": "Present"},
    ]
    warnings = [
        d["message"]
        for d in result.documents
        if d["kind"] == "Result" and d["severity"] == "SEVERITY_WARNING"
    ]
    assert any("DeviceClass dra.net" in w and "does not exist" in w for w in warnings), warnings
    stack_ready = next(
        c
        for c in result.documents[0]["status"]["conditions"]
        if c["type"] == conditions.STACK_READY
    )
    assert "deviceclass" not in stack_ready["message"]
