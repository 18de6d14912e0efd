"""One bad object never stops the fleet, and no credential leaves in a message.

Issue 20, classes 2 and 4: a malformed InferenceCluster or ModelReplica is reported and
frozen (never treated as gone); an exception nobody anticipated becomes a fatal result
naming the XR, with every composed resource kept; URL credentials are refused without
being echoed, and redacted from any text that may quote them.
"""

import asyncio
import re
from pathlib import Path

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import contracts
from functions.common.quantity import parse_quantity
from functions.common.redact import REDACTED, redact, url_credentials
from functions.common.telemetrydestination import (
    DEFAULT_SECRET_NAMESPACES,
    InvalidDestination,
    parse_destination,
    secret_namespaces_from,
)
from functions.compose_model_deployment.cel_env import (
    DeviceProfile,
    SelectorError,
    compile_selector,
    evaluate,
)
from functions.compose_model_deployment.devices import check_selectors
from functions.compose_model_deployment.fn import (
    REQUIRED_CLUSTERS,
    FunctionRunner,
)
from functions.compose_model_deployment.model import InputError, read_cluster, read_deployment
from functions.compose_model_replica.model import InvalidReplica
from functions.compose_model_replica.model import parse as parse_replica
from functions.compose_serving_stack import fn as stack_fn
from functions.compose_serving_stack.compose import InvalidCluster
from functions.compose_serving_stack.compose import parse_cluster as parse_stack_cluster
from functions.compose_serving_stack.ledger import cluster_ledger
from functions.compose_telemetry.fn import FunctionRunner as TelemetryRunner
from tests.unit.test_placement_status import NOW, REPO_EXAMPLE

REPO = Path(__file__).resolve().parents[2]
REPLICA_INPUTS = REPO / "tests" / "unit" / "testdata" / "model_replica" / "inputs"


def _cluster(name: str) -> dict:
    files = {"us-east-1": "us-east-h100.yaml", "eu-west-1": "eu-west-b200.yaml"}
    return yaml.safe_load((REPO / "examples" / "inferenceclusters" / files[name]).read_text())


def _our_replica(cluster: str, pool: str, replicas: int) -> dict:
    return {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_MODEL_REPLICA,
        "metadata": {
            "name": f"llama-3-1-8b-{cluster}",
            "namespace": "ml-team",
            "labels": {"x": "y"},
        },
        "spec": {
            "deployment": "llama-3-1-8b",
            "replicas": replicas,
            "cluster": {"name": cluster},
            "nodePool": {"name": pool},
            "engines": [{"members": [{"role": "Unified", "devices": [{"count": 1}]}]}],
        },
    }


