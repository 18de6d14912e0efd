"""The fuzz tier's API-server check: what the functions compose is accepted by a real
kube-apiserver (issue 20, class 3).

One kube-apiserver (with etcd) starts for the module, with the CRDs of every kind the
functions compose (the pinned schema bundle; the ClusterProfile stand-in the fleet box
uses). Seeded hypothesis runs then give the functions names at the edges of what the
XRDs and Kubernetes allow: deployment and ModelReplica names of up to 253 characters,
dotted, digit-leading; namespaces and cluster names of up to 63. Every composed
manifest, and every provider-kubernetes Object that carries one, is created with
`dryRun=All`: the API server's own validation of names, label values, volume names and
sizes, nothing stored. A 409 (AlreadyExists) passed validation too. The ModelReplicas
compose-model-deployment composes are checked through a ConfigMap with their metadata
(their CRD comes from an XRD).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client, dynamic

from functions.compose_model_deployment import cache_fn
from functions.compose_model_deployment import fn as deployment_fn
from functions.compose_model_deployment import main as deployment_main
from functions.compose_model_replica import fn as replica_fn
from functions.compose_serving_stack import fn as stack_fn
from tests.conftest import require_tool
from tests.runtime.cluster import Fleet, _wait_established

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))
from fleetbox.members import CLUSTER_PROFILE_CRD  # noqa: E402

EXAMPLES = REPO / "examples"
DRY_RUN = settings(
    max_examples=int(os.environ.get("FUZZ_DRYRUN_EXAMPLES", "12")),
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
    # Each example costs a round of API calls; a failure prints its inputs unshrunk.
    phases=[Phase.explicit, Phase.generate],
)

_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
# Valid object names (DNS subdomains, up to 253), biased to the long and the odd.
SUBDOMAINS = st.one_of(
    st.from_regex(rf"\A{_LABEL}(\.{_LABEL}){{0,3}}\Z").filter(lambda s: len(s) <= 253),
    st.integers(64, 253).map(lambda n: ("9" + "long-name-" * 26)[:n].rstrip("-.") or "x"),
    st.sampled_from(["8b", "llama-3.1-8b", "a" * 253, "m." * 126 + "m"]),
)
DNS_LABELS = st.one_of(
    st.from_regex(rf"\A{_LABEL}\Z"),
    st.integers(1, 63).map(lambda n: ("c" * 63)[:n]),
)


@pytest.fixture(scope="module")
def apiserver():
    fleet = Fleet(1, require_tool("etcd"), require_tool("kube-apiserver")).start()
    try:
        api = fleet.members[0].client()
        extensions = client.ApiextensionsV1Api(api)
        crds = [CLUSTER_PROFILE_CRD]
        bundle = require_tool("schemas") / "crds"
        # provider-helm's Release (compose-serving-stack's charts), cached by its tool script.
        helm = require_tool("schemas").parents[1] / "provider-helm-crds"
        for path in sorted([*bundle.glob("*.yaml"), *helm.glob("helm.m.crossplane.io_*.yaml")]):
            crd = yaml.safe_load(path.read_text())
            crd["spec"].pop("conversion", None)  # no webhook runs here
            crds.append(crd)
        for crd in crds:
            extensions.create_custom_resource_definition(crd)
        for crd in crds:
            _wait_established(extensions, crd["metadata"]["name"])
        yield DryRun(api)
        api.close()
    finally:
        fleet.close()


class DryRun:
    def __init__(self, api: client.ApiClient) -> None:
        self.dynamic = dynamic.DynamicClient(api)
        self.core = client.CoreV1Api(api)
        self.namespaces: set[str] = set()

    def namespace(self, name: str) -> None:
        if name in self.namespaces:
            return
        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except client.ApiException as error:
            if error.status != 409:
                raise
        self.namespaces.add(name)

    def refusal(self, body: dict) -> str | None:
        """None when the API server would accept `body`, else its message. A kind with no
        CRD here (KAI's Queue) has its name and labels checked on a ConfigMap."""
        try:
            kinds = self.dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
        except dynamic.exceptions.ResourceNotFoundError:
            return self.refusal(stand_in(body, body["metadata"].get("namespace") or "default"))
        namespace = body.get("metadata", {}).get("namespace") if kinds.namespaced else None
        if namespace:
            self.namespace(namespace)
        try:
            kinds.create(body=body, namespace=namespace, dry_run="All")
        except dynamic.exceptions.ConflictError:
            return None  # AlreadyExists: validation ran first and passed
        except dynamic.exceptions.DynamicApiError as error:
            return f"{body['kind']} {body['metadata'].get('name')}: {error.summary()}"
        return None


def _as_sent(value):
    """A Struct value as Crossplane sends it on (protojson writes 8.0 as 8)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _as_sent(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_sent(v) for v in value]
    return value


def stand_in(body: dict, namespace: str) -> dict:
    """A ConfigMap with `body`'s name and labels: the same name and label rules."""
    metadata = body.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": metadata.get("name"),
            "namespace": namespace,
            "labels": metadata.get("labels") or {},
        },
    }


