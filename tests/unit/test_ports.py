"""The test processes' ports: never handed out twice, never where the kernel picks."""

from __future__ import annotations

import socket

from tests import ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    given = [ports.free_port() for _ in range(300)]
    assert len(set(given)) == len(given)
    low = ports._ephemeral_low()
    assert all(ports._PORTS_LOW <= port < low for port in given), (low, sorted(given)[:5])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", given[-1]))


def test_a_port_something_listens_on_is_never_given(monkeypatch):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        unused = free.getsockname()[1]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy, unused])
        monkeypatch.setattr(ports, "_ephemeral_low", lambda: 65536)
        monkeypatch.setattr(ports, "_PORTS_LOW", 1024)
        monkeypatch.setattr(ports.random, "randrange", lambda low, high: next(picks))
        monkeypatch.setattr(ports, "_HANDED_OUT", set())
        assert ports.free_port() == unused