def _request(clusters: list[dict], observed: dict[str, dict]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(yaml.safe_load((REPO / REPO_EXAMPLE).read_text()))
    for key, body in observed.items():
        req.observed.resources[key].resource.update(body)
    req.required_resources[REQUIRED_CLUSTERS].SetInParent()
    for c in clusters:
        req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(c)
    return req


def _run(req, runner=None):
    return asyncio.run((runner or FunctionRunner(clock=lambda: NOW)).RunFunction(req))


def _severities(rsp, severity):
    return [r.message for r in rsp.results if r.severity == severity]


MALFORMED_CLUSTERS = {
    "a_driver_version_as_real_drivers_publish_it": lambda ic: ic["spec"]["nodePools"][0]["devices"][
        "attributes"
    ].update(driverVersion={"version": "535.129.03"}),
    "an_attribute_that_is_not_a_typed_value": lambda ic: ic["spec"]["nodePools"][0]["devices"][
        "attributes"
    ].update(productName="H100"),
    "node_pools_that_are_not_a_list_of_objects": lambda ic: ic["spec"].update(nodePools=["h100"]),
    "a_capacity_that_is_not_a_quantity": lambda ic: ic["spec"]["nodePools"][0]["devices"][
        "capacity"
    ].update(memory="80 gigs"),
    "a_node_count_that_is_infinite": lambda ic: ic["spec"]["nodePools"][0].update(
        nodes=float("inf")
    ),
}


@pytest.mark.parametrize("break_it", MALFORMED_CLUSTERS.values(), ids=MALFORMED_CLUSTERS.keys())
def test_a_malformed_cluster_keeps_the_replicas_it_runs_and_says_why(break_it):
    us, eu = _cluster("us-east-1"), _cluster("eu-west-1")
    break_it(us)
    ours = _our_replica("us-east-1", "h100", 2)
    rsp = _run(_request([us, eu], {"modelreplica-us-east-1": ours}))
    assert not _severities(rsp, fnv1.SEVERITY_FATAL)
    kept = resource.struct_to_dict(rsp.desired.resources["modelreplica-us-east-1"].resource)
    assert kept["spec"] == ours["spec"]  # exactly as observed: not moved, not rewritten
    warnings = _severities(rsp, fnv1.SEVERITY_WARNING)
    assert any("keeping 2 replicas on us-east-1 as they are" in w for w in warnings), warnings
    # The rest of the deployment (3 replicas) is placed on the readable cluster.
    placed = resource.struct_to_dict(rsp.desired.resources["modelreplica-eu-west-1"].resource)
    assert placed["spec"]["replicas"] == 1


def test_a_malformed_replica_of_another_deployment_is_left_out_of_the_ledger_with_a_warning():
    other = _our_replica("us-east-1", "h100", 1)
    other["metadata"].update(name="other", namespace="team-b")
    other["spec"].update(deployment="other", replicas="many")
    ledger, warnings = cluster_ledger("us-east-1", [other])
    assert ledger == {"replicas": 0, "pools": []}
    assert any("ModelReplica team-b/other: spec.replicas" in w for w in warnings), warnings


@pytest.mark.parametrize(
    "ledger",
    [
        {"pools": [{"name": "h100", "holders": ["not a holder line"]}]},
        {"pools": [{"name": "h100", "holders": ["- team-b other other many /1"]}]},
        {"pools": "h100"},
    ],
    ids=["too_few_fields", "replicas_not_a_number", "pools_not_a_list"],
)
def test_a_cluster_whose_ledger_cannot_be_read_keeps_the_replicas_it_runs_and_says_why(ledger):
    us, eu = _cluster("us-east-1"), _cluster("eu-west-1")
    us["status"] = {"ledger": ledger}
    ours = _our_replica("us-east-1", "h100", 2)
    rsp = _run(_request([us, eu], {"modelreplica-us-east-1": ours}))
    assert not _severities(rsp, fnv1.SEVERITY_FATAL)
    kept = resource.struct_to_dict(rsp.desired.resources["modelreplica-us-east-1"].resource)
    assert kept["spec"] == ours["spec"]
    warnings = _severities(rsp, fnv1.SEVERITY_WARNING)
    assert any("status.ledger" in w and "us-east-1" in w for w in warnings), warnings


class _Exploding(FunctionRunner):
    def _compose(self, *args, **kwargs):
        raise RuntimeError("boom at https://admin:hunter2@example.com/?token=abc")


def test_an_unexpected_exception_is_a_fatal_naming_the_xr_that_keeps_what_runs():
    ours = _our_replica("us-east-1", "h100", 3)
    req = _request([_cluster("us-east-1")], {"modelreplica-us-east-1": ours})
    rsp = _run(req, _Exploding(clock=lambda: NOW))
    fatal = _severities(rsp, fnv1.SEVERITY_FATAL)
    assert len(fatal) == 1
    assert fatal[0].startswith("ModelDeployment ml-team/llama-3-1-8b: unexpected error")
    assert "hunter2" not in fatal[0]
    assert "abc" not in fatal[0]
    assert list(rsp.desired.resources) == ["modelreplica-us-east-1"]


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("https://user:pw@otlp.example.com/v1", ["user-info (user:password@)"]),
        ("https://otlp.example.com/v1?api_key=s3cret", ["query parameter 'api_key'"]),
        ("https://otlp.example.com/v1?X-Amz-Signature=aa", ["query parameter 'X-Amz-Signature'"]),
        ("https://otlp.example.com/v1?region=eu", []),
    ],
)
def test_url_credentials_are_named_without_their_values(url, found):
    assert url_credentials(url) == found


