"""The runtime as it ships: `modelplane runtime agent` and `... scaler` processes with
kubeconfigs for their members, killed and terminated with real signals, their metrics
read from their /metrics endpoints.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
import yaml
from kubernetes import client

from functions.common.contracts import ANNOTATION_FENCING_TOKEN
from functions.runtime.scaler.server import METRIC_NAME
from functions.runtime.shared.cert_expiry import CERTIFICATE_EXPIRY
from functions.runtime.shared.metrics import FLEET_MEMBERS, HUB_LEADING
from tests.runtime.cluster import free_port
from tests.runtime.conftest import FAST, wait_for
from tests.runtime.test_election import SLACK, _lease
from tests.runtime.test_scaler import Member, _health, in_seconds, pb, pb_grpc

ENTRYPOINT = [sys.executable, "-m", "functions.entrypoint", "runtime"]
TIMING_FLAGS = [
    f"--lease-duration={FAST.lease_duration}",
    f"--renew-deadline={FAST.renew_deadline}",
    f"--retry-period={FAST.retry_period}",
]


def _kubeconfig(member, directory) -> str:
    path = directory / f"{member.name}.kubeconfig"
    path.write_text(yaml.safe_dump(member.kubeconfig()))
    return str(path)


def _gauge(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{name}{{") or line.startswith(f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def _holder(members) -> str:
    """The holder every member's Lease names ("" until they agree)."""
    try:
        holders = {(_lease(m).spec.holder_identity or "") for m in members}
    except client.ApiException:  # not created yet
        return ""
    return holders.pop() if len(holders) == 1 else ""


def test_agent_processes_elect_hand_over_on_sigterm_and_fail_over_on_sigkill(
    fleet, processes, tmp_path
):
    members = fleet.members[:3]
    configs = [f"--member={m.name}={_kubeconfig(m, tmp_path)}" for m in members]
    agents = {}
    for member in members:
        port = free_port()
        process = subprocess.Popen(
            [
                *ENTRYPOINT,
                "agent",
                f"--cluster={member.name}",
                "--pod=agent-0",
                *configs,
                *TIMING_FLAGS,
                f"--metrics-port={port}",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        agents[f"{member.name}/agent-0"] = (process, port)

    hub = wait_for(lambda: _holder(members), 20)
    assert hub in agents
    process, port = agents[hub]
    assert wait_for(lambda: _gauge(port, HUB_LEADING) == 1.0, 5)
    assert _gauge(port, FLEET_MEMBERS) == 3.0
    # The CA its member kubeconfigs trust, read from the files at this scrape: the API
    # servers' self-signed certificates, valid for a year from their start.
    expiry = _gauge(port, CERTIFICATE_EXPIRY)
    assert expiry is not None
    assert expiry > time.time() + 300 * 86400
    for other, (_, other_port) in agents.items():
        if other != hub:
            assert wait_for(lambda p=other_port: _gauge(p, HUB_LEADING) == 0.0, 5)

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert "releasing its Leases" in process.stderr.read()
    stopped = time.monotonic()
    second = wait_for(lambda: (h := _holder(members)) not in ("", hub) and h, 10)
    assert second, "no new hub after a graceful stop"
    assert time.monotonic() - stopped < FAST.lease_duration

    killed, _ = agents[second]
    killed.kill()
    crashed = time.monotonic()
    third = wait_for(
        lambda: (h := _holder(members)) not in ("", hub, second) and h,
        FAST.lease_duration + FAST.retry_period + SLACK + 5,
    )
    assert third, "no new hub after the hub was killed"
    assert time.monotonic() - crashed <= FAST.lease_duration + FAST.retry_period + SLACK + 1


def test_scaler_process_serves_the_floor_stamped_with_the_lease_term(fleet, processes):
    member = fleet.members[0]
    writer = Member(member)
    writer.lease(holder="member-0/agent-0", token="term-cli")
    writer.policy()
    kubeconfig = _kubeconfig(member, fleet.root)
    port, health_port = free_port(), free_port()
    processes.append(
        subprocess.Popen(
            [
                *ENTRYPOINT,
                "scaler",
                f"--cluster={member.name}",
                f"--kubeconfig={kubeconfig}",
                f"--listen=127.0.0.1:{port}",
                f"--health-listen=127.0.0.1:{health_port}",
                "--metrics-port=0",
            ],
        )
    )
    token = _lease(member).metadata.annotations[ANNOTATION_FENCING_TOKEN]
    writer.intent(floor=3, hub="member-0/agent-0", token=token, expires=in_seconds(60))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ExternalScalerStub(channel)
    request = pb.GetMetricsRequest(
        scaledObjectRef=pb.ScaledObjectRef(name="llama", namespace="ml-team"),
        metricName=METRIC_NAME,
    )

    def served():
        try:
            return stub.GetMetrics(request, timeout=2).metricValues[0].metricValue
        except grpc.RpcError:
            return None

    def health() -> str | None:
        try:
            return _health(health_port)
        except grpc.RpcError:
            return None

    try:
        assert wait_for(lambda: served() == 3, 15)
        assert health() == "SERVING"  # the readiness probe's answer once the cache is filled
    finally:
        channel.close()
        writer.api.close()
