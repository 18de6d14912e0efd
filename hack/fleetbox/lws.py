"""The LeaderWorkerSet controller out of cluster, against one member's API server.

In a cluster, LWS runs as a Deployment behind a Service, makes its own serving
certificate and patches its webhook configurations to match. Out of cluster (the fleet
box) nothing of that exists, so:

- its `--config` (`Configuration`, config.lws.x-k8s.io/v1alpha1) turns internal
  certificate management and leader election off, serves the webhooks on loopback from
  a certificate folder the caller gives (tls.crt and tls.key signed by the box's CA,
  with IP:127.0.0.1: what the box's `Certificates.pair(name, "127.0.0.1", "serverAuth")`
  makes), and puts metrics and health on free loopback ports;
- the CRD and the Mutating/ValidatingWebhookConfigurations are applied from the
  release's own config/ (kept in the tool cache by hack/tools/lws.sh), with the
  kustomization's two patches (the pod webhooks only see pods that carry
  `leaderworkerset.sigs.k8s.io/name`, so every other pod of the member is created as
  before even while the controller is down), its `lws-` name prefix, and each
  clientConfig rewritten from the in-cluster Service to `url:
  https://127.0.0.1:<port><path>` with the CA as `caBundle`;
- ready means what a caller needs: a LeaderWorkerSet can be created. A dry-run create
  goes through both LWS webhooks (they declare sideEffects None), so it is polled every
  0.1 s until it passes, without a fixed sleep.

The CRD has one version (v1), so the kustomization's conversion-webhook patch is not
applied: a conversion webhook with one version never runs.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from render import tools_bin
from tests.ports import free_port
from tests.runtime.cluster import _die_with_parent

BINARY = "lws-controller"
CONFIG_LINK = "lws-config"  # hack/tools/lws.sh: $MODELPLANE_TOOLS/lws-config
GROUP = "leaderworkerset.x-k8s.io"
VERSION = "v1"
PLURAL = "leaderworkersets"
CRD_NAME = f"{PLURAL}.{GROUP}"
NAME_PREFIX = "lws-"  # config/default/kustomization.yaml namePrefix
READY_TIMEOUT = 60.0
POLL_SECONDS = 0.1
# Labels and env the controller and its pod webhook put on every pod (sigs.k8s.io/lws
# api/leaderworkerset/v1), for callers and tests that look for them.
LABEL_NAME = "leaderworkerset.sigs.k8s.io/name"
LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
ENV_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
ENV_GROUP_SIZE = "LWS_GROUP_SIZE"
ENV_WORKER_INDEX = "LWS_WORKER_INDEX"


def config_dir() -> Path:
    return tools_bin().parent / CONFIG_LINK


def controller_configuration(
    cert_dir: Path, webhook_port: int, metrics_port: int, health_port: int
) -> dict:
    """The controller's --config for one member, everything on loopback."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }


def _apply_patch(document: dict, operations: list[dict]) -> dict:
    """JSON patch (RFC 6902) add/replace/remove, the operations the release's
    kustomization patches use."""
    patched = copy.deepcopy(document)
    for operation in operations:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]
        ]
        target = patched
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: int | str = int(last) if isinstance(target, list) and last != "-" else last
        if operation["op"] == "replace":
            target[key] = operation["value"]
        elif operation["op"] == "add":
            if isinstance(target, list):
                target.insert(len(target) if key == "-" else key, operation["value"])
            else:
                target[key] = operation["value"]
        elif operation["op"] == "remove":
            del target[key]
        else:
            raise ValueError(f"unsupported JSON patch operation {operation['op']}")
    return patched


def webhook_configurations(config: Path, webhook_port: int, ca_bundle: bytes) -> list[dict]:
    """The release's webhook configurations, patched as its kustomization patches them,
    named with its prefix, and pointed at the controller on loopback by URL."""
    webhook = config / "webhook"
    documents = [d for d in yaml.safe_load_all((webhook / "manifests.yaml").read_text()) if d]
    patches = {
        "MutatingWebhookConfiguration": yaml.safe_load(
            (webhook / "mutating-patch.yaml").read_text()
        ),
        "ValidatingWebhookConfiguration": yaml.safe_load(
            (webhook / "validating-patch.yaml").read_text()
        ),
    }
    bundle = base64.b64encode(ca_bundle).decode()
    configured = []
    for original in documents:
        document = _apply_patch(original, patches[original["kind"]])
        document["metadata"]["name"] = NAME_PREFIX + document["metadata"]["name"]
        for hook in document["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{webhook_port}{path}",
                "caBundle": bundle,
            }
        configured.append(document)
    return configured