def _composed(rsp: fnv1.RunFunctionResponse) -> list[dict]:
    """Every composed Object and the manifest it carries (other kinds as they are)."""
    bodies = []
    for desired in rsp.desired.resources.values():
        body = _as_sent(resource.struct_to_dict(desired.resource))
        bodies.append(body)
        manifest = (body.get("spec") or {}).get("forProvider", {}).get("manifest")
        if manifest:
            bodies.append(manifest)
    return bodies


def _run(runner, req) -> fnv1.RunFunctionResponse:
    rsp = asyncio.run(runner.RunFunction(req))
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert not fatal, fatal
    return rsp


def _accepted(apiserver: DryRun, bodies: list[dict]) -> None:
    refused = [m for m in map(apiserver.refusal, bodies) if m]
    assert not refused, "\n".join(refused)


REPLICAS = [
    yaml.safe_load(p.read_text())
    for p in sorted((REPO / "tests/unit/testdata/model_replica/inputs").glob("*.yaml"))
]


@given(
    base=st.sampled_from(REPLICAS),
    name=SUBDOMAINS,
    deployment=SUBDOMAINS,
    namespace=DNS_LABELS,
    cluster=DNS_LABELS,
)
@DRY_RUN
def test_model_replica_composes_what_the_api_server_accepts(
    apiserver, base, name, deployment, *, namespace, cluster
):
    xr = yaml.safe_load(yaml.safe_dump(base))
    xr["metadata"].update(name=name, namespace=namespace)
    xr["spec"]["deployment"] = deployment
    old = xr["spec"]["cluster"]["name"]
    xr["spec"]["cluster"]["name"] = cluster
    for member in (xr["spec"].get("autoscaling") or {}).get("clusters") or []:
        if member.get("name") == old:
            member["name"] = cluster
    if namespace in {"modelplane-system", "kube-system"}:
        return
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    _accepted(apiserver, _composed(_run(replica_fn.FunctionRunner(), req)))


def _stack_request(xr: dict, peers: list[dict]) -> fnv1.RunFunctionRequest:
    destination = yaml.safe_load((EXAMPLES / "telemetrydestinations/fleet.yaml").read_text())
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for key, items in (
        (stack_fn.REQUIRED_MAPPINGS, []),
        (stack_fn.REQUIRED_DESTINATIONS, [destination]),
        (stack_fn.REQUIRED_CLUSTERS, peers),
        (stack_fn.REQUIRED_REPLICAS, []),
    ):
        req.required_resources[key].SetInParent()
        for item in items:
            req.required_resources[key].items.add().resource.update(item)
    return req


CLUSTERS = [
    yaml.safe_load(p.read_text()) for p in sorted((EXAMPLES / "inferenceclusters").glob("*.yaml"))
]


@given(
    base=st.sampled_from(CLUSTERS),
    name=DNS_LABELS,
    peers=st.lists(DNS_LABELS, min_size=1, max_size=3, unique=True),
    stack=st.sampled_from(["Standard", "Dynamo"]),
)
@DRY_RUN
def test_serving_stack_composes_what_the_api_server_accepts(apiserver, base, name, peers, stack):
    xr = yaml.safe_load(yaml.safe_dump(base))
    xr["metadata"]["name"] = name
    xr["spec"]["stack"] = stack
    peer_clusters = []
    for peer in peers:
        body = yaml.safe_load(yaml.safe_dump(base))
        body["metadata"]["name"] = peer
        peer_clusters.append(body)
    rsp = _run(stack_fn.FunctionRunner(), _stack_request(xr, [xr, *peer_clusters]))
    _accepted(apiserver, _composed(rsp))


