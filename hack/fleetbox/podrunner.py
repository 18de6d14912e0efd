"""A kubelet for chosen pods: the pods bound to one node that carry the real-run label
run as local processes, started exactly as a kubelet would start their containers.

The fleet box's nodes are KWOK nodes: KWOK writes a pod's status and no process ever
runs. For the pods a test marks (`REAL_RUN_LABEL: REAL_RUN_VALUE`, a label because the
workload controllers copy a template's labels to its pods, and because KWOK's Stages can
skip by it), `PodRunner` plays the kubelet instead:

- it watches the pods bound to its node and reads each one as the API server stores it,
  after every webhook and controller mutated it (LeaderWorkerSet's env, for one);
- the pod gets its own address (`LoopbackAddresses`, one pool shared by every runner in
  the process, so two members' pods never share an address) as its pod IP: from the
  host's loopback 127.0.0.0/8 by default, or, for a runner whose pods resolve through
  cluster DNS, from `CLUSTER_POD_ADDRESSES` (198.18.x), since the API server refuses a
  loopback address in an EndpointSlice and without EndpointSlices no Service or DNS
  record names the pod. Those pods run in a network namespace the box makes itself
  (podnet.py), where their addresses are assigned while they hold them, reached from
  the host through its veth pair; no host interface of its own holds them;
- each container's environment, command and args are the kubelet's (hack/fleetbox/kubelet_rules.py:
  `$(VAR)` expansion, downward API, service links), and the image's entrypoint is the
  local program the caller maps the image to (`Image`): `command` replaces it, `args`
  replace the image's CMD;
- volumes are materialized on the host (emptyDir as a folder, a Memory emptyDir on
  /dev/shm, hostPath, ConfigMap, Secret, downward API, projected service-account
  token, a PersistentVolumeClaim the caller maps to a folder) and bind-mounted at
  their mountPath in a private mount namespace of the container's process, with a
  kubelet-managed /etc/hosts (localhost, the pod's own name and FQDN, hostAliases:
  nothing about other pods) and the resolv.conf the kubelet writes by the pod's
  dnsPolicy and dnsConfig: for ClusterFirst, the cluster's nameserver (the runner's
  `nameserver`, the member's CoreDNS: dns.py), `search <namespace>.svc.<domain>
  svc.<domain> <domain>` and `options ndots:5`. Peers (LeaderWorkerSet's leader
  address) resolve through cluster DNS only, as in a cluster;
- it writes the pod's status as the kubelet does: podIP, phase, conditions, container
  states; started and ready follow startup and readiness probes (httpGet, tcpSocket,
  exec) against the pod IP; a failing liveness or startup probe restarts the container;
- a process that exits is a container that terminated (exit code, reason, the
  termination message by the container's terminationMessagePolicy: the file the
  process wrote at terminationMessagePath, or with FallbackToLogsOnError the tail of
  its output), restarted by the pod's restartPolicy with the kubelet's back-off (first
  restart at once, then 10 s doubling to 5 min; `Backoff` scales it for tests) and
  `restartCount` counting;
- a pod deleted gracefully is stopped as the kubelet stops it (killContainer,
  pkg/kubelet/kuberuntime): each running container's preStop hook runs first (sleep,
  exec in the container's namespaces, httpGet against the pod IP; never for a container
  that is not running, nor with a grace period of 0), and SIGTERM follows once it
  returns, or once the grace period is spent (the grace period counts from the
  deletion, the hook included); SIGKILL follows what is left of the grace period, at
  least 2 s (the kubelet's minimum, which is also the "one-off extension" a hook that
  outlasts the grace period leaves the container). Meanwhile the pod's status is written
  as before: readiness follows the readiness probe until the container exits, so an
  engine that stops answering reads not Ready before it is gone. The pod is then
  removed with grace 0, as the kubelet confirms a deletion.

A process that binds every address (0.0.0.0 or a dual-stack ::) is bound to its pod's
address instead, by an LD_PRELOAD library the runner builds with the C compiler
(`build_bind_shim`); so two pods listen on the same port as in a cluster. The process
sees LD_PRELOAD and PODRUNNER_POD_IP in its environment: the only variables a kubelet
would not give it (besides the image's ENV, HOSTNAME and a HOME in the pod's folder,
which a container runtime gives).

Not done (a kubelet does): postStart hooks, resource limits (cgroups), a network
namespace per pod (pods with cluster DNS share the box's one, podnet.py, the others the
host's; the bind library keeps their listeners apart), image pulls, ephemeral
containers, in-place resize, grpc probes; exec probes run on the host, outside the
container's mount namespace (in the box's network namespace for pods there); a
hostNetwork pod still gets its own address; a dnsConfig with dnsPolicy Default is not
merged into the host's resolv.conf (the pod keeps the host's); no kube-proxy, so a
Service's ClusterIP (which cluster DNS answers) reaches nothing.

The runner needs root (or CAP_SYS_ADMIN) for mount namespaces; without them a container
that mounts anything fails with CreateContainerError saying so, and /etc/hosts and the
termination-message file are not provided (nor the resolv.conf: the process then uses
the host's). A mountPath that does not exist on the host
is created only under a folder the caller names (`mount_point_roots`), since it stays
behind on the host as an empty folder or file (say "/models" for a ModelCache's mount,
"/var/run/secrets/kubernetes.io" for the service-account token, "/dev/termination-log"
for the default termination-message path); elsewhere the container fails with
CreateContainerError naming the path, and a missing termination-message path only
means its message comes from nowhere but the logs.

Threads: one watch thread feeds pod events to one sync thread, which alone changes
state and starts every process (PR_SET_PDEATHSIG follows the thread that spawned a
child, so that thread lives as long as the runner); a waiter thread per process and a
prober thread per probe only wake the sync thread.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import http.client
import ipaddress
import json
import logging
import os
import queue
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetbox.kubelet_rules import (
    Addresses,
    ContainerConfigError,
    EnvSources,
    Image,
    command_line,
    container_env,
    field_ref_value,
    referenced_objects,
    resource_field_value,
)
from fleetbox.podnet import HOST_ADDRESSES as PODNET_HOST_ADDRESSES
from fleetbox.podnet import POD_ADDRESSES as PODNET_POD_ADDRESSES
from fleetbox.podnet import POD_NETWORK, PodNetwork
from tests.ports import xdist_worker
from tests.runtime.cluster import _die_with_parent

log = logging.getLogger("podrunner")

# The switch a test sets on a pod template: run this pod for real. Not under
# modelplane.ai/, which the ModelDeployment's CEL rules reserve on pod templates.
REAL_RUN_LABEL = "modelplane.test/run"
REAL_RUN_VALUE = "real"
REAL_RUN_SELECTOR = f"{REAL_RUN_LABEL}={REAL_RUN_VALUE}"
# The matchExpression every KWOK pod Stage of a member with a runner needs, so KWOK
# never writes the status of (nor deletes) a pod the runner runs: the two would fight.
KWOK_STAGE_SKIP = {"key": f'.metadata.labels["{REAL_RUN_LABEL}"]', "operator": "DoesNotExist"}


def skip_real_pods(stages: list[dict]) -> list[dict]:
    """KWOK Stages with `KWOK_STAGE_SKIP` added to every Pod stage's selector."""
    skipping = []
    for original in stages:
        stage = json.loads(json.dumps(original))
        if stage["spec"]["resourceRef"].get("kind") == "Pod":
            selector = stage["spec"].setdefault("selector", {})
            selector["matchExpressions"] = [*selector.get("matchExpressions", []), KWOK_STAGE_SKIP]
        skipping.append(stage)
    return skipping


CLUSTER_DOMAIN = "cluster.local"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The kubelet's limits on a termination message (pkg/kubelet/kuberuntime).
TERMINATION_MESSAGE_MAX_BYTES = 4096
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
# Pod status fields other components write, kept as they are when the runner writes its
# own (the resourceclaim controller names each pod's generated ResourceClaims).
STATUS_KEPT = (
    "qosClass",
    "nominatedNodeName",
    "resourceClaimStatuses",
    "extendedResourceClaimStatus",
)
# How often the sync thread looks at timers when nothing wakes it.
IDLE_WAKE_SECONDS = 1.0
# How long a volume that cannot be set up waits before the next try.
VOLUME_RETRY_SECONDS = 2.0
# What the kubelet leaves a container between SIGTERM and SIGKILL at least, however
# little of the grace period a preStop hook left (minimumGracePeriodInSeconds).
MINIMUM_GRACE_SECONDS = 2.0

