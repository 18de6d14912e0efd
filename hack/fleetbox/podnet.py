"""The pod network of the box's real pods that resolve through cluster DNS: a network
namespace the box makes itself, joined to the host by one veth pair.

The API server refuses a loopback address in an EndpointSlice, so a pod that a Service
(and so cluster DNS) must name needs an address outside 127.0.0.0/8. Test traffic goes
only to loopback or to addresses inside a network namespace the test run made itself:
those addresses never sit on an interface of the host's own (root) namespace. So:

- one named namespace per test process (`modelplane-<worker>-<pid>`, the worker being
  pytest-xdist's or `main`), made on first use and deleted at exit; a leftover of a
  process that died is deleted when the next process of the same worker starts (and a
  leftover pod address on the host's `lo`, from the box before it had this namespace);
- a veth pair: its end inside (`eth0`) holds the pods' addresses, each a /32 added
  while a pod holds it (198.18.<n>.100..250, RFC 2544's never-routed benchmarking
  range, n = 0, or 1 + the xdist worker); its host end holds the gateway
  198.18.<n>.1/24, the only route to them, and the host-side service addresses
  198.18.<n>.2..99 (/32: a member's CoreDNS listens on one, since a resolv.conf names
  a nameserver by address and the pods cannot reach the host's loopback);
- inside: `lo` up, the /24 on eth0 and a default route via the gateway (the host does
  not forward, ip_forward is left as it is: a pod reaches its peers in the namespace,
  the gateway's addresses, and nothing beyond);
- the pod runner starts a pod's processes inside (setns, in the child before exec);
  host processes (probes, the tests' clients, collectors) reach a pod by its address
  through the veth pair.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), as the runner's mount namespaces do.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import re
import subprocess
import threading
from pathlib import Path

from tests.ports import xdist_worker

NETNS_DIR = Path("/run/netns")
PREFIX = "modelplane"
INSIDE_DEVICE = "eth0"
GATEWAY_HOST = 1
HOST_ADDRESSES = (2, 99)
POD_ADDRESSES = (100, 250)


class PodNetworkError(RuntimeError):
    pass


def _ip(*args: str, ok: tuple[str, ...] = ()) -> str:
    """`ip ARGS`; an error whose answer holds one of `ok` is fine, any other raises
    naming the command and its answer."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0 and not any(o in done.stderr for o in ok):
        raise PodNetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PodNetwork:
    """One test process's pod namespace (see the module's docstring). `subnet_index` is
    the third octet of 198.18.x.0/24; `worker` names the process's share (xdist)."""

    def __init__(self, subnet_index: int, worker: str) -> None:
        if not 0 <= subnet_index <= 255:
            raise ValueError(f"subnet index must be 0..255: {subnet_index}")
        self.subnet = ipaddress.IPv4Network(f"198.18.{subnet_index}.0/24")
        self.worker = worker
        self.name = f"{PREFIX}-{worker}-{os.getpid()}"
        self.gateway = str(self.subnet[GATEWAY_HOST])
        # The host end's name: unique on the host (a pid), at most 15 characters.
        self.host_device = f"mp{subnet_index}h{os.getpid()}"
        self._made = False
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The namespace's file, which `nsenter --net=` and setns take."""
        return NETNS_DIR / self.name

    def address_range(self, which: tuple[int, int]) -> tuple[str, str]:
        return str(self.subnet[which[0]]), str(self.subnet[which[1]])

    # --- lifecycle -------------------------------------------------------------------

    def ensure(self) -> PodNetwork:
        """Make the namespace and the veth pair (once; a leftover of a dead process of
        the same worker goes first)."""
        with self._lock:
            if self._made and self.path.exists():
                return self
            self._remove_leftovers()
            _ip("netns", "add", self.name)
            self._made = True
            atexit.register(self.close)
            try:
                _ip(
                    "link", "add", self.host_device, "type", "veth",
                    "peer", "name", INSIDE_DEVICE, "netns", self.name,
                )  # fmt: skip
                _ip(
                    "addr",
                    "add",
                    f"{self.gateway}/{self.subnet.prefixlen}",
                    "dev",
                    self.host_device,
                )
                _ip("link", "set", self.host_device, "up")
                inside = ("-n", self.name)
                _ip(*inside, "link", "set", "lo", "up")
                _ip(*inside, "link", "set", INSIDE_DEVICE, "up")
                _ip(*inside, "route", "add", str(self.subnet), "dev", INSIDE_DEVICE)
                _ip(*inside, "route", "add", "default", "via", self.gateway, "dev", INSIDE_DEVICE)
            except PodNetworkError:
                self._delete()
                raise
        return self

    def close(self) -> None:
        """Delete the namespace (and with it the veth pair). Processes still inside keep
        the namespace alive, unnamed, until they exit."""
        with self._lock:
            if self._made:
                self._delete()

    def _delete(self) -> None:
        _ip("netns", "del", self.name, ok=("No such file", "Invalid argument"))
        _ip("link", "del", self.host_device, ok=("Cannot find device",))
        self._made = False

    def _remove_leftovers(self) -> None:
        pattern = re.compile(rf"^{PREFIX}-{re.escape(self.worker)}-(\d+)\b")
        for line in _ip("netns", "list").splitlines():
            found = pattern.match(line.strip())
            if not found or int(found.group(1)) == os.getpid():
                continue
            name = line.split()[0]
            if _alive(int(found.group(1))):
                raise PodNetworkError(
                    f"network namespace {name} of a running process holds {self.subnet}: "
                    f"two test processes of worker {self.worker} cannot share it"
                )
            _ip("netns", "del", name, ok=("No such file",))
            _ip(
                "link",
                "del",
                f"mp{self.subnet.network_address.packed[2]}h{found.group(1)}",
                ok=("Cannot find device",),
            )
        # The box before this namespace assigned pod addresses to the host's lo.
        for line in _ip("-o", "-4", "addr", "show", "dev", "lo").splitlines():
            fields = line.split()
            address = fields[fields.index("inet") + 1] if "inet" in fields else ""
            if address and ipaddress.IPv4Interface(address).ip in self.subnet:
                _ip("addr", "del", address, "dev", "lo", ok=("Cannot assign",))

    # --- addresses -------------------------------------------------------------------

    def pod_address(self, action: str, address: str) -> None:
        """Add or remove a pod's address (a /32 on the namespace's eth0)."""
        self._address(action, address, ("-n", self.name), INSIDE_DEVICE)

    def host_address(self, action: str, address: str) -> None:
        """Add or remove a host-side address (a /32 on the host end of the pair)."""
        self._address(action, address, (), self.host_device)

    def _address(self, action: str, address: str, where: tuple[str, ...], device: str) -> None:
        if ipaddress.IPv4Address(address) not in self.subnet:
            raise PodNetworkError(f"{address} is not in the pod network {self.subnet}")
        if action == "add":
            self.ensure()
        elif not self._made:
            return
        benign = ("File exists",) if action == "add" else ("Cannot assign", "Cannot find device")
        _ip(*where, "addr", action, f"{address}/32", "dev", device, ok=benign)


def _process_network() -> PodNetwork:
    """198.18.0.0/24, or under pytest-xdist 198.18.<1 + worker>.0/24."""
    index, count = xdist_worker()
    if count == 1:
        return PodNetwork(0, "main")
    return PodNetwork(1 + index, f"gw{index}")


# Shared by every runner (and every member's CoreDNS) in this process.
POD_NETWORK = _process_network()


def in_pod_network(command: list[str], network: PodNetwork | None) -> list[str]:
    """`command` run inside `network` (nsenter), or as it is without one."""
    if network is None:
        return command
    return ["nsenter", f"--net={network.path}", *command]


__all__ = ["POD_NETWORK", "PodNetwork", "PodNetworkError", "in_pod_network"]
