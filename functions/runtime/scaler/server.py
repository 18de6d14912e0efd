"""The member's KEDA `external-push` scaler: serves the hub's floor for one workload.

KEDA calls `GetMetricSpec` and `GetMetrics` (through the HPA) and `IsActive`, and keeps a
`StreamIsActive` stream open. Every answer comes from `scaler_core.served_floor` over a
local cache of this member's AdaptivePolicies and its own hub Lease, kept current by
watches, so a call never waits on the API server and a change reaches open streams as
soon as the watch delivers it. Streams also re-check on their own at the intent's expiry
and at least every `recheck` seconds (30 by default), so an expiring intent turns
inactive even when nothing else changes.

The ScaledObject's trigger names the policy with `scalerMetadata.policy` (default: the
ScaledObject's own name) in the ScaledObject's namespace. Its metric is the floor with a
target of 1, so the HPA asks for exactly `floor` replicas from this trigger; any other
outcome is 0, "no influence". The one error is UNAVAILABLE while the cache has never
been filled: KEDA then keeps its last decision instead of scaling on a guess.

Health (grpc.health.v1): the overall service ("") and `externalscaler.ExternalScaler`
are NOT_SERVING until that cache has been filled, then SERVING — the readiness probe;
`liveness` is SERVING while the process serves. It is on the scaler's port (for TLS
clients) and on a plaintext port of its own (`serve_health`): kubelet's gRPC probe speaks
no TLS, and that port serves nothing but health.

The servers are asyncio (grpc.aio): an open `StreamIsActive` is a coroutine waiting on the
cache, not a worker thread, so any number of streams (one per autoscaled workload, KEDA
keeps each open) leaves the server free to answer `IsActive` and `GetMetrics`. The
watches stay on threads of their own and wake the waiting streams through the loop.
Anything a request carries (names, namespaces, metadata) is escaped before it is logged.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client, watch

from functions.common.contracts import (
    ANNOTATION_FENCING_TOKEN,
    API_VERSION,
    AUTOSCALING_GROUP,
    HUB_LEASE_NAME,
    SCALER_LIVENESS_SERVICE,
    SYSTEM_NAMESPACE,
)
from functions.runtime.scaler.core import HubLeaseCopy, ServedFloor, served_floor
from functions.runtime.scaler.proto import stubs

log = logging.getLogger("modelplane.scaler")

pb, pb_grpc = stubs()
health_pb, health_grpc = stubs("health")

METRIC_NAME = "modelplane-floor"
METADATA_POLICY = "policy"
POLICY_PLURAL = "adaptivepolicies"
DEFAULT_RECHECK = 30.0
WATCH_SECONDS = 60  # a watch is re-opened this often, so a silent stall cannot last


class MemberCache:
    """This member's AdaptivePolicies and hub Lease, from list + watch."""

    def __init__(
        self,
        api: client.ApiClient,
        lease_namespace: str = SYSTEM_NAMESPACE,
        lease_name: str = HUB_LEASE_NAME,
        request_timeout: float = 10.0,
    ) -> None:
        self.api = api
        self.lease_namespace = lease_namespace
        self.lease_name = lease_name
        self.request_timeout = request_timeout
        self._policies: dict[tuple[str, str], dict[str, Any]] = {}
        self._lease: HubLeaseCopy | None = None
        self._synced = {"policies": False, "lease": False}
        self._changed = threading.Condition()
        self._generation = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[watch.Watch] = []
        self._async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    # --- reading ---------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        with self._changed:
            return all(self._synced.values())

    def snapshot(self, namespace: str, name: str) -> tuple[dict | None, HubLeaseCopy | None, int]:
        with self._changed:
            return self._policies.get((namespace, name)), self._lease, self._generation

    async def changed(self, generation: int, timeout: float) -> int:
        """Wait on the running loop until the cache changes past `generation`, or `timeout`.
        Cancelling the caller (its client hung up) ends the wait."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        waiter = (loop, event)
        with self._changed:
            if self._generation != generation or self._stop.is_set():
                return self._generation
            self._async_waiters.add(waiter)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._changed:
                self._async_waiters.discard(waiter)
        with self._changed:
            return self._generation

    def _bump(self) -> None:
        self._generation += 1
        self._changed.notify_all()
        self._wake_async()

    def _wake_async(self) -> None:
        for loop, event in list(self._async_waiters):
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: its server has stopped
                self._async_waiters.discard((loop, event))

    # --- running ---------------------------------------------------------------------

    def start(self) -> MemberCache:
        for name, target in (("policies", self._run_policies), ("lease", self._run_lease)):
            thread = threading.Thread(target=self._forever, args=(name, target), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for stream in list(self._watches):
            stream.stop()
        with self._changed:
            self._changed.notify_all()
            self._wake_async()

    def _forever(self, what: str, run: Callable[[], None]) -> None:
        while not self._stop.is_set():
            try:
                run()
            except Exception as error:  # the watch ended or the server is away: relist
                if not self._stop.is_set():
                    log.warning("scaler cache: %s: %s; relisting", what, error)
                    self._stop.wait(1.0)

    def _run_policies(self) -> None:
        objects = client.CustomObjectsApi(self.api)
        listed = objects.list_cluster_custom_object(
            AUTOSCALING_GROUP, API_VERSION, POLICY_PLURAL, _request_timeout=self.request_timeout
        )
        with self._changed:
            self._policies = {_key(o): o for o in listed.get("items", [])}
            self._synced["policies"] = True
            self._bump()
        stream = watch.Watch()
        self._watches.append(stream)
        try:
            for event in stream.stream(
                objects.list_cluster_custom_object,
                AUTOSCALING_GROUP,
                API_VERSION,
                POLICY_PLURAL,
                resource_version=listed["metadata"]["resourceVersion"],
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=WATCH_SECONDS + self.request_timeout,
            ):
                if self._stop.is_set():
                    return
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {event['object']}")
                item = event["object"]
                with self._changed:
                    if event["type"] == "DELETED":
                        self._policies.pop(_key(item), None)
                    else:
                        self._policies[_key(item)] = item
                    self._bump()
        finally:
            self._watches.remove(stream)

    def _run_lease(self) -> None:
        leases = client.CoordinationV1Api(self.api)
        selector = f"metadata.name={self.lease_name}"
        listed = leases.list_namespaced_lease(
            self.lease_namespace, field_selector=selector, _request_timeout=self.request_timeout
        )
        with self._changed:
            self._lease = _lease_copy(listed.items[0]) if listed.items else None
            self._synced["lease"] = True
            self._bump()
        stream = watch.Watch()
        self._watches.append(stream)
        try:
            for event in stream.stream(
                leases.list_namespaced_lease,
                self.lease_namespace,
                field_selector=selector,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=WATCH_SECONDS + self.request_timeout,
            ):
                if self._stop.is_set():
                    return
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {event['raw_object']}")
                with self._changed:
                    deleted = event["type"] == "DELETED"
                    self._lease = None if deleted else _lease_copy(event["object"])
                    self._bump()
        finally:
            self._watches.remove(stream)


def _key(policy: dict[str, Any]) -> tuple[str, str]:
    metadata = policy.get("metadata", {})
    return metadata.get("namespace", ""), metadata.get("name", "")


def _lease_copy(lease: client.V1Lease) -> HubLeaseCopy:
    holder = (lease.spec.holder_identity if lease.spec else None) or ""
    annotations = lease.metadata.annotations or {}
    return HubLeaseCopy(holder=holder, token=annotations.get(ANNOTATION_FENCING_TOKEN, ""))


_LOG_TEXT_MAX = 253


def shown(value: object) -> str:
    """Request text as it may appear in a log line: control characters, newlines and
    non-ASCII escaped, and cut to a name's length, so a request cannot forge log lines."""
    text = str(value)
    cut = len(text) > _LOG_TEXT_MAX
    escaped = text[:_LOG_TEXT_MAX].encode("unicode_escape").decode("ascii")
    return escaped + ("...(cut)" if cut else "")


