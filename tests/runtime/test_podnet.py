"""Runtime: the box's pod network (hack/fleetbox/podnet.py), the network namespace the
real pods with cluster DNS run in. Real `ip` and namespaces; needs root, as the pod
runner's namespaces do (under CI=true the test fails without it; elsewhere it skips).

Each test makes namespaces of its own (a worker name of its own, subnets from
198.18.240.0/24 on), never the process's shared one, and deletes them."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from fleetbox.podnet import PodNetwork, in_pod_network
from tests.conftest import IN_CI

if os.geteuid() != 0:
    if IN_CI:
        pytest.fail("CI requires root for the pod network (ip netns, veth)", pytrace=False)
    pytest.skip(  # not in CI: under CI=true it failed above
        "the pod network needs root (ip netns, veth): run it as root, "
        "`sudo .venv/bin/python -m pytest tests/runtime/test_podnet.py` (under CI=true it fails)",
        allow_module_level=True,
    )

LISTENER = (
    "import socket, sys\n"
    "s = socket.socket(); s.bind((sys.argv[1], 8080)); s.listen()\n"
    "print('listening', flush=True)\n"
    "c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()\n"
)


def host_addresses() -> set[str]:
    out = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True)
    return {word.split("/")[0] for word in out.stdout.split()}


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_a_pod_address_lives_in_the_namespace_and_is_reached_through_the_pair() -> None:
    network = PodNetwork("podnet-test", 240)
    try:
        assert network.subnet == ipaddress.IPv4Network("198.18.240.0/24")
        pod, gateway = str(network.subnet[100]), network.gateway
        network.pod_address("add", pod)
        assert network.name in netns_names()
        # No interface of the host's own namespace holds the pod's address.
        assert pod not in host_addresses()
        assert network.gateway in host_addresses()
        listener = subprocess.Popen(
            in_pod_network([sys.executable, "-c", LISTENER, pod], network),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert listener.stdout.readline().strip() == "listening"
            with socket.create_connection((pod, 8080), timeout=5) as connection:
                # From the host, through the pair: the peer is the gateway.
                assert connection.recv(100).decode() == network.gateway
        finally:
            listener.kill()
            listener.wait()
        # From inside: the gateway answers, the host's own addresses are not routed to
        # beyond the pair (its loopback is the namespace's own).
        route = subprocess.run(
            in_pod_network(["ip", "route", "get", "8.8.8.8"], network),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"via {network.gateway} dev eth0" in route
        network.pod_address("del", pod)
        inside = subprocess.run(
            in_pod_network(["ip", "-o", "addr"], network),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert pod not in inside
        # With no pod there, what is sent to the host end leaves from the namespace's
        # own address (the box's resolver checks run inside with no pod running).
        route = subprocess.run(
            in_pod_network(["ip", "route", "get", gateway], network),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"src {network.subnet[254]}" in route
    finally:
        network.close()
    assert network.name not in netns_names()
    assert gateway not in host_addresses()


def test_leftovers_of_dead_processes_go_and_a_running_ones_subnet_is_not_shared() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftover = f"modelplane-podnet-test-{dead.pid}"
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    first = PodNetwork("podnet-test", 241)
    second = PodNetwork("podnet-test-b", 241)
    try:
        first.ensure()
        assert leftover not in netns_names()
        assert first.subnet == ipaddress.IPv4Network("198.18.241.0/24")
        # A second network wanting the same subnet while the first's process runs (here:
        # the same process) takes another one: two test processes never share one.
        second.ensure()
        assert second.subnet != first.subnet
        assert {first.name, second.name} <= netns_names()
    finally:
        first.close()
        second.close()
        subprocess.run(["ip", "netns", "del", leftover], capture_output=True, check=False)
    assert not {first.name, second.name} & netns_names()
