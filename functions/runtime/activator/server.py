"""The on-demand activator's shell: an HTTP/1.1 server on the member (asyncio, with h11
doing the framing), a reader of the member's HTTPRoutes, and a reader and one
annotation writer on the control plane. The decisions are in core.py.

Shaped by what a hostile or broken client may do, every wait is bounded and nothing
grows with the number of clients but coroutines and their buffers:

- One event loop serves every connection; the Kubernetes client's blocking calls run
  on a pool of KUBE_THREADS threads, each with a connect and read timeout. No thread is
  made per connection or per request.
- A connection waits `idle_seconds` for a request; once its first byte arrives the
  headers must be complete in `header_seconds` (408) and within `max_header_bytes`
  (431), the body in `body_seconds` (408) and within `max_body_bytes` (413, refused
  from Content-Length before a byte of it is read). A client that does not read its
  answer is dropped after `write_seconds`.
- At most `max_connections` are open (beyond: 503 and close, before parsing anything);
  at most `max_in_flight` requests are being served (503 Overloaded, Retry-After), and
  at most `max_per_model` of them for one model (429, Retry-After), so one model's
  flood cannot take every slot. A held request whose client hangs up frees its slot.
- Anything h11 cannot parse gets its 4xx and the connection closes; every answer is
  the route's JSON error shape.
- The control plane is read at most once per model per `read_interval` however many
  requests arrive (single flight, then a short cache; a failed read is cached too),
  and the member's routes at most once per `routes_interval` (once per second when a
  request names an identity the last read did not vouch for). Concurrent requests for
  one model share one activation: a burst is one placement attempt, not one per request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import http
import logging
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import h11
from kubernetes import client
from kubernetes.client.rest import ApiException
from opentelemetry.metrics import NoOpMeter

from functions.common import contracts
from functions.common.naming import serving_service_name
from functions.runtime.activator import core
from functions.runtime.activator.metrics import (
    OUTCOME_CLIENT_GONE,
    OUTCOME_PROXIED,
    RESULT_READY,
    ActivatorMetrics,
)

log = logging.getLogger("modelplane.activator")

GROUP: Final = contracts.API_GROUP_VERSION.split("/")[0]
VERSION: Final = contracts.API_GROUP_VERSION.split("/")[1]
PLURAL: Final = "modeldeployments"
ROUTE_GROUP: Final = "gateway.networking.k8s.io"
ROUTE_VERSION: Final = "v1"
ROUTE_PLURAL: Final = "httproutes"
# How long compose-model-deployment has to answer an attempt (one reconcile).
DEFAULT_ATTEMPT_TIMEOUT: Final = 60.0  # also cli.py's default
DEFAULT_UPSTREAM: Final = "http://{service}.{namespace}.svc:{port}"
KUBE_THREADS: Final = 4
# The probes' port is open to every pod (the kubelet's address is not a pod's): small.
HEALTH_CONNECTIONS: Final = 64
HEALTH_SECONDS: Final = 2.0
READ_CHUNK: Final = 65536
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
    }
)


@dataclass(frozen=True)
class Limits:
    """Every bound of the server (module docstring); flags of `runtime activator`."""

    max_body_bytes: int = core.DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = core.DEFAULT_MAX_HEADER_BYTES
    idle_seconds: float = 30.0
    header_seconds: float = 10.0
    body_seconds: float = 30.0
    write_seconds: float = 30.0
    max_connections: int = 1024
    max_in_flight: int = 128
    max_per_model: int = 32
    retry_after_seconds: int = 1
    control_plane_seconds: float = 5.0  # connect and read, each call
    read_interval: float = 1.0
    routes_interval: float = 5.0
    routes_miss_interval: float = 1.0
    upstream_connect_seconds: float = 5.0
    upstream_seconds: float = 600.0  # between two reads from the engine (generation)


class Unavailable(Exception):
    """A dependency (control plane, member API, upstream) did not answer: `refusal`."""

    def __init__(self, refusal: core.Refuse) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


# --- Kubernetes (blocking; run on the kube threads) ---------------------------------------


class ControlPlane:
    """Reads ModelDeployments and sets the activate annotation; nothing else (RBAC: get
    and patch on modeldeployments, CONTROL_PLANE_RULES)."""

    def __init__(self, api: client.ApiClient, timeout: float = 5.0) -> None:
        self.objects = client.CustomObjectsApi(api)
        self.timeout = timeout

    def get(self, namespace: str, name: str) -> dict | None:
        try:
            return self.objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self.timeout
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
            _request_timeout=self.timeout,
        )


# What the activator may do on the control plane, all of it: read one ModelDeployment at
# a time (no list, no watch: it never needs to know which models exist) and patch it
# (the merge patch of one annotation is its only write). docs/activator-rbac.yaml ships it.
CONTROL_PLANE_RULES: Final = (
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "patch"]},
)
# On the member: list HTTPRoutes (every namespace: a route that claims another
# namespace's model must be seen to be refused). compose-serving-stack grants it.
MEMBER_RULES: Final = (
    {"apiGroups": [ROUTE_GROUP], "resources": [ROUTE_PLURAL], "verbs": ["list"]},
)


class MemberRoutes:
    """Lists the member's HTTPRoutes (every namespace)."""

    def __init__(self, api: client.ApiClient, timeout: float = 5.0) -> None:
        self.objects = client.CustomObjectsApi(api)
        self.timeout = timeout

    def list(self) -> list[dict]:
        answer = self.objects.list_cluster_custom_object(
            ROUTE_GROUP, ROUTE_VERSION, ROUTE_PLURAL, _request_timeout=self.timeout
        )
        return list(answer.get("items") or [])


