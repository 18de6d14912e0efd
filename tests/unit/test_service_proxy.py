"""The fleet box's CONNECT proxy (hack/fleetbox/service_proxy.py): how KEDA's operator, run out
of cluster, reaches our scaler at the in-cluster address the ScaledObject names."""

from __future__ import annotations

import socket
import threading

import pytest

from fleetbox.service_proxy import ServiceProxy, in_cluster_name
from functions.common.contracts import SCALER_PORT, SCALER_SERVICE_NAME, SYSTEM_NAMESPACE
from functions.compose_model_replica.autoscaling import SCALER_ADDRESS


@pytest.fixture
def echo():
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def connect(proxy: ServiceProxy, target: str) -> tuple[str, socket.socket]:
    sock = socket.create_connection(("127.0.0.1", proxy.server_address[1]), timeout=5)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    return head.decode().split("\r\n")[0], sock


def test_the_composed_scaler_address_is_the_route_the_box_maps(echo):
    # The box maps exactly what compose-model-replica writes into the ScaledObject.
    name = in_cluster_name(SCALER_SERVICE_NAME, SYSTEM_NAMESPACE, SCALER_PORT)
    assert name == SCALER_ADDRESS
    proxy = ServiceProxy({name: echo})
    try:
        status, sock = connect(proxy, SCALER_ADDRESS)
        with sock:
            assert status == "HTTP/1.1 200 Connection Established"
            sock.sendall(b"floor")
            assert sock.recv(1024) == b"FLOOR"
    finally:
        proxy.close()


def test_an_unknown_in_cluster_name_is_refused(echo):
    proxy = ServiceProxy({SCALER_ADDRESS: echo})
    try:
        status, sock = connect(proxy, "kubernetes.default.svc.cluster.local:443")
        sock.close()
        assert status.startswith("HTTP/1.1 403")
    finally:
        proxy.close()