DEPLOYMENT = yaml.safe_load((EXAMPLES / "modeldeployments/llama-8b-vllm.yaml").read_text())


@given(
    name=SUBDOMAINS,
    namespace=DNS_LABELS,
    cluster_names=st.lists(DNS_LABELS, min_size=2, max_size=2, unique=True),
)
@DRY_RUN
def test_model_deployment_composes_names_and_labels_the_api_server_accepts(
    apiserver, name, namespace, cluster_names
):
    if namespace in {"modelplane-system", "kube-system"}:
        return
    xr = yaml.safe_load(yaml.safe_dump(DEPLOYMENT))
    xr["metadata"].update(name=name, namespace=namespace)
    clusters = []
    for base, cluster in zip(CLUSTERS, cluster_names, strict=False):
        body = yaml.safe_load(yaml.safe_dump(base))
        body["metadata"]["name"] = cluster
        clusters.append(body)
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for key, items in ((deployment_fn.REQUIRED_CLUSTERS, clusters),):
        req.required_resources[key].SetInParent()
        for item in items:
            req.required_resources[key].items.add().resource.update(item)
    rsp = _run(deployment_fn.FunctionRunner(), req)
    replicas = [resource.struct_to_dict(d.resource) for d in rsp.desired.resources.values()]
    assert replicas, "nothing placed"
    # A ModelReplica's CRD comes from its XRD: its metadata is checked on a ConfigMap.
    _accepted(apiserver, [stand_in(r, namespace) for r in replicas])


CACHE = yaml.safe_load((EXAMPLES / "modelcaches/llama-3-3-70b.yaml").read_text())
CACHE_SOURCES = [
    {"huggingFace": {"repo": "Qwen/Qwen3-8B", "tokenSecretRef": {"name": "t", "key": "k"}}},
    {"objectStore": {"uri": "s3://bucket/qwen3-8b", "credentialsSecretRef": {"name": "s3"}}},
    {"objectStore": {"uri": "gs://bucket/qwen3-8b", "credentialsSecretRef": {"name": "gcs"}}},
    {"oci": {"reference": "r.example.com/m/qwen3-8b:v1", "pullSecretRef": {"name": "pull"}}},
]


@given(
    name=SUBDOMAINS,
    namespace=DNS_LABELS,
    cluster_names=st.lists(DNS_LABELS, min_size=2, max_size=2, unique=True),
    source=st.sampled_from(CACHE_SOURCES),
)
@DRY_RUN
def test_model_cache_composes_a_volume_and_job_the_api_server_accepts(
    apiserver, name, namespace, cluster_names, source
):
    if namespace in {"modelplane-system", "kube-system"}:
        return
    xr = yaml.safe_load(yaml.safe_dump(CACHE))
    xr["metadata"].update(name=name, namespace=namespace)
    xr["spec"]["source"] = source
    xr["spec"].pop("clusterSelector")  # every cluster
    # A cache is staged only where a deployment that references it could be placed: one
    # that fits a pool on every cluster.
    referencing = yaml.safe_load(yaml.safe_dump(DEPLOYMENT))
    referencing["metadata"]["namespace"] = namespace
    referencing["spec"]["modelCacheRef"] = {"name": name}
    referencing["spec"]["template"]["spec"].pop("clusterSelector")
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    req.required_resources[cache_fn.REQUIRED_CLUSTERS].SetInParent()
    for base, cluster in zip(CLUSTERS, cluster_names, strict=False):
        body = yaml.safe_load(yaml.safe_dump(base))
        body["metadata"]["name"] = cluster
        req.required_resources[cache_fn.REQUIRED_CLUSTERS].items.add().resource.update(body)
    req.required_resources[cache_fn.REQUIRED_DEPLOYMENTS].items.add().resource.update(referencing)
    bodies = _composed(_run(deployment_main.runner(), req))
    kinds = {b["kind"] for b in bodies}
    assert {"PersistentVolumeClaim", "Job", "Object"} <= kinds, kinds
    _accepted(apiserver, bodies)