_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 0x1
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
_LIBC.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_LIBC.unshare.argtypes = [ctypes.c_int]
_LIBC.setns.argtypes = [ctypes.c_int, ctypes.c_int]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _go_duration(seconds: float) -> str:
    """A back-off as Go prints a time.Duration: 10s, 1m20s, 5m0s."""
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:g}s"
    return f"{whole // 60}m{whole % 60}s"


# --- addresses ------------------------------------------------------------------------


class LoopbackAddresses:
    """Pod IPs, each handed to one pod at a time. Addresses are handed out round the
    range before one is reused, so a Service endpoint or a client that still names a
    deleted pod's address does not reach its successor.

    Without `network`, the range is in 127.0.0.0/8: the host's loopback, nothing to
    assign, but an EndpointSlice may not hold such an address (the API server refuses
    loopback endpoints), so no Service, and no cluster DNS record, can name such a pod.
    With `network` (podnet.py: a network namespace the box makes itself), the range is
    in that network's 198.18.x.0/24 and each address is assigned while an owner holds
    it: inside the namespace (a pod's, `inside=True`; the runner starts the pod's
    processes there) or on the host end of its veth pair (`inside=False`: a host-side
    service the pods reach, such as a member's CoreDNS). Never on a host interface of
    its own."""

    def __init__(
        self,
        first: str = "127.0.0.100",
        last: str = "127.0.0.250",
        *,
        network: PodNetwork | None = None,
        hosts: tuple[int, int] = PODNET_POD_ADDRESSES,
        inside: bool = True,
    ) -> None:
        """Without `network`, `first`..`last` (loopback); with it, the host numbers
        `hosts` of the network's subnet, which the network picks when first used."""
        self.network = network
        self.inside = inside
        self._hosts = hosts
        self._range: list[str] = []
        if network is None:
            low, high = int(ipaddress.IPv4Address(first)), int(ipaddress.IPv4Address(last))
            ends = (ipaddress.IPv4Address(first), ipaddress.IPv4Address(last))
            if not all(a.is_loopback for a in ends):
                raise ValueError(f"pod addresses must be loopback addresses: {first}..{last}")
            self._range = [str(ipaddress.IPv4Address(i)) for i in range(low, high + 1)]
        elif not 1 < hosts[0] <= hosts[1] < 255:
            raise ValueError(f"host numbers must be within 2..254: {hosts}")
        self._cursor = 0
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()

    def _addresses(self) -> list[str]:
        if not self._range and self.network is not None:
            subnet = self.network.subnet
            self._range = [str(subnet[i]) for i in range(self._hosts[0], self._hosts[1] + 1)]
        return self._range

    @property
    def assign(self) -> bool:
        return self.network is not None

    @property
    def netns(self) -> Path | None:
        """The network namespace the pods holding these addresses run in (None: the
        host's)."""
        return self.network.path if self.network is not None and self.inside else None

    def _assign(self, action: str, address: str) -> None:
        if self.network is None:
            return
        if self.inside:
            self.network.pod_address(action, address)
        else:
            self.network.host_address(action, address)

    def allocate(self, owner: str) -> str:
        with self._lock:
            for address, who in self._owners.items():
                if who == owner:
                    return address
            addresses = self._addresses()
            for _ in range(len(addresses)):
                address = addresses[self._cursor]
                self._cursor = (self._cursor + 1) % len(addresses)
                if address not in self._owners:
                    self._assign("add", address)
                    self._owners[address] = owner
                    return address
        raise RuntimeError(f"no free pod address in {self._range[0]}..{self._range[-1]}")

    def release(self, owner: str) -> None:
        with self._lock:
            for address in [a for a, who in self._owners.items() if who == owner]:
                del self._owners[address]
                self._assign("del", address)


def _pod_address_range() -> tuple[str, str]:
    """127.0.0.100..250, or under pytest-xdist a /24 of loopback per worker
    (127.0.<1 + worker>.100..250), so two test processes' pods never share an address."""
    index, count = xdist_worker()
    if count == 1:
        return "127.0.0.100", "127.0.0.250"
    return f"127.0.{1 + index}.100", f"127.0.{1 + index}.250"


# Shared by every runner in this process: two members' pods never share an address.
POD_ADDRESSES = LoopbackAddresses(*_pod_address_range())
# For a runner whose pods resolve through cluster DNS (`nameserver`): addresses an
# EndpointSlice may hold, so the member's Services and CoreDNS can name the pods; the
# pods run in the box's own network namespace (podnet.py), where these addresses live.
CLUSTER_POD_ADDRESSES = LoopbackAddresses(network=POD_NETWORK, hosts=PODNET_POD_ADDRESSES)
# Host-side addresses those pods reach (a member's CoreDNS): on the host end of the
# namespace's veth pair.
CLUSTER_HOST_ADDRESSES = LoopbackAddresses(
    network=POD_NETWORK, hosts=PODNET_HOST_ADDRESSES, inside=False
)


@dataclass(frozen=True)
class Backoff:
    """The kubelet's crash-loop back-off: the first restart at once, then `initial`
    seconds doubling to `maximum`; forgotten after twice `maximum` without an exit."""

    initial: float = 10.0
    maximum: float = 300.0


def mount_namespaces_work() -> bool:
    """Whether this process may give a child its own mount namespace (root or
    CAP_SYS_ADMIN, and a kernel and sandbox that allow it)."""
    probe = (
        "import ctypes, sys; libc = ctypes.CDLL('libc.so.6', use_errno=True); "
        f"sys.exit(0 if libc.unshare({_CLONE_NEWNS}) == 0 else 1)"
    )
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


# --- the pod's address for wildcard binds ------------------------------------------------

# What a process binds to 0.0.0.0 (or ::) is bound to its pod's address instead, so two
# pods may listen on the same port as in a cluster (vLLM listens on every address unless
# told otherwise). An LD_PRELOAD library, built once per runner folder with the C
# compiler; without one, wildcard binds stay wildcard (and collide). Programs that do
# not call libc's bind (static Go binaries) are not covered.
BIND_SHIM_ADDRESS = "PODRUNNER_POD_IP"
_BIND_SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *pod_ip = getenv("PODRUNNER_POD_IP");
    if (pod_ip && addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in = *(const struct sockaddr_in *)addr;
        if (in.sin_addr.s_addr == htonl(INADDR_ANY)
            && inet_pton(AF_INET, pod_ip, &in.sin_addr) == 1)
            return real_bind(fd, (const struct sockaddr *)&in, sizeof in);
    }
    if (pod_ip && addr && addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6 = *(const struct sockaddr_in6 *)addr;
        int v6only = 0;
        socklen_t size = sizeof v6only;
        getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size);
        char mapped[64];
        snprintf(mapped, sizeof mapped, "::ffff:%s", pod_ip);
        /* A dual-stack wildcard: the pod's IPv4 address, mapped. */
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) && !v6only
            && inet_pton(AF_INET6, mapped, &in6.sin6_addr) == 1)
            return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
    }
    return real_bind(fd, addr, len);
}
"""


def build_bind_shim(folder: Path) -> Path | None:
    """The bind library in `folder` (built if missing), or None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("podrunner: no C compiler: wildcard binds are not moved to pod addresses")
        return None
    digest = hashlib.sha256(_BIND_SHIM_SOURCE.encode()).hexdigest()[:12]
    library = folder / f"podrunner-bind-{digest}.so"
    if library.exists():
        return library
    source = folder / f"podrunner-bind-{digest}.c"
    source.write_text(_BIND_SHIM_SOURCE)
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        log.warning("podrunner: the bind library did not build: %s", built.stderr.strip())
        return None
    return library


# --- a container ------------------------------------------------------------------------


@dataclass
class Mount:
    source: Path
    target: str
    read_only: bool


