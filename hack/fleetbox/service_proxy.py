"""In-cluster Service names, mapped to local addresses, for the box's host processes.

These processes (KEDA, our agent) run on the host, outside any pod, where no cluster DNS
answers and no kube-proxy routes a ClusterIP (real pods resolve through their member's
CoreDNS, dns.py, and reach each other by pod IP).

KEDA's operator dials the scaler at the address the composed ScaledObject names
(`modelplane-scaler.modelplane-system.svc.cluster.local:9090`), and our agent reads the
collector's signals page by its in-cluster URL. Both run here as local processes with a
proxy in their environment (HTTPS_PROXY, http_proxy) pointing at one of these, which
maps each in-cluster address to the local process behind it and refuses the rest.
grpc-go (v1.84, KEDA's) builds its client with `grpc.NewClient`; for a `dns` target
with a proxy in the environment it does not resolve the name itself but sends it in
the CONNECT (internal/resolver/delegatingresolver). Go never proxies loopback
addresses, so KEDA still reaches its API server directly.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading


def in_cluster_name(service: str, namespace: str, port: int) -> str:
    return f"{service}.{namespace}.svc.cluster.local:{port}"


class ServiceProxy(socketserver.ThreadingTCPServer):
    """A proxy on loopback that maps in-cluster Service addresses
    (`name.namespace.svc[.cluster.local]:port`) to local ones and refuses the rest: HTTP
    CONNECT (KEDA's gRPC) and plain HTTP requests in absolute form (Python's urllib, as
    our agent reads the collector's signals page, with `http_proxy` set). `routes` may
    change while it runs (a test starts a member's collector late)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, routes: dict[str, str]) -> None:
        self.routes = dict(routes)
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Tunnel(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline(8192)
        request = line.decode("latin-1").split()
        headers = []
        while (header := self.rfile.readline(8192)) not in (b"\r\n", b"\n", b""):
            headers.append(header)
        if len(request) != 3:
            self.wfile.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            return
        method, target, version = request
        if method == "CONNECT":
            address, first = target, b""
        elif target.startswith("http://"):
            address, _, path = target[len("http://") :].partition("/")
            address = address if ":" in address else f"{address}:80"
            # Relayed as one request to the origin, in origin form, closing after it.
            kept = [h for h in headers if not h.lower().startswith((b"proxy-", b"connection"))]
            first = f"{method} /{path} {version}\r\n".encode("latin-1")
            first += b"".join(kept) + b"Connection: close\r\n\r\n"
        else:
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        route = self.server.routes.get(address)
        if route is None:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\n\r\nno such in-cluster service\r\n")
            return
        host, port = route.rsplit(":", 1)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        upstream.settimeout(None)
        if first:
            upstream.sendall(first)
        else:
            self.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            self.wfile.flush()
        pump = threading.Thread(target=_pump, args=(upstream, self.connection), daemon=True)
        pump.start()
        _pump(self.connection, upstream)
        pump.join()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


__all__ = ["ServiceProxy", "in_cluster_name"]