class FloorScaler(pb_grpc.ExternalScalerServicer):
    """KEDA's ExternalScaler service over a MemberCache (grpc.aio handlers)."""

    def __init__(
        self,
        cache: MemberCache,
        cluster: str,
        wall: Callable[[], float] = time.time,
        recheck: float = DEFAULT_RECHECK,
    ) -> None:
        self.cache = cache
        self.cluster = cluster
        self.wall = wall
        self.recheck = recheck

    async def floor_for(self, ref, context) -> tuple[ServedFloor, int]:
        if not self.cache.synced:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the scaler's cache is not filled yet")
        name = ref.scalerMetadata.get(METADATA_POLICY) or ref.name
        policy, lease, generation = self.cache.snapshot(ref.namespace, name)
        now = datetime.fromtimestamp(self.wall(), UTC)
        return served_floor(policy, lease, self.cluster, now), generation

    async def IsActive(self, request, context):
        served, _ = await self.floor_for(request, context)
        return pb.IsActiveResponse(result=served.active)

    async def StreamIsActive(self, request, context):
        # A coroutine per stream: waiting costs no thread. When KEDA hangs up, grpc.aio
        # cancels this coroutine inside `changed`.
        last: tuple[bool, int] | None = None
        while True:
            served, generation = await self.floor_for(request, context)
            if (served.active, served.floor) != last:
                last = (served.active, served.floor)
                log.info(
                    "%s/%s: floor %d (%s)",
                    shown(request.namespace),
                    shown(request.name),
                    served.floor,
                    shown(served.reason),
                )
                yield pb.IsActiveResponse(result=served.active)
            wait = self.recheck
            if served.changes_at is not None:
                wait = min(wait, max(0.0, served.changes_at.timestamp() - self.wall()) + 0.01)
            await self.cache.changed(generation, wait)

    async def GetMetricSpec(self, request, context):
        await self.floor_for(request, context)  # the same availability as GetMetrics
        return pb.GetMetricSpecResponse(
            metricSpecs=[pb.MetricSpec(metricName=METRIC_NAME, targetSize=1, targetSizeFloat=1.0)]
        )

    async def StreamMetricSpec(self, request, context):
        # The spec never changes (one metric, target 1). KEDA (2.21+) opens this stream
        # for every push ScaledObject and, on UNIMPLEMENTED, keeps GetMetricSpec's answer:
        # say so plainly rather than through the generated stub's ERROR and traceback.
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "the metric spec is fixed: GetMetricSpec answers it"
        )

    async def GetMetrics(self, request, context):
        served, _ = await self.floor_for(request.scaledObjectRef, context)
        return pb.GetMetricsResponse(
            metricValues=[
                pb.MetricValue(
                    metricName=METRIC_NAME,
                    metricValue=served.floor,
                    metricValueFloat=float(served.floor),
                )
            ]
        )


