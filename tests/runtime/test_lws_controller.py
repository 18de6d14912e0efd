"""The real LeaderWorkerSet controller (hack/fleetbox/lws.py) against one real
kube-apiserver, with kube-controller-manager's StatefulSet and EndpointSlice controllers,
the member's CoreDNS (hack/fleetbox/dns.py) and the pod runner (hack/fleetbox/podrunner.py)
as the kubelet: a LeaderWorkerSet of size 2 becomes a leader and a worker pod with LWS's
own labels and env, both run as local processes, and the worker reaches the leader by the
address LWS gives it, resolved through cluster DNS (the kubelet's resolv.conf, no peer in
its hosts file).

The leader, like a multi-node engine's rank 0, is Ready only once its worker has joined,
so the worker must resolve it before it is Ready: what the LWS controller's headless
Service gives (`publishNotReadyAddresses`). A Service of another's making under the
LeaderWorkerSet's name (what compose-model-replica composed before issue 45) keeps the
controller from making its own, and the worker never finds its leader.

The webhooks are served to the API server by URL with a CA of the fleet box's making
(`fleetbox.certificates.Certificates`), as the box will serve them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from functions.common.contracts import ENV_GROUP_INDEX
from functions.common.contracts import ENV_LEADER_ADDRESS as OUR_LEADER_ADDRESS
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse
from tests.conftest import require_tool
from tests.ports import free_port
from tests.runtime.cluster import Member, _die_with_parent
from tests.runtime.conftest import measured

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from fleetbox.certificates import Certificates
from fleetbox.dns import ClusterDns
from fleetbox.lws import (
    ENV_GROUP_SIZE,
    ENV_LEADER_ADDRESS,
    ENV_WORKER_INDEX,
    GROUP,
    LABEL_GROUP_INDEX,
    LABEL_NAME,
    LABEL_WORKER_INDEX,
    PLURAL,
    VERSION,
    LwsController,
    webhook_configurations,
)
from fleetbox.podrunner import (
    CLUSTER_HOST_ADDRESSES,
    CLUSTER_POD_ADDRESSES,
    REAL_RUN_LABEL,
    REAL_RUN_VALUE,
    Backoff,
    Image,
    PodRunner,
)

NODE = "lws-node-0"
NAMESPACE = "lws-test"
PYTHON_IMAGE = "example.test/python:1"
IMAGES = {
    PYTHON_IMAGE: Image(entrypoint=(sys.executable, "-c")),
}
WAIT = 60.0
POD_IP = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
# How long a worker that cannot resolve its leader is watched failing to (its own loop
# tries for 60 s), once the leader runs and its Service's EndpointSlice lists it.
UNRESOLVED_SECONDS = 5.0
# A multi-node replica as compose-model-deployment writes it (the unit goldens' input).
LEADER_WORKER_REPLICA = (
    Path(__file__).resolve().parents[1] / "unit/testdata/model_replica/inputs/leader-worker.yaml"
)

# The leader: serve /hello; answer /ready with 200 only once a worker fetched /hello (a
# multi-node engine's rank 0 serves only after every rank joined).
LEADER = textwrap.dedent(
    """
    import http.server, os, pathlib
    pathlib.Path("hello").write_text("leader " + os.environ["HOSTNAME"])
    class Leader(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            joined = pathlib.Path("joined")
            if self.path == "/hello":
                joined.touch()
            if self.path == "/ready" and not joined.exists():
                self.send_error(503, "no worker joined yet")
                return
            if self.path == "/ready":
                self.path = "/hello"
            super().do_GET()
    http.server.ThreadingHTTPServer((os.environ["POD_IP"], 8080), Leader).serve_forever()
    """
)

# The worker: find the leader by LWS_LEADER_ADDRESS (as vLLM's --master-addr would),
# fetch its page, write what it learned where its own server serves it.
WORKER = textwrap.dedent(
    """
    import http.server, os, pathlib, socket, time, urllib.request
    leader = os.environ["LWS_LEADER_ADDRESS"]
    for _ in range(600):
        try:
            ip = socket.gethostbyname(leader)
            page = urllib.request.urlopen(f"http://{leader}:8080/hello", timeout=2).read()
            break
        except OSError:
            time.sleep(0.1)
    pathlib.Path("report").write_text(
        f"{leader} {ip} {page.decode().strip()} "
        f"{os.environ['LWS_WORKER_INDEX']} {os.environ['LWS_GROUP_SIZE']}"
    )
    http.server.test(
        http.server.SimpleHTTPRequestHandler, port=8080, bind=os.environ["POD_IP"]
    )
    """
)


@dataclass
class LwsMember:
    member: Member
    kubeconfig: Path
    controller: LwsController
    runner: PodRunner
    api: client.ApiClient
    dns: ClusterDns


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("ab") as output:
        return subprocess.Popen(
            args,
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - sets a signal and a group only
        )


def _stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def lws() -> Iterator[LwsMember]:
    etcd, apiserver = require_tool("etcd"), require_tool("kube-apiserver")
    controller_manager = require_tool("kube-controller-manager")
    require_tool("lws-controller")
    coredns = require_tool("coredns", "coredns")
    root = Path(tempfile.mkdtemp(prefix="modelplane-lws-"))
    member = Member("lws", root / "member", etcd, apiserver)
    manager = runner = controller = api = dns_process = None
    try:
        member.start_etcd()
        member.start_apiserver()
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(member.kubeconfig()))
        # StatefulSets make LWS's pods; every namespace needs its default ServiceAccount;
        # cluster DNS serves the pods of a Service's EndpointSlices.
        manager = _spawn(
            [
                str(controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={root / 'kcm-certs'}",
                "--controllers=statefulset-controller,serviceaccount-controller,"
                "endpointslice-controller",
            ],
            root / "kube-controller-manager.log",
        )
        certificates = Certificates(root / "certs")
        serving = certificates.pair("lws-webhook", "127.0.0.1", "serverAuth")
        api = member.client()
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        # The pods' node, as an object: the endpointslice controller skips a pod whose
        # node it cannot find (unless its Service publishes not-ready addresses).
        client.CoreV1Api(api).create_node({"metadata": {"name": NODE}})
        controller = LwsController(kubeconfig, serving, root / "lws")
        began = time.monotonic()
        controller.start(api)
        measured("LWS controller: launch to a LeaderWorkerSet accepted", time.monotonic() - began)
        # CoreDNS on the host end of the pods' network: the pods run in the box's own
        # network namespace (podnet.py) and reach it there.
        dns = ClusterDns(
            coredns,
            kubeconfig,
            root / "coredns",
            CLUSTER_HOST_ADDRESSES.allocate("coredns"),
            CLUSTER_POD_ADDRESSES.netns,
        )
        dns_process = _spawn(dns.command(), dns.log)
        began = time.monotonic()
        dns.wait_ready(lambda: dns_process.poll() is None)
        measured("CoreDNS: launch to ready (synced with the API server)", time.monotonic() - began)
        # Every node: the scheduler-less pods here all name NODE, a box has many nodes.
        runner = PodRunner(
            api,
            None,
            IMAGES,
            root / "pods",
            backoff=Backoff(0.5, 2.0),
            nameserver=dns.address,
            addresses=CLUSTER_POD_ADDRESSES,
        )
        runner.start()
        yield LwsMember(member, kubeconfig, controller, runner, api, dns)
    finally:
        if runner is not None:
            runner.stop()
        _stop(dns_process)
        CLUSTER_HOST_ADDRESSES.release("coredns")
        if controller is not None:
            controller.stop()
        _stop(manager)
        if api is not None:
            api.close()
        member.close()


def leader_worker_set(name: str, size: int) -> dict:
    labels = {REAL_RUN_LABEL: REAL_RUN_VALUE}
    common = {"nodeName": NODE, "automountServiceAccountToken": False}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": {
                    "metadata": {"labels": labels},
                    "spec": {
                        **common,
                        "containers": [
                            {
                                "name": "leader",
                                "image": PYTHON_IMAGE,
                                "args": [LEADER],
                                "env": [POD_IP],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8080},
                                    "periodSeconds": 1,
                                },
                            }
                        ],
                    },
                },
                "workerTemplate": {
                    "metadata": {"labels": labels},
                    "spec": {
                        **common,
                        "containers": [
                            {
                                "name": "worker",
                                "image": PYTHON_IMAGE,
                                "args": [WORKER],
                                "env": [POD_IP],
                                "readinessProbe": {
                                    "httpGet": {"path": "/report", "port": 8080},
                                    "periodSeconds": 1,
                                },
                            }
                        ],
                    },
                },
            },
        },
    }


def model_service(name: str, lws: str) -> dict:
    """A ClusterIP Service in front of a LeaderWorkerSet's leader, as compose-model-replica
    composes the model's: `name` is what the test puts under test."""
    return {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "selector": {LABEL_NAME: lws, LABEL_WORKER_INDEX: "0"},
            "ports": [{"name": "http", "port": 8000, "targetPort": 8080}],
        },
    }


