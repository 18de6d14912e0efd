"""The pod runner (hack/fleetbox/podrunner.py) against one real kube-apiserver: pods created
through the API run as local processes, and their status is what a kubelet writes.

One member (etcd and kube-apiserver from the tool cache, tests/runtime/cluster.py) for
the module; no scheduler, so each pod names its node itself. The "image" is a fake name
mapped to this Python, so the containers are trivial real processes: an HTTP server,
a shell that fails.
"""

from __future__ import annotations

import contextlib
import ipaddress
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import require_tool
from tests.runtime.cluster import Member

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from fleetbox.podrunner import REAL_RUN_LABEL, REAL_RUN_VALUE, Backoff, Image, PodRunner

NODE = "real-node-0"
NAMESPACE = "runner"
SERVER_IMAGE = "example.test/http-server:1"
SHELL_IMAGE = "example.test/shell:1"
IMAGES = {
    SERVER_IMAGE: Image(entrypoint=(sys.executable, "-m", "http.server")),
    SHELL_IMAGE: Image(entrypoint=("/bin/sh", "-c")),
}
WAIT = 30.0
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def member() -> Iterator[Member]:
    etcd, apiserver = require_tool("etcd"), require_tool("kube-apiserver")
    root = Path(tempfile.mkdtemp(prefix="modelplane-podrunner-"))
    one = Member("podrunner", root / "member", etcd, apiserver)
    try:
        one.start_etcd()
        one.start_apiserver()
        api = one.client()
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        # The ServiceAccount admission plugin wants the namespace's default account (the
        # controller manager's serviceaccount controller is not running here).
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})
        api.close()
        yield one
    finally:
        one.close()


@pytest.fixture(scope="module")
def runner(member: Member, tmp_path_factory) -> Iterator[PodRunner]:
    api = member.client()
    work = tmp_path_factory.mktemp("runner")
    pods = PodRunner(
        api,
        NODE,
        IMAGES,
        work / "pods",
        backoff=Backoff(initial=0.5, maximum=2.0),
        # The tests' mount paths are under pytest's temporary folder, and only there may
        # the runner create a missing one.
        mount_point_roots=(tmp_path_factory.getbasetemp(),),
    )
    pods.start()
    try:
        yield pods
    finally:
        pods.stop()
        api.close()


@pytest.fixture
def core(member: Member) -> Iterator[client.CoreV1Api]:
    api = member.client()
    yield client.CoreV1Api(api)
    api.close()


def real_pod(name: str, containers: list[dict], **spec) -> dict:
    return {
        "metadata": {"name": name, "labels": {REAL_RUN_LABEL: REAL_RUN_VALUE}},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "containers": containers,
            **spec,
        },
    }


def wait_pod(core: client.CoreV1Api, name: str, check: Callable[[dict], object]) -> dict:
    """The pod (as a dict) once `check` holds on it; fails with the last status."""
    deadline = time.monotonic() + WAIT
    last: dict = {}
    while time.monotonic() < deadline:
        last = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, NAMESPACE))
        if check(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"pod {name}: condition not met in {WAIT}s; status: {last.get('status')}")


def condition(pod: dict, kind: str) -> str | None:
    for entry in (pod.get("status") or {}).get("conditions") or []:
        if entry["type"] == kind:
            return entry["status"]
    return None


def container_status(pod: dict, name: str, init: bool = False) -> dict:
    key = "initContainerStatuses" if init else "containerStatuses"
    for entry in (pod.get("status") or {}).get(key) or []:
        if entry["name"] == name:
            return entry
    return {}


def delete(core: client.CoreV1Api, name: str) -> None:
    with contextlib.suppress(ApiException):
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def pod_names(core: client.CoreV1Api) -> set[str]:
    return {p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items}


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.read().decode()


