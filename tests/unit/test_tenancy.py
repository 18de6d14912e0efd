"""Names and references that cannot be taken over (issue 34, item 5), through each
function's gRPC shell as Crossplane calls it.

- Tenant kinds in a reserved namespace are refused naming metadata.namespace.
- An InferenceCluster's kubeconfig Secret is only read from the platform's Secret
  namespaces; one named `default` or named like a provider config it did not compose is
  refused, and the existing provider config is not in the response.
- A ModelReplica's providerConfigRef is the one its InferenceCluster names or composes,
  and its Namespace's Pod Security labels are the cluster's, whatever the replica says.
"""

import asyncio
import copy
from pathlib import Path

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from functions.common import pod_policy, tenancy
from functions.common.reader import InputError
from functions.compose_model_deployment import fn as deployment_fn
from functions.compose_model_deployment.modelcache import read_cache
from functions.compose_model_replica import fn as replica_fn
from functions.compose_model_replica.cluster import REQUIRED_CLUSTER
from functions.compose_serving_stack import fn as stack_fn
from functions.compose_serving_stack import names

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
KUBECONFIG_CLUSTER = EXAMPLES / "inferenceclusters" / "kubeconfig" / "ap-south-1.yaml"
REPLICA = REPO / "tests" / "render" / "testdata" / "modelreplica.yaml"
US_EAST = EXAMPLES / "inferenceclusters" / "us-east-h100.yaml"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _fatal(rsp) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def _run(runner, req):
    return asyncio.run(runner.RunFunction(req))


# --- reserved namespaces ------------------------------------------------------------------


RESERVED = ["kube-system", "kube-public", "crossplane-system", "keda", "modelplane-system"]


@pytest.mark.parametrize("namespace", [*RESERVED, "kube-anything", "envoy-gateway-system"])
def test_a_model_deployment_in_a_reserved_namespace_is_refused(namespace):
    xr = _load(EXAMPLES / "modeldeployments" / "llama-8b-vllm.yaml")
    xr["metadata"]["namespace"] = namespace
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    (message,) = _fatal(_run(deployment_fn.FunctionRunner(), req))
    assert "metadata.namespace: " in message
    assert "in a tenant namespace" in message


@pytest.mark.parametrize("namespace", RESERVED)
def test_a_model_cache_in_a_reserved_namespace_is_refused(namespace):
    xr = _load(EXAMPLES / "modelcaches" / "llama-3-3-70b.yaml")
    xr["metadata"]["namespace"] = namespace
    with pytest.raises(InputError, match=r"metadata\.namespace: .*in a tenant namespace"):
        read_cache(xr)


@pytest.mark.parametrize("namespace", RESERVED)
def test_a_model_replica_in_a_reserved_namespace_is_refused(namespace):
    xr = _load(REPLICA)
    xr["metadata"]["namespace"] = namespace
    (message,) = _fatal(_run(replica_fn.FunctionRunner(), _replica_request(xr, _load(US_EAST))))
    assert "metadata.namespace: " in message


def test_the_platform_adds_reserved_namespaces(monkeypatch):
    assert tenancy.namespace_problem("team-infra", "deploy models") is None
    monkeypatch.setenv(tenancy.ENV_RESERVED_NAMESPACES, "team-infra, monitoring")
    assert "reserved for the platform" in tenancy.namespace_problem("team-infra", "deploy models")
    assert tenancy.namespace_problem("monitoring", "x") is not None
    # The built-in ones stay reserved whatever the platform lists.
    assert tenancy.namespace_problem("keda", "x") is not None
    assert tenancy.namespace_problem("ml-team", "x") is None


# --- InferenceCluster: kubeconfig Secrets and provider config names -------------------------


