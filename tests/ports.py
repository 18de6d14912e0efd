"""Ports for the processes the tests start (API servers, etcd, collectors, KEDA, ours)."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
from pathlib import Path

# Handed out by `free_port`: below the kernel's ephemeral range (`ip_local_port_range`),
# so no outgoing connection and no `bind(0)` takes one between the pick and the process
# binding it, and never twice in a run; above the fixed defaults of the tools we run
# (the controller manager's 10257, the scheduler's 10259, the collector's 13133).
_PORTS_LOW = 20000
_HANDED_OUT: set[int] = set()
_PORTS_LOCK = threading.Lock()


def _ephemeral_low() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def xdist_worker() -> tuple[int, int]:
    """(this test process's index, how many there are): pytest-xdist's workers (`make
    test` runs two) each get their own share of ports and pod addresses."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


def _share(low: int, high: int) -> tuple[int, int]:
    index, count = xdist_worker()
    span = (high - low) // count
    return low + index * span, low + (index + 1) * span


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` that nothing listens on now and no other caller of this function
    has been given. A port picked by binding port 0 is in the ephemeral range: until the
    process we start binds it, an outgoing connection or another pick may take it, and
    the process exits (a flake). So pick below that range, and remember what we gave.
    Under pytest-xdist each worker picks from its own part of the range, so two workers
    never pick the same port between the check and the bind."""
    low, high = _share(_PORTS_LOW, _ephemeral_low())
    with _PORTS_LOCK:
        for _ in range(200) if high - low > 1000 else ():
            port = random.randrange(low, high)
            if port in _HANDED_OUT:
                continue
            with socket.socket() as sock, contextlib.suppress(OSError):
                sock.bind((host, port))
                _HANDED_OUT.add(port)
                return port
        while True:  # a host whose ephemeral range starts low: the kernel's pick
            with socket.socket() as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
