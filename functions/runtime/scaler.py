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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
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
from functions.runtime.proto import stubs
from functions.runtime.scaler_core import HubLeaseCopy, ServedFloor, served_floor

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

    # --- reading ---------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        with self._changed:
            return all(self._synced.values())

    def snapshot(self, namespace: str, name: str) -> tuple[dict | None, HubLeaseCopy | None, int]:
        with self._changed:
            return self._policies.get((namespace, name)), self._lease, self._generation

    def wait_for_change(
        self, generation: int, timeout: float, gone: Callable[[], bool] = lambda: False
    ) -> int:
        """Block until the cache changes past `generation`, `gone()`, or `timeout`."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._generation != generation or self._stop.is_set() or gone(),
                timeout,
            )
            return self._generation

    def wake(self) -> None:
        """Make every waiter re-check (a stream's client went away)."""
        with self._changed:
            self._changed.notify_all()

    def _bump(self) -> None:
        self._generation += 1
        self._changed.notify_all()

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


class FloorScaler(pb_grpc.ExternalScalerServicer):
    """KEDA's ExternalScaler service over a MemberCache."""

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

    def floor_for(self, ref, context) -> tuple[ServedFloor, int]:
        if not self.cache.synced:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the scaler's cache is not filled yet")
        name = ref.scalerMetadata.get(METADATA_POLICY) or ref.name
        policy, lease, generation = self.cache.snapshot(ref.namespace, name)
        now = datetime.fromtimestamp(self.wall(), UTC)
        return served_floor(policy, lease, self.cluster, now), generation

    def IsActive(self, request, context):
        served, _ = self.floor_for(request, context)
        return pb.IsActiveResponse(result=served.active)

    def StreamIsActive(self, request, context):
        last: tuple[bool, int] | None = None
        context.add_callback(self.cache.wake)  # frees this worker as soon as KEDA hangs up
        while context.is_active():
            served, generation = self.floor_for(request, context)
            if (served.active, served.floor) != last:
                last = (served.active, served.floor)
                log.info(
                    "%s/%s: floor %d (%s)",
                    request.namespace,
                    request.name,
                    served.floor,
                    served.reason,
                )
                yield pb.IsActiveResponse(result=served.active)
            wait = self.recheck
            if served.changes_at is not None:
                wait = min(wait, max(0.0, served.changes_at.timestamp() - self.wall()) + 0.01)
            self.cache.wait_for_change(generation, wait, gone=lambda: not context.is_active())

    def GetMetricSpec(self, request, context):
        self.floor_for(request, context)  # the same availability as GetMetrics
        return pb.GetMetricSpecResponse(
            metricSpecs=[pb.MetricSpec(metricName=METRIC_NAME, targetSize=1, targetSizeFloat=1.0)]
        )

    def GetMetrics(self, request, context):
        served, _ = self.floor_for(request.scaledObjectRef, context)
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

    def Check(self, request, context):
        status = self.status(request.service)
        if status is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb.HealthCheckResponse(status=status)

    def Watch(self, request, context):
        last = None
        context.add_callback(self.cache.wake)
        while context.is_active():
            status = self.status(request.service)
            if status is None:
                status = health_pb.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                last = status
                yield health_pb.HealthCheckResponse(status=status)
            _, _, generation = self.cache.snapshot("", "")
            self.cache.wait_for_change(
                generation, self.watch_seconds, gone=lambda: not context.is_active()
            )


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


def serve(
    scaler: FloorScaler,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
    max_streams: int = 64,
) -> tuple[grpc.Server, int]:
    """Start the gRPC server; returns it and the port it bound (for ':0')."""
    # Each open StreamIsActive holds a worker thread while it waits for changes.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_streams + 8))
    pb_grpc.add_ExternalScalerServicer_to_server(scaler, server)
    health_grpc.add_HealthServicer_to_server(Health(scaler.cache), server)
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    server.start()
    return server, port


def serve_health(cache: MemberCache, address: str) -> tuple[grpc.Server, int]:
    """Health alone, in plaintext, on a server of its own (kubelet's gRPC probe)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health_grpc.add_HealthServicer_to_server(Health(cache), server)
    port = server.add_insecure_port(address)
    server.start()
    return server, port


def wait_synced(cache: MemberCache, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cache.synced:
            return True
        time.sleep(0.02)
    return False
