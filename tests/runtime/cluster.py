"""Simulated fleet members for the runtime tests: each member is its own etcd and
kube-apiserver on loopback, with token auth, our CRDs and the runtime's namespace.

No controllers, kubelet or Pods: only what the runtime talks to (Leases, the
AdaptivePolicy CRD with its validation, watches). Every process is started in its own
process group with PR_SET_PDEATHSIG, so a killed test run cannot leave one behind, and
`Fleet.close()` (run from the fixture's finalizer, also on failures and Ctrl-C) stops
them all and removes their data.

Faults are process-level: `stop_apiserver()` kills a member's API server (its etcd and
data stay, `start_apiserver()` brings it back on the same port), `freeze()` sends
SIGSTOP so requests hang in its socket and land when `thaw()` sends SIGCONT.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from functions.common.contracts import SYSTEM_NAMESPACE
from functions.runtime.kube.clients import token_client
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
CRDS = [REPO / "apis" / "adaptivepolicies" / "definition.yaml"]
START_TIMEOUT = 60.0
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)  # loaded before any fork


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the test process dies, however.

    The signal follows the *thread* that spawned the child, so every process here is
    spawned from the test's main thread (waiting for readiness may use others).
    """
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()


@dataclass
class Member:
    name: str
    workdir: Path
    etcd_bin: Path
    apiserver_bin: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    etcd_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    etcd: subprocess.Popen | None = None
    apiserver: subprocess.Popen | None = None
    frozen: bool = False
    launched: float = 0.0
    startup_seconds: float = 0.0  # launch to /readyz of the last API server start
    starts: list[float] = field(default_factory=list)  # every start's, first one first
    # More kube-apiserver flags (the fleet box's aggregation layer sets some).
    apiserver_args: list[str] = field(default_factory=list)
    start_timeout: float = START_TIMEOUT

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        """The API server's self-signed serving certificate (with its CA), valid for
        127.0.0.1."""
        return self.workdir / "certs" / "apiserver.crt"

    def kubeconfig(self, namespace: str | None = None) -> dict:
        """A kubeconfig for this member with the CA and the admin token inline (tools
        such as provider-kubernetes ignore file paths in a kubeconfig)."""
        context = {"cluster": self.name, "user": "admin"}
        if namespace:
            context["namespace"] = namespace
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": self.name, "context": context}],
            "current-context": self.name,
        }

    def client(self) -> client.ApiClient:
        """A new client for this member, with an admin token."""
        return token_client(self.server, self.token, str(self.ca_file))

    # --- processes ----------------------------------------------------------------

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = (self.workdir / log_name).open("ab")
        # preexec_fn only sets the death signal and process group: no locks involved.
        return subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509
        )

    def start_etcd(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.etcd = self._spawn(
            [
                str(self.etcd_bin),
                f"--name={self.name}",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={self.name}={peer}",
                "--unsafe-no-fsync",  # test data: durability buys nothing, fsync costs CI time
                "--log-level=warn",
            ],
            "etcd.log",
        )

    def start_apiserver(self, wait: bool = True) -> None:
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f"{self.token},admin,admin-uid,system:masters\n")
        key = self.workdir / "sa.key"
        if not key.exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
            )
        self.launched = time.monotonic()
        self.apiserver = self._spawn(
            [
                str(self.apiserver_bin),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.workdir / 'certs'}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                *self.apiserver_args,
            ],
            "apiserver.log",
        )
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        started = self.launched
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        request = urllib.request.Request(
            f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"}
        )
        while time.monotonic() - started < self.start_timeout:
            if self.apiserver.poll() is not None:
                raise RuntimeError(f"{self.name}: kube-apiserver exited\n{self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(request, timeout=1, context=insecure) as answer,
            ):
                if answer.status == 200:
                    self.startup_seconds = time.monotonic() - started
                    self.starts.append(self.startup_seconds)
                    return
            time.sleep(0.05)
        raise RuntimeError(
            f"{self.name}: kube-apiserver not ready in {self.start_timeout}s\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        path = self.workdir / "apiserver.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )

    def stop_apiserver(self) -> None:
        if self.apiserver and self.apiserver.poll() is None:
            if self.frozen:
                self.thaw()
            self.apiserver.kill()
            self.apiserver.wait()
        self.apiserver = None

    def freeze(self) -> None:
        self.apiserver.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        self.apiserver.send_signal(signal.SIGCONT)
        self.frozen = False

    def restore(self) -> None:
        """Undo any fault: thaw a frozen API server, restart a stopped one."""
        if self.frozen:
            self.thaw()
        if self.apiserver is None or self.apiserver.poll() is not None:
            self.start_apiserver()

    def close(self) -> None:
        for process in (self.apiserver, self.etcd):
            if process and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)
                    process.kill()
                process.wait()

    # --- contents ----------------------------------------------------------------

    def install(self) -> None:
        """Our CRDs (established) and the runtime's namespace."""
        api = self.client()
        try:
            extensions = client.ApiextensionsV1Api(api)
            for path in CRDS:
                crd = yaml.safe_load(path.read_text())
                extensions.create_custom_resource_definition(crd)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": SYSTEM_NAMESPACE}})
            for path in CRDS:
                name = yaml.safe_load(path.read_text())["metadata"]["name"]
                _wait_established(extensions, name)
        finally:
            api.close()


def _wait_established(extensions: client.ApiextensionsV1Api, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = extensions.read_custom_resource_definition(name)
        conditions = (crd.status.conditions or []) if crd.status else []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.05)
    raise RuntimeError(f"CRD {name} not established in 30s")


def delete_crd(extensions: client.ApiextensionsV1Api, name: str, timeout: int = 60) -> None:
    """Delete a CRD and wait, on a watch, until it is gone. Its deletion finishes only
    after the server has removed its objects (the customresourcecleanup finalizer); a
    create of the same CRD before then is refused 409 "object is being deleted"."""
    with contextlib.suppress(ApiException):  # 404: already gone
        extensions.delete_custom_resource_definition(name)
    selector = f"metadata.name={name}"
    listed = extensions.list_custom_resource_definition(field_selector=selector)
    if not listed.items:
        return
    stream = watch.Watch().stream(
        extensions.list_custom_resource_definition,
        field_selector=selector,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=timeout,
    )
    for event in stream:
        if event["type"] == "DELETED":
            return
    raise AssertionError(f"CRD {name} was not deleted within {timeout} s")


class Fleet:
    """N members, started in parallel; `close()` always stops every process."""

    def __init__(
        self, size: int, etcd_bin: Path, apiserver_bin: Path, start_timeout: float = START_TIMEOUT
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="modelplane-fleet-"))
        self.members = [
            Member(
                f"member-{i}",
                self.root / f"member-{i}",
                etcd_bin,
                apiserver_bin,
                start_timeout=start_timeout,
            )
            for i in range(size)
        ]
        self.install_seconds = 0.0
        self.startup_seconds = 0.0

    def start(self) -> Fleet:
        began = time.monotonic()
        try:
            for member in self.members:
                member.start_etcd()
            for member in self.members:
                member.start_apiserver(wait=False)
            with ThreadPoolExecutor(len(self.members)) as pool:
                list(pool.map(lambda m: m.wait_ready(), self.members))
                ready = time.monotonic()
                list(pool.map(lambda m: m.install(), self.members))
            self.install_seconds = time.monotonic() - ready
            self.startup_seconds = time.monotonic() - began
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for member in self.members:
            with contextlib.suppress(Exception):
                member.close()
        shutil.rmtree(self.root, ignore_errors=True)
