"""The report's shell: read one member's inputs from its API server and Prometheus.

`read_member_inputs` reads the workload (through its ScaledObject when the policy names
one), its scale subresource, pods, nodes, the pods on each node, the DRA objects that
say how many devices each node has free for the pods' claims (ResourceClaimTemplates,
ResourceSlices, ResourceClaims, DeviceClasses), and Karpenter's NodePools and NodeClaims;
`query_prometheus` runs each configured signal as an instant query. Objects are turned
into values by `report_parse.py` and the report is decided by
`report_core.compute_report`.
"""

import json
import urllib.error
import urllib.parse
import urllib.request

from functions.common.contracts import KIND_SCALED_OBJECT
from functions.runtime.policy import PolicySpec
from functions.runtime.report_core import EXTRA_PREFIX, MemberInputs, NodePoolInfo, SignalResult
from functions.runtime.report_parse import (
    device_class_drivers,
    node_devices,
    node_info,
    node_pool_info,
    pod_needs_from_template,
    pod_state,
    prometheus_result,
)


def _object_path(ref: dict, namespace: str) -> str:
    version = ref["apiVersion"]
    prefix = "/api/" if "/" not in version else "/apis/"
    plural = ref["kind"].lower() + "s"  # Deployment, LeaderWorkerSet, PodCliqueSet, ...
    return f"{prefix}{version}/namespaces/{namespace}/{plural}/{ref['name']}"


def query_prometheus(base_url: str, query: str, timeout: float = 5.0) -> SignalResult:
    """One instant query; every sample's value, or why it failed (never raises)."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as err:
        try:
            detail = json.load(err).get("error", err.reason)
        except ValueError:
            detail = err.reason
        return SignalResult(error=f"Prometheus answered {err.code}: {detail}")
    except (OSError, ValueError) as err:
        return SignalResult(error=f"Prometheus unreachable: {err}")
    return prometheus_result(body)


def _get(api, path: str, query=None) -> dict:
    from functions.runtime.rest import kube_request  # noqa: PLC0415 (the shell's only client use)

    return kube_request(api, "GET", path, query=query)


def read_member_inputs(
    api, spec: PolicySpec, namespace: str, prometheus_url: str | None, now: float
):
    """Everything `compute_report` needs from this member (its API client and Prometheus).

    NodePools are optional (a member without Karpenter has none): a 404 for their API is
    "no NodePools", any other failure is named in the report's condition.
    """
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    ref = {
        "apiVersion": spec.workload.api_version,
        "kind": spec.workload.kind,
        "name": spec.workload.name,
    }
    if ref["kind"] == KIND_SCALED_OBJECT:
        # The copy names the ScaledObject (the same on every stack); its target has the pods.
        scaled = _get(api, _object_path(ref, namespace))
        target = (scaled.get("spec") or {}).get("scaleTargetRef") or {}
        ref = {
            "apiVersion": target.get("apiVersion", "apps/v1"),
            "kind": target.get("kind", "Deployment"),
            "name": target["name"],
        }
    obj = _get(api, _object_path(ref, namespace))
    wspec = obj.get("spec") or {}
    if ref["kind"] == "LeaderWorkerSet":
        lwt = wspec.get("leaderWorkerTemplate") or {}
        template = lwt.get("workerTemplate") or {}
        per_replica = int(lwt.get("size") or 1)
    else:
        template = wspec.get("template") or {}
        per_replica = 1
    # Every KEDA target has the scale subresource: its replicas and pod selector.
    scale = _get(api, _object_path(ref, namespace) + "/scale")
    desired = int((scale.get("spec") or {}).get("replicas") or 0)
    selector = (scale.get("status") or {}).get("selector") or ""
    pods = _get(api, f"/api/v1/namespaces/{namespace}/pods", [("labelSelector", selector)])
    nodes = _get(api, "/api/v1/nodes").get("items") or []
    running = (
        _get(
            api,
            "/api/v1/pods",
            [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")],
        ).get("items")
        or []
    )
    by_node: dict[str, list[dict]] = {}
    for pod in running:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            by_node.setdefault(node, []).append(pod)

    read_errors: list[str] = []
    # DRA: what the pods' claims take and what each node's ResourceSlices still have.
    # A member without the resource.k8s.io API (404) has no devices to count.
    claim_templates: dict[str, dict] = {}
    devices: tuple[dict, dict] = ({}, {})
    try:
        dra = "/apis/resource.k8s.io/v1"
        claim_templates = {
            t["metadata"]["name"]: t
            for t in _get(api, f"{dra}/namespaces/{namespace}/resourceclaimtemplates").get("items")
            or []
        }
        devices = node_devices(
            _get(api, f"{dra}/resourceslices").get("items") or [],
            _get(api, f"{dra}/resourceclaims").get("items") or [],
            device_class_drivers(_get(api, f"{dra}/deviceclasses").get("items") or []),
        )
    except ApiException as err:
        if err.status != 404:
            read_errors.append(f"DRA devices: {err.status} {err.reason}")
    pools: list[NodePoolInfo] = []
    try:
        pool_objs = _get(api, "/apis/karpenter.sh/v1/nodepools").get("items") or []
        claims = _get(api, "/apis/karpenter.sh/v1/nodeclaims").get("items") or []
        pools = [node_pool_info(p, claims, now) for p in pool_objs]
    except ApiException as err:
        if err.status != 404:
            read_errors.append(f"NodePools: {err.status} {err.reason}")

    signals = {}
    queries = spec.signals.configured() | {
        EXTRA_PREFIX + name: query for name, query in spec.signals.extra_queries().items()
    }
    for name, query in sorted(queries.items()):
        if prometheus_url:
            signals[name] = query_prometheus(prometheus_url, query)
        else:
            signals[name] = SignalResult(error="no --prometheus-url")
    return MemberInputs(
        desired=desired,
        pods=tuple(pod_state(p) for p in pods.get("items") or []),
        needs=pod_needs_from_template(template, per_replica, claim_templates),
        nodes=tuple(
            node_info(
                n,
                by_node.get(n["metadata"]["name"], []),
                devices[0].get(n["metadata"]["name"]),
                devices[1].get(n["metadata"]["name"]),
            )
            for n in nodes
        ),
        node_pools=tuple(pools),
        signals=signals,
        read_errors=tuple(read_errors),
    )