# --- Reads: single flight, then a short cache ---------------------------------------------


class _Cached:
    __slots__ = ("error", "fetched", "flight", "value")

    def __init__(self) -> None:
        self.value: Any = None
        self.error: core.Refuse | None = None
        self.fetched = float("-inf")
        self.flight: asyncio.Future | None = None


class Reads:
    """`get(key, fetch)`: at most one fetch per key per `interval`; every caller in the
    meantime gets the last answer (or waits for the one being fetched). A failure is an
    answer too (Unavailable), cached for the interval, so an API server that is down is
    not asked again by every request."""

    def __init__(
        self,
        run: Callable[[Callable[[], Any]], asyncio.Future],
        interval: float,
        failed: core.Refuse,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run = run
        self.interval = interval
        self.failed = failed
        self.clock = clock
        self.entries: dict[Any, _Cached] = {}
        self.fetches = 0  # how many reads were made (the benchmark and tests read it)

    async def get(self, key: Any, fetch: Callable[[], Any], *, max_age: float | None = None):
        entry = self.entries.setdefault(key, _Cached())
        age = self.clock() - entry.fetched
        if entry.flight is None and age >= (self.interval if max_age is None else max_age):
            entry.flight = asyncio.ensure_future(self._fetch(entry, fetch))
        if entry.flight is not None:
            await asyncio.shield(entry.flight)
        if entry.error is not None:
            raise Unavailable(entry.error)
        return entry.value

    async def _fetch(self, entry: _Cached, fetch: Callable[[], Any]) -> None:
        self.fetches += 1
        try:
            entry.value, entry.error = await self.run(fetch), None
        except Exception as err:
            log.warning("%s: %s", self.failed.reason, type(err).__name__)
            entry.error = core.Refuse(
                self.failed.status,
                self.failed.reason,
                f"{self.failed.message} ({type(err).__name__})",
                self.failed.retry_after,
            )
        finally:
            entry.fetched = self.clock()
            entry.flight = None
        if len(self.entries) > 4096:  # models come and go: forget ones not asked lately
            stale = [k for k, e in self.entries.items() if e.flight is None and e is not entry]
            for key in stale[: len(stale) // 2]:
                del self.entries[key]


# --- Activations ------------------------------------------------------------------------


class Activations:
    """One activation per model at a time; every request for it awaits the same one."""

    def __init__(
        self,
        plane: ControlPlane,
        reads: Reads,
        run: Callable[[Callable[[], Any]], asyncio.Future],
        cluster: str,
        *,
        attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
        poll: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: ActivatorMetrics | None = None,
    ) -> None:
        self.metrics = metrics or ActivatorMetrics(NoOpMeter("activator"))
        self.plane = plane
        self.reads = reads
        self.run_blocking = run
        self.cluster = cluster
        self.attempt_timeout = attempt_timeout
        self.poll = poll
        self.clock = clock
        self.running: dict[tuple[str, str], asyncio.Task] = {}

    def run(self, namespace: str, name: str) -> asyncio.Task:
        key = (namespace, name)
        task = self.running.get(key)
        if task is None:
            task = self.running[key] = asyncio.ensure_future(self._guarded(namespace, name))
            task.add_done_callback(lambda _: self.running.pop(key, None))
        return task

    async def _guarded(self, namespace: str, name: str) -> core.Step:
        started = self.clock()
        step: core.Step
        try:
            step = await self._activate(namespace, name)
        except Unavailable as err:
            step = err.refusal
        except Exception as err:  # an API error is an answer too, not a hung request
            log.warning("activation of %s/%s failed: %s", namespace, name, type(err).__name__)
            step = core.Refuse(
                core.STATUS_UNAVAILABLE, core.REASON_ACTIVATION_FAILED, type(err).__name__
            )
        result = step.reason if isinstance(step, core.Refuse) else RESULT_READY
        self.metrics.activation(namespace, name, result, self.clock() - started)
        return step

    async def _read(self, namespace: str, name: str) -> dict | None:
        return await self.reads.get(
            (namespace, name), lambda: self.plane.get(namespace, name), max_age=self.poll
        )

    async def _activate(self, namespace: str, name: str) -> core.Step:
        attempt_id = f"{self.cluster}/{uuid.uuid4().hex[:16]}"
        started = self.clock()
        await self.run_blocking(lambda: self.plane.activate(namespace, name, attempt_id))
        log.info("asked for a placement attempt of %s/%s (%s)", namespace, name, attempt_id)
        deadline = started + self.attempt_timeout
        while True:
            await asyncio.sleep(self.poll)
            deployment = await self._read(namespace, name)
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
            await asyncio.sleep(self.poll)
            deployment = await self._read(namespace, name) or deployment


class Upstreams:
    """Where a ready replica is reached: this member's model Service, or another member's
    gateway (`--gateway CLUSTER=URL`)."""

    def __init__(self, cluster: str, template: str, gateways: Mapping[str, str]) -> None:
        self.cluster, self.template, self.gateways = cluster, template, dict(gateways)

    def url(self, namespace: str, name: str, cluster: str) -> str | None:
        if cluster == self.cluster:
            return self.template.format(
                service=serving_service_name(name),
                namespace=namespace,
                port=contracts.PORT_SERVING,
                deployment=name,
                cluster=cluster,
            )
        return self.gateways.get(cluster)


# --- The HTTP server ------------------------------------------------------------------


@dataclass(frozen=True)
class _Request:
    """A request admitted to be served: what the client sent, and the model it is for."""

    method: str
    target: str
    headers: list[tuple[str, str]]  # (lowercase name, value)
    body: bytes
    namespace: str
    name: str
    started: float  # monotonic, when its head was parsed


class _Closed(Exception):
    """The connection is done (answered and closing, or the client left)."""


class _Connection:
    """One client connection: h11's state, the stream, and bytes read ahead."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: Limits
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        # How the request being served was answered (the refusal's reason, or
        # OUTCOME_PROXIED; None until it is) and, once a route vouched for it, its model.
        self.outcome: str | None = None
        self.model: tuple[str, str] | None = None

    async def send(self, *events: Any) -> None:
        data = b"".join(self.h11.send(event) or b"" for event in events)
        self.writer.write(data)
        try:
            await asyncio.wait_for(self.writer.drain(), self.limits.write_seconds)
        except (TimeoutError, ConnectionError) as err:
            raise _Closed from err

    async def answer(self, refusal: core.Refuse, model: str = "", *, close: bool = False):
        """Answer with the route's JSON error shape (and `Connection: close`)."""
        self.outcome = refusal.reason
        body = core.error_body(refusal.status, refusal.reason, model, refusal.message)
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        if refusal.retry_after:
            headers.append(("retry-after", str(refusal.retry_after)))
        if close:
            headers.append(("connection", "close"))
        await self.send(
            h11.Response(
                status_code=refusal.status, headers=headers, reason=_phrase(refusal.status)
            ),
            h11.Data(data=body),
        )
        await self.send(h11.EndOfMessage())

    async def refuse(self, refusal: core.Refuse, model: str = "") -> NoReturn:
        """Answer, then end the connection (raises _Closed): for a request whose body is
        not read, or whose client must not be kept."""
        await self.answer(refusal, model, close=True)
        raise _Closed

    async def answer_text(self, status: int, text: bytes) -> None:
        headers = [("content-type", "text/plain"), ("content-length", str(len(text)))]
        await self.send(
            h11.Response(status_code=status, headers=headers, reason=_phrase(status)),
            h11.Data(data=text),
            h11.EndOfMessage(),
        )

    async def next_event(self, deadline: float | None, timeout_refusal: core.Refuse) -> Any:
        """h11's next event, reading as needed until `deadline` (monotonic; None: wait
        `idle_seconds` for a first byte, then `header_seconds` for the rest)."""
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            loop_time = time.monotonic()
            wait = self.limits.idle_seconds if deadline is None else deadline - loop_time
            if wait <= 0:
                await self.refuse(timeout_refusal)
            try:
                data = await asyncio.wait_for(self.reader.read(READ_CHUNK), wait)
            except TimeoutError:
                if deadline is None:  # nothing of a request arrived: just close
                    raise _Closed from None
                await self.refuse(timeout_refusal)
            except ConnectionError as err:
                raise _Closed from err
            if deadline is None and data:
                deadline = time.monotonic() + self.limits.header_seconds
            self.h11.receive_data(data)


def _timeout(what: str, seconds: float) -> core.Refuse:
    return core.Refuse(
        core.STATUS_REQUEST_TIMEOUT,
        core.REASON_REQUEST_TIMEOUT,
        f"the request's {what} did not arrive within {seconds:g}s",
    )


class Activator:
    """The server: `serve()` starts it on its own event loop thread."""

    def __init__(
        self,
        plane: ControlPlane,
        routes: MemberRoutes,
        cluster: str,
        upstreams: Upstreams,
        *,
        limits: Limits = Limits(),
        attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
        upstream_ssl: ssl.SSLContext | None = None,
        metrics: ActivatorMetrics | None = None,
    ) -> None:
        self.metrics = metrics or ActivatorMetrics(NoOpMeter("activator"))
        self.plane = plane
        self.member_routes = routes
        self.cluster = cluster
        self.upstreams = upstreams
        self.limits = limits
        self.attempt_timeout = attempt_timeout
        self.upstream_ssl = upstream_ssl
        self.kube = concurrent.futures.ThreadPoolExecutor(KUBE_THREADS, "activator-kube")
        self.connections = 0
        self.health_connections = 0
        self.in_flight = 0
        self.per_model: dict[tuple[str, str], int] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.servers: list[asyncio.base_events.Server] = []
        self.port = 0
        self.health_port = 0
        retry = max(1, round(limits.control_plane_seconds))
        self.reads = Reads(
            self._blocking,
            limits.read_interval,
            core.Refuse(
                core.STATUS_UNAVAILABLE,
                core.REASON_CONTROL_PLANE,
                "the control plane did not answer",
                retry,
            ),
        )
        self.routes = Reads(
            self._blocking,
            limits.routes_interval,
            core.Refuse(
                core.STATUS_UNAVAILABLE,
                core.REASON_ROUTES_UNKNOWN,
                "this member's routes could not be read",
                retry,
            ),
        )
        self.activations = Activations(
            plane,
            self.reads,
            self._blocking,
            cluster,
            attempt_timeout=attempt_timeout,
            poll=limits.read_interval,
            metrics=self.metrics,
        )

    def _on_loop(self, call: Callable[..., Any], *args: Any) -> None:
        """Run `call` on the event loop (from a kube thread): metrics change there only."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(call, *args)

    def _blocking(self, call: Callable[[], Any]) -> asyncio.Future:
        assert self.loop is not None
        return self.loop.run_in_executor(self.kube, call)

    # --- lifecycle --------------------------------------------------------------------

    async def start(self, listen: tuple[str, int], health: tuple[str, int] | None) -> None:
        self.loop = asyncio.get_running_loop()
        # A backlog as deep as the connections it may hold: a burst waits in the kernel
        # for its accept, not for a SYN retransmission a second later.
        server = await asyncio.start_server(
            self._accept,
            listen[0],
            listen[1],
            limit=READ_CHUNK,
            reuse_address=True,
            backlog=self.limits.max_connections,
        )
        self.servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        if health is not None:
            probe = await asyncio.start_server(
                self._accept_health, health[0], health[1], limit=READ_CHUNK, reuse_address=True
            )
            self.servers.append(probe)
            self.health_port = probe.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        self.kube.shutdown(wait=False, cancel_futures=True)

    # --- connections ------------------------------------------------------------------

    async def _accept_health(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """The kubelet's probes: /healthz and /readyz answer `ok` while the loop turns;
        the port the NetworkPolicy leaves open carries nothing else. Any pod may reach
        it, so it holds at most HEALTH_CONNECTIONS, each for HEALTH_SECONDS."""
        if self.health_connections >= HEALTH_CONNECTIONS:
            writer.close()
            return
        self.health_connections += 1
        brief = dataclasses.replace(
            self.limits,
            idle_seconds=HEALTH_SECONDS,
            header_seconds=HEALTH_SECONDS,
            write_seconds=HEALTH_SECONDS,
        )
        connection = _Connection(reader, writer, brief)
        try:
            event = await connection.next_event(None, _timeout("headers", HEALTH_SECONDS))
            if isinstance(event, h11.Request):
                path = event.target.decode("latin-1")
                found = path in (contracts.HEALTHZ_PATH, contracts.READYZ_PATH)
                await connection.answer_text(200 if found else 404, b"ok" if found else b"")
        except (_Closed, h11.ProtocolError):
            pass
        finally:
            self.health_connections -= 1
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connections >= self.limits.max_connections:
            # Before parsing anything: the cheapest answer there is.
            body = core.error_body(
                503, core.REASON_OVERLOADED, "", "too many open connections; retry"
            )
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"retry-after: %d\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                % (self.limits.retry_after_seconds, len(body), body)
            )
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), 1)
            writer.close()
            self.metrics.request(core.REASON_OVERLOADED)
            return
        self.connections += 1
        connection = _Connection(reader, writer, self.limits)
        try:
            while await self._one_request(connection):
                connection.h11.start_next_cycle()
        except _Closed:
            pass
        except Exception:
            log.exception("unexpected error on a connection")
        finally:
            self.connections -= 1
            writer.close()

    async def _one_request(self, connection: _Connection) -> bool:
        """Serve one request on `connection`; False when the connection must close."""
        connection.outcome, connection.model = None, None
        try:
            return await self._one_request_counted(connection)
        finally:
            # Counted once it was answered or vouched for (a probe or a client that
            # sent nothing is not a request); against its model only if vouched for.
            if connection.outcome is not None or connection.model is not None:
                self.metrics.request(
                    connection.outcome or OUTCOME_CLIENT_GONE, *(connection.model or ("", ""))
                )

    async def _one_request_counted(self, connection: _Connection) -> bool:
        try:
            event = await connection.next_event(
                None, _timeout("headers", self.limits.header_seconds)
            )
        except h11.RemoteProtocolError as err:
            await self._protocol_error(connection, err)
            return False
        if not isinstance(event, h11.Request):
            return False  # the client closed between requests
        await self._serve(connection, event)
        return connection.h11.our_state is h11.DONE and connection.h11.their_state is h11.DONE

    async def _protocol_error(self, connection: _Connection, err: h11.RemoteProtocolError):
        status = err.error_status_hint
        reason = core.REASON_HEADERS_TOO_LARGE if status == 431 else core.REASON_BAD_REQUEST
        if status == 408:
            reason = core.REASON_REQUEST_TIMEOUT
        refusal = core.Refuse(status, reason, f"malformed request: {err}"[:200])
        connection.outcome = reason
        body = core.error_body(refusal.status, refusal.reason, "", refusal.message)
        # h11 is in its error state: the answer is written as bytes.
        connection.writer.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (status, _phrase(status), len(body), body)
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.writer.drain(), 1)

    async def _serve(self, connection: _Connection, request: h11.Request) -> None:
        started = time.monotonic()
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("latin-1")
        headers = [
            (name.decode("latin-1").lower(), value.decode("latin-1"))
            for name, value in request.headers
        ]
        if method == "GET" and target in (contracts.HEALTHZ_PATH, contracts.READYZ_PATH):
            await connection.answer_text(200, b"ok")
            await self._discard_body(connection)
            return
        problem = core.request_problem(
            method,
            target,
            headers,
            max_body_bytes=self.limits.max_body_bytes,
            max_header_bytes=self.limits.max_header_bytes,
        )
        if problem is not None:
            await connection.refuse(problem)
        identity = next(v for k, v in headers if k == core.HEADER_DEPLOYMENT_LOWER)
        namespace, name = core.parse_deployment(identity)
        if any(k == contracts.HEADER_ACTIVATED.lower() for k, _ in headers):
            # Proxied once already and routed back here: answer, never loop.
            await connection.refuse(
                core.Refuse(core.STATUS_UNAVAILABLE, core.REASON_NOT_READY, "no ready replica yet"),
                name,
            )
        tokens = [v for k, v in headers if k == core.HEADER_ROUTE_TOKEN_LOWER]
        try:
            vouched = await self._vouched(namespace, name, tokens[0] if len(tokens) == 1 else None)
        except Unavailable as err:
            await connection.refuse(err.refusal, name)
        if not vouched:
            # The same answer whether the identity is unknown or the token wrong.
            await connection.refuse(core.not_routed())
        key = connection.model = (namespace, name)
        if self.in_flight >= self.limits.max_in_flight:
            await connection.refuse(
                core.Refuse(
                    core.STATUS_UNAVAILABLE,
                    core.REASON_OVERLOADED,
                    "the activator is serving all the requests it can; retry",
                    self.limits.retry_after_seconds,
                ),
                name,
            )
        if self.per_model.get(key, 0) >= self.limits.max_per_model:
            await connection.refuse(
                core.Refuse(
                    core.STATUS_TOO_MANY,
                    core.REASON_MODEL_BUSY,
                    f"{self.limits.max_per_model} requests for this model are being served; retry",
                    self.limits.retry_after_seconds,
                ),
                name,
            )
        self.in_flight += 1
        self.per_model[key] = self.per_model.get(key, 0) + 1
        try:
            body = await self._read_body(connection)
            admitted = _Request(method, target, headers, body, namespace, name, started)
            await self._answer(connection, admitted)
        finally:
            self.in_flight -= 1
            self.per_model[key] -= 1
            if not self.per_model[key]:
                del self.per_model[key]

    async def _vouched(self, namespace: str, name: str, token: str | None) -> bool:
        index = await self.routes.get("routes", self._route_index)
        if index.admits(namespace, name, token) or (namespace, name) in index.contested:
            return index.admits(namespace, name, token)
        # A route composed (or re-composed with its token) since the last read: look
        # again, at most once a second.
        index = await self.routes.get(
            "routes", self._route_index, max_age=self.limits.routes_miss_interval
        )
        return index.admits(namespace, name, token)

    def _route_index(self) -> core.RouteIndex:
        index = core.route_index(self.member_routes.list())
        self._on_loop(self.metrics.routed, index.served)
        for namespace, name in sorted(index.contested):
            log.warning("a route outside %s claims %s/%s: refused", namespace, namespace, name)
        return index

    async def _read_body(self, connection: _Connection) -> bytes:
        if connection.h11.they_are_waiting_for_100_continue:
            await connection.send(h11.InformationalResponse(status_code=100, headers=[]))
        deadline = time.monotonic() + self.limits.body_seconds
        chunks: list[bytes] = []
        size = 0
        timeout = _timeout("body", self.limits.body_seconds)
        while True:
            try:
                event = await connection.next_event(deadline, timeout)
            except h11.RemoteProtocolError as err:
                await self._protocol_error(connection, err)
                raise _Closed from err
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.limits.max_body_bytes:
                    await connection.refuse(
                        core.Refuse(
                            core.STATUS_TOO_LARGE,
                            core.REASON_TOO_LARGE,
                            f"the body is over {self.limits.max_body_bytes} bytes",
                        )
                    )
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            else:  # ConnectionClosed: the client left mid-body
                raise _Closed

    async def _discard_body(self, connection: _Connection) -> None:
        with contextlib.suppress(h11.ProtocolError):
            while connection.h11.their_state is h11.SEND_BODY:
                await self._read_body(connection)

    async def _answer(self, connection: _Connection, request: _Request) -> None:
        namespace, name = request.namespace, request.name
        held = False
        try:
            deployment = await self.reads.get(
                (namespace, name), lambda: self.plane.get(namespace, name)
            )
            step = core.first_step(deployment, self.cluster)
            held = isinstance(step, core.Activate)
            if held:
                self.metrics.hold(namespace, name)
                try:
                    step = await self._held(connection, self.activations.run(namespace, name))
                finally:
                    self.metrics.release(namespace, name)
        except Unavailable as err:
            step = err.refusal
        if isinstance(step, core.Refuse):
            await connection.answer(step, name)
            return
        assert isinstance(step, core.Proxy)
        url = self.upstreams.url(namespace, name, step.cluster)
        if url is None:
            log.info("%s/%s serves on %s, which no --gateway names", namespace, name, step.cluster)
            await connection.answer(
                core.Refuse(
                    core.STATUS_UNAVAILABLE,
                    core.REASON_SERVING_ELSEWHERE,
                    # Which cluster is the operator's to know (logged above), not the caller's.
                    "the model is serving elsewhere and cannot be reached through this "
                    "endpoint yet; retry later",
                ),
                name,
            )
            return
        await self._proxy(connection, url, request, held=held)

    async def _held(self, connection: _Connection, activation: asyncio.Task) -> core.Step:
        """The activation's answer, or _Closed as soon as the client hangs up (its slot
        is freed; the activation goes on for the others)."""
        watch = asyncio.ensure_future(connection.reader.read(READ_CHUNK))
        try:
            done, _ = await asyncio.wait({activation, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done:
                ahead = watch.exception() is None and watch.result()
                if not ahead:
                    raise _Closed  # EOF or reset: nobody is waiting for this answer
                connection.h11.receive_data(ahead)  # a pipelined request: keep it for later
                await activation
            return activation.result()
        finally:
            if not watch.done():
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watch

    async def _proxy(
        self, connection: _Connection, base: str, request: _Request, *, held: bool
    ) -> None:
        method, target, headers, body = (
            request.method,
            request.target,
            request.headers,
            request.body,
        )
        model = request.name
        upstream_url = urllib.parse.urlsplit(base)
        secure = upstream_url.scheme == "https"
        port = upstream_url.port or (443 if secure else 80)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    upstream_url.hostname,
                    port,
                    ssl=(self.upstream_ssl or ssl.create_default_context()) if secure else None,
                    limit=READ_CHUNK,
                ),
                self.limits.upstream_connect_seconds,
            )
        except (OSError, TimeoutError) as err:
            await connection.answer(
                core.Refuse(
                    core.STATUS_BAD_GATEWAY,
                    core.REASON_UPSTREAM,
                    f"the model's replica did not accept a connection ({type(err).__name__})",
                ),
                model,
            )
            return
        upstream = h11.Connection(h11.CLIENT)
        # The route token stays here: the replica it goes on to has no use for it.
        forwarded = [
            (k, v) for k, v in headers if k not in HOP_BY_HOP and k != core.HEADER_ROUTE_TOKEN_LOWER
        ]
        forwarded += [
            ("host", upstream_url.netloc),
            (contracts.HEADER_ACTIVATED.lower(), "1"),
            ("content-length", str(len(body))),
        ]
        path = upstream_url.path.rstrip("/") + target
        started = False
        try:
            writer.write(
                upstream.send(h11.Request(method=method, target=path, headers=forwarded))
                + (upstream.send(h11.Data(data=body)) if body else b"")
                + upstream.send(h11.EndOfMessage())
            )
            await asyncio.wait_for(writer.drain(), self.limits.upstream_connect_seconds)
            while True:
                event = upstream.next_event()
                if event is h11.NEED_DATA:
                    data = await asyncio.wait_for(
                        reader.read(READ_CHUNK), self.limits.upstream_seconds
                    )
                    upstream.receive_data(data)
                elif isinstance(event, h11.InformationalResponse):
                    continue
                elif isinstance(event, h11.Response):
                    kept = [
                        (k, v)
                        for k, v in event.headers
                        if k.decode("latin-1").lower() not in HOP_BY_HOP
                    ]
                    # No Content-Length: h11 frames it chunked, so a streaming
                    # completion's first token is not held back until the last.
                    await connection.send(h11.Response(status_code=event.status_code, headers=kept))
                    started = True
                    connection.outcome = OUTCOME_PROXIED
                    self.metrics.first_byte(
                        request.namespace,
                        request.name,
                        time.monotonic() - request.started,
                        held=held,
                    )
                elif isinstance(event, h11.Data):
                    await connection.send(h11.Data(data=bytes(event.data)))
                elif isinstance(event, h11.EndOfMessage):
                    await connection.send(h11.EndOfMessage())
                    return
                else:
                    raise ConnectionError("the replica closed the connection")
        except _Closed:
            raise
        except (OSError, TimeoutError, h11.ProtocolError) as err:
            if started:
                raise _Closed from err  # mid-answer: only closing tells the client
            await connection.refuse(
                core.Refuse(
                    core.STATUS_BAD_GATEWAY,
                    core.REASON_UPSTREAM,
                    f"the model's replica did not answer ({type(err).__name__})",
                ),
                model,
            )
        finally:
            writer.close()


def _phrase(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b"Error"


class Served:
    """A running activator on its own event loop thread."""

    def __init__(self, activator: Activator) -> None:
        self.activator = activator
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="activator", daemon=True)

    @property
    def port(self) -> int:
        return self.activator.port

    @property
    def health_port(self) -> int:
        return self.activator.health_port

    def shutdown(self) -> None:
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.activator.stop(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def _address(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def _allow_open_files(limits: Limits) -> None:
    """Raise this process's open-file limit towards what max_connections needs (the
    soft limit is often 1024); the hard limit is the platform's."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource  # noqa: PLC0415 - POSIX only

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = limits.max_connections + limits.max_in_flight + 256
        if soft < wanted:
            ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def serve(
    plane: ControlPlane,
    routes: MemberRoutes,
    cluster: str,
    listen: str,
    upstreams: Upstreams,
    *,
    health_listen: str | None = None,
    **kwargs: Any,
) -> Served:
    """Start the activator; `listen` and `health_listen` are HOST:PORT (port 0: any)."""
    activator = Activator(plane, routes, cluster, upstreams, **kwargs)
    _allow_open_files(activator.limits)
    served = Served(activator)
    served.thread.start()
    asyncio.run_coroutine_threadsafe(
        activator.start(_address(listen), _address(health_listen) if health_listen else None),
        served.loop,
    ).result(30)
    return served