def test_redact_removes_user_info_and_credential_query_values():
    text = "dial 'https://u:p4ss@h:443/x?sig=abc&region=eu' failed"
    assert redact(text) == f"dial 'https://{REDACTED}@h:443/x?sig={REDACTED}&region=eu' failed"


# --- TelemetryDestination: credentials and Secret namespaces -------------------------------


def _destination(**exporter) -> dict:
    body = yaml.safe_load((REPO / "examples" / "telemetrydestinations" / "fleet.yaml").read_text())
    body["spec"]["exporter"].update(exporter)
    return body


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://admin:hunter2@metrics.example.com/api/v1/write",
        "https://metrics.example.com/api/v1/write?api_key=hunter2",
        "https://metrics.example.com/api/v1/write?region=eu&X-Amz-Signature=hunter2",
        "https://hunter2@metrics.example.com/api/v1/write",
        "admin:hunter2@metrics.example.com:4317",
    ],
)
def test_an_endpoint_with_a_credential_is_refused_without_echoing_it(endpoint):
    with pytest.raises(InvalidDestination) as refused:
        parse_destination(_destination(endpoint=endpoint))
    assert "must not carry credentials" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_a_refused_destination_never_reaches_a_condition_with_its_password():
    xr = _destination(endpoint="https://admin:hunter2@metrics.example.com/api/v1/write")
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    rsp = asyncio.run(TelemetryRunner().RunFunction(req))
    assert "hunter2" not in str(rsp)
    assert [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def test_secret_references_are_confined_to_the_allowed_namespaces():
    xr = _destination()
    xr["spec"]["gateway"]["tokenSecretRef"]["namespace"] = "kube-system"
    with pytest.raises(InvalidDestination) as refused:
        parse_destination(xr)
    assert "spec.gateway.tokenSecretRef.namespace: Secrets of a TelemetryDestination" in str(
        refused.value
    )
    allowed = secret_namespaces_from("kube-system, crossplane-system")
    assert parse_destination(xr, allowed).gateway.token.namespace == "kube-system"


def test_the_allowed_namespaces_default_when_the_setting_is_empty():
    assert secret_namespaces_from("") == secret_namespaces_from(None) == DEFAULT_SECRET_NAMESPACES


def test_a_trailing_newline_does_not_pass_a_full_string_pattern():
    xr = _destination()
    xr["spec"]["gateway"]["endpoint"] = "gateway.example.com:4317\n"
    with pytest.raises(InvalidDestination, match=r"spec\.gateway\.endpoint"):
        parse_destination(xr)


# --- Bounded cost: selectors and quantities ------------------------------------------------

_LIST_100 = "[" + ",".join(str(i) for i in range(100)) + "]"


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("device.driver == 'x' && " * 60 + "true", "at most 1024"),
        ("(" * 33 + "true" + ")" * 33, "nests brackets 33 deep; at most 32"),
        (f"{_LIST_100}.all(x, {_LIST_100}.all(y, x + y >= 0))", "exceeds the budget"),
        (f"{_LIST_100}.map(x, {_LIST_100}.map(y, x)).size() > 0", "exceeds the budget"),
        (
            "[1].all(a, [1].all(b, [1].all(c, device.attributes['x'].all(k, "
            "device.attributes['x'].all(j, device.attributes['x'].all(i, true))))))",
            "exceeds the budget",
        ),
    ],
)
def test_a_selector_over_its_limits_is_refused_naming_the_limit(selector, message):
    with pytest.raises(SelectorError, match=message):
        compile_selector(selector)