def _stack_request(xr: dict, *, existing: bool = False, observed: dict | None = None):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for name in (
        stack_fn.REQUIRED_MAPPINGS,
        stack_fn.REQUIRED_DESTINATIONS,
        stack_fn.REQUIRED_CLUSTERS,
        stack_fn.REQUIRED_REPLICAS,
    ):
        req.required_resources[name].SetInParent()
    for required_name, api_version, _key in names.PROVIDER_CONFIGS:
        req.required_resources[required_name].SetInParent()
        if existing:
            req.required_resources[required_name].items.add().resource.update(
                {
                    "apiVersion": api_version,
                    "kind": "ClusterProviderConfig",
                    "metadata": {"name": xr["metadata"]["name"]},
                    "spec": {"credentials": {"source": "Secret"}},
                }
            )
    for key, body in (observed or {}).items():
        req.observed.resources[key].resource.update(body)
    return req


def test_a_kubeconfig_cluster_composes_its_provider_configs():
    rsp = _run(stack_fn.FunctionRunner(), _stack_request(_load(KUBECONFIG_CLUSTER)))
    assert not _fatal(rsp)
    assert {"providerconfig-kubernetes", "providerconfig-helm"} <= set(rsp.desired.resources)


@pytest.mark.parametrize("namespace", ["kube-system", "ml-team", "default"])
def test_a_kubeconfig_outside_the_platforms_secret_namespaces_is_refused(namespace):
    xr = _load(KUBECONFIG_CLUSTER)
    xr["spec"]["kubeconfigSecretRef"]["namespace"] = namespace
    (message,) = _fatal(_run(stack_fn.FunctionRunner(), _stack_request(xr)))
    assert "spec.kubeconfigSecretRef.namespace: must be one of the platform's" in message
    assert "crossplane-system" in message


def test_the_platform_names_its_secret_namespaces(monkeypatch):
    xr = _load(KUBECONFIG_CLUSTER)
    xr["spec"]["kubeconfigSecretRef"]["namespace"] = "platform-secrets"
    monkeypatch.setenv(tenancy.ENV_SECRET_NAMESPACES, "platform-secrets")
    assert not _fatal(_run(stack_fn.FunctionRunner(), _stack_request(xr)))


@pytest.mark.parametrize("reserved", ["default", "control-plane"])
def test_a_cluster_named_like_a_reserved_provider_config_is_refused(monkeypatch, reserved):
    monkeypatch.setenv(tenancy.ENV_RESERVED_PROVIDER_CONFIGS, "control-plane")
    xr = _load(KUBECONFIG_CLUSTER)
    xr["metadata"]["name"] = reserved
    rsp = _run(stack_fn.FunctionRunner(), _stack_request(xr))
    (message,) = _fatal(rsp)
    assert "metadata.name: " in message
    assert "reserved provider config name" in message


def test_a_cluster_named_like_an_existing_provider_config_does_not_take_it_over():
    xr = _load(KUBECONFIG_CLUSTER)
    xr["metadata"]["name"] = "control-plane"
    rsp = _run(stack_fn.FunctionRunner(), _stack_request(xr, existing=True))
    (message,) = _fatal(rsp)
    assert "a ClusterProviderConfig named 'control-plane' already exists" in message
    # A fatal result: Crossplane applies nothing, and nothing of ours is in it.
    assert not rsp.desired.resources


def test_its_own_provider_configs_are_not_a_takeover():
    xr = _load(KUBECONFIG_CLUSTER)
    first = _run(stack_fn.FunctionRunner(), _stack_request(xr))
    observed = {
        k: json_format.MessageToDict(v.resource)
        for k, v in first.desired.resources.items()
        if k.startswith("providerconfig-")
    }
    again = _run(stack_fn.FunctionRunner(), _stack_request(xr, existing=True, observed=observed))
    assert not _fatal(again)


def test_until_the_provider_configs_are_fetched_nothing_is_composed_anew():
    xr = _load(KUBECONFIG_CLUSTER)
    req = _stack_request(xr)
    for required_name, _api, _key in names.PROVIDER_CONFIGS:
        del req.required_resources[required_name]
    rsp = _run(stack_fn.FunctionRunner(), req)
    assert not _fatal(rsp)
    assert "providerconfig-kubernetes" not in rsp.desired.resources
    asked = {name for name in rsp.requirements.resources}
    assert {n for n, _a, _k in names.PROVIDER_CONFIGS} <= asked


