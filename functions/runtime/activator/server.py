"""The on-demand activator's shell: an HTTP server on the member, a reader and one
annotation writer on the control plane.

Concurrent requests for one model share one activation (one attempt, one wait for a
ready replica): a burst of requests for a scaled-to-zero model is one placement attempt,
not one per request. The decisions are in activator_core.py.

The wait is polling (a GET every POLL_SECONDS while a request is held): bounded by the
attempt timeout and the model's activationTimeout, and only while a request waits.
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from kubernetes import client
from kubernetes.client.rest import ApiException

from functions.common import contracts
from functions.common.naming import service_name
from functions.runtime.activator import core

log = logging.getLogger("modelplane.activator")

GROUP: Final = contracts.API_GROUP_VERSION.split("/")[0]
VERSION: Final = contracts.API_GROUP_VERSION.split("/")[1]
PLURAL: Final = "modeldeployments"
POLL_SECONDS: Final = 0.25
# How long compose-model-deployment has to answer an attempt (one reconcile).
DEFAULT_ATTEMPT_TIMEOUT: Final = 60.0  # also cli.py's default
DEFAULT_UPSTREAM: Final = "http://{service}.{namespace}.svc:{port}"
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


class ControlPlane:
    """Reads ModelDeployments and sets the activate annotation; nothing else."""

    def __init__(self, api: client.ApiClient) -> None:
        self.objects = client.CustomObjectsApi(api)

    def get(self, namespace: str, name: str) -> dict | None:
        try:
            return self.objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def activate(self, namespace: str, name: str, attempt_id: str) -> None:
        self.objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            core.activate_patch(attempt_id, contracts.ANNOTATION_ACTIVATE),
            _content_type="application/merge-patch+json",
        )


class _Shared:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.step: core.Step | None = None


class Activations:
    """One activation per model at a time; every request for it waits on the same one."""

    def __init__(
        self,
        plane: ControlPlane,
        cluster: str,
        *,
        attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plane = plane
        self.cluster = cluster
        self.attempt_timeout = attempt_timeout
        self.clock = clock
        self.lock = threading.Lock()
        self.running: dict[tuple[str, str], _Shared] = {}

    def run(self, namespace: str, name: str) -> core.Step:
        key = (namespace, name)
        with self.lock:
            shared = self.running.get(key)
            leader = shared is None
            if leader:
                shared = self.running[key] = _Shared()
        assert shared is not None
        if leader:
            try:
                shared.step = self._activate(namespace, name)
            except Exception as err:  # an API error is an answer too, not a hung request
                log.exception("activation of %s/%s failed", namespace, name)
                shared.step = core.Refuse(
                    core.STATUS_UNAVAILABLE, core.REASON_ACTIVATION_FAILED, type(err).__name__
                )
            finally:
                with self.lock:
                    self.running.pop(key, None)
                shared.done.set()
        shared.done.wait()
        assert shared.step is not None
        return shared.step

    def _activate(self, namespace: str, name: str) -> core.Step:
        attempt_id = f"{self.cluster}/{uuid.uuid4().hex[:16]}"
        started = self.clock()
        self.plane.activate(namespace, name, attempt_id)
        log.info("asked for a placement attempt of %s/%s (%s)", namespace, name, attempt_id)
        deadline = started + self.attempt_timeout
        while True:
            deployment = self.plane.get(namespace, name)
            if deployment is None:
                return core.Refuse(
                    core.STATUS_NOT_FOUND, core.REASON_NOT_FOUND, "no such ModelDeployment"
                )
            answer = core.attempt_answer(deployment, attempt_id)
            if answer is not None:
                break
            if self.clock() >= deadline:
                return core.Refuse(
                    core.STATUS_UNAVAILABLE,
                    core.REASON_ATTEMPT_NOT_ANSWERED,
                    f"no placement answer within {self.attempt_timeout:.0f}s",
                )
            time.sleep(POLL_SECONDS)
        if isinstance(answer, core.Refuse):
            log.info("%s/%s not placed: %s", namespace, name, answer.reason)
            return answer
        timeout = core.activation_timeout(deployment)
        deadline = self.clock() + timeout
        while True:
            cluster = core.ready_cluster(deployment, self.cluster)
            if cluster:
                log.info(
                    "%s/%s ready on %s after %.1fs",
                    namespace,
                    name,
                    cluster,
                    self.clock() - started,
                )
                return core.Proxy(cluster)
            if self.clock() >= deadline:
                return core.Refuse(
                    core.STATUS_TIMEOUT,
                    core.REASON_ACTIVATION_TIMEOUT,
                    f"placed, but no replica was ready within {timeout:.0f}s",
                )
            time.sleep(POLL_SECONDS)
            deployment = self.plane.get(namespace, name) or deployment


class Upstreams:
    """Where a ready replica is reached: this member's model Service, or another member's
    gateway (`--gateway CLUSTER=URL`)."""

    def __init__(self, cluster: str, template: str, gateways: Mapping[str, str]) -> None:
        self.cluster, self.template, self.gateways = cluster, template, dict(gateways)

    def url(self, namespace: str, name: str, cluster: str) -> str | None:
        if cluster == self.cluster:
            return self.template.format(
                service=service_name(name),
                namespace=namespace,
                port=contracts.PORT_SERVING,
                deployment=name,
                cluster=cluster,
            )
        return self.gateways.get(cluster)


def make_handler(
    plane: ControlPlane, activations: Activations, upstreams: Upstreams
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def do_GET(self) -> None:
            if self.path in (contracts.HEALTHZ_PATH, contracts.READYZ_PATH):
                self._answer(200, b"ok", "text/plain")
                return
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _answer(self, status: int, body: bytes, content_type: str = "application/json"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self, step: core.Refuse, model: str) -> None:
            self._answer(
                step.status, core.error_body(step.status, step.reason, model, step.message)
            )

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                namespace, name = core.parse_deployment(
                    self.headers.get(contracts.HEADER_DEPLOYMENT)
                )
            except core.BadDeployment as err:
                self._refuse(
                    core.Refuse(core.STATUS_BAD_REQUEST, core.REASON_BAD_ROUTE, str(err)), ""
                )
                return
            if self.headers.get(contracts.HEADER_ACTIVATED):
                # Proxied once already and routed back here: answer, never loop.
                self._refuse(
                    core.Refuse(
                        core.STATUS_UNAVAILABLE, core.REASON_NOT_READY, "no ready replica yet"
                    ),
                    name,
                )
                return
            step = core.first_step(plane.get(namespace, name), upstreams.cluster)
            if isinstance(step, core.Activate):
                step = activations.run(namespace, name)
            if isinstance(step, core.Refuse):
                self._refuse(step, name)
                return
            assert isinstance(step, core.Proxy)
            url = upstreams.url(namespace, name, step.cluster)
            if url is None:
                self._refuse(
                    core.Refuse(
                        core.STATUS_UNAVAILABLE,
                        core.REASON_SERVING_ELSEWHERE,
                        f"serving on {step.cluster}; send requests to its gateway",
                    ),
                    name,
                )
                return
            self._proxy(url, body)

        def _proxy(self, base: str, body: bytes) -> None:
            target = urllib.parse.urlsplit(base)
            connection_type = (
                http.client.HTTPSConnection
                if target.scheme == "https"
                else http.client.HTTPConnection
            )
            upstream = connection_type(target.netloc, timeout=600)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers[contracts.HEADER_ACTIVATED] = "1"
            headers["Content-Length"] = str(len(body))
            try:
                upstream.request(self.command, target.path.rstrip("/") + self.path, body, headers)
                reply = upstream.getresponse()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                # Streamed as it arrives: a streaming completion's first token is not
                # held back until the last.
                while chunk := reply.read1(65536):
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            finally:
                upstream.close()

    return Handler


def serve(
    plane: ControlPlane, cluster: str, listen: str, upstreams: Upstreams, **kwargs: Any
) -> ThreadingHTTPServer:
    host, _, port = listen.rpartition(":")
    activations = Activations(plane, cluster, **kwargs)
    server = ThreadingHTTPServer(
        (host or "0.0.0.0", int(port)), make_handler(plane, activations, upstreams)
    )
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="activator", daemon=True).start()
    return server
