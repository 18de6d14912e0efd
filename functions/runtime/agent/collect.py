"""The report's shell: read one member's inputs from its API server, and its signals.

`read_member_inputs` reads the workload (through its ScaledObject when the policy names
one), its scale subresource, pods, nodes, the pods on each node, the DRA objects that
say how many devices each node has free for the pods' claims (ResourceClaimTemplates,
ResourceSlices, ResourceClaims, DeviceClasses), and Karpenter's NodePools and NodeClaims.
Vocabulary signals are computed from the agent's history of the collector's page
(`read_collector_page`, `signals_core.evaluate`), scoped to the deployment named by the
workload's pod template label; a PromQL signal runs as one bounded instant query
(`query_prometheus`) against the endpoint the operator named.
Objects are turned into values by `report_parse.py` and the report is decided by
`report_core.compute_report`.
"""

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Final

from functions.common.contracts import (
    KIND_SCALED_OBJECT,
    LABEL_DEPLOYMENT,
    RESOURCE_ATTRIBUTE_CLUSTER,
)
from functions.common.exposition import prometheus_label
from functions.runtime.agent import signals as signals_core
from functions.runtime.agent.parse import (
    device_class_drivers,
    node_devices,
    node_info,
    node_pool_info,
    pod_needs_from_template,
    pod_state,
    prometheus_result,
)
from functions.runtime.agent.promql_scope import UnscopableQuery, scope_query
from functions.runtime.shared.policy import PolicySpec
from functions.runtime.shared.report import EXTRA_PREFIX, MemberInputs, NodePoolInfo, SignalResult


def _object_path(ref: dict, namespace: str) -> str:
    version = ref["apiVersion"]
    prefix = "/api/" if "/" not in version else "/apis/"
    plural = ref["kind"].lower() + "s"  # Deployment, LeaderWorkerSet, PodCliqueSet, ...
    return f"{prefix}{version}/namespaces/{namespace}/{plural}/{ref['name']}"


# Bounds on what one PromQL answer may cost the agent: bytes read, samples kept, seconds.
PROMQL_MAX_BYTES: Final = 256 * 1024
PROMQL_MAX_SAMPLES: Final = 100
PROMQL_TIMEOUT_SECONDS: Final = 5.0
# The collector's page holds one series per deployment, engine and model: far below this.
PAGE_MAX_BYTES: Final = 64 * 1024 * 1024
PAGE_TIMEOUT_SECONDS: Final = 5.0


def query_prometheus(
    base_url: str, query: str, timeout: float = PROMQL_TIMEOUT_SECONDS
) -> SignalResult:
    """One bounded instant query; every sample's value, or why it failed (never raises).

    The server is asked to stop at the agent's timeout and sample limit too
    (`timeout`, `limit`), and the agent reads at most PROMQL_MAX_BYTES of its answer.
    """
    params = {"query": query, "timeout": f"{timeout:g}s", "limit": str(PROMQL_MAX_SAMPLES)}
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            raw = response.read(PROMQL_MAX_BYTES + 1)
        if len(raw) > PROMQL_MAX_BYTES:
            return SignalResult(error=f"answer larger than {PROMQL_MAX_BYTES} bytes")
        body = json.loads(raw)
    except urllib.error.HTTPError as err:
        try:
            detail = json.loads(err.read(4096)).get("error", err.reason)
        except ValueError:
            detail = err.reason
        return SignalResult(error=f"Prometheus answered {err.code}: {detail}")
    except (OSError, ValueError) as err:
        return SignalResult(error=f"Prometheus unreachable: {err}")
    result = prometheus_result(body)
    if len(result.values) > PROMQL_MAX_SAMPLES:
        return SignalResult(error=f"returned more than {PROMQL_MAX_SAMPLES} samples")
    return result


