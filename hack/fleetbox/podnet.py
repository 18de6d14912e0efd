"""The pod network of the box's real pods that resolve through cluster DNS: a network
namespace the box makes itself, joined to the host by one veth pair.

The API server refuses a loopback address in an EndpointSlice, so a pod that a Service
(and so cluster DNS) must name needs an address outside 127.0.0.0/8. Test traffic goes
only to loopback or to addresses inside a network namespace the test run made itself:
those addresses never sit on an interface of the host's own (root) namespace. So:

- one named namespace per test process (`modelplane-<worker>-<pid>`, the worker being
  pytest-xdist's or `main`), made on first use and deleted at exit. Under a host-wide
  lock, the namespaces and veth ends of processes that are gone are deleted first (and
  pod addresses the box before this namespace left on the host's `lo`), then the
  process takes its subnet: 198.18.<n>.0/24 (RFC 2544's never-routed benchmarking
  range), n = 0 or 1 + the xdist worker, or while a running process holds that one
  (its veth end `mp<n>h<pid>` says so) the first free n from 64 up;
- a veth pair: its end inside (`eth0`) holds the pods' addresses, each a /32 added
  while a pod holds it (198.18.<n>.100..250); its host end holds the gateway
  198.18.<n>.1/24, the only route to them, and the host-side service addresses
  198.18.<n>.2..99 (/32: a member's CoreDNS listens on one, since a resolv.conf names
  a nameserver by address and the pods cannot reach the host's loopback; the KEDA
  adapter the aggregation layer dials, runtime.py, on another);
- inside: `lo` up, the namespace's own address 198.18.<n>.254/32 on eth0 (the source
  of what is sent to the host end, pod or no pod), the /24 on eth0 and a default route
  via the gateway (the host does
  not forward, ip_forward is left as it is: a pod reaches its peers in the namespace,
  the gateway's addresses, and nothing beyond);
- the pod runner starts a pod's processes inside (setns, in the child before exec);
  host processes (probes, the tests' clients, collectors) reach a pod by its address
  through the veth pair.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), as the runner's mount namespaces do.
"""

from __future__ import annotations

import atexit
import fcntl
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
# The namespace's own address on eth0, held while it exists: the source of what a
# process inside sends to the host end when no pod's address is there (the box's
# resolver checks run there with no pod running).
NAMESPACE_HOST = 254
LOCK_FILE = Path("/tmp/modelplane-podnet.lock")
# What the box before this namespace put on the host's lo, removed where found.
LEFTOVER_RANGE = ipaddress.IPv4Network("198.18.0.0/15")


class PodNetworkError(RuntimeError):
    pass