def test_a_selector_over_budget_is_a_fatal_naming_the_field():
    req = _request([_cluster("us-east-1")], {})
    engines = req.observed.composite.resource["spec"]["template"]["spec"]["engines"]
    selectors = engines[0]["members"][0]["nodeSelector"]["devices"][0]["selectors"]
    selectors[0]["cel"] = f"{_LIST_100}.all(x, {_LIST_100}.all(y, x + y >= 0))"
    fatal = _severities(_run(req), fnv1.SEVERITY_FATAL)
    assert len(fatal) == 1
    assert "devices[0].selectors[0].cel: estimated cost exceeds the budget" in fatal[0]


def test_a_value_that_doubles_at_run_time_stops_at_the_value_budget():
    binds = "".join(f"cel.bind(a{i + 1}, a{i} + a{i}, " for i in range(16))
    selector = f'cel.bind(a0, "xxxxxxxxxxxxxxxx", {binds}size(a16) > 0' + ")" * 17
    result = evaluate(selector, DeviceProfile("gpu.nvidia.com", (), ()))
    assert not result.matched
    assert "over the runtime cost budget" in result.error


def test_string_concatenation_compares_as_a_string():
    assert evaluate('"ab" + "cd" == "abcd"', DeviceProfile("d", (), ())).matched


@pytest.mark.parametrize("text", ["1e999999999", "1e-999999999", "9" * 70, "1e19", "20Ei", "1Gi\n"])
def test_quantities_are_bounded_in_exponent_magnitude_and_length(text):
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_a_huge_capacity_is_a_field_error_not_a_hang():
    ic = _cluster("us-east-1")
    ic["spec"]["nodePools"][0]["devices"]["capacity"]["memory"] = "1e999999999"
    with pytest.raises(InputError, match=r"devices\.capacity\.memory"):
        read_cluster(ic)


# --- What the XRD checks, checked again ------------------------------------------------


def _deployment_xr() -> dict:
    return yaml.safe_load((REPO / REPO_EXAMPLE).read_text())


RECHECKED = {
    "a_model_in_the_suites_own_namespace": (
        lambda xr: xr["metadata"].update(namespace=contracts.SYSTEM_NAMESPACE),
        "metadata.namespace",
    ),
    "replicas_past_the_xrd_maximum": (
        lambda xr: xr["spec"].update(replicas=1001),
        "spec.replicas: 1001 is outside 0-1000",
    ),
    "parking_enabled_as_a_string": (
        lambda xr: xr["spec"].update(parking={"enabled": "false"}),
        "spec.parking.enabled: must be true or false",
    ),
    "a_failure_threshold_of_zero": (
        lambda xr: xr["spec"].update(parking={"maxConsecutiveFailures": 0}),
        "spec.parking.maxConsecutiveFailures: 0 is outside 1-100",
    ),
    "five_engines": (
        lambda xr: xr["spec"]["template"]["spec"].update(
            engines=xr["spec"]["template"]["spec"]["engines"] * 5
        ),
        "spec.template.spec.engines: has 5 entries; at most 4",
    ),
}


@pytest.mark.parametrize(("break_it", "message"), RECHECKED.values(), ids=RECHECKED.keys())
def test_the_function_rechecks_what_the_xrd_checks(break_it, message):
    xr = _deployment_xr()
    break_it(xr)
    with pytest.raises(InputError, match=re.escape(message)):
        read_deployment(xr)


def test_a_version_with_a_trailing_newline_is_not_a_version():
    assert not evaluate('isSemver("1.2.3\\n")', DeviceProfile("d", (), ())).matched
    ic = _cluster("us-east-1")
    ic["spec"]["nodePools"][0]["devices"]["attributes"]["driverVersion"] = {"version": "1.2.3\n"}
    with pytest.raises(InputError, match="not a semantic version"):
        read_cluster(ic)