def wait_pods(core: client.CoreV1Api, lws: str, check, what: str) -> dict[str, client.V1Pod]:
    deadline = time.monotonic() + WAIT
    pods: dict[str, client.V1Pod] = {}
    while time.monotonic() < deadline:
        pods = {
            p.metadata.name: p
            for p in core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_NAME}={lws}").items
        }
        if check(pods):
            return pods
        time.sleep(0.2)
    statuses = {n: (p.status.phase, ready(p)) for n, p in pods.items()}
    raise AssertionError(f"{what} within {WAIT} s: {statuses}")


def running(pod: client.V1Pod) -> bool:
    return any(c.state.running for c in pod.status.container_statuses or [])


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def assert_in_the_pod_network(lws: LwsMember, *pods: client.V1Pod) -> None:
    """The pods' processes run in the box's own network namespace (podnet.py), where
    their addresses are; no interface of the host's own namespace holds a pod's address."""
    netns = os.stat(CLUSTER_POD_ADDRESSES.netns).st_ino
    assert os.stat("/proc/self/ns/net").st_ino != netns
    for pod in pods:
        pids = lws.runner.pids(NAMESPACE, pod.metadata.name)
        assert pids, pod.metadata.name
        assert {os.stat(f"/proc/{pid}/ns/net").st_ino for pid in pids.values()} == {netns}
    host = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True)
    held = {word.split("/")[0] for word in host.stdout.split()}
    for pod in pods:
        assert ipaddress.IPv4Address(pod.status.pod_ip) in CLUSTER_POD_ADDRESSES.network.subnet
        assert pod.status.pod_ip not in held, host.stdout