def _ip(*args: str, ok: tuple[str, ...] = ()) -> str:
    """`ip ARGS`; an error whose answer holds one of `ok` is fine, any other raises
    naming the command and its answer."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0 and not any(o in done.stderr for o in ok):
        raise PodNetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _remove_leftovers() -> set[int]:
    """Delete the namespaces and host ends of processes that are gone (and pod
    addresses the box before this namespace put on the host's `lo`); the subnets
    (third octets) running processes hold."""
    for line in _ip("netns", "list").splitlines():
        found = re.match(rf"^({PREFIX}-\S+-(\d+))\b", line.strip())
        if found and not _alive(int(found.group(2))):
            _ip("netns", "del", found.group(1), ok=("No such file",))
    taken = set()
    for line in _ip("-o", "link", "show").splitlines():
        found = re.match(r"^\d+:\s+mp(\d+)h(\d+)\b", line)
        if not found:
            continue
        if _alive(int(found.group(2))):
            taken.add(int(found.group(1)))
        else:
            _ip("link", "del", f"mp{found.group(1)}h{found.group(2)}", ok=("Cannot find",))
    for line in _ip("-o", "-4", "addr", "show", "dev", "lo").splitlines():
        fields = line.split()
        address = fields[fields.index("inet") + 1] if "inet" in fields else ""
        if address and ipaddress.IPv4Interface(address).ip in LEFTOVER_RANGE:
            _ip("addr", "del", address, "dev", "lo", ok=("Cannot assign",))
    return taken


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PodNetwork:
    """One test process's pod namespace (see the module's docstring). `worker` names the
    process's share (xdist); `preferred` is the third octet of the 198.18.x.0/24 it
    takes unless a running process holds that one (then the first free from 64 up)."""

    def __init__(self, worker: str, preferred: int) -> None:
        if not 0 <= preferred <= 255:
            raise ValueError(f"subnet index must be 0..255: {preferred}")
        self.worker = worker
        self.preferred = preferred
        self.name = f"{PREFIX}-{worker}-{os.getpid()}"
        self._subnet: ipaddress.IPv4Network | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The namespace's file, which `nsenter --net=` and setns take."""
        return NETNS_DIR / self.name

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return self.ensure()._subnet

    @property
    def gateway(self) -> str:
        return str(self.subnet[GATEWAY_HOST])

    @property
    def host_device(self) -> str:
        """The host end's name: the subnet and the pid (so unique on the host, and what
        another process reads to know the subnet taken), at most 15 characters."""
        return f"mp{self.subnet.network_address.packed[2]}h{os.getpid()}"

    # --- lifecycle -------------------------------------------------------------------

    def ensure(self) -> PodNetwork:
        """Make the namespace and the veth pair, once: under a host-wide lock, the
        leftovers of dead processes go first, then the first free subnet is taken."""
        with self._lock:
            if self._subnet is not None:
                return self
            with LOCK_FILE.open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                taken = _remove_leftovers()
                index = next((n for n in (self.preferred, *range(64, 256)) if n not in taken), None)
                if index is None:
                    raise PodNetworkError(f"no free 198.18.x.0/24 for a pod network: {taken}")
                subnet = ipaddress.IPv4Network(f"198.18.{index}.0/24")
                self._make(subnet)
                self._subnet = subnet
        atexit.register(self.close)
        return self

    def _make(self, subnet: ipaddress.IPv4Network) -> None:
        gateway = str(subnet[GATEWAY_HOST])
        host_device = f"mp{subnet.network_address.packed[2]}h{os.getpid()}"
        _ip("netns", "add", self.name)
        try:
            _ip(
                "link", "add", host_device, "type", "veth",
                "peer", "name", INSIDE_DEVICE, "netns", self.name,
            )  # fmt: skip
            _ip("addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", host_device)
            _ip("link", "set", host_device, "up")
            inside = ("-n", self.name)
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "link", "set", INSIDE_DEVICE, "up")
            own = str(subnet[NAMESPACE_HOST])
            _ip(*inside, "addr", "add", f"{own}/32", "dev", INSIDE_DEVICE)
            _ip(*inside, "route", "add", str(subnet), "dev", INSIDE_DEVICE, "src", own)
            _ip(*inside, "route", "add", "default", "via", gateway, "dev", INSIDE_DEVICE)
        except PodNetworkError:
            _ip("netns", "del", self.name, ok=("No such file", "Invalid argument"))
            _ip("link", "del", host_device, ok=("Cannot find device",))
            raise

    def close(self) -> None:
        """Delete the namespace (and with it the veth pair). Processes still inside keep
        the namespace alive, unnamed, until they exit."""
        with self._lock:
            if self._subnet is None:
                return
            host_device = f"mp{self._subnet.network_address.packed[2]}h{os.getpid()}"
            _ip("netns", "del", self.name, ok=("No such file", "Invalid argument"))
            _ip("link", "del", host_device, ok=("Cannot find device",))
            self._subnet = None

    # --- addresses -------------------------------------------------------------------

    def pod_address(self, action: str, address: str) -> None:
        """Add or remove a pod's address (a /32 on the namespace's eth0)."""
        self._address(action, address, inside=True)

    def host_address(self, action: str, address: str) -> None:
        """Add or remove a host-side address (a /32 on the host end of the pair)."""
        self._address(action, address, inside=False)

    def _address(self, action: str, address: str, *, inside: bool) -> None:
        if action != "add" and self._subnet is None:
            return
        if ipaddress.IPv4Address(address) not in self.subnet:
            raise PodNetworkError(f"{address} is not in the pod network {self.subnet}")
        where, device = (("-n", self.name), INSIDE_DEVICE) if inside else ((), self.host_device)
        benign = ("File exists",) if action == "add" else ("Cannot assign", "Cannot find device")
        _ip(*where, "addr", action, f"{address}/32", "dev", device, ok=benign)


def _process_network() -> PodNetwork:
    """198.18.0.0/24, or under pytest-xdist 198.18.<1 + worker>.0/24."""
    index, count = xdist_worker()
    if count == 1:
        return PodNetwork("main", 0)
    return PodNetwork(f"gw{index}", 1 + index)


# Shared by every runner (and every member's CoreDNS) in this process.
POD_NETWORK = _process_network()


def in_pod_network(command: list[str], network: PodNetwork | None) -> list[str]:
    """`command` run inside `network` (nsenter), or as it is without one."""
    if network is None:
        return command
    return ["nsenter", f"--net={network.path}", *command]


__all__ = ["POD_NETWORK", "PodNetwork", "PodNetworkError", "in_pod_network"]