@dataclass
class ContainerRun:
    """One container of a pod: its process, its state as the kubelet reports it."""

    spec: dict
    init: bool = False
    sidecar: bool = False  # an init container with restartPolicy Always
    restart_count: int = 0
    process: subprocess.Popen | None = None
    generation: int = 0
    argv0: str = ""
    argv: list[str] = field(default_factory=list)  # what it was last started with
    state: dict = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict = field(default_factory=dict)
    started_at: str = ""
    started: bool = False
    ready: bool = False
    completed: bool = False  # terminated for good (no restart will follow)
    backoff_seconds: float = 0.0
    backoff_updated: float = 0.0  # monotonic time of the exit the back-off counted
    restart_at: float | None = None
    kill_deadline: float | None = None
    kill_reason: str = ""
    prestop: PreStopHook | None = None  # running or run while the pod terminates
    termination_file: Path | None = None
    log_path: Path | None = None
    probers: list[Prober] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec["name"]

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def status(self, pod_uid: str) -> dict:
        status = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": f"podrunner://{self.argv0}" if self.argv0 else "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.generation:
            status["containerID"] = f"podrunner://{pod_uid}/{self.name}/{self.generation}"
        return status


# --- probes ------------------------------------------------------------------------------


class Prober(threading.Thread):
    """One probe of one container generation, run on the kubelet's schedule; it reports
    each change of result to its runner by waking the sync thread."""

    def __init__(self, runner: PodRunner, pod: PodRun, container: ContainerRun, kind: str) -> None:
        super().__init__(daemon=True, name=f"probe-{kind}-{pod.key}/{container.name}")
        self.runner, self.pod, self.container, self.kind = runner, pod, container, kind
        self.spec = container.spec[f"{kind}Probe"]
        self.generation = container.generation
        self.stopped = threading.Event()
        self.result: bool | None = None

    def run(self) -> None:
        spec = self.spec
        period = float(spec.get("periodSeconds") or 10)
        timeout = float(spec.get("timeoutSeconds") or 1)
        needed_successes = int(spec.get("successThreshold") or 1)
        allowed_failures = int(spec.get("failureThreshold") or 3)
        if self.stopped.wait(float(spec.get("initialDelaySeconds") or 0)):
            return
        successes = failures = 0
        while not self.stopped.is_set():
            if self.kind != "startup" and not self.container.started:
                self.stopped.wait(0.1)
                continue
            ok = self._probe(timeout)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            result = self.result
            if ok and successes >= needed_successes:
                result = True
            elif not ok and failures >= allowed_failures:
                result = False
            if result != self.result:
                self.result = result
                self.runner._wake(self.pod.uid)
            if self.kind == "startup" and result:
                return
            self.stopped.wait(period)

    def _probe(self, timeout: float) -> bool:
        spec = self.spec
        try:
            if spec.get("httpGet"):
                return self._http(spec["httpGet"], timeout)
            if spec.get("tcpSocket"):
                target = spec["tcpSocket"]
                host = target.get("host") or self.pod.ip
                with socket.create_connection((host, self._port(target["port"])), timeout):
                    return True
            if spec.get("exec"):
                argv = spec["exec"].get("command") or []
                netns = self.runner.addresses.netns
                # In the pod's network namespace, as the container sees localhost.
                network = ["nsenter", f"--net={netns}"] if netns is not None and argv else []
                done = subprocess.run(
                    [*network, *argv],
                    env=self.container_env(),
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )
                return done.returncode == 0
        except (OSError, subprocess.TimeoutExpired, http.client.HTTPException):
            return False
        return False  # grpc and unknown handlers: never succeed here

    def container_env(self) -> dict[str, str]:
        return dict(self.pod.envs.get(self.container.name, {}))

    def _port(self, port: int | str) -> int:
        return _container_port(self.container.spec, port)

    def _http(self, target: dict, timeout: float) -> bool:
        host = target.get("host") or self.pod.ip
        port = self._port(target["port"])
        if (target.get("scheme") or "HTTP").upper() == "HTTPS":
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # as the kubelet: no verification
            connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=timeout)
        headers = {"User-Agent": "kube-probe/1.35", "Accept": "*/*"}
        headers.update({h["name"]: h["value"] for h in target.get("httpHeaders") or []})
        try:
            connection.request("GET", target.get("path") or "/", headers=headers)
            # 2xx and 3xx succeed; a redirect is not followed.
            return 200 <= connection.getresponse().status < 400
        finally:
            connection.close()


# --- lifecycle hooks ------------------------------------------------------------------------


class PreStopHook(threading.Thread):
    """A container's preStop handler, run once while its pod terminates; it wakes the
    sync thread when it returns. The sync thread sends SIGTERM after it (or at
    `deadline`, the end of the grace period, if it has not returned by then)."""

    def __init__(
        self, runner: PodRunner, pod: PodRun, container: ContainerRun, grace: float
    ) -> None:
        super().__init__(daemon=True, name=f"prestop-{pod.key}/{container.name}")
        self.runner, self.pod, self.container = runner, pod, container
        self.spec = container.spec["lifecycle"]["preStop"]
        self.began = time.monotonic()
        self.deadline = self.began + grace
        self.finished = threading.Event()
        self.abandoned = threading.Event()  # the grace period ended, or the runner stops
        self.error = ""

    def run(self) -> None:
        try:
            self._handle()
        except (OSError, subprocess.SubprocessError, http.client.HTTPException) as error:
            # The kubelet records a failed hook (an event) and stops the container anyway.
            self.error = str(error)
            log.info(
                "podrunner: preStop of %s/%s failed: %s", self.pod.key, self.container.name, error
            )
        finally:
            self.finished.set()
            self.runner._wake(self.pod.uid)

    def _remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def _handle(self) -> None:
        spec = self.spec
        if spec.get("sleep"):
            self.abandoned.wait(min(float(spec["sleep"].get("seconds") or 0), self._remaining()))
        elif spec.get("exec"):
            argv = spec["exec"].get("command") or []
            process = self.container.process
            if not argv or process is None:
                return
            # In the container's own namespaces, as `kubectl exec` would run it.
            enter = (
                ["nsenter", f"--target={process.pid}", "--mount", "--net", "--"]
                if self.runner.mount_namespaces
                else []
            )
            subprocess.run(
                [*enter, *argv],
                env=dict(self.pod.envs.get(self.container.name, {})),
                capture_output=True,
                timeout=max(0.1, self._remaining()),
                check=False,
            )
        elif spec.get("httpGet"):
            target = spec["httpGet"]
            port = _container_port(self.container.spec, target["port"])
            host = target.get("host") or self.pod.ip
            scheme = (target.get("scheme") or "HTTP").upper()
            timeout = max(0.1, self._remaining())
            if scheme == "HTTPS":
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                connection = http.client.HTTPSConnection(
                    host, port, timeout=timeout, context=context
                )
            else:
                connection = http.client.HTTPConnection(host, port, timeout=timeout)
            headers = {h["name"]: h["value"] for h in target.get("httpHeaders") or []}
            try:
                connection.request("GET", target.get("path") or "/", headers=headers)
                connection.getresponse().read()
            finally:
                connection.close()
        # tcpSocket: kept in the API for compatibility, the kubelet runs nothing for it.