def test_the_webhooks_are_served_by_url_with_the_boxes_ca(lws: LwsMember) -> None:
    admission = client.AdmissionregistrationV1Api(lws.api)
    mutating = admission.read_mutating_webhook_configuration("lws-mutating-webhook-configuration")
    urls = sorted(h.client_config.url for h in mutating.webhooks)
    port = lws.controller.webhook_port
    assert urls == [
        f"https://127.0.0.1:{port}/mutate--v1-pod",
        f"https://127.0.0.1:{port}/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
    ]
    # Only LWS pods go through the pod webhooks (the release's kustomize patch).
    pod_hook = next(h for h in mutating.webhooks if h.name == "mpod.kb.io")
    assert pod_hook.object_selector.match_expressions[0].key == LABEL_NAME
    expected = webhook_configurations(lws.controller.config, port, b"")
    assert [d["metadata"]["name"] for d in expected] == [
        "lws-mutating-webhook-configuration",
        "lws-validating-webhook-configuration",
    ]


def test_a_leader_worker_set_becomes_a_leader_and_a_worker_that_find_each_other(
    lws: LwsMember,
) -> None:
    custom = client.CustomObjectsApi(lws.api)
    core = client.CoreV1Api(lws.api)
    # The model's Service as compose-model-replica composes it now, beside the LWS.
    core.create_namespaced_service(NAMESPACE, model_service("tiny-serving", "tiny"))
    began = time.monotonic()
    custom.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, leader_worker_set("tiny", 2)
    )
    try:
        deadline = began + WAIT
        pods: dict[str, client.V1Pod] = {}
        while time.monotonic() < deadline:
            pods = {p.metadata.name: p for p in core.list_namespaced_pod(NAMESPACE).items}
            if len(pods) == 2 and all(ready(p) for p in pods.values()):
                break
            time.sleep(0.2)
        statuses = {n: (p.status.phase, ready(p)) for n, p in pods.items()}
        assert sorted(pods) == ["tiny-0", "tiny-0-1"], statuses
        assert all(ready(p) for p in pods.values()), f"{statuses}\n{lws.controller.tail()}"
        measured("LWS size 2: create to leader and worker Ready", time.monotonic() - began)

        leader, worker = pods["tiny-0"], pods["tiny-0-1"]
        for pod, index in ((leader, "0"), (worker, "1")):
            assert pod.metadata.labels[LABEL_NAME] == "tiny"
            assert pod.metadata.labels[LABEL_GROUP_INDEX] == "0"
            assert pod.metadata.labels[LABEL_WORKER_INDEX] == index
            env = pod.spec.containers[0].env
            # LWS's webhook put its variables first, in this order, before the template's.
            assert [e.name for e in env[:3]] == [
                ENV_LEADER_ADDRESS,
                ENV_GROUP_SIZE,
                ENV_WORKER_INDEX,
            ]
            assert env[0].value == f"tiny-0.tiny.{NAMESPACE}"
            assert env[1].value == "2"
            assert env[2].value == index
        # The worker resolved LWS_LEADER_ADDRESS to the leader's pod IP and reached it.
        with urllib.request.urlopen(f"http://{worker.status.pod_ip}:8080/report", timeout=5) as r:
            report = r.read().decode()
        assert report == f"tiny-0.tiny.{NAMESPACE} {leader.status.pod_ip} leader tiny-0 1 2"
        assert leader.status.pod_ip != worker.status.pod_ip
        assert_in_the_pod_network(lws, leader, worker)
        # Through cluster DNS: the controller's headless Service names the pods, the
        # worker's resolver is the kubelet's, and its hosts file names no other pod.
        headless = core.read_namespaced_service("tiny", NAMESPACE)
        assert headless.spec.cluster_ip == "None"
        assert headless.spec.publish_not_ready_addresses is True
        assert [o.kind for o in headless.metadata.owner_references] == ["LeaderWorkerSet"]
        files = lws.runner.files(NAMESPACE, "tiny-0-1")
        assert files["resolv.conf"] == (
            f"search {NAMESPACE}.svc.cluster.local svc.cluster.local cluster.local\n"
            f"nameserver {lws.dns.address}\noptions ndots:5\n"
        )
        assert leader.status.pod_ip not in files["hosts"], files["hosts"]
        address = f"tiny-0.tiny.{NAMESPACE}"
        assert lws.runner.resolve(NAMESPACE, "tiny-0-1", "worker", address) == [
            leader.status.pod_ip
        ]
        # The worker's own name, from the same headless Service, for a pod of the namespace.
        assert lws.dns.resolve("tiny-0-1.tiny", NAMESPACE) == [worker.status.pod_ip]
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "tiny")
        with contextlib.suppress(ApiException):
            core.delete_namespaced_service("tiny-serving", NAMESPACE)