def crds(config: Path) -> list[dict]:
    return [
        d
        for path in sorted((config / "crd").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]


def readiness_probe_object(namespace: str) -> dict:
    """The smallest LeaderWorkerSet both webhooks accept: created with dryRun only."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws-readiness-probe", "namespace": namespace},
        "spec": {
            "leaderWorkerTemplate": {
                "size": 1,
                "workerTemplate": {
                    "spec": {"containers": [{"name": "probe", "image": "lws-readiness-probe"}]}
                },
            }
        },
    }


class LwsControllerError(RuntimeError):
    """The controller exited or did not become ready; the message has its log's tail."""


def _create_or_replace(create, read, replace, name: str, body: dict) -> None:
    try:
        create(body)
    except ApiException as error:
        if error.status != 409:
            raise
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = read(name).metadata.resource_version
        replace(name, body)


@dataclass
class LwsController:
    """One member's LWS controller.

    `kubeconfig`: the member's kubeconfig file. `serving_certs`: a folder with tls.crt,
    tls.key and ca.crt (the CA goes into the webhook configurations' caBundle).
    `workdir`: where its config and log go.

    The box either calls `start(api)` (this object runs the process), or runs
    `command()` as one of its own processes and calls `install(api)` and
    `wait_ready(api, alive)` around it.
    """

    kubeconfig: Path
    serving_certs: Path
    workdir: Path
    name: str = "lws"
    binary: Path = field(default_factory=lambda: tools_bin() / BINARY)
    config: Path = field(default_factory=config_dir)
    webhook_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def command(self) -> list[str]:
        """The controller's command line; writes its --config first."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_file = self.workdir / f"{self.name}-config.yaml"
        config_file.write_text(
            yaml.safe_dump(
                controller_configuration(
                    self.serving_certs, self.webhook_port, self.metrics_port, self.health_port
                ),
                sort_keys=False,
            )
        )
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={config_file}",
            "--zap-devel=false",
            "--zap-log-level=info",
        ]

    def install(self, api: client.ApiClient) -> None:
        """The CRD (established) and the two webhook configurations."""
        extensions = client.ApiextensionsV1Api(api)
        for crd in crds(self.config):
            _create_or_replace(
                extensions.create_custom_resource_definition,
                extensions.read_custom_resource_definition,
                extensions.replace_custom_resource_definition,
                crd["metadata"]["name"],
                crd,
            )
        admission = client.AdmissionregistrationV1Api(api)
        ca_bundle = (self.serving_certs / "ca.crt").read_bytes()
        for document in webhook_configurations(self.config, self.webhook_port, ca_bundle):
            if document["kind"] == "MutatingWebhookConfiguration":
                calls = (
                    admission.create_mutating_webhook_configuration,
                    admission.read_mutating_webhook_configuration,
                    admission.replace_mutating_webhook_configuration,
                )
            else:
                calls = (
                    admission.create_validating_webhook_configuration,
                    admission.read_validating_webhook_configuration,
                    admission.replace_validating_webhook_configuration,
                )
            _create_or_replace(*calls, document["metadata"]["name"], document)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            crd = extensions.read_custom_resource_definition(CRD_NAME)
            conditions = (crd.status.conditions or []) if crd.status else []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            time.sleep(POLL_SECONDS)
        raise LwsControllerError(f"CRD {CRD_NAME} not established in {READY_TIMEOUT:.0f}s")

    def wait_ready(
        self,
        api: client.ApiClient,
        alive=None,
        namespace: str = "default",
        timeout: float = READY_TIMEOUT,
    ) -> float:
        """Until a LeaderWorkerSet can be created (a dry run through both webhooks
        passes); the seconds it took. `alive` says whether the process still runs."""
        alive = alive or (lambda: self.process is not None and self.process.poll() is None)
        custom = client.CustomObjectsApi(api)
        began = time.monotonic()
        last = ""
        while time.monotonic() - began < timeout:
            if not alive():
                raise LwsControllerError(f"{self.name} exited\n{self.tail()}")
            try:
                custom.create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    readiness_probe_object(namespace),
                    dry_run="All",
                )
            except ApiException as error:
                last = f"{error.status} {error.reason}: {(error.body or '')[:300]}"
                time.sleep(POLL_SECONDS)
                continue
            return time.monotonic() - began
        raise LwsControllerError(
            f"{self.name}: no LeaderWorkerSet could be created within {timeout:.0f}s "
            f"(last: {last})\n{self.tail()}"
        )

    def start(self, api: client.ApiClient, timeout: float = READY_TIMEOUT) -> LwsController:
        """Install, run the controller (dies with this process) and wait until ready."""
        if not self.binary.exists():
            raise LwsControllerError(f"{self.binary} is missing: run 'bash hack/tools.sh lws'")
        self.install(api)
        argv = self.command()
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                argv,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - sets a signal and a group only
            )
        try:
            self.wait_ready(api, timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


__all__ = [
    "CRD_NAME",
    "ENV_GROUP_SIZE",
    "ENV_LEADER_ADDRESS",
    "ENV_WORKER_INDEX",
    "GROUP",
    "LABEL_GROUP_INDEX",
    "LABEL_NAME",
    "LABEL_WORKER_INDEX",
    "PLURAL",
    "VERSION",
    "LwsController",
    "LwsControllerError",
    "controller_configuration",
    "crds",
    "webhook_configurations",
]
