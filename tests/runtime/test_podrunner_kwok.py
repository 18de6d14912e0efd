"""KWOK and the pod runner on one member without a fight: the fleet box's own KWOK
Stages (hack/fleetbox/gpu.py) with `podrunner.skip_real_pods` applied, as the box will
apply them. KWOK keeps playing the kubelet for unmarked pods on its nodes; a marked pod
on the same node keeps the runner's status (its loopback address, its real container
state) and is deleted gracefully by the runner, not at once by KWOK's delete stage.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.conftest import require_tool
from tests.ports import free_port
from tests.runtime.cluster import Member, _die_with_parent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from fleetbox import gpu as fleetbox_gpu
from fleetbox.podrunner import REAL_RUN_LABEL, REAL_RUN_VALUE, Image, PodRunner, skip_real_pods

NODE = "kwok-node-0"
NAMESPACE = "mixed"
SERVER_IMAGE = "example.test/http-server:1"
SHELL_IMAGE = "example.test/shell:1"
WAIT = 30.0


@pytest.fixture(scope="module")
def mixed() -> Iterator[client.CoreV1Api]:
    etcd, apiserver, kwok = (
        require_tool("etcd"),
        require_tool("kube-apiserver"),
        require_tool("kwok"),
    )
    root = Path(tempfile.mkdtemp(prefix="modelplane-kwok-runner-"))
    member = Member("mixed", root / "member", etcd, apiserver)
    process = runner = api = None
    try:
        member.start_etcd()
        member.start_apiserver()
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(member.kubeconfig()))
        stages = root / "kwok-stages.yaml"
        stages.write_text(yaml.safe_dump_all(skip_real_pods(fleetbox_gpu.STAGES), sort_keys=False))
        annotation = f"{fleetbox_gpu.KWOK_NODE_ANNOTATION}={fleetbox_gpu.KWOK_NODE_VALUE}"
        with (root / "kwok.log").open("ab") as output:
            process = subprocess.Popen(
                [
                    str(kwok),
                    f"--kubeconfig={kubeconfig}",
                    f"--config={stages}",
                    f"--manage-nodes-with-annotation-selector={annotation}",
                    f"--server-address=127.0.0.1:{free_port()}",
                    "--cidr=10.244.0.0/16",
                    "--node-ip=10.96.0.1",
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - sets a signal and a group only
            )
        api = member.client()
        core = client.CoreV1Api(api)
        core.create_node(
            {
                "metadata": {
                    "name": NODE,
                    "annotations": {
                        fleetbox_gpu.KWOK_NODE_ANNOTATION: fleetbox_gpu.KWOK_NODE_VALUE
                    },
                }
            }
        )
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})
        images = {
            SERVER_IMAGE: Image(entrypoint=(sys.executable, "-m", "http.server")),
            SHELL_IMAGE: Image(entrypoint=("/bin/sh", "-c")),
        }
        runner = PodRunner(api, NODE, images, root / "pods")
        runner.start()
        yield core
    finally:
        if runner is not None:
            runner.stop()
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if api is not None:
            api.close()
        member.close()


def pod(name: str, real: bool) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {REAL_RUN_LABEL: REAL_RUN_VALUE} if real else {},
        },
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "server",
                    "image": SERVER_IMAGE,
                    "args": ["8095"],
                    "readinessProbe": {"tcpSocket": {"port": 8095}, "periodSeconds": 1},
                }
            ],
        },
    }


def ready(core: client.CoreV1Api, name: str) -> client.V1Pod:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = core.read_namespaced_pod(name, NAMESPACE)
        if any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or []):
            return found
        time.sleep(0.1)
    raise AssertionError(f"{name} not Ready in {WAIT}s: {found.status}")


def test_kwok_runs_unmarked_pods_and_leaves_marked_ones_to_the_runner(
    mixed: client.CoreV1Api,
) -> None:
    mixed.create_namespaced_pod(NAMESPACE, pod("fake", real=False))
    mixed.create_namespaced_pod(NAMESPACE, pod("real", real=True))
    fake, real = ready(mixed, "fake"), ready(mixed, "real")
    assert fake.status.pod_ip.startswith("10.244.")  # KWOK's
    assert ipaddress.ip_address(real.status.pod_ip).is_loopback  # the runner's
    real_ip = real.status.pod_ip
    # KWOK's ready stage fires 1-2 s after a pod is seen: past it, the runner's status holds.
    time.sleep(fleetbox_gpu.START_DELAY_MS * 2.5 / 1000)
    again = mixed.read_namespaced_pod("real", NAMESPACE)
    assert again.status.pod_ip == real_ip
    assert again.status.container_statuses[0].container_id.startswith("podrunner://")

    mixed.delete_namespaced_pod("fake", NAMESPACE)
    mixed.delete_namespaced_pod("real", NAMESPACE, grace_period_seconds=0)


def test_a_marked_pod_is_deleted_gracefully_by_the_runner_not_at_once_by_kwok(
    mixed: client.CoreV1Api, tmp_path: Path
) -> None:
    # The process takes a second to stop cleanly on SIGTERM. KWOK's delete stage would
    # remove the pod at once, and the runner would then SIGKILL a process it can no
    # longer report on.
    mark = tmp_path / "stopped"
    stopping = f"trap 'sleep 1; echo clean > {mark}; exit 0' TERM; while true; do sleep 0.1; done"
    marked = pod("graceful", real=True)
    marked["spec"]["containers"] = [{"name": "engine", "image": SHELL_IMAGE, "args": [stopping]}]
    mixed.create_namespaced_pod(NAMESPACE, marked)
    ready(mixed, "graceful")
    began = time.monotonic()
    mixed.delete_namespaced_pod("graceful", NAMESPACE)
    deadline = began + WAIT
    while time.monotonic() < deadline and mixed.list_namespaced_pod(NAMESPACE).items:
        time.sleep(0.05)
    assert not mixed.list_namespaced_pod(NAMESPACE).items
    assert time.monotonic() - began >= 1.0
    assert mark.read_text() == "clean\n"