def test_a_service_that_takes_the_leader_worker_sets_name_leaves_the_leader_unresolved(
    lws: LwsMember,
) -> None:
    """The composition before issue 45: the model's Service named after the deployment,
    so after the LeaderWorkerSet. The controller finds a Service of its name and makes no
    headless one; the leader is not Ready until its worker joins, so the ClusterIP
    Service publishes no record for it either, and the worker never finds it."""
    custom = client.CustomObjectsApi(lws.api)
    core = client.CoreV1Api(lws.api)
    core.create_namespaced_service(NAMESPACE, model_service("clash", "clash"))
    custom.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, leader_worker_set("clash", 2)
    )
    try:
        pods = wait_pods(
            core,
            "clash",
            lambda pods: (
                sorted(pods) == ["clash-0", "clash-0-1"] and all(running(p) for p in pods.values())
            ),
            "clash's leader and worker running",
        )
        # The leader is in the Service's EndpointSlice (not ready): DNS has had its chance.
        discovery = client.DiscoveryV1Api(lws.api)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            slices = discovery.list_namespaced_endpoint_slice(
                NAMESPACE, label_selector="kubernetes.io/service-name=clash"
            ).items
            if any(e.addresses for es in slices for e in es.endpoints or []):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("no EndpointSlice lists clash's leader")
        time.sleep(UNRESOLVED_SECONDS)
        service = core.read_namespaced_service("clash", NAMESPACE)
        assert service.spec.cluster_ip != "None"  # still ours: no headless Service
        assert not service.metadata.owner_references
        address = f"clash-0.clash.{NAMESPACE}"
        assert lws.runner.resolve(NAMESPACE, "clash-0-1", "worker", address) == []
        assert lws.dns.resolve(address, NAMESPACE) == []
        current = {p.metadata.name: p for p in core.list_namespaced_pod(NAMESPACE).items}
        assert not ready(current["clash-0"])
        assert not ready(current["clash-0-1"])
        assert pods["clash-0"].status.pod_ip
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "clash")
        with contextlib.suppress(ApiException):
            core.delete_namespaced_service("clash", NAMESPACE)


