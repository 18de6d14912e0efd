"""The KEDA scaler against a real API server, called through a gRPC client generated
from the same externalscaler.proto KEDA uses.

Each case starts from a served floor and makes one change, so a 0 proves the scaler
refused, not that its cache was still empty.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from kubernetes import client

from functions.common.contracts import (
    API_VERSION,
    AUTOSCALING_GROUP,
    HUB_LEASE_NAME,
    SCALER_LIVENESS_SERVICE,
    SYSTEM_NAMESPACE,
)
from functions.runtime.election.core import LeaseRecord
from functions.runtime.election.leases import lease_body
from functions.runtime.scaler.proto import stubs
from functions.runtime.scaler.server import (
    METRIC_NAME,
    SCALER_SERVICE,
    FloorScaler,
    MemberCache,
    serve,
    serve_health,
    tls_credentials,
    wait_synced,
)
from tests.runtime.conftest import POLICY_NAMESPACE, POLICY_PLURAL, measured, wait_for

pb, pb_grpc = stubs()
health_pb, health_grpc = stubs("health")

HUB = "member-1/agent-0"
TOKEN = "term-a"
POLICY = "llama"


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def in_seconds(seconds: float) -> str:
    return rfc3339(datetime.now(UTC) + timedelta(seconds=seconds))


class Member:
    """Writes what the hub and compose-model-replica would write on one member."""

    def __init__(self, member) -> None:
        self.api = member.client()
        self.objects = client.CustomObjectsApi(self.api)
        self.leases = client.CoordinationV1Api(self.api)

    def policy(
        self,
        name: str = POLICY,
        mode: str = "auto",
        max_replicas: int = 8,
        cluster: str = "member-0",
    ) -> None:
        body = {
            "apiVersion": f"{AUTOSCALING_GROUP}/{API_VERSION}",
            "kind": "AdaptivePolicy",
            "metadata": {"name": name, "namespace": POLICY_NAMESPACE},
            "spec": {
                "mode": mode,
                "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "clusters": [{"name": cluster, "maxReplicas": max_replicas}],
            },
        }
        try:
            current = self.objects.get_namespaced_custom_object(
                AUTOSCALING_GROUP, API_VERSION, POLICY_NAMESPACE, POLICY_PLURAL, name
            )
            current["spec"] = body["spec"]
            self.objects.replace_namespaced_custom_object(
                AUTOSCALING_GROUP, API_VERSION, POLICY_NAMESPACE, POLICY_PLURAL, name, current
            )
        except client.ApiException as error:
            if error.status != 404:
                raise
            self.objects.create_namespaced_custom_object(
                AUTOSCALING_GROUP, API_VERSION, POLICY_NAMESPACE, POLICY_PLURAL, body
            )

    def intent(
        self,
        name: str = POLICY,
        floor: int = 5,
        hub: str = HUB,
        token: str = TOKEN,
        expires: str | None = None,
    ) -> None:
        intent = {
            "floor": floor,
            "tier": 0,
            "hub": hub,
            "fencingToken": token,
            "expires": expires or in_seconds(300),
        }
        self.objects.patch_namespaced_custom_object_status(
            AUTOSCALING_GROUP,
            API_VERSION,
            POLICY_NAMESPACE,
            POLICY_PLURAL,
            name,
            {"status": {"intent": intent}},
        )

    def lease(self, holder: str = HUB, token: str = TOKEN) -> None:
        record = LeaseRecord(
            holder=holder, token=token, duration=15, renewed_at=time.time(), acquired_at=time.time()
        )
        try:
            current = self.leases.read_namespaced_lease(HUB_LEASE_NAME, SYSTEM_NAMESPACE)
            body = lease_body(
                record, HUB_LEASE_NAME, SYSTEM_NAMESPACE, current.metadata.resource_version
            )
            self.leases.replace_namespaced_lease(HUB_LEASE_NAME, SYSTEM_NAMESPACE, body)
        except client.ApiException as error:
            if error.status != 404:
                raise
            body = lease_body(record, HUB_LEASE_NAME, SYSTEM_NAMESPACE, None)
            self.leases.create_namespaced_lease(SYSTEM_NAMESPACE, body)

    def delete_lease(self) -> None:
        self.leases.delete_namespaced_lease(HUB_LEASE_NAME, SYSTEM_NAMESPACE)

    def delete_policy(self, name: str = POLICY) -> None:
        self.objects.delete_namespaced_custom_object(
            AUTOSCALING_GROUP, API_VERSION, POLICY_NAMESPACE, POLICY_PLURAL, name
        )


class Scaler:
    """A running scaler for one member and a KEDA-like client for it."""

    def __init__(self, member, recheck: float = 30.0) -> None:
        self.cache = MemberCache(member.client()).start()
        self.server, port = serve(
            FloorScaler(self.cache, member.name, recheck=recheck), "127.0.0.1:0"
        )
        self.port = port
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    def ref(self, name: str = POLICY, **metadata) -> object:
        return pb.ScaledObjectRef(name=name, namespace=POLICY_NAMESPACE, scalerMetadata=metadata)

    def floor(self, name: str = POLICY) -> int:
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref(name), metricName=METRIC_NAME)
        values = self.stub.GetMetrics(request, timeout=5).metricValues
        assert [v.metricName for v in values] == [METRIC_NAME]
        assert values[0].metricValue == int(values[0].metricValueFloat)
        return values[0].metricValue

    def becomes(self, floor: int, timeout: float = 3.0, name: str = POLICY) -> bool:
        return bool(wait_for(lambda: self.floor(name) == floor, timeout))

    def close(self) -> None:
        self.channel.close()
        self.server.stop(grace=None)
        self.cache.stop()


@pytest.fixture
def member0(fleet):
    writer = Member(fleet.members[0])
    yield writer
    writer.api.close()


@pytest.fixture
def scaler(fleet):
    running = Scaler(fleet.members[0])
    assert wait_synced(running.cache, 10)
    yield running
    running.close()


def _serving(member0, scaler, **policy) -> None:
    member0.lease()
    member0.policy(**policy)
    member0.intent()
    assert scaler.becomes(5), "the valid intent was never served"


CHANGES = [
    ("shadow_mode_serves_nothing", lambda m: m.policy(mode="shadow"), 0),
    ("off_mode_serves_nothing", lambda m: m.policy(mode="off"), 0),
    ("an_expired_intent_serves_nothing", lambda m: m.intent(expires=in_seconds(-1)), 0),
    ("another_hubs_intent_is_refused", lambda m: m.intent(hub="member-2/agent-0"), 0),
    ("a_stale_fencing_token_is_refused", lambda m: m.intent(token="term-old"), 0),
    ("a_new_term_on_the_lease_refuses_the_old_terms_intent", lambda m: m.lease(token="term-b"), 0),
    (
        "a_new_holder_on_the_lease_refuses_the_old_hubs_intent",
        lambda m: m.lease(holder="member-2/agent-0"),
        0,
    ),
    ("a_missing_lease_refuses_every_intent", lambda m: m.delete_lease(), 0),
    ("a_released_lease_refuses_every_intent", lambda m: m.lease(holder="", token=""), 0),
    ("a_missing_policy_serves_nothing", lambda m: m.delete_policy(), 0),
    ("the_floor_is_capped_at_max_replicas", lambda m: m.policy(max_replicas=3), 3),
    (
        "a_policy_that_does_not_list_this_member_serves_nothing",
        lambda m: m.policy(cluster="member-3"),
        0,
    ),
    ("a_higher_floor_is_served", lambda m: m.intent(floor=7), 7),
]


@pytest.mark.parametrize(("change", "floor"), [c[1:] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_served_floor_after_one_change(member0, scaler, change, floor):
    _serving(member0, scaler)
    change(member0)
    assert scaler.becomes(floor), f"expected floor {floor}, scaler serves {scaler.floor()}"
    active = scaler.stub.IsActive(scaler.ref(), timeout=5).result
    assert active is (floor > 0)


def test_metric_spec_asks_for_exactly_the_floor(member0, scaler):
    _serving(member0, scaler)
    specs = scaler.stub.GetMetricSpec(scaler.ref(), timeout=5).metricSpecs
    assert [(s.metricName, s.targetSizeFloat, s.targetSize) for s in specs] == [
        (METRIC_NAME, 1.0, 1)
    ]


def test_the_metric_spec_stream_is_declined_as_keda_expects_without_an_error_logged(
    member0, scaler, caplog
):
    # KEDA opens StreamMetricSpec for every push ScaledObject and keeps GetMetricSpec's
    # spec on UNIMPLEMENTED (any other code: it retries and logs an error every minute).
    _serving(member0, scaler)
    with caplog.at_level("WARNING"), pytest.raises(grpc.RpcError) as declined:
        list(scaler.stub.StreamMetricSpec(scaler.ref(), timeout=5))
    assert declined.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "GetMetricSpec" in declined.value.details()
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


def test_the_trigger_may_name_another_policy(member0, scaler):
    _serving(member0, scaler)
    answer = scaler.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=scaler.ref("scaled-object", policy=POLICY)), timeout=5
    )
    assert answer.metricValues[0].metricValueFloat == 5.0


def test_stream_pushes_changes_and_expiry(member0, fleet):
    scaler = Scaler(fleet.members[0], recheck=30.0)
    try:
        assert wait_synced(scaler.cache, 10)
        member0.lease()
        member0.policy()
        pushed: queue.Queue = queue.Queue()
        stream = scaler.stub.StreamIsActive(scaler.ref())

        def read() -> None:
            try:
                for message in stream:
                    pushed.put((time.monotonic(), message.result))
            except grpc.RpcError:
                pass

        threading.Thread(target=read, daemon=True).start()
        assert pushed.get(timeout=5)[1] is False  # the current state, on open

        latencies = []
        for _ in range(5):
            changed = time.monotonic()
            member0.intent(expires=in_seconds(300))
            at, result = pushed.get(timeout=5)
            assert result is True
            latencies.append(at - changed)
            changed = time.monotonic()
            member0.policy(mode="shadow")
            at, result = pushed.get(timeout=5)
            assert result is False
            latencies.append(at - changed)
            member0.policy(mode="auto")
            member0.intent(floor=0)
            time.sleep(0.2)
            while not pushed.empty():
                pushed.get()
        latencies.sort()
        measured("intent change to stream update, median of 10", latencies[len(latencies) // 2])
        assert latencies[-1] < 2.0

        # Nothing changes on the API server: the stream turns inactive at the expiry.
        member0.intent(expires=in_seconds(1.5))
        assert pushed.get(timeout=5)[1] is True
        expiry = time.monotonic() + 1.5
        at, result = pushed.get(timeout=5)
        assert result is False
        assert at - expiry < 1.0
        measured("intent expiry to stream update (no API change)", max(0.0, at - expiry))
        stream.cancel()
    finally:
        scaler.close()


def test_unavailable_only_while_its_own_cache_cannot_be_read(fleet):
    member = fleet.members[4]
    member.stop_apiserver()
    scaler = Scaler(member)
    try:
        with pytest.raises(grpc.RpcError) as raised:
            scaler.stub.IsActive(scaler.ref(), timeout=5)
        assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
        member.start_apiserver()
        assert wait_synced(scaler.cache, 15)
        assert scaler.floor() == 0  # no policy yet: no influence, not an error
    finally:
        scaler.close()


def _openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(directory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all from it."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=directory,
    )
    for name, extension in (("tls", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=directory,
        )
        extra = []
        if extension:
            (directory / f"{name}.ext").write_text(extension + "\n")
            extra = ["-extfile", f"{name}.ext"]
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            f"{name}.crt",
            *extra,
            cwd=directory,
        )


def test_tls_with_client_certificates_from_the_trigger_authentication(fleet, tmp_path):
    _certificates(tmp_path)
    cache = MemberCache(fleet.members[0].client()).start()
    server, port = serve(FloorScaler(cache, "member-0"), "127.0.0.1:0", tls_credentials(tmp_path))
    try:
        assert wait_synced(cache, 10)
        ca = (tmp_path / "ca.crt").read_bytes()
        ref = pb.ScaledObjectRef(name=POLICY, namespace=POLICY_NAMESPACE)
        trusted = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(tmp_path / "client.key").read_bytes(),
            certificate_chain=(tmp_path / "client.crt").read_bytes(),
        )
        with grpc.secure_channel(f"127.0.0.1:{port}", trusted) as channel:
            assert pb_grpc.ExternalScalerStub(channel).IsActive(ref, timeout=5).result is False
        anonymous = grpc.ssl_channel_credentials(root_certificates=ca)
        with (
            grpc.secure_channel(f"127.0.0.1:{port}", anonymous) as channel,
            pytest.raises(grpc.RpcError) as refused,
        ):
            pb_grpc.ExternalScalerStub(channel).IsActive(ref, timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError):
            pb_grpc.ExternalScalerStub(channel).IsActive(ref, timeout=5)
    finally:
        server.stop(grace=None)
        cache.stop()


# --- health: what kubelet's gRPC probes ask ------------------------------------------


def _health(port: int, service: str = "") -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_grpc.HealthStub(channel)
        answer = stub.Check(health_pb.HealthCheckRequest(service=service), timeout=5)
        return health_pb.HealthCheckResponse.ServingStatus.Name(answer.status)


def test_health_is_not_serving_until_the_cache_is_filled_then_serving(fleet):
    """Readiness ("" and the scaler's service) follows the cache; liveness does not. The
    API server is frozen first, so the cache cannot fill until it thaws."""
    member = fleet.members[0]
    member.freeze()
    cache = MemberCache(member.client(), request_timeout=2.0).start()
    scaler_server, scaler_port = serve(FloorScaler(cache, member.name), "127.0.0.1:0")
    health_server, health_port = serve_health(cache, "127.0.0.1:0")
    try:
        for port in (health_port, scaler_port):
            assert _health(port) == "NOT_SERVING"
            assert _health(port, SCALER_SERVICE) == "NOT_SERVING"
            assert _health(port, SCALER_LIVENESS_SERVICE) == "SERVING"
        with pytest.raises(grpc.RpcError) as unknown:
            _health(health_port, "something.Else")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        # The health port serves health alone: the floors stay behind the scaler's port.
        with grpc.insecure_channel(f"127.0.0.1:{health_port}") as channel:
            with pytest.raises(grpc.RpcError) as floors:
                pb_grpc.ExternalScalerStub(channel).IsActive(
                    pb.ScaledObjectRef(name=POLICY, namespace=POLICY_NAMESPACE), timeout=5
                )
            assert floors.value.code() == grpc.StatusCode.UNIMPLEMENTED

        member.thaw()
        assert wait_for(lambda: _health(health_port) == "SERVING", 20)
        assert _health(scaler_port, SCALER_SERVICE) == "SERVING"
    finally:
        member.restore()
        health_server.stop(grace=None)
        scaler_server.stop(grace=None)
        cache.stop()


# --- under load: one stream per autoscaled workload ------------------------------------

STREAMS = 300


def test_hundreds_of_open_streams_leave_metrics_answered_and_all_get_the_change(member0, scaler):
    """KEDA keeps one StreamIsActive open per ScaledObject. With hundreds open, GetMetrics
    and IsActive are still answered, and one change reaches every stream."""
    _serving(member0, scaler)
    member0.intent(floor=0)
    assert scaler.becomes(0)

    async def run() -> tuple[int, float]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{scaler.port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            refs = [scaler.ref(f"workload-{i}", policy=POLICY) for i in range(STREAMS)]
            streams = [stub.StreamIsActive(ref) for ref in refs]
            opened = await asyncio.gather(*(s.read() for s in streams))
            assert all(m.result is False for m in opened)  # the current state, on open
            # Every stream is open and waiting; the unary calls are answered regardless.
            metrics = pb.GetMetricsRequest(scaledObjectRef=scaler.ref(), metricName=METRIC_NAME)
            answer = await stub.GetMetrics(metrics, timeout=5)
            assert answer.metricValues[0].metricValueFloat == 0.0
            assert (await stub.IsActive(scaler.ref(), timeout=5)).result is False
            changed = time.monotonic()
            await asyncio.to_thread(member0.intent, floor=4)
            pushed = await asyncio.wait_for(asyncio.gather(*(s.read() for s in streams)), 30)
            spread = time.monotonic() - changed
            answer = await stub.GetMetrics(metrics, timeout=5)
            for stream in streams:
                stream.cancel()
            return (
                sum(m.result is True for m in pushed),
                answer.metricValues[0].metricValueFloat,
                spread,
            )

    reached, floor, spread = asyncio.run(run())
    assert reached == STREAMS
    assert floor == 4.0
    measured(f"intent change to all {STREAMS} streams", spread)
    # The cancelled streams leave no waiter behind.
    assert wait_for(lambda: not scaler.cache._async_waiters, 10)


def test_request_text_is_escaped_in_logs(member0, scaler, caplog):
    member0.lease()
    forged = "llama\n2026-12-03 INFO forged line\x1b[31m"
    # Collect on the scaler's own logger, not through the root: whether another module of
    # this session configured logging (a handler swapped, the logger disabled) is not
    # what this test is about.
    logger = logging.getLogger("modelplane.scaler")
    collected: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = collected.append  # type: ignore[method-assign]
    saved = (logger.level, logger.disabled)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.disabled = False
    try:
        # The stream starts only now that the handler listens: a call starts when it is
        # made, and a server quicker than this thread logged before the handler existed.
        stream = scaler.stub.StreamIsActive(pb.ScaledObjectRef(name=forged, namespace="ml\rteam"))
        assert next(iter(stream)).result is False
        stream.cancel()
    finally:
        logger.removeHandler(handler)
        logger.level, logger.disabled = saved
    lines = [r.getMessage() for r in collected]
    assert any("forged line" in line for line in lines)
    for line in lines:
        assert not {"\n", "\r", "\x1b"} & set(line)