def _container_port(spec: dict, port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in spec.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise OSError(f"no container port named {port}")


# --- a pod --------------------------------------------------------------------------------


@dataclass
class PodRun:
    """What the runner keeps for one pod (by UID): its address, folders, containers."""

    uid: str
    pod: dict
    ip: str
    root: Path
    containers: list[ContainerRun]
    started_at: str = field(default_factory=_now)
    volumes: dict[str, Path] = field(default_factory=dict)
    volumes_ready: bool = False
    volume_error: str = ""
    volume_retry_at: float = 0.0
    memory_dirs: list[Path] = field(default_factory=list)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    hosts_file: Path | None = None
    resolv_conf: Path | None = None
    terminating: bool = False
    last_status: dict | None = None

    @property
    def key(self) -> str:
        metadata = self.pod["metadata"]
        return f"{metadata['namespace']}/{metadata['name']}"

    @property
    def init_containers(self) -> list[ContainerRun]:
        return [c for c in self.containers if c.init]

    @property
    def app_containers(self) -> list[ContainerRun]:
        return [c for c in self.containers if not c.init]

    def initialized(self) -> bool:
        return all(c.started if c.sidecar else _succeeded(c) for c in self.init_containers)


class PodRunner:
    """Runs the pods bound to `node` (None: to any node) that match `selector` as local
    processes.

    `api`: a client for the member's API server (the runner's own; closed by the caller).
    `images`: image reference (exactly as in the pod spec) → the local program standing in.
    `claims`: "namespace/claimName" → the host folder a PersistentVolumeClaim stands for.
    `workdir`: where pods' folders and container logs go.
    `nameserver`: the cluster DNS address a ClusterFirst pod's resolv.conf names (the
    member's CoreDNS, dns.py); None: such a pod keeps the host's resolver.
    """

    def __init__(
        self,
        api: client.ApiClient,
        node: str | None,
        images: Mapping[str, Image],
        workdir: Path,
        *,
        selector: str = REAL_RUN_SELECTOR,
        addresses: LoopbackAddresses = POD_ADDRESSES,
        claims: Mapping[str, Path] | None = None,
        backoff: Backoff = Backoff(),
        mount_point_roots: tuple[str | Path, ...] = (),
        cluster_domain: str = CLUSTER_DOMAIN,
        nameserver: str | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.images = dict(images)
        self.workdir = Path(workdir)
        self.selector = selector
        self.addresses = addresses
        self.claims = {k: Path(v) for k, v in (claims or {}).items()}
        self.backoff = backoff
        self.mount_point_roots = tuple(Path(r) for r in mount_point_roots)
        self.cluster_domain = cluster_domain
        self.nameserver = nameserver
        self.core = client.CoreV1Api(api)
        self.mount_namespaces = False
        self._latest: dict[str, dict | None] = {}
        self._latest_lock = threading.Lock()
        self._runs: dict[str, PodRun] = {}
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch: watch.Watch | None = None
        self._nodes: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
        self._bind_shim: Path | None = None

    # --- public ---------------------------------------------------------------------

    def start(self) -> PodRunner:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.mount_namespaces = mount_namespaces_work()
        self._bind_shim = build_bind_shim(self.workdir)
        for target, name in ((self._watch_pods, "watch"), (self._sync_loop, "sync")):
            thread = threading.Thread(
                target=target, daemon=True, name=f"podrunner-{name}-{self.node or 'all'}"
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process (SIGTERM, SIGKILL after `grace`) and the threads. Pods stay
        in the API server as they are."""
        self._stopping.set()
        if self._watch is not None:
            self._watch.stop()
        self._queue.put(None)
        for thread in self._threads:
            if thread.name.startswith("podrunner-sync"):
                thread.join(timeout=grace + 10)
        self._threads.clear()
        if self.addresses.assign:
            # The processes are gone: their addresses leave `lo` (the pods keep them in
            # the API server, as pods of a stopped node do).
            for run in list(self._runs.values()):
                self.addresses.release(run.uid)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pod_ip(self, namespace: str, name: str) -> str | None:
        for run in list(self._runs.values()):
            if run.key == f"{namespace}/{name}":
                return run.ip
        return None

    def pids(self, namespace: str | None = None, name: str | None = None) -> dict[str, int]:
        """The running containers' process ids ("namespace/pod/container" → pid), of one
        pod, of one namespace, or of every pod this runner runs."""
        found = {}
        for run in list(self._runs.values()):
            pod_namespace, pod_name = run.key.split("/", 1)
            if namespace not in (None, pod_namespace) or name not in (None, pod_name):
                continue
            for c in run.containers:
                process = c.process
                if process is not None and process.poll() is None:
                    found[f"{run.key}/{c.name}"] = process.pid
        return found

    def resolve(self, namespace: str, name: str, container: str, host: str) -> list[str]:
        """The IPv4 addresses `host` resolves to as a running container of a pod sees
        it (the system resolver in the container's mount namespace: its hosts file and
        resolv.conf); [] when it does not resolve or the container does not run."""
        pid = self.pids(namespace, name).get(f"{namespace}/{name}/{container}")
        if pid is None:
            return []
        found = subprocess.run(
            ["nsenter", "--target", str(pid), "--mount", "--net", "getent", "ahostsv4", host],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return sorted({line.split()[0] for line in found.stdout.splitlines() if line.strip()})

    def files(self, namespace: str, name: str) -> dict[str, str]:
        """The resolver files the runner wrote a pod ("hosts", "resolv.conf"), as its
        containers see them at /etc/hosts and /etc/resolv.conf."""
        for run in list(self._runs.values()):
            if run.key == f"{namespace}/{name}":
                paths = {"hosts": run.hosts_file, "resolv.conf": run.resolv_conf}
                return {k: p.read_text() for k, p in paths.items() if p is not None}
        return {}

    def argv(self, namespace: str, name: str, container: str) -> list[str]:
        """The command line a container was last started with (after `$(VAR)`
        expansion, the image's entrypoint in front), or [] before it first starts."""
        for run in list(self._runs.values()):
            if run.key == f"{namespace}/{name}":
                for c in run.containers:
                    if c.name == container:
                        return list(c.argv)
        return []

    def logs(self, namespace: str, name: str, container: str, previous: bool = False) -> str:
        """A container's output (of its previous run with `previous`), like kubectl logs."""
        for run in list(self._runs.values()):
            if run.key != f"{namespace}/{name}":
                continue
            for c in run.containers:
                if c.name == container:
                    generation = c.generation - (1 if previous else 0)
                    path = run.root / "logs" / container / f"{generation}.log"
                    return path.read_text(errors="replace") if path.exists() else ""
        return ""

    # --- watch ----------------------------------------------------------------------

    def _node(self, name: str) -> tuple[dict[str, str], tuple[str, ...]]:
        """A node's allocatable and InternalIPs (read once; nothing for a missing node)."""
        if name not in self._nodes:
            try:
                node = json.loads(self.core.read_node(name, _preload_content=False).data)
            except ApiException as error:
                if error.status != 404:
                    raise
                node = {}
            status = node.get("status") or {}
            self._nodes[name] = (
                dict(status.get("allocatable") or {}),
                tuple(
                    a["address"]
                    for a in status.get("addresses") or []
                    if a.get("type") == "InternalIP"
                ),
            )
        return self._nodes[name]

    def _observe(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self._latest_lock:
            self._latest[uid] = None if kind == "DELETED" else pod
        self._wake(uid)

    def _wake(self, uid: str) -> None:
        self._queue.put(uid)

    def _watch_pods(self) -> None:
        # One node, or every pod once the scheduler has bound it.
        fields = f"spec.nodeName={self.node}" if self.node else "spec.nodeName!="
        version: str | None = None
        while not self._stopping.is_set():
            try:
                if version is None:
                    listing = json.loads(
                        self.core.list_pod_for_all_namespaces(
                            label_selector=self.selector,
                            field_selector=fields,
                            _preload_content=False,
                        ).data
                    )
                    present = {p["metadata"]["uid"] for p in listing["items"]}
                    with self._latest_lock:
                        gone = [
                            u for u, p in self._latest.items() if p is not None and u not in present
                        ]
                    for uid in gone:
                        self._observe("DELETED", {"metadata": {"uid": uid}})
                    for pod in listing["items"]:
                        self._observe("MODIFIED", pod)
                    version = listing["metadata"]["resourceVersion"]
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=self.selector,
                    field_selector=fields,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                    deserialize=False,
                ):
                    pod = event["object"]
                    version = pod["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._observe(event["type"], pod)
            except ApiException as error:
                if error.status == 410:
                    version = None
                    continue
                if not self._stopping.is_set():
                    log.warning("podrunner %s: watch failed: %s", self.node, error)
                    version = None
                    self._stopping.wait(0.5)
            except Exception as error:
                if not self._stopping.is_set():
                    log.warning("podrunner %s: watch failed: %s", self.node, error)
                    version = None
                    self._stopping.wait(0.5)

    # --- the sync thread ------------------------------------------------------------

    def _sync_loop(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    first = self._queue.get(timeout=self._next_timer())
                except queue.Empty:
                    first = ""
                if first is None:
                    break
                dirty = {first} if first else set()
                with contextlib.suppress(queue.Empty):
                    while True:
                        more = self._queue.get_nowait()
                        if more is None:
                            self._stopping.set()
                            break
                        dirty.add(more)
                if self._stopping.is_set():
                    break
                dirty |= set(self._runs)  # timers: back-off, kill deadlines, volume retries
                for uid in sorted(u for u in dirty if u):
                    try:
                        self._sync(uid)
                    except Exception:
                        log.exception("podrunner %s: sync of pod %s failed", self.node, uid)
        finally:
            for run in list(self._runs.values()):
                self._kill_all(run, grace=5.0)
                self._forget(run)

    def _next_timer(self) -> float:
        now = time.monotonic()
        wake = IDLE_WAKE_SECONDS
        for run in self._runs.values():
            for c in run.containers:
                hook_end = c.prestop.deadline if c.prestop is not None else None
                for at in (c.restart_at, c.kill_deadline, hook_end):
                    if at is not None:
                        wake = min(wake, max(0.01, at - now))
        return wake

    def _sync(self, uid: str) -> None:
        with self._latest_lock:
            pod = self._latest.get(uid)
        run = self._runs.get(uid)
        if pod is None:
            if run is not None:  # gone from the API server: nothing to confirm
                self._kill_all(run, grace=0)
                self._forget(run)
            with self._latest_lock:
                self._latest.pop(uid, None)
            return
        if run is None:
            if pod["metadata"].get("deletionTimestamp"):
                self._confirm_deletion(pod)
                return
            run = self._admit(pod)
        run.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(run)
            return
        self._advance(run)
        self._write_status(run)

    # --- starting a pod ---------------------------------------------------------------

    def _admit(self, pod: dict) -> PodRun:
        metadata, spec = pod["metadata"], pod["spec"]
        uid = metadata["uid"]
        ip = self.addresses.allocate(uid)
        root = self.workdir / f"{metadata['namespace']}_{metadata['name']}_{uid[:8]}"
        containers = [
            ContainerRun(c, init=True, sidecar=c.get("restartPolicy") == "Always")
            for c in spec.get("initContainers") or []
        ] + [ContainerRun(c) for c in spec.get("containers") or []]
        run = PodRun(uid=uid, pod=pod, ip=ip, root=root, containers=containers)
        for c in run.app_containers:
            if run.init_containers:
                c.state = {"waiting": {"reason": "PodInitializing"}}
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self._runs[uid] = run
        self._write_hosts(run)
        self._write_resolv_conf(run)
        log.info("podrunner %s: pod %s gets %s", self.node, run.key, ip)
        return run

    def _advance(self, run: PodRun) -> None:
        now = time.monotonic()
        for c in run.containers:
            if c.process is not None and c.process.poll() is not None:
                self._on_exit(run, c)
            self._apply_probes(run, c)
            if c.kill_deadline is not None and c.running() and now >= c.kill_deadline:
                self._signal(c, signal.SIGKILL)
        if not run.volumes_ready:
            if now < run.volume_retry_at:
                return
            try:
                self._prepare_volumes(run)
            except VolumeError as error:
                run.volume_error = str(error)
                run.volume_retry_at = now + VOLUME_RETRY_SECONDS
                for c in run.containers:
                    if c.generation == 0:
                        c.state = {
                            "waiting": {"reason": "ContainerCreating", "message": str(error)}
                        }
                return
            run.volumes_ready = True
        if not run.initialized():
            for c in run.init_containers:
                if _succeeded(c) or (c.sidecar and c.started):
                    continue
                self._maybe_start(run, c, now)
                return
        for c in run.app_containers:
            self._maybe_start(run, c, now)

    def _maybe_start(self, run: PodRun, c: ContainerRun, now: float) -> None:
        if c.running() or c.completed or c.kill_deadline is not None:
            return
        if c.restart_at is not None and now < c.restart_at:
            return
        if c.generation > 0:  # a restart: the back-off counts it
            if c.backoff_seconds == 0 or now - c.backoff_updated > 2 * self.backoff.maximum:
                c.backoff_seconds = self.backoff.initial
            else:
                c.backoff_seconds = min(c.backoff_seconds * 2, self.backoff.maximum)
            c.backoff_updated = now
            c.restart_count += 1
        c.restart_at = None
        self._start(run, c)

    def _start(self, run: PodRun, c: ContainerRun) -> None:
        spec = c.spec
        image = self.images.get(spec.get("image", ""))
        if image is None:
            known = ", ".join(sorted(self.images)) or "none"
            c.state = {
                "waiting": {
                    "reason": "ErrImagePull",
                    "message": f"podrunner: no local program for image {spec.get('image')!r} "
                    f"(known: {known})",
                }
            }
            c.completed = True  # the table does not change while the runner runs
            return
        try:
            container_variables = self._environment(run, c)
            # Command and args expand from what the kubelet hands the runtime; the
            # image's ENV and HOSTNAME are the runtime's, added below.
            argv = command_line(spec, image, container_variables)
            mounts = self._mounts(run, c)
        except ContainerConfigError as error:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}
            c.restart_at = time.monotonic() + VOLUME_RETRY_SECONDS
            return
        except MountError as error:
            c.state = {"waiting": {"reason": "CreateContainerError", "message": str(error)}}
            c.restart_at = time.monotonic() + VOLUME_RETRY_SECONDS
            return
        (run.root / "home").mkdir(exist_ok=True)
        env = {
            "PATH": DEFAULT_PATH,
            "HOME": str(run.root / "home"),
            **image.env,
            "HOSTNAME": self._hostname(run.pod),
            **container_variables,
        }
        if self._bind_shim is not None:
            preload = env.get("LD_PRELOAD", "")
            env["LD_PRELOAD"] = f"{self._bind_shim} {preload}".strip()
            env[BIND_SHIM_ADDRESS] = run.ip
        run.envs[c.name] = env
        c.generation += 1
        c.started_at = _now()
        c.ready = c.started = False
        log_dir = run.root / "logs" / c.name
        log_dir.mkdir(parents=True, exist_ok=True)
        c.log_path = log_dir / f"{c.generation}.log"
        cwd = spec.get("workingDir") or image.working_dir or str(run.root)
        executable = (
            argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", DEFAULT_PATH))
        )
        if executable is None:
            self._record_exit(
                run,
                c,
                128,
                "StartError",
                f'failed to create containerd task: exec: "{argv[0]}": '
                "executable file not found in $PATH",
            )
            return
        c.argv0 = executable
        c.argv = list(argv)
        try:
            with c.log_path.open("ab") as output:
                c.process = subprocess.Popen(
                    [executable, *argv[1:]],
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=env,
                    preexec_fn=_child_setup(mounts, cwd, self.addresses.netns),  # noqa: PLW1509 - no locks taken
                )
        except (OSError, subprocess.SubprocessError) as error:
            self._record_exit(run, c, 128, "StartError", f"failed to start {argv[0]}: {error}")
            return
        c.state = {"running": {"startedAt": c.started_at}}
        c.started = not spec.get("startupProbe")
        c.ready = c.started and not spec.get("readinessProbe")
        threading.Thread(
            target=self._await_exit,
            args=(run.uid, c.process),
            daemon=True,
            name=f"wait-{run.key}/{c.name}",
        ).start()
        for kind in ("startup", "readiness", "liveness"):
            if spec.get(f"{kind}Probe"):
                prober = Prober(self, run, c, kind)
                c.probers.append(prober)
                prober.start()
        log.info("podrunner %s: %s/%s started: %s", self.node, run.key, c.name, argv)

    def _await_exit(self, uid: str, process: subprocess.Popen) -> None:
        process.wait()
        self._wake(uid)

    def _environment(self, run: PodRun, c: ContainerRun) -> dict[str, str]:
        """The container's variables as the kubelet builds them."""
        pod = run.pod
        namespace = pod["metadata"]["namespace"]
        config_map_names, secret_names = referenced_objects(c.spec)
        config_maps = {
            n: d for n in config_map_names if (d := self._config_map(namespace, n)) is not None
        }
        secrets = {n: d for n in secret_names if (d := self._secret(namespace, n)) is not None}
        services = [
            *json.loads(self.core.list_namespaced_service(namespace, _preload_content=False).data)[
                "items"
            ],
        ]
        if namespace != "default":
            with contextlib.suppress(ApiException):
                services.append(
                    json.loads(
                        self.core.read_namespaced_service(
                            "kubernetes", "default", _preload_content=False
                        ).data
                    )
                )
        sources = EnvSources(
            config_maps=config_maps,
            secrets=secrets,
            services=tuple(services),
            allocatable=self._node(pod["spec"]["nodeName"])[0],
        )
        return container_env(pod, c.spec, self._addresses(run), sources)

    def _addresses(self, run: PodRun) -> Addresses:
        host_ips = self._node(run.pod["spec"]["nodeName"])[1]
        return Addresses(pod_ips=(run.ip,), host_ips=host_ips or ("127.0.0.1",))

    def _config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            found = json.loads(
                self.core.read_namespaced_config_map(name, namespace, _preload_content=False).data
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(found.get("data") or {})

    def _secret(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            found = json.loads(
                self.core.read_namespaced_secret(name, namespace, _preload_content=False).data
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return {
            k: base64.b64decode(v).decode(errors="replace")
            for k, v in (found.get("data") or {}).items()
        }

    # --- exits and restarts ----------------------------------------------------------

    def _on_exit(self, run: PodRun, c: ContainerRun) -> None:
        code = c.process.returncode
        exit_code = 128 - code if code < 0 else code  # killed by a signal: 128 + signal
        for prober in c.probers:
            prober.stopped.set()
        c.probers.clear()
        c.process = None
        c.kill_deadline = None
        message = self._termination_message(c, exit_code)
        self._record_exit(run, c, exit_code, "Completed" if exit_code == 0 else "Error", message)

    def _record_exit(
        self, run: PodRun, c: ContainerRun, exit_code: int, reason: str, message: str
    ) -> None:
        terminated = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": c.started_at or _now(),
            "finishedAt": _now(),
        }
        if message:
            terminated["message"] = message
        if c.generation:
            terminated["containerID"] = f"podrunner://{run.uid}/{c.name}/{c.generation}"
        c.ready = False
        c.started = False
        c.kill_reason = ""
        policy = run.pod["spec"].get("restartPolicy") or "Always"
        if c.sidecar:
            restarts = True
        elif c.init:
            restarts = exit_code != 0 and policy != "Never"
        else:
            restarts = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
        if run.terminating or not restarts:
            c.state = {"terminated": terminated}
            c.completed = True
            return
        c.last_state = {"terminated": terminated}
        now = time.monotonic()
        first = c.backoff_seconds == 0 or now - c.backoff_updated > 2 * self.backoff.maximum
        if first:
            c.restart_at = None  # the first restart is immediate
            c.state = {"terminated": terminated}
            return
        c.restart_at = now + c.backoff_seconds
        metadata = run.pod["metadata"]
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {_go_duration(c.backoff_seconds)} restarting failed "
                f"container={c.name} pod={metadata['name']}_{metadata['namespace']}({run.uid})",
            }
        }

    def _termination_message(self, c: ContainerRun, exit_code: int) -> str:
        message = ""
        if c.termination_file is not None and c.termination_file.exists():
            message = c.termination_file.read_bytes()[:TERMINATION_MESSAGE_MAX_BYTES].decode(
                errors="replace"
            )
            c.termination_file.write_bytes(b"")
        policy = c.spec.get("terminationMessagePolicy") or "File"
        if not message and policy == "FallbackToLogsOnError" and exit_code != 0 and c.log_path:
            lines = c.log_path.read_bytes().splitlines(keepends=True)[-LOG_TAIL_LINES:]
            message = b"".join(lines)[-LOG_TAIL_BYTES:].decode(errors="replace")
        return message

    def _apply_probes(self, run: PodRun, c: ContainerRun) -> None:
        if not c.running():
            return
        for prober in c.probers:
            if prober.generation != c.generation:
                continue
            if prober.kind == "startup" and prober.result is True:
                c.started = True
                c.ready = not c.spec.get("readinessProbe")
            elif prober.kind == "readiness":
                c.ready = c.started and prober.result is True
            if (
                prober.kind in ("startup", "liveness")
                and prober.result is False
                and c.kill_deadline is None
            ):
                c.kill_reason = f"Container {c.name} failed {prober.kind} probe, will be restarted"
                grace = float(
                    prober.spec.get("terminationGracePeriodSeconds")
                    or run.pod["spec"].get("terminationGracePeriodSeconds")
                    or 30
                )
                self._signal(c, signal.SIGTERM)
                c.kill_deadline = time.monotonic() + grace
                log.info("podrunner %s: %s: %s", self.node, run.key, c.kill_reason)

    # --- deleting -----------------------------------------------------------------------

    def _terminate(self, run: PodRun) -> None:
        """One step of stopping a deleted pod (see the module docstring): preStop hooks,
        then SIGTERM, SIGKILL at the end of the grace period; the status written as it
        changes; the deletion confirmed once every container has exited."""
        metadata = run.pod["metadata"]
        now = time.monotonic()
        if not run.terminating:
            run.terminating = True
            grace = float(metadata.get("deletionGracePeriodSeconds") or 0)
            for c in run.containers:
                c.restart_at = None
                if not c.running():
                    continue  # the kubelet runs no hook for a container that is not running
                if (c.spec.get("lifecycle") or {}).get("preStop") and grace > 0:
                    c.prestop = PreStopHook(self, run, c, grace)
                    c.prestop.start()
                else:
                    self._stop(c, grace, now)
        for c in run.containers:
            if c.process is not None and c.process.poll() is not None:
                self._on_exit(run, c)
                continue
            if not c.running():
                continue
            hook = c.prestop
            if c.kill_deadline is None and hook is not None:
                if hook.finished.is_set() or now >= hook.deadline:
                    hook.abandoned.set()
                    self._stop(c, hook.deadline - now, now)
            elif c.kill_deadline is not None and now >= c.kill_deadline:
                self._signal(c, signal.SIGKILL)
            self._apply_readiness(c)
        if any(c.running() for c in run.containers):
            self._write_status(run)
            return
        self._confirm_deletion(run.pod)
        self._forget(run)

    def _stop(self, c: ContainerRun, grace: float, now: float) -> None:
        """SIGTERM now, SIGKILL after `grace` (at least the kubelet's minimum)."""
        self._signal(c, signal.SIGTERM)
        c.kill_deadline = now + max(MINIMUM_GRACE_SECONDS, grace)

    @staticmethod
    def _apply_readiness(c: ContainerRun) -> None:
        """While a pod terminates its readiness probe still runs (what an EndpointSlice's
        `serving` reads), and nothing restarts."""
        for prober in c.probers:
            if prober.generation == c.generation and prober.kind == "readiness":
                c.ready = c.started and prober.result is True

    def _confirm_deletion(self, pod: dict) -> None:
        metadata = pod["metadata"]
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(
                metadata["name"],
                metadata["namespace"],
                body=client.V1DeleteOptions(
                    grace_period_seconds=0,
                    preconditions=client.V1Preconditions(uid=metadata["uid"]),
                ),
            )

    def _kill_all(self, run: PodRun, grace: float) -> None:
        running = [c for c in run.containers if c.running()]
        for c in running:
            self._signal(c, signal.SIGTERM if grace else signal.SIGKILL)
        deadline = time.monotonic() + grace
        for c in running:
            try:
                c.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(c, signal.SIGKILL)
                c.process.wait()

    @staticmethod
    def _signal(c: ContainerRun, which: signal.Signals) -> None:
        if c.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.process.pid, which)

    def _forget(self, run: PodRun) -> None:
        for c in run.containers:
            for prober in c.probers:
                prober.stopped.set()
            if c.prestop is not None:
                c.prestop.abandoned.set()
        self._runs.pop(run.uid, None)
        self.addresses.release(run.uid)
        for folder in run.memory_dirs:
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(run.root / "volumes", ignore_errors=True)

    # --- status -------------------------------------------------------------------------

    def _pod_status(self, run: PodRun, current: dict) -> dict:
        spec = run.pod["spec"]
        policy = spec.get("restartPolicy") or "Always"
        apps = run.app_containers
        initialized = run.initialized()
        phase = _phase(run, policy, initialized)
        not_ready = [c.name for c in apps if not c.ready]
        incomplete = [
            c.name for c in run.init_containers if not (_succeeded(c) or (c.sidecar and c.started))
        ]
        conditions = {
            "PodReadyToStartContainers": ("True", "", ""),
            "Initialized": ("True", "", "")
            if initialized
            else (
                "False",
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(incomplete)}]",
            ),
            "ContainersReady": ("True", "", "")
            if not not_ready
            else (
                "False",
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(not_ready)}]",
            ),
        }
        ready = conditions["ContainersReady"]
        if phase in ("Succeeded", "Failed"):
            ready = ("False", "PodCompleted", "")
        else:
            for gate in spec.get("readinessGates") or []:
                kind = gate["conditionType"]
                match = [x for x in current.get("conditions") or [] if x.get("type") == kind]
                if not match or match[0].get("status") != "True":
                    ready = (
                        "False",
                        "ReadinessGatesNotReady",
                        f'corresponding condition of pod readiness gate "{kind}" does not exist.',
                    )
                    break
        conditions["Ready"] = ready
        merged = []
        existing = {x["type"]: x for x in current.get("conditions") or []}
        for kind, (status, reason, message) in conditions.items():
            before = existing.pop(kind, None)
            condition = {"type": kind, "status": status}
            if reason:
                condition["reason"] = reason
            if message:
                condition["message"] = message
            unchanged = before is not None and before.get("status") == status
            condition["lastProbeTime"] = None
            condition["lastTransitionTime"] = (
                before.get("lastTransitionTime") if unchanged else _now()
            )
            merged.append(condition)
        merged.extend(existing.values())  # PodScheduled, DisruptionTarget, gates: not ours
        status = {
            # Not the kubelet's: the scheduler's and the resourceclaim controller's.
            **{k: v for k, v in current.items() if k in STATUS_KEPT},
            "phase": phase,
            "conditions": merged,
            "hostIP": self._addresses(run).host_ips[0],
            "hostIPs": [{"ip": ip} for ip in self._addresses(run).host_ips],
            "podIP": run.ip,
            "podIPs": [{"ip": run.ip}],
            "startTime": run.started_at,
            "containerStatuses": [c.status(run.uid) for c in apps],
        }
        if run.init_containers:
            status["initContainerStatuses"] = [c.status(run.uid) for c in run.init_containers]
        return status

    def _write_status(self, run: PodRun) -> None:
        metadata = run.pod["metadata"]
        if run.last_status is not None and _comparable(
            self._pod_status(run, run.last_status)
        ) == _comparable(run.last_status):
            return  # nothing changed since the last write: no read either
        for _ in range(5):
            try:
                current = json.loads(
                    self.core.read_namespaced_pod(
                        metadata["name"], metadata["namespace"], _preload_content=False
                    ).data
                )
            except ApiException as error:
                if error.status == 404:
                    return
                raise
            if current["metadata"]["uid"] != run.uid:
                return
            status = self._pod_status(run, current.get("status") or {})
            if _comparable(status) == _comparable(run.last_status):
                return
            current["status"] = status
            try:
                self.core.replace_namespaced_pod_status(
                    metadata["name"], metadata["namespace"], current
                )
            except ApiException as error:
                if error.status == 409:
                    continue
                if error.status == 404:
                    return
                raise
            run.last_status = status
            return

    # --- volumes and mounts --------------------------------------------------------------

    def _prepare_volumes(self, run: PodRun) -> None:
        pod = run.pod
        namespace = pod["metadata"]["namespace"]
        base = run.root / "volumes"
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            if name in run.volumes:
                continue
            target = base / name
            if "emptyDir" in volume:
                if (volume["emptyDir"] or {}).get("medium") == "Memory" and Path(
                    "/dev/shm"
                ).is_dir():
                    target = Path("/dev/shm") / "modelplane-podrunner" / run.uid / name
                    run.memory_dirs.append(target.parent)
                target.mkdir(parents=True, exist_ok=True)
            elif "hostPath" in volume:
                target = Path(volume["hostPath"]["path"])
                kind = volume["hostPath"].get("type") or ""
                if kind == "DirectoryOrCreate":
                    target.mkdir(parents=True, exist_ok=True)
                elif kind == "FileOrCreate":
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()
                elif kind and not target.exists():
                    raise VolumeError(f"hostPath type check failed: {target} is not a {kind}")
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                found = self.claims.get(f"{namespace}/{claim}")
                if found is None:
                    raise VolumeError(
                        f"unable to attach or mount volumes: volume {name}: claim "
                        f"{namespace}/{claim} is not mapped to a host folder (PodRunner claims=)"
                    )
                target = found
            elif "configMap" in volume or "secret" in volume:
                self._write_files(target, self._object_files(namespace, volume))
            elif "downwardAPI" in volume:
                self._write_files(target, self._downward_files(run, volume["downwardAPI"]))
            elif "projected" in volume:
                files: dict[str, bytes] = {}
                for source in volume["projected"].get("sources") or []:
                    files.update(self._projected_files(run, source))
                self._write_files(target, files)
            else:
                kinds = sorted(set(volume) - {"name"})
                raise VolumeError(
                    f"volume {name}: {kinds} volumes are not supported by the pod runner"
                )
            run.volumes[name] = target

    def _object_files(self, namespace: str, volume: dict) -> dict[str, bytes]:
        is_map = "configMap" in volume
        source = volume["configMap"] if is_map else volume["secret"]
        name = source.get("name") if is_map else source.get("secretName")
        files = self._source_files(namespace, name, source, is_map)
        if files is None:
            raise VolumeError(f'{"configmap" if is_map else "secret"} "{name}" not found')
        return files

    def _source_files(
        self, namespace: str, name: str, source: dict, is_map: bool
    ) -> dict[str, bytes] | None:
        data = self._config_map(namespace, name) if is_map else self._secret(namespace, name)
        if data is None:
            return {} if source.get("optional") else None
        items = source.get("items")
        if not items:
            return {k: v.encode() for k, v in data.items()}
        files = {}
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise VolumeError(f"key {item['key']} not found in {name}")
            files[item["path"]] = data[item["key"]].encode()
        return files

    def _downward_files(self, run: PodRun, source: dict) -> dict[str, bytes]:
        files = {}
        for item in source.get("items") or []:
            try:
                if item.get("fieldRef"):
                    value = field_ref_value(run.pod, item["fieldRef"], self._addresses(run))
                else:
                    container = next(
                        c.spec
                        for c in run.containers
                        if c.name == item["resourceFieldRef"].get("containerName")
                    )
                    value = resource_field_value(
                        run.pod,
                        container,
                        item["resourceFieldRef"],
                        self._node(run.pod["spec"]["nodeName"])[0],
                    )
            except (ContainerConfigError, StopIteration) as error:
                raise VolumeError(f"downward API item {item.get('path')}: {error}") from error
            files[item["path"]] = value.encode()
        return files

    def _projected_files(self, run: PodRun, source: dict) -> dict[str, bytes]:
        namespace = run.pod["metadata"]["namespace"]
        if "configMap" in source or "secret" in source:
            is_map = "configMap" in source
            spec = source["configMap"] if is_map else source["secret"]
            files = self._source_files(namespace, spec["name"], spec, is_map)
            if files is None:
                raise VolumeError(
                    f'{"configmap" if is_map else "secret"} "{spec["name"]}" not found'
                )
            return files
        if "downwardAPI" in source:
            return self._downward_files(run, source["downwardAPI"])
        if "serviceAccountToken" in source:
            token_spec = source["serviceAccountToken"]
            account = run.pod["spec"].get("serviceAccountName") or "default"
            request = {
                "spec": {
                    "audiences": [token_spec["audience"]] if token_spec.get("audience") else None,
                    "expirationSeconds": int(token_spec.get("expirationSeconds") or 3607),
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": run.pod["metadata"]["name"],
                        "uid": run.uid,
                    },
                }
            }
            try:
                answer = self.core.create_namespaced_service_account_token(
                    account, namespace, request
                )
            except ApiException as error:
                raise VolumeError(
                    f"service account token for {namespace}/{account}: {error.reason}"
                ) from error
            return {token_spec["path"]: answer.status.token.encode()}
        raise VolumeError(f"projected source {sorted(source)} is not supported by the pod runner")

    @staticmethod
    def _write_files(folder: Path, files: Mapping[str, bytes]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for relative, content in files.items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    def _mounts(self, run: PodRun, c: ContainerRun) -> list[Mount]:
        """What the container's process sees: its volume mounts, the pod's hosts file,
        its termination-message file."""
        spec = c.spec
        mounts: list[Mount] = []
        read_only_kinds = ("configMap", "secret", "downwardAPI", "projected")
        volumes = {v["name"]: v for v in run.pod["spec"].get("volumes") or []}
        for mount in spec.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None or mount["name"] not in run.volumes:
                raise MountError(
                    f"volume {mount['name']} of mount {mount['mountPath']} is not ready"
                )
            source = run.volumes[mount["name"]]
            if mount.get("subPath"):
                source = source / mount["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
            read_only = bool(mount.get("readOnly")) or any(k in volume for k in read_only_kinds)
            mounts.append(Mount(source, mount["mountPath"], read_only))
        if mounts and not self.mount_namespaces:
            raise MountError(
                "volume mounts need a private mount namespace, which this process may not "
                "create (run the pod runner as root or with CAP_SYS_ADMIN)"
            )
        if not self.mount_namespaces:
            return []
        if not run.pod["spec"].get("hostNetwork") and run.hosts_file is not None:
            mounts.append(Mount(run.hosts_file, "/etc/hosts", False))
        if run.resolv_conf is not None:
            mounts.append(Mount(run.resolv_conf, "/etc/resolv.conf", True))
        message_path = spec.get("terminationMessagePath") or "/dev/termination-log"
        c.termination_file = run.root / "termination" / c.name
        c.termination_file.parent.mkdir(parents=True, exist_ok=True)
        c.termination_file.write_bytes(b"")
        if Path(message_path).exists() or self._may_create(Path(message_path)):
            mounts.append(Mount(c.termination_file, message_path, False))
        else:
            c.termination_file = None
        for mount in mounts:
            target = Path(mount.target)
            if target.exists():
                if target.is_dir() != mount.source.is_dir():
                    raise MountError(
                        f"cannot mount {'a folder' if mount.source.is_dir() else 'a file'} at "
                        f"{target}: it is a {'folder' if target.is_dir() else 'file'} on this host"
                    )
                continue
            if not self._may_create(target):
                raise MountError(
                    f"mount path {target} does not exist on this host (PodRunner("
                    "mount_point_roots=) names the folders under which the runner creates one)"
                )
            if mount.source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
        return mounts

    def _may_create(self, target: Path) -> bool:
        return any(target == root or root in target.parents for root in self.mount_point_roots)

    # --- names ------------------------------------------------------------------------

    @staticmethod
    def _hostname(pod: dict) -> str:
        """GeneratePodHostNameAndDomain: spec.hostname, else the pod's name cut to 63."""
        return pod["spec"].get("hostname") or pod["metadata"]["name"][:63].rstrip("-.")

    def _hosts_lines(self, run: PodRun) -> list[str]:
        pod = run.pod
        hostname = self._hostname(pod)
        subdomain = pod["spec"].get("subdomain")
        namespace = pod["metadata"]["namespace"]
        if subdomain:
            return [
                f"{run.ip}\t{hostname}.{subdomain}.{namespace}.svc.{self.cluster_domain}\t{hostname}"
            ]
        return [f"{run.ip}\t{hostname}"]

    def _write_hosts(self, run: PodRun) -> None:
        """The kubelet's hosts file: localhost, the pod's own names, its hostAliases.
        Other pods are found through cluster DNS (`nameserver`), never written here."""
        lines = [
            "# Kubernetes-managed hosts file.",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            "fe00::0\tip6-localnet",
            "fe00::0\tip6-mcastprefix",
            "fe00::1\tip6-allnodes",
            "fe00::2\tip6-allrouters",
            *self._hosts_lines(run),
        ]
        aliases = run.pod["spec"].get("hostAliases") or []
        if aliases:
            lines.append("")
            lines.append("# Entries added by HostAliases.")
            lines += [f"{a['ip']}\t{chr(9).join(a.get('hostnames') or [])}" for a in aliases]
        path = run.root / "etc-hosts"
        path.write_text("\n".join(lines) + "\n")
        run.hosts_file = path

    def _write_resolv_conf(self, run: PodRun) -> None:
        """The pod's resolv.conf as the kubelet derives it (pkg/kubelet/network/dns),
        or none (the host's is used) for a pod that resolves as its node does."""
        content = pod_resolv_conf(run.pod, self.nameserver, self.cluster_domain)
        if content is None:
            run.resolv_conf = None
            return
        path = run.root / "resolv.conf"
        path.write_text(content)
        run.resolv_conf = path


# The kubelet's limits on a pod's resolver (pkg/apis/core/validation, pkg/kubelet/network/dns).
MAX_NAMESERVERS = 3
MAX_SEARCH_DOMAINS = 32
CLUSTER_NDOTS = 5


def pod_resolv_conf(pod: dict, nameserver: str | None, cluster_domain: str) -> str | None:
    """The resolv.conf the kubelet gives `pod`, or None where it gives the node's
    (dnsPolicy Default, a hostNetwork pod with ClusterFirst, or no cluster DNS).

    ClusterFirst (and ClusterFirstWithHostNet): the cluster's nameserver, the search
    path `<namespace>.svc.<domain> svc.<domain> <domain>`, `options ndots:5`; None: only
    dnsConfig. dnsConfig's nameservers and searches are appended, its options override
    by name."""
    spec = pod["spec"]
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    host_network = bool(spec.get("hostNetwork"))
    dns_config = spec.get("dnsConfig") or {}
    nameservers: list[str] = []
    searches: list[str] = []
    options: dict[str, str | None] = {}
    if policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst" and not host_network):
        if nameserver is None:
            return None
        namespace = pod["metadata"]["namespace"]
        nameservers = [nameserver]
        searches = [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]
        options = {"ndots": str(CLUSTER_NDOTS)}
    elif policy != "None":
        return None
    nameservers += [n for n in dns_config.get("nameservers") or [] if n not in nameservers]
    searches += [d for d in dns_config.get("searches") or [] if d not in searches]
    for option in dns_config.get("options") or []:
        options[option["name"]] = option.get("value")
    lines = []
    if searches:
        lines.append("search " + " ".join(searches[:MAX_SEARCH_DOMAINS]))
    lines += [f"nameserver {n}" for n in nameservers[:MAX_NAMESERVERS]]
    if options:
        lines.append(
            "options "
            + " ".join(
                name if value is None else f"{name}:{value}" for name, value in options.items()
            )
        )
    return "\n".join(lines) + "\n"


def _succeeded(c: ContainerRun) -> bool:
    return c.completed and c.state.get("terminated", {}).get("exitCode") == 0


class VolumeError(RuntimeError):
    """A volume the pod runner cannot set up (yet): containers wait in ContainerCreating."""


class MountError(RuntimeError):
    """A mount the pod runner cannot give a container: CreateContainerError."""


def _phase(run: PodRun, policy: str, initialized: bool) -> str:
    """getPhase (pkg/kubelet/kubelet_pods.go), for the states this runner produces."""
    if not initialized:
        failed_init = any(
            c.completed and "terminated" in c.state and c.state["terminated"]["exitCode"] != 0
            for c in run.init_containers
        )
        return "Failed" if failed_init and policy == "Never" else "Pending"
    waiting = running = stopped = succeeded = 0
    for c in run.app_containers:
        if "running" in c.state:
            running += 1
        elif "terminated" in c.state:
            stopped += 1
            succeeded += c.state["terminated"]["exitCode"] == 0
        elif c.last_state.get("terminated"):
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Failed" if policy == "Never" else "Running"


def _comparable(status: dict | None) -> Any:
    """A status without transition times: writing only when something else changed."""
    if status is None:
        return None
    copy = json.loads(json.dumps(status))
    for condition in copy.get("conditions") or []:
        condition.pop("lastTransitionTime", None)
    return copy


def _child_setup(mounts: list[Mount], cwd: str, netns: Path | None = None):
    """What runs in the child between fork and exec: die with the runner, its own
    process group, the pod network's namespace (`netns`: podnet.py; None: the host's),
    a private mount namespace with the mounts, the working folder. Everything it needs
    is encoded before the fork (no imports, no locks after it)."""
    prepared = [(os.fsencode(str(m.source)), os.fsencode(m.target), m.read_only) for m in mounts]
    folder = os.fsencode(cwd)
    network = os.fsencode(str(netns)) if netns is not None else None

    def setup() -> None:
        _die_with_parent()
        if network is not None:
            fd = os.open(network, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET)")
            finally:
                os.close(fd)
        if prepared:
            if _LIBC.unshare(_CLONE_NEWNS) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
            if _LIBC.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
                raise OSError(ctypes.get_errno(), "make / private")
            for source, target, read_only in prepared:
                if _LIBC.mount(source, target, None, _MS_BIND | _MS_REC, None) != 0:
                    raise OSError(ctypes.get_errno(), f"bind {source!r} at {target!r}")
                if (
                    read_only
                    and _LIBC.mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY, None)
                    != 0
                ):
                    raise OSError(ctypes.get_errno(), f"read-only {target!r}")
        os.chdir(folder)

    return setup


__all__ = [
    "CLUSTER_HOST_ADDRESSES",
    "CLUSTER_POD_ADDRESSES",
    "KWOK_STAGE_SKIP",
    "POD_ADDRESSES",
    "REAL_RUN_LABEL",
    "REAL_RUN_SELECTOR",
    "REAL_RUN_VALUE",
    "Backoff",
    "Image",
    "LoopbackAddresses",
    "PodRunner",
    "build_bind_shim",
    "mount_namespaces_work",
    "pod_resolv_conf",
    "skip_real_pods",
]