def read_collector_page(url: str, history: signals_core.SignalHistory, now: float) -> None:
    """Read the collector's page once into `history` (a failed read is kept as its error)."""
    try:
        with urllib.request.urlopen(url, timeout=PAGE_TIMEOUT_SECONDS) as response:
            raw = response.read(PAGE_MAX_BYTES + 1)
        if len(raw) > PAGE_MAX_BYTES:
            history.failed(f"page larger than {PAGE_MAX_BYTES} bytes")
            return
        history.add(signals_core.parse_page(raw.decode("utf-8", "replace"), now))
    except (OSError, ValueError) as err:
        history.failed(f"{url}: {err}")


def policy_signals(
    spec: PolicySpec,
    scope: signals_core.Scope | None,
    *,
    ready_replicas: int,
    history: signals_core.SignalHistory | None,
    prometheus_url: str | None,
    now: float,
    interval: float,
    cluster: str = "",
) -> dict[str, SignalResult]:
    """Every signal the policy uses (its own or the defaults), computed or failed."""
    signals: dict[str, SignalResult] = {}
    # Extra named metrics travel among the signals as `extra.<name>`.
    wanted = spec.effective_signals | {EXTRA_PREFIX + n: s for n, s in spec.extra_signals.items()}
    for name, signal in sorted(wanted.items()):
        if signal.promql is not None:
            if prometheus_url and scope is not None:
                # The store holds every tenant's series: the query sees only this one's.
                matchers = {
                    signals_core.NAMESPACE_LABEL: scope.namespace,
                    signals_core.DEPLOYMENT_LABEL: scope.deployment,
                }
                if cluster:
                    matchers[prometheus_label(RESOURCE_ATTRIBUTE_CLUSTER)] = cluster
                try:
                    scoped = scope_query(signal.promql, matchers)
                except UnscopableQuery as err:
                    signals[name] = SignalResult(error=f"promql: {err}")
                else:
                    signals[name] = query_prometheus(prometheus_url, scoped)
            elif prometheus_url:
                signals[name] = SignalResult(
                    error=f"a PromQL signal is scoped by the workload's {LABEL_DEPLOYMENT} "
                    "pod template label, which it has not got"
                )
            else:
                signals[name] = SignalResult(
                    error="a PromQL signal needs the InferenceCluster's "
                    "spec.runtime.prometheusURL (the agent's --prometheus-url)"
                )
        elif scope is None:
            signals[name] = SignalResult(
                error=f"the workload's pod template has no {LABEL_DEPLOYMENT} label to scope by"
            )
        elif history is None:
            signals[name] = SignalResult(error="the agent reads no collector page")
        else:
            signals[name] = signals_core.evaluate(
                signal,
                history,
                scope,
                ready_replicas=ready_replicas,
                now=now,
                window=spec.signal_window,
                interval=interval,
            )
    return signals


def _get(api, path: str, query=None) -> dict:
    from functions.runtime.kube.rest import kube_request  # noqa: PLC0415 (the shell's only client use)

    return kube_request(api, "GET", path, query=query)


def read_member_inputs(
    api,
    spec: PolicySpec,
    namespace: str,
    prometheus_url: str | None,
    now: float,
    *,
    history: signals_core.SignalHistory | None = None,
    interval: float = 30.0,
    cluster: str = "",
):
    """Everything `compute_report` needs from this member (its API client and signals).

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

    states = tuple(pod_state(p) for p in pods.get("items") or [])
    deployment = ((template.get("metadata") or {}).get("labels") or {}).get(LABEL_DEPLOYMENT)
    scope = signals_core.Scope(namespace, deployment) if deployment else None
    ready = sum(1 for p in states if p.ready and not p.terminating) // max(1, per_replica)
    signals = policy_signals(
        spec,
        scope,
        ready_replicas=ready,
        history=history,
        prometheus_url=prometheus_url,
        now=now,
        interval=interval,
        cluster=cluster,
    )
    return MemberInputs(
        desired=desired,
        pods=states,
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