SCALER_SERVICE = "externalscaler.ExternalScaler"


class Health(health_grpc.HealthServicer):
    """grpc.health.v1 over the scaler's cache: ready once filled, live while serving."""

    def __init__(self, cache: MemberCache, watch_seconds: float = DEFAULT_RECHECK) -> None:
        self.cache = cache
        self.watch_seconds = watch_seconds

    def status(self, service: str) -> int | None:
        serving = health_pb.HealthCheckResponse.SERVING
        if service == SCALER_LIVENESS_SERVICE:
            return serving
        if service in {"", SCALER_SERVICE}:
            return serving if self.cache.synced else health_pb.HealthCheckResponse.NOT_SERVING
        return None

    async def Check(self, request, context):
        status = self.status(request.service)
        if status is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"unknown service {shown(request.service)}"
            )
        return health_pb.HealthCheckResponse(status=status)

    async def Watch(self, request, context):
        last = None
        while True:
            status = self.status(request.service)
            if status is None:
                status = health_pb.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                last = status
                yield health_pb.HealthCheckResponse(status=status)
            _, _, generation = self.cache.snapshot("", "")
            await self.cache.changed(generation, self.watch_seconds)


def tls_credentials(cert_dir: Path) -> grpc.ServerCredentials:
    """tls.crt and tls.key serve TLS; with ca.crt, clients must present a cert it signed
    (the trigger's TriggerAuthentication: caCert, tlsClientCert, tlsClientKey)."""
    key = (cert_dir / "tls.key").read_bytes()
    cert = (cert_dir / "tls.crt").read_bytes()
    ca_path = cert_dir / "ca.crt"
    ca = ca_path.read_bytes() if ca_path.exists() else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


class Served:
    """A grpc.aio server running on an event loop of its own thread."""

    def __init__(self, build: Callable[[grpc.aio.Server], int]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server, self.port = asyncio.run_coroutine_threadsafe(
            self._start(build), self.loop
        ).result()

    async def _start(self, build: Callable[[grpc.aio.Server], int]) -> tuple:
        server = grpc.aio.server()
        port = build(server)
        await server.start()
        return server, port

    def stop(self, grace: float | None = None) -> threading.Event:
        """Stop serving (open streams get `grace` seconds) and end the loop; the returned
        event is already set, for callers that `.wait()` on it."""
        done = threading.Event()
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.server.stop(grace), self.loop).result()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
        done.set()
        return done


def serve(
    scaler: FloorScaler,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[Served, int]:
    """Start the gRPC server; returns it and the port it bound (for ':0')."""

    def build(server: grpc.aio.Server) -> int:
        pb_grpc.add_ExternalScalerServicer_to_server(scaler, server)
        health_grpc.add_HealthServicer_to_server(Health(scaler.cache), server)
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)

    served = Served(build)
    return served, served.port


def serve_health(cache: MemberCache, address: str) -> tuple[Served, int]:
    """Health alone, in plaintext, on a server of its own (kubelet's gRPC probe)."""

    def build(server: grpc.aio.Server) -> int:
        health_grpc.add_HealthServicer_to_server(Health(cache), server)
        return server.add_insecure_port(address)

    served = Served(build)
    return served, served.port


def wait_synced(cache: MemberCache, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cache.synced:
            return True
        time.sleep(0.02)
    return False