def test_a_model_replica_in_the_suites_own_namespace_is_refused():
    xr = yaml.safe_load(next(iter(sorted(REPLICA_INPUTS.glob("*.yaml")))).read_text())
    xr["metadata"]["namespace"] = contracts.SYSTEM_NAMESPACE
    with pytest.raises(InvalidReplica, match=r"metadata\.namespace"):
        parse_replica(xr)


@pytest.mark.parametrize(
    "uri",
    [
        "https://user:hunter2@huggingface.co/meta-llama/Llama-3.1-8B",
        "s3://bucket/model?X-Amz-Signature=hunter2",
    ],
)
def test_a_model_source_with_a_credential_is_refused_without_echoing_it(uri):
    xr = _deployment_xr()
    xr["spec"]["source"]["uri"] = uri
    with pytest.raises(InputError, match="must not carry credentials") as refused:
        read_deployment(xr)
    assert "hunter2" not in str(refused.value)


def test_an_oci_digest_is_not_mistaken_for_a_credential():
    xr = _deployment_xr()
    xr["spec"]["source"]["uri"] = "oci://registry.example.com/models/llama@sha256:abcd"
    assert read_deployment(xr).source["uri"].endswith("@sha256:abcd")


def test_a_prometheus_url_with_a_password_is_refused_without_echoing_it():
    ic = _cluster("us-east-1")
    ic["spec"]["runtime"] = {"prometheusURL": "http://admin:hunter2@prometheus:9090"}
    with pytest.raises(InvalidCluster, match="must not carry credentials") as refused:
        parse_stack_cluster(ic)
    assert "hunter2" not in str(refused.value)


def test_a_deployment_whose_selectors_together_are_over_budget_is_refused():
    xr = _deployment_xr()
    selector = "[" + ",".join(str(i) for i in range(60)) + "].all(x, x + 1 > 0)"
    devices = [
        {
            "name": f"gpu{k}",
            "count": 1,
            "selectors": [{"cel": f"{selector} || {j} > 0"} for j in range(8)],
        }
        for k in range(4)
    ]
    member = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"] = devices
    with pytest.raises(InputError, match="the device selectors together"):
        check_selectors(read_deployment(xr))


# --- Names both functions agree on; a stack that does not change ---------------------


@pytest.mark.parametrize("name", ["us.east.1", "c" * 64, "US-EAST-1"])
def test_both_functions_refuse_the_same_cluster_names(name):
    """compose-model-deployment never places on a cluster compose-serving-stack would
    refuse to install: it reports the cluster and places on the others."""
    odd, eu = _cluster("us-east-1"), _cluster("eu-west-1")
    odd["metadata"]["name"] = name
    with pytest.raises(InvalidCluster, match=r"metadata\.name: .*must be a DNS label"):
        parse_stack_cluster(odd)
    rsp = _run(_request([odd, eu], {}))
    assert not _severities(rsp, fnv1.SEVERITY_FATAL)
    placed = [
        resource.struct_to_dict(r.resource)["spec"]["cluster"]["name"]
        for r in rsp.desired.resources.values()
        if resource.struct_to_dict(r.resource).get("kind") == contracts.KIND_MODEL_REPLICA
    ]
    assert placed == ["eu-west-1"]
    with pytest.raises(InputError, match=r"metadata\.name.*must be a DNS label"):
        read_cluster(odd)


def _stack_request(stack: str, observed_keys: list[str]) -> fnv1.RunFunctionRequest:
    xr = _cluster("us-east-1")
    xr["spec"]["stack"] = stack
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for key in observed_keys:
        req.observed.resources[key].resource.update({"apiVersion": "v1", "kind": "X"})
    for name in (
        stack_fn.REQUIRED_MAPPINGS,
        stack_fn.REQUIRED_DESTINATIONS,
        stack_fn.REQUIRED_CLUSTERS,
        stack_fn.REQUIRED_REPLICAS,
    ):
        req.required_resources[name].SetInParent()
    return req


