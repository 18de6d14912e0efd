"""The real LeaderWorkerSet controller (hack/fleetbox/lws.py) against one real
kube-apiserver, with kube-controller-manager's StatefulSet controller and the pod runner
(hack/fleetbox/podrunner.py) as the kubelet: a LeaderWorkerSet of size 2 becomes a leader and a
worker pod with LWS's own labels and env, both run as local processes, and the worker
reaches the leader by the address LWS gives it.

The webhooks are served to the API server by URL with a CA of the fleet box's making
(`fleetbox.certificates.Certificates`), as the box will serve them.
"""

from __future__ import annotations

import contextlib
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

from tests.conftest import require_tool
from tests.ports import free_port
from tests.runtime.cluster import Member, _die_with_parent
from tests.runtime.conftest import measured

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from fleetbox.certificates import Certificates
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
from fleetbox.podrunner import REAL_RUN_LABEL, REAL_RUN_VALUE, Backoff, Image, PodRunner

NODE = "lws-node-0"
NAMESPACE = "lws-test"
SERVER_IMAGE = "example.test/http-server:1"
PYTHON_IMAGE = "example.test/python:1"
IMAGES = {
    SERVER_IMAGE: Image(entrypoint=(sys.executable, "-m", "http.server")),
    PYTHON_IMAGE: Image(entrypoint=(sys.executable, "-c")),
}
WAIT = 60.0
POD_IP = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}

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
    root = Path(tempfile.mkdtemp(prefix="modelplane-lws-"))
    member = Member("lws", root / "member", etcd, apiserver)
    manager = runner = controller = api = None
    try:
        member.start_etcd()
        member.start_apiserver()
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(member.kubeconfig()))
        # StatefulSets make LWS's pods; every namespace needs its default ServiceAccount.
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
                "--controllers=statefulset-controller,serviceaccount-controller",
            ],
            root / "kube-controller-manager.log",
        )
        certificates = Certificates(root / "certs")
        serving = certificates.pair("lws-webhook", "127.0.0.1", "serverAuth")
        api = member.client()
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        controller = LwsController(kubeconfig, serving, root / "lws")
        began = time.monotonic()
        controller.start(api)
        measured("LWS controller: launch to a LeaderWorkerSet accepted", time.monotonic() - began)
        # Every node: the scheduler-less pods here all name NODE, a box has many nodes.
        runner = PodRunner(api, None, IMAGES, root / "pods", backoff=Backoff(0.5, 2.0))
        runner.start()
        yield LwsMember(member, kubeconfig, controller, runner, api)
    finally:
        if runner is not None:
            runner.stop()
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
                                "image": SERVER_IMAGE,
                                "args": ["--bind", "$(POD_IP)", "8080"],
                                "env": [POD_IP],
                                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                            }
                        ],
                        # The leader's page, written by an init container into the pod's
                        # folder (every container's working folder, served by the leader).
                        "initContainers": [
                            {
                                "name": "page",
                                "image": PYTHON_IMAGE,
                                "args": [
                                    "import os, pathlib; pathlib.Path('hello')"
                                    ".write_text('leader ' + os.environ['HOSTNAME'])"
                                ],
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


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


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
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "tiny")