def test_what_we_compose_beside_a_leader_worker_set_leaves_its_leader_resolvable(
    lws: LwsMember,
) -> None:
    """compose-model-replica's own Services for a multi-node replica (the model's, the
    picker's), created on the member as provider-kubernetes would, beside a
    LeaderWorkerSet of the name it composes: the controller still makes its headless
    Service, and the leader address we launch workers with (MODELPLANE_LEADER_ADDRESS,
    group 0) resolves through cluster DNS to the leader. Before issue 45 the model's
    Service took the LeaderWorkerSet's name and this failed."""
    composed = compose(parse(yaml.safe_load(LEADER_WORKER_REPLICA.read_text())))
    manifests = {c.key: c.object["spec"]["forProvider"]["manifest"] for c in composed.composed}
    workload = manifests["workload"]
    name, composed_namespace = workload["metadata"]["name"], workload["metadata"]["namespace"]
    leader_env = workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"]
    (address,) = {e["value"] for e in leader_env[0]["env"] if e["name"] == OUR_LEADER_ADDRESS}
    address = address.replace(f"$({ENV_GROUP_INDEX})", "0").replace(
        f".{composed_namespace}", f".{NAMESPACE}"
    )
    custom = client.CustomObjectsApi(lws.api)
    core = client.CoreV1Api(lws.api)
    services = [m for m in manifests.values() if m["kind"] == "Service"]
    assert services
    for service in services:
        core.create_namespaced_service(
            NAMESPACE,
            {"metadata": {"name": service["metadata"]["name"]}, "spec": service["spec"]},
        )
    custom.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, leader_worker_set(name, 2)
    )
    try:
        pods = wait_pods(
            core,
            name,
            lambda pods: len(pods) == 2 and all(ready(p) for p in pods.values()),
            f"{name}'s leader (Ready once its worker joined) and worker Ready",
        )
        leader, worker = pods[f"{name}-0"], pods[f"{name}-0-1"]
        assert lws.runner.resolve(NAMESPACE, worker.metadata.name, "worker", address) == [
            leader.status.pod_ip
        ]
        assert core.read_namespaced_service(name, NAMESPACE).spec.cluster_ip == "None"
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
        for service in services:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_service(service["metadata"]["name"], NAMESPACE)