@pytest.mark.parametrize(
    ("installed", "asked"),
    [
        ("leaderworkerset", contracts.STACK_DYNAMO),
        ("grove", contracts.STACK_STANDARD),
    ],
)
def test_the_stack_of_an_installed_cluster_cannot_change(installed, asked):
    rsp = asyncio.run(stack_fn.FunctionRunner().RunFunction(_stack_request(asked, [installed])))
    (fatal,) = _severities(rsp, fnv1.SEVERITY_FATAL)
    assert "spec.stack is immutable" in fatal
    assert f"not {asked}" in fatal


def test_the_same_stack_composes_as_before():
    req = _stack_request(contracts.STACK_STANDARD, ["leaderworkerset"])
    rsp = asyncio.run(stack_fn.FunctionRunner().RunFunction(req))
    assert not _severities(rsp, fnv1.SEVERITY_FATAL)
    assert "leaderworkerset" in rsp.desired.resources


# --- A composed object over an API limit is refused, naming what to shrink -------------


def max_size_mapping(i: int) -> dict:
    """A MetricMapping at the XRD's bounds: 64 metrics of 8 `from` names of up to 200
    characters, 32 labels."""
    return {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_METRIC_MAPPING,
        "metadata": {"name": f"engine-{i}"},
        "spec": {
            "engine": f"engine-{i}",
            "metrics": [
                {
                    "to": f"modelplane_custom_{m}",
                    "custom": True,
                    "from": [f"e{i}_m{m}_f{f}_" + "x" * 180 for f in range(8)],
                }
                for m in range(64)
            ],
            "labels": [{"from": f"l{j}" + "y" * 90, "to": f"t{j}"} for j in range(32)],
        },
    }


def _stack_with_mappings(mappings: list[dict]) -> fnv1.RunFunctionResponse:
    req = _stack_request(contracts.STACK_STANDARD, [])
    destination = yaml.safe_load((REPO / "examples/telemetrydestinations/fleet.yaml").read_text())
    req.observed.composite.resource.update(_cluster("us-east-1"))
    for name, items in (
        (stack_fn.REQUIRED_MAPPINGS, mappings),
        (stack_fn.REQUIRED_DESTINATIONS, [destination]),
    ):
        for item in items:
            req.required_resources[name].items.add().resource.update(item)
    return asyncio.run(stack_fn.FunctionRunner().RunFunction(req))


def test_a_collector_config_over_the_configmap_limit_is_refused_naming_the_mappings():
    one = _stack_with_mappings([max_size_mapping(0)])
    assert not _severities(one, fnv1.SEVERITY_FATAL)
    assert "collector-config" in one.desired.resources
    many = _stack_with_mappings([max_size_mapping(i) for i in range(3)])
    (fatal,) = _severities(many, fnv1.SEVERITY_FATAL)
    assert "ConfigMap modelplane-collector" in fatal
    assert "over the limit of 1,048,576" in fatal
    assert "shrink the MetricMappings in effect" in fatal


# --- What the InferenceCluster and ModelReplica XRDs check, checked again ---------------

CLUSTER_BOUNDS = {
    "nodes_past_the_xrd_maximum": (
        lambda ic: ic["spec"]["nodePools"][0].update(nodes=10001),
        r"spec\.nodePools\[0\]\.nodes: 10001 is outside 0-10000",
    ),
    "negative_max_nodes": (
        lambda ic: ic["spec"]["nodePools"][0].update(maxNodes=-1),
        r"spec\.nodePools\[0\]\.maxNodes: -1 is outside 0-10000",
    ),
    "devices_per_node_past_64": (
        lambda ic: ic["spec"]["nodePools"][0]["devices"].update(perNode=65),
        r"devices\.perNode: 65 is outside 1-64",
    ),
    "nodes_as_a_bool": (
        lambda ic: ic["spec"]["nodePools"][0].update(nodes=True),
        r"nodes: must be an integer",
    ),
    "thirty_three_pools": (
        lambda ic: ic["spec"].update(nodePools=ic["spec"]["nodePools"][:1] * 33),
        r"spec\.nodePools: has 33 entries; at most 32",
    ),
}


