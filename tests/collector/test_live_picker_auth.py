"""The endpoint picker's metrics, scraped with auth, live.

The Inference Extension's picker serves /metrics behind controller-runtime's
authentication filter (`--metrics-endpoint-auth`, on by default): every scrape's bearer
token is reviewed by the API server (TokenReview, sent with the picker's own
credentials) and the token's user must be allowed `get` on the non-resource URL
/metrics (SubjectAccessReview). So two grants are needed, and both are composed: the
picker's ServiceAccount is bound to `system:auth-delegator` (compose-model-replica), and
the collector's ClusterRole allows `get /metrics` (compose-serving-stack).

Real parts: a kube-apiserver with etcd, holding the RBAC objects exactly as composed
(taken from the functions' own output) and issuing real ServiceAccount tokens
(TokenRequest); the collector from hack/tools.sh running the rendered cluster-tier config
with its picker job. The picker is a loopback HTTP server that serves the picker's metric
names and enforces what the real one does, with the API server doing the reviews.

Test substitutions: the picker job's Kubernetes discovery becomes a static target
carrying the `__meta_kubernetes_*` labels discovery would give the picker's pod (so its
keep rules run as rendered); the service-account token file is the TokenRequest token
for the collector's ServiceAccount; the gateway exporter is the harness's JSON sink.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from functions.common import contracts
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse
from functions.compose_model_replica.serving import EPP_IMAGE
from functions.compose_serving_stack import collector, collector_objects
from functions.compose_serving_stack.envelope import Target
from tests.collector import harness
from tests.conftest import require_tool
from tests.runtime.cluster import Member

REPLICA_INPUT = Path(__file__).parents[1] / "unit/testdata/model_replica/inputs/standalone.yaml"
SCRAPE_SECONDS = 2
ARRIVAL_SECONDS = 90
# The picker's own series (Gateway API Inference Extension, pkg/epp/metrics).
PICKER_PAGE = """\
# HELP inference_pool_average_kv_cache_utilization The average kv cache utilization for an inference server pool.
# TYPE inference_pool_average_kv_cache_utilization gauge
inference_pool_average_kv_cache_utilization{name="llama"} 0.42
# HELP inference_pool_average_queue_size The average number of requests pending in the model server queue.
# TYPE inference_pool_average_queue_size gauge
inference_pool_average_queue_size{name="llama"} 3
# HELP inference_pool_ready_pods The number of ready pods in the inference server pool.
# TYPE inference_pool_ready_pods gauge
inference_pool_ready_pods{name="llama"} 2
"""  # noqa: E501


@dataclass
class Picker:
    """A picker's /metrics that authorizes each scrape through the API server."""

    reviewer: client.ApiClient  # the picker's own ServiceAccount token
    answers: list[int] = field(default_factory=list)
    port: int = 0

    def authorize(self, header: str) -> int:
        if not header.startswith("Bearer "):
            return 401
        auth = client.AuthenticationV1Api(self.reviewer)
        review = auth.create_token_review({"spec": {"token": header.removeprefix("Bearer ")}})
        if not review.status.authenticated:
            return 401
        user = review.status.user
        access = client.AuthorizationV1Api(self.reviewer).create_subject_access_review(
            {
                "spec": {
                    "user": user.username,
                    "groups": user.groups,
                    "uid": user.uid,
                    "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                }
            }
        )
        return 200 if access.status.allowed else 403

    def __enter__(self) -> Picker:
        picker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    code = picker.authorize(self.headers.get("Authorization", ""))
                except client.ApiException:
                    # The picker cannot review: controller-runtime answers 500.
                    code = 500
                picker.answers.append(code)
                body = PICKER_PAGE.encode() if code == 200 else b"Unauthorized\n"
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def composed_rbac() -> tuple[list[dict], list[dict], str, str]:
    """The collector's RBAC (compose-serving-stack) and the picker's (compose-model-
    replica), as the functions compose them; with the picker's namespace and name."""
    collector_side = [
        c.resource["spec"]["forProvider"]["manifest"]
        for c in collector_objects.cluster_tier(
            Target("member", "member", "ClusterProviderConfig"),
            {"receivers": {}},
            gateway=True,
        )
        if c.resource["spec"]["forProvider"]["manifest"]["kind"]
        in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    replica = parse(yaml.safe_load(REPLICA_INPUT.read_text()))
    manifests = {c.key: c.manifest for c in compose(replica).composed}
    picker_side = [manifests["epp-serviceaccount"], manifests["epp-auth-delegator"]]
    account = manifests["epp-serviceaccount"]["metadata"]
    return collector_side, picker_side, account["namespace"], account["name"]


def apply(api: client.ApiClient, manifest: dict[str, Any]) -> None:
    kind = manifest["kind"]
    namespace = manifest["metadata"].get("namespace")
    if kind == "ServiceAccount":
        client.CoreV1Api(api).create_namespaced_service_account(namespace, manifest)
    elif kind == "ClusterRole":
        client.RbacAuthorizationV1Api(api).create_cluster_role(manifest)
    elif kind == "ClusterRoleBinding":
        client.RbacAuthorizationV1Api(api).create_cluster_role_binding(manifest)
    else:
        raise AssertionError(f"unexpected kind {kind}")


def token_for(api: client.ApiClient, namespace: str, name: str) -> str:
    request = client.CoreV1Api(api).create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return request.status.token


def reviewer_client(member: Member, token: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = member.server
    configuration.ssl_ca_cert = str(member.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


@dataclass
class Cluster:
    member: Member
    admin: client.ApiClient
    picker_namespace: str
    picker_name: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    member = Member(
        "member",
        tmp_path_factory.mktemp("picker-auth"),
        require_tool("etcd"),
        require_tool("kube-apiserver"),
    )
    try:
        member.start_etcd()
        member.start_apiserver()
        admin = member.client()
        collector_side, picker_side, namespace, name = composed_rbac()
        core = client.CoreV1Api(admin)
        for ns in {contracts.SYSTEM_NAMESPACE, namespace}:
            core.create_namespace({"metadata": {"name": ns}})
        for manifest in collector_side + picker_side:
            apply(admin, manifest)
        yield Cluster(member, admin, namespace, name)
        admin.close()
    finally:
        member.close()


def picker_target(port: int) -> dict[str, Any]:
    """The static stand-in for discovery of the picker's pod (see the module doc)."""
    return {
        "targets": [f"127.0.0.1:{port}"],
        "labels": {
            "__meta_kubernetes_namespace": "ml-team",
            "__meta_kubernetes_pod_name": "llama-epp-0",
            "__meta_kubernetes_pod_uid": "0a0b0c0d-0000-4000-8000-000000000001",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_container_image": EPP_IMAGE,
            "__meta_kubernetes_pod_container_port_name": contracts.PORT_NAME_METRICS,
        },
    }


def scrape_config(token_file: Path, picker_port: int, sink: str, folder: Path) -> dict:
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("member"),
        (),
        collector.CollectorDestination("gateway.example:4317"),
        scrape_interval_seconds=SCRAPE_SECONDS,
    )
    live = harness.localize_paths(copy.deepcopy(config), folder)
    jobs = live["receivers"][collector.RECEIVER]["config"]["scrape_configs"]
    pickers = next(j for j in jobs if j["job_name"] == collector.ENDPOINT_PICKERS_JOB)
    del pickers["kubernetes_sd_configs"]
    pickers["static_configs"] = [picker_target(picker_port)]
    # The token the kubelet would mount for the collector's ServiceAccount.
    pickers["authorization"]["credentials_file"] = str(token_file)
    live["receivers"] = {collector.RECEIVER: {"config": {"scrape_configs": [pickers]}}}
    processors = [p for p in collector.PROCESSORS if p != "k8s_attributes"]
    del live["processors"]["k8s_attributes"]
    live["exporters"] = {
        harness.TEST_EXPORTER: {"endpoint": sink, "encoding": "json", "compression": "none"}
    }
    live["extensions"] = {collector.HEALTH_CHECK: live["extensions"][collector.HEALTH_CHECK]}
    live["service"]["extensions"] = [collector.HEALTH_CHECK]
    live["service"]["pipelines"] = {
        "metrics": {
            "receivers": [collector.RECEIVER],
            "processors": processors,
            "exporters": [harness.TEST_EXPORTER],
        }
    }
    return live


def picker_series(sink: harness.OtlpJsonSink) -> set[str]:
    names = set()
    for export in list(sink.exports):
        for resource in export.body.get("resourceMetrics", []):
            for scope in resource.get("scopeMetrics", []):
                names |= {m["name"] for m in scope.get("metrics", [])}
    return {n for n in names if n.startswith("inference_pool_")}


def run_scrape(cluster: Cluster, collector_token: str, tmp_path: Path) -> tuple[Picker, set[str]]:
    otelcol = require_tool("otelcol")
    picker_token = token_for(cluster.admin, cluster.picker_namespace, cluster.picker_name)
    reviewer = reviewer_client(cluster.member, picker_token)
    token_file = tmp_path / "collector-token"
    token_file.write_text(collector_token)
    with harness.OtlpJsonSink() as sink, Picker(reviewer) as picker:
        config = scrape_config(token_file, picker.port, sink.endpoint, tmp_path)
        with harness.running_collector(otelcol, config, tmp_path) as log:
            deadline = time.monotonic() + ARRIVAL_SECONDS
            while time.monotonic() < deadline and not (
                picker_series(sink) or any(code != 200 for code in picker.answers)
            ):
                time.sleep(1)
            # A few more scrapes, so a refused one has had its chance to be retried.
            time.sleep(3 * SCRAPE_SECONDS)
            found = picker_series(sink)
            if not picker.answers:
                pytest.fail(f"the collector never scraped the picker\n{log.read_text()[-3000:]}")
    reviewer.close()
    return picker, found


def test_the_collector_scrapes_the_picker_with_its_service_account_token(cluster, tmp_path):
    token = token_for(cluster.admin, contracts.SYSTEM_NAMESPACE, collector_objects.COLLECTOR)
    picker, found = run_scrape(cluster, token, tmp_path)
    assert set(picker.answers) == {200}, picker.answers
    assert found == {
        "inference_pool_average_kv_cache_utilization",
        "inference_pool_average_queue_size",
        "inference_pool_ready_pods",
    }


def test_a_token_without_the_metrics_grant_is_refused(cluster, tmp_path):
    # The same scrape with a ServiceAccount that has no `get /metrics`: the picker (via
    # the API server) refuses it, so the grant in the collector's ClusterRole is what
    # makes the scrape above work.
    client.CoreV1Api(cluster.admin).create_namespaced_service_account(
        "default", {"metadata": {"name": "no-grant"}}
    )
    token = token_for(cluster.admin, "default", "no-grant")
    picker, found = run_scrape(cluster, token, tmp_path)
    assert picker.answers
    assert set(picker.answers) == {403}, picker.answers
    assert found == set()