# --- ModelReplica: its provider config and pod policy are its cluster's ---------------------


def _replica_request(xr: dict, cluster: dict | None, *, fetched: bool = True, observed=None):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    if fetched:
        req.required_resources[REQUIRED_CLUSTER].SetInParent()
        if cluster is not None:
            req.required_resources[REQUIRED_CLUSTER].items.add().resource.update(cluster)
    for key, body in (observed or {}).items():
        req.observed.resources[key].resource.update(body)
    return req


def test_a_replica_of_an_existing_cluster_composes():
    rsp = _run(replica_fn.FunctionRunner(), _replica_request(_load(REPLICA), _load(US_EAST)))
    assert not _fatal(rsp)
    assert rsp.desired.resources
    assert rsp.requirements.resources[REQUIRED_CLUSTER].match_name == "us-east-1"


@pytest.mark.parametrize(
    "ref",
    [
        {"name": "control-plane"},
        {"name": "eu-west-1"},
        {"name": "us-east-1", "kind": "ProviderConfig"},
    ],
)
def test_a_replica_naming_another_provider_config_is_refused(ref):
    xr = _load(REPLICA)
    xr["spec"]["cluster"]["providerConfigRef"] = ref
    rsp = _run(replica_fn.FunctionRunner(), _replica_request(xr, _load(US_EAST)))
    (message,) = _fatal(rsp)
    assert "spec.cluster.providerConfigRef: must be the provider config" in message
    assert not rsp.desired.resources


def test_a_replica_of_a_kubeconfig_cluster_goes_through_the_composed_provider_config():
    xr = _load(REPLICA)
    cluster = _load(KUBECONFIG_CLUSTER)
    xr["spec"]["cluster"]["name"] = cluster["metadata"]["name"]
    xr["spec"]["cluster"]["providerConfigRef"] = {"name": cluster["metadata"]["name"]}
    assert not _fatal(_run(replica_fn.FunctionRunner(), _replica_request(xr, cluster)))


def test_a_replica_of_a_cluster_that_does_not_exist_is_refused():
    (message,) = _fatal(_run(replica_fn.FunctionRunner(), _replica_request(_load(REPLICA), None)))
    assert "spec.cluster.name: InferenceCluster 'us-east-1' does not exist" in message


def test_until_the_cluster_is_fetched_everything_composed_is_kept():
    first = _run(replica_fn.FunctionRunner(), _replica_request(_load(REPLICA), _load(US_EAST)))
    observed = {
        k: json_format.MessageToDict(v.resource) for k, v in first.desired.resources.items()
    }
    rsp = _run(
        replica_fn.FunctionRunner(),
        _replica_request(_load(REPLICA), None, fetched=False, observed=observed),
    )
    assert not _fatal(rsp)
    assert set(rsp.desired.resources) == set(observed)


def test_the_namespace_labels_are_the_clusters_not_the_replicas():
    xr = _load(REPLICA)
    xr["spec"]["cluster"]["podSecurity"] = {"level": "baseline", "enforce": "privileged"}
    cluster = _load(US_EAST)
    cluster["spec"]["podSecurity"] = {"level": "restricted"}
    rsp = _run(replica_fn.FunctionRunner(), _replica_request(xr, cluster))
    assert not _fatal(rsp)
    namespace = json_format.MessageToDict(rsp.desired.resources["namespace"].resource)
    labels = namespace["spec"]["forProvider"]["manifest"]["metadata"]["labels"]
    assert labels[pod_policy.LABEL_ENFORCE] == "restricted"
    assert labels[pod_policy.LABEL_WARN] == "restricted"


def test_a_copy_is_not_changed():
    xr = _load(REPLICA)
    before = copy.deepcopy(xr)
    _run(replica_fn.FunctionRunner(), _replica_request(xr, _load(US_EAST)))
    assert xr == before