@pytest.mark.parametrize(
    ("break_it", "message"), CLUSTER_BOUNDS.values(), ids=CLUSTER_BOUNDS.keys()
)
def test_placement_rechecks_the_cluster_bounds(break_it, message):
    ic = _cluster("us-east-1")
    break_it(ic)
    with pytest.raises(InputError, match=message):
        read_cluster(ic)


def test_a_node_tier_written_as_a_string_is_refused_not_turned_on():
    ic = _cluster("us-east-1")
    ic["spec"]["telemetry"] = {"nodeTier": "false"}
    with pytest.raises(InvalidCluster, match=r"spec\.telemetry\.nodeTier: must be true or false"):
        parse_stack_cluster(ic)


REPLICA_BOUNDS = {
    "replicas_past_1000": (lambda spec: spec.update(replicas=1001), "spec.replicas"),
    "replicas_as_a_string": (lambda spec: spec.update(replicas="3"), "spec.replicas"),
    "replicas_as_a_bool": (lambda spec: spec.update(replicas=True), "spec.replicas"),
    "a_port_past_65535": (lambda spec: spec["engines"][0].update(port=70000), "port"),
    "worker_nodes_past_63": (
        lambda spec: spec["engines"][0]["members"][0].update(workerNodes=64),
        "workerNodes",
    ),
    "five_members": (
        lambda spec: spec["engines"][0].update(members=spec["engines"][0]["members"] * 5),
        "members",
    ),
}


@pytest.mark.parametrize(("break_it", "field"), REPLICA_BOUNDS.values(), ids=REPLICA_BOUNDS.keys())
def test_the_replica_function_rechecks_the_replica_bounds(break_it, field):
    xr = yaml.safe_load(next(iter(sorted(REPLICA_INPUTS.glob("*.yaml")))).read_text())
    parse_replica(xr)  # valid as it is
    break_it(xr["spec"])
    with pytest.raises(InvalidReplica) as refused:
        parse_replica(xr)
    assert field in refused.value.path


def test_a_whole_float_is_still_an_integer():
    """Numbers arrive from a protobuf Struct as floats: 2.0 is the integer 2."""
    xr = yaml.safe_load(next(iter(sorted(REPLICA_INPUTS.glob("*.yaml")))).read_text())
    xr["spec"]["replicas"] = 2.0
    assert parse_replica(xr).replicas == 2


REPLICA_TEXT = {
    "a_deployment_that_is_a_url": (
        lambda spec: spec.update(deployment="https://admin:hunter2@evil.example.com/v1"),
        "spec.deployment",
    ),
    "a_driver_with_a_password": (
        lambda spec: spec["nodePool"].update(driver="https://admin:hunter2@evil.example.com"),
        "spec.nodePool.driver",
    ),
    "a_node_selector_value_that_is_no_label_value": (
        lambda spec: spec["nodePool"].update(nodeSelector={"pool": "x" * 64}),
        "spec.nodePool.nodeSelector[pool]",
    ),
    "a_dotted_cluster_name": (
        lambda spec: spec["cluster"].update(name="us.east.1"),
        "spec.cluster.name",
    ),
}


@pytest.mark.parametrize(("break_it", "path"), REPLICA_TEXT.values(), ids=REPLICA_TEXT.keys())
def test_replica_text_that_would_reach_the_member_is_refused_without_echo(break_it, path):
    xr = yaml.safe_load(next(iter(sorted(REPLICA_INPUTS.glob("*.yaml")))).read_text())
    break_it(xr["spec"])
    with pytest.raises(InvalidReplica) as refused:
        parse_replica(xr)
    assert refused.value.path == path
    assert "hunter2" not in str(refused.value)