def test_a_real_pod_serves_on_its_own_address_as_the_kubelet_starts_it(
    runner: PodRunner, core: client.CoreV1Api, tmp_path: Path
) -> None:
    mount_path = tmp_path / "mnt" / "data"
    env = [
        # LeaderWorkerSet's order: the controller's variables first, then the template's.
        {"name": "LEADER", "value": "leader-0.group.runner"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MASTER", "value": "$(LEADER):29500"},
        {"name": "TOO_EARLY", "value": "$(LATER)"},
        {"name": "LATER", "value": "late"},
    ]
    # The kubelet expands $(MASTER) and turns $$(MASTER) into $(MASTER), which the
    # single quotes keep from the shell; $MASTER and $TOO_EARLY are the shell's.
    write_files = (
        f"echo \"$MASTER $TOO_EARLY $POD_NAME $(MASTER)\" '$$(MASTER)' > {mount_path}/index.html"
        f" && cp /etc/hosts {mount_path}/hosts && pwd > {mount_path}/cwd"
    )
    pod = real_pod(
        "server",
        [
            {
                "name": "server",
                "image": SERVER_IMAGE,
                "args": ["--bind", "$(POD_IP)", "--directory", str(mount_path), "8080"],
                "env": env,
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {
                    "httpGet": {"path": "/index.html", "port": "http"},
                    "periodSeconds": 1,
                },
                "volumeMounts": [{"name": "data", "mountPath": str(mount_path)}],
            }
        ],
        initContainers=[
            {
                "name": "prepare",
                "image": SHELL_IMAGE,
                "args": [write_files],
                "env": env,
                "workingDir": "/tmp",
                "volumeMounts": [{"name": "data", "mountPath": str(mount_path)}],
            }
        ],
        volumes=[{"name": "data", "emptyDir": {}}],
        hostname="server",
        subdomain="group",
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    try:
        ready = wait_pod(core, "server", lambda p: condition(p, "Ready") == "True")
        status = ready["status"]
        ip = status["podIP"]
        assert ipaddress.ip_address(ip).is_loopback
        assert ip != "127.0.0.1"
        assert status["phase"] == "Running"
        assert condition(ready, "Initialized") == "True"
        prepared = container_status(ready, "prepare", init=True)
        assert prepared["state"]["terminated"]["exitCode"] == 0
        assert prepared["state"]["terminated"]["reason"] == "Completed"
        server = container_status(ready, "server")
        assert server["ready"] is True
        assert server["started"] is True
        assert "running" in server["state"]
        assert runner.pod_ip(NAMESPACE, "server") == ip
        # The shell ran `args` as the kubelet expanded them: MASTER from an earlier
        # variable, TOO_EARLY kept literal, $(MASTER) in args expanded, $$ escaped.
        page = fetch(f"http://{ip}:8080/index.html")
        assert page == (
            "leader-0.group.runner:29500 $(LATER) server leader-0.group.runner:29500 $(MASTER)\n"
        )
        hosts = fetch(f"http://{ip}:8080/hosts")
        assert f"{ip}\tserver.group.runner.svc.cluster.local\tserver" in hosts
        assert fetch(f"http://{ip}:8080/cwd") == "/tmp\n"
        # The folder was bind-mounted in the containers' own mount namespace: the host's
        # mount point stays empty.
        assert list(mount_path.iterdir()) == []
    finally:
        delete(core, "server")


def test_a_process_that_exits_nonzero_is_a_terminated_container_restarted_with_backoff(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    pod = real_pod(
        "crasher",
        [
            {
                "name": "engine",
                "image": SHELL_IMAGE,
                "args": [
                    "echo loading model; echo 'error: unrecognized argument --tp' >&2; exit 3"
                ],
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    try:

        def crash_looped(p: dict) -> bool:
            # Backing off after its third restart (between restarts it runs, and a
            # container without probes is ready while it runs).
            engine = container_status(p, "engine")
            waiting = (engine.get("state") or {}).get("waiting") or {}
            return (
                waiting.get("reason") == "CrashLoopBackOff" and engine.get("restartCount", 0) >= 3
            )

        looped = wait_pod(core, "crasher", crash_looped)
        engine = container_status(looped, "engine")
        last = engine["lastState"]["terminated"]
        assert last["exitCode"] == 3
        assert last["reason"] == "Error"
        assert last["message"] == "loading model\nerror: unrecognized argument --tp\n"
        assert engine["ready"] is False
        assert looped["status"]["phase"] == "Running"
        assert condition(looped, "Ready") == "False"
        backoff = engine["state"]["waiting"]["message"]
        assert backoff.startswith("back-off ")
        assert "restarting failed container=engine pod=crasher_runner(" in backoff
        assert runner.logs(NAMESPACE, "crasher", "engine", previous=True).startswith("loading")
    finally:
        delete(core, "crasher")


def test_restart_policy_never_leaves_a_failed_pod_and_file_policy_reads_no_logs(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    pod = real_pod(
        "once",
        [{"name": "job", "image": SHELL_IMAGE, "args": ["echo noisy; exit 7"]}],
        restartPolicy="Never",
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    try:
        failed = wait_pod(core, "once", lambda p: p["status"].get("phase") == "Failed")
        job = container_status(failed, "job")
        assert job["restartCount"] == 0
        assert job["state"]["terminated"]["exitCode"] == 7
        # terminationMessagePolicy File (the default): the message is what the process
        # wrote to its termination-log file, and this one wrote nothing there.
        assert "message" not in job["state"]["terminated"]
    finally:
        delete(core, "once")


def test_a_termination_message_file_is_the_message(
    runner: PodRunner, core: client.CoreV1Api, tmp_path: Path
) -> None:
    message_path = tmp_path / "termination-log"
    pod = real_pod(
        "told",
        [
            {
                "name": "job",
                "image": SHELL_IMAGE,
                "args": [f"echo 'model not found' > {message_path}; exit 1"],
                "terminationMessagePath": str(message_path),
            }
        ],
        restartPolicy="Never",
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    try:
        failed = wait_pod(core, "told", lambda p: p["status"].get("phase") == "Failed")
        assert container_status(failed, "job")["state"]["terminated"]["message"] == (
            "model not found\n"
        )
    finally:
        delete(core, "told")


@pytest.mark.parametrize(
    "case",
    [
        (
            {"name": "c", "image": "example.test/unknown:9"},
            "waiting",
            "ErrImagePull",
            "no local program for image 'example.test/unknown:9'",
        ),
        (
            {"name": "c", "image": SHELL_IMAGE, "command": ["no-such-program"]},
            "terminated",
            "StartError",
            'exec: "no-such-program": executable file not found in $PATH',
        ),
        (
            {
                "name": "c",
                "image": SHELL_IMAGE,
                "args": ["true"],
                "env": [
                    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}
                ],
            },
            "waiting",
            "CreateContainerConfigError",
            'configmap "absent" not found',
        ),
    ],
    ids=["unmapped_image", "missing_executable", "missing_config_map"],
)
def test_a_container_that_cannot_start_says_why_as_the_kubelet_does(
    runner: PodRunner, core: client.CoreV1Api, case: tuple[dict, str, str, str]
) -> None:
    container, where, reason, says = case
    name = f"broken-{reason.lower()}"
    core.create_namespaced_pod(NAMESPACE, real_pod(name, [container], restartPolicy="Never"))
    try:

        def reported(p: dict) -> bool:
            state = container_status(p, "c").get("state") or {}
            return (state.get(where) or {}).get("reason") == reason

        broken = wait_pod(core, name, reported)
        state = container_status(broken, "c")["state"][where]
        assert says in state["message"]
        if where == "terminated":
            assert state["exitCode"] == 128
    finally:
        delete(core, name)


def test_a_deleted_pod_stops_its_process_and_is_removed(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    pod = real_pod(
        "doomed",
        [
            {
                "name": "server",
                "image": SERVER_IMAGE,
                "args": ["--bind", "$(POD_IP)", "8081"],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                ],
                "readinessProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1},
            }
        ],
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    ready = wait_pod(core, "doomed", lambda p: condition(p, "Ready") == "True")
    ip = ready["status"]["podIP"]
    assert fetch(f"http://{ip}:8081/") != ""
    began = time.monotonic()
    core.delete_namespaced_pod("doomed", NAMESPACE)  # graceful: the runner confirms it
    deadline = began + WAIT
    while time.monotonic() < deadline and "doomed" in pod_names(core):
        time.sleep(0.1)
    assert "doomed" not in pod_names(core), "the deleted pod was never removed"
    # SIGTERM stops http.server at once: well inside the 5 s grace period.
    assert time.monotonic() - began < 5
    with pytest.raises(OSError, match="Connection refused"):
        fetch(f"http://{ip}:8081/")
    assert runner.pod_ip(NAMESPACE, "doomed") is None


def _removed_after(core: client.CoreV1Api, name: str, began: float) -> float:
    """Seconds from `began` until the pod is gone from the API server."""
    deadline = began + WAIT
    while time.monotonic() < deadline and name in pod_names(core):
        time.sleep(0.05)
    assert name not in pod_names(core), f"{name} was never removed"
    return time.monotonic() - began


def test_a_prestop_sleep_keeps_the_container_serving_and_sigterm_follows_it(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    """As the kubelet: the hook runs first, the container keeps serving meanwhile (and
    reads Ready), SIGTERM follows the hook, long before the grace period ends."""
    pod = real_pod(
        "draining",
        [
            {
                "name": "server",
                "image": SERVER_IMAGE,
                "args": ["--bind", "$(POD_IP)", "8082"],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                ],
                "readinessProbe": {"tcpSocket": {"port": 8082}, "periodSeconds": 1},
                "lifecycle": {"preStop": {"sleep": {"seconds": 2}}},
            }
        ],
        terminationGracePeriodSeconds=20,
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    ready = wait_pod(core, "draining", lambda p: condition(p, "Ready") == "True")
    ip = ready["status"]["podIP"]
    began = time.monotonic()
    core.delete_namespaced_pod("draining", NAMESPACE)
    terminating = wait_pod(core, "draining", lambda p: p["metadata"].get("deletionTimestamp"))
    assert condition(terminating, "Ready") == "True"
    assert fetch(f"http://{ip}:8082/") != ""  # during the hook: still serving
    assert time.monotonic() - began < 2
    gone = _removed_after(core, "draining", began)
    assert 2 <= gone < 10, gone  # the hook's 2 s, then SIGTERM stops http.server at once


def test_a_prestop_exec_runs_in_the_container_before_its_sigterm(
    runner: PodRunner, core: client.CoreV1Api, tmp_path: Path
) -> None:
    record = tmp_path / "order"
    pod = real_pod(
        "hooked",
        [
            {
                "name": "c",
                "image": SHELL_IMAGE,
                "args": [
                    f"trap 'echo term >> {record}; exit 0' TERM; echo started >> {record}; "
                    "while true; do sleep 0.1; done"
                ],
                "lifecycle": {
                    "preStop": {"exec": {"command": ["/bin/sh", "-c", f"echo hook >> {record}"]}}
                },
            }
        ],
        terminationGracePeriodSeconds=20,
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    wait_pod(core, "hooked", lambda p: condition(p, "Ready") == "True")
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and not record.exists():
        time.sleep(0.05)
    began = time.monotonic()
    core.delete_namespaced_pod("hooked", NAMESPACE)
    assert _removed_after(core, "hooked", began) < 10
    assert record.read_text().split() == ["started", "hook", "term"]


def test_a_hook_that_outlasts_the_grace_period_is_cut_short_then_sigkill_after_two_seconds(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    """Grace 2 s, a preStop that would take 60 s, a process that ignores SIGTERM: SIGTERM
    when the grace period ends, SIGKILL the kubelet's minimum 2 s later. (An exec hook:
    the API server refuses a sleep action as long as the grace period.)"""
    pod = real_pod(
        "stubborn",
        [
            {
                "name": "c",
                "image": SHELL_IMAGE,
                "args": ["trap '' TERM; while true; do sleep 0.1; done"],
                "lifecycle": {"preStop": {"exec": {"command": ["/bin/sleep", "60"]}}},
            }
        ],
        terminationGracePeriodSeconds=2,
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    wait_pod(core, "stubborn", lambda p: condition(p, "Ready") == "True")
    began = time.monotonic()
    core.delete_namespaced_pod("stubborn", NAMESPACE)
    gone = _removed_after(core, "stubborn", began)
    assert 4 <= gone < 10, gone


def test_pods_without_the_label_are_left_alone(runner: PodRunner, core: client.CoreV1Api) -> None:
    pod = real_pod("fake", [{"name": "c", "image": SHELL_IMAGE, "args": ["sleep 30"]}])
    pod["metadata"]["labels"] = {}
    core.create_namespaced_pod(NAMESPACE, pod)
    try:
        time.sleep(1.0)  # nothing to wait for: the runner must do nothing
        untouched = core.read_namespaced_pod("fake", NAMESPACE)
        assert untouched.status.pod_ip is None
        assert not untouched.status.container_statuses
    finally:
        delete(core, "fake")


def test_pods_that_bind_every_address_share_a_port_each_on_its_own_address(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    # No --bind: http.server listens on every address, as vLLM does without --host. In a
    # cluster each pod has its own network; here the bind library moves it to the pod IP.
    twins = ("twin-a", "twin-b")
    for name in twins:
        server = {
            "name": "server",
            "image": SERVER_IMAGE,
            "args": ["8090"],
            "readinessProbe": {"tcpSocket": {"port": 8090}, "periodSeconds": 1},
        }
        core.create_namespaced_pod(NAMESPACE, real_pod(name, [server]))
    try:
        ips = {
            name: wait_pod(core, name, lambda p: condition(p, "Ready") == "True")["status"]["podIP"]
            for name in twins
        }
        assert len(set(ips.values())) == 2
        for ip in ips.values():
            assert "Directory listing" in fetch(f"http://{ip}:8090/")
    finally:
        for name in twins:
            delete(core, name)


def test_the_service_account_volume_waits_for_its_ca_then_needs_its_mount_point(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    # Admission adds the kube-api-access projected volume (a bound token from the
    # TokenRequest API, the kube-root-ca.crt ConfigMap, the namespace). Without the
    # controller manager's root-CA publisher the ConfigMap is missing, and the kubelet
    # waits in ContainerCreating; once it exists, the mount path must be allowed.
    pod = real_pod("with-token", [{"name": "c", "image": SHELL_IMAGE, "args": ["sleep 30"]}])
    del pod["spec"]["automountServiceAccountToken"]
    core.create_namespaced_pod(NAMESPACE, pod)
    try:

        def waiting(reason: str) -> Callable[[dict], bool]:
            def check(p: dict) -> bool:
                state = container_status(p, "c").get("state") or {}
                return (state.get("waiting") or {}).get("reason") == reason

            return check

        creating = wait_pod(core, "with-token", waiting("ContainerCreating"))
        message = container_status(creating, "c")["state"]["waiting"]["message"]
        assert message == 'configmap "kube-root-ca.crt" not found'
        core.create_namespaced_config_map(
            NAMESPACE, {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA"}}
        )
        if Path(TOKEN_PATH).exists():  # this host is itself a pod: the path is there
            wait_pod(core, "with-token", lambda p: "running" in container_status(p, "c")["state"])
            return
        refused = wait_pod(core, "with-token", waiting("CreateContainerError"))
        message = container_status(refused, "c")["state"]["waiting"]["message"]
        assert message.startswith(f"mount path {TOKEN_PATH} does not exist on this host")
    finally:
        delete(core, "with-token")
        core.delete_namespaced_config_map("kube-root-ca.crt", NAMESPACE)


def test_a_failing_liveness_probe_restarts_the_container(
    runner: PodRunner, core: client.CoreV1Api
) -> None:
    pod = real_pod(
        "unhealthy",
        [
            {
                "name": "c",
                "image": SHELL_IMAGE,
                "args": ["sleep 30"],
                "livenessProbe": {
                    "exec": {"command": ["false"]},
                    "periodSeconds": 1,
                    "failureThreshold": 2,
                },
            }
        ],
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    try:
        restarted = wait_pod(
            core, "unhealthy", lambda p: container_status(p, "c").get("restartCount")
        )
        last = container_status(restarted, "c")["lastState"]["terminated"]
        assert last["exitCode"] == 128 + 15  # SIGTERM, as the kubelet stops it
        assert last["reason"] == "Error"
    finally:
        delete(core, "unhealthy")
