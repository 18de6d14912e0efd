"""Cluster DNS for a member whose pods run for real: CoreDNS with its kubernetes plugin.

In a cluster, CoreDNS runs as a Deployment behind the `kube-dns` Service and the kubelet
writes every pod a resolv.conf naming that Service's address. Out of cluster (the fleet
box) the same binary (hack/tools/coredns.sh) runs as a process beside the member:

- its kubernetes plugin reads the member's API server through the member's kubeconfig
  (Services, EndpointSlices, Namespaces; `pods insecure` as kubeadm configures it) and
  answers `cluster.local` from what the API server holds: a Service's name with its
  ClusterIP, a headless Service's name with its endpoints, and a pod that names a
  headless Service as its subdomain by `<hostname>.<subdomain>.<namespace>.svc` — the
  record LeaderWorkerSet's leader address and Grove's pod names rely on. The
  EndpointSlices come from the member's own endpointslice controller
  (gpu.CONTROLLERS) over the pod IPs the pod runner (or KWOK) writes;
- everything else goes to the host's resolver (`forward . /etc/resolv.conf`);
- it listens on port 53 of a host-side address of the pods' network (podnet.py: the
  host end of the veth pair to the network namespace the pods run in,
  podrunner.CLUSTER_HOST_ADDRESSES), because a resolv.conf names a nameserver by
  address only and the pods cannot reach the host's loopback; it stays on the host,
  reading its API server on loopback. A port below 1024 needs root, as the runner's
  namespaces already do. The pods it names have addresses an EndpointSlice may hold
  (podrunner.CLUSTER_POD_ADDRESSES, inside that namespace: the API server refuses
  loopback endpoints);
- ready means its `ready` plugin answers 200: the kubernetes plugin has synced.

Not done (a cluster does): the `kube-dns` Service itself, caching (answers follow the API
server within the plugin's 5 s TTL), reverse zones for the Service range.

No kube-proxy runs in the box: a Service name resolves to its ClusterIP, which nothing
routes here. The box's own host processes (KEDA, the agent) reach the few Services
they need through service_proxy.py, not through this DNS; real pods reach their peers
by pod records (hostname.subdomain), which resolve to pod IPs the runner listens on.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.ports import free_port

BINARY = "coredns"
CLUSTER_DOMAIN = "cluster.local"
DNS_PORT = 53
READY_TIMEOUT = 60.0
POLL_SECONDS = 0.1


class ClusterDnsError(RuntimeError):
    pass


def corefile(address: str, kubeconfig: Path, ready_port: int) -> str:
    """The member's Corefile: the kubernetes plugin for the cluster domain and the
    reverse zones, the host's resolver for the rest."""
    return f"""\
.:{DNS_PORT} {{
    bind {address}
    errors
    ready {address}:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
}}
"""


def resolv_conf(nameserver: str, namespace: str, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """What the kubelet writes a ClusterFirst pod (pkg/kubelet/network/dns): the
    cluster's nameserver, the pod's namespace first in the search path, ndots 5."""
    search = f"{namespace}.svc.{cluster_domain} svc.{cluster_domain} {cluster_domain}"
    return f"search {search}\nnameserver {nameserver}\noptions ndots:5\n"


class ClusterDns:
    """One member's CoreDNS: `command()` to run, `wait_ready()` after it starts."""

    def __init__(
        self,
        binary: Path,
        kubeconfig: Path,
        workdir: Path,
        address: str,
        netns: Path | None = None,
    ) -> None:
        """`netns`: the network namespace its clients (the pods) run in, which
        `resolve` resolves from; None: the host's."""
        self.binary = binary
        self.netns = netns
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.address = address
        self.ready_port = free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = self.workdir / "Corefile"
        self.config.write_text(corefile(address, kubeconfig, self.ready_port))
        self.log = self.workdir / "coredns.log"

    def command(self) -> list[str]:
        return [str(self.binary), "-conf", str(self.config)]

    def wait_ready(self, alive, timeout: float = READY_TIMEOUT) -> float:
        """Until the ready plugin answers 200 (the kubernetes plugin has synced with
        the API server); the seconds it took. `alive` says whether the process runs."""
        began = time.monotonic()
        url = f"http://{self.address}:{self.ready_port}/ready"
        last = ""
        while time.monotonic() - began < timeout:
            if not alive():
                raise ClusterDnsError(f"coredns for {self.kubeconfig} exited\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return time.monotonic() - began
            except (urllib.error.URLError, OSError) as error:
                last = str(error)
            time.sleep(POLL_SECONDS)
        raise ClusterDnsError(f"coredns not ready after {timeout} s ({last})\n{self.tail()}")

    def resolve(self, name: str, namespace: str) -> list[str]:
        """The IPv4 addresses `name` resolves to for a pod in `namespace`, through the
        system resolver reading the resolv.conf the pod runner gives such a pod (in a
        private mount namespace, in the pods' network namespace, as the pod's processes
        see it); [] when it does not resolve."""
        conf = self.workdir / f"resolv-{namespace}.conf"
        conf.write_text(resolv_conf(self.address, namespace))
        network = ["nsenter", f"--net={self.netns}"] if self.netns is not None else []
        found = subprocess.run(
            [
                *network,
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                'mount --bind "$0" /etc/resolv.conf && exec getent ahostsv4 "$1"',
                str(conf),
                name,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return sorted({line.split()[0] for line in found.stdout.splitlines() if line.strip()})

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


__all__ = ["CLUSTER_DOMAIN", "ClusterDns", "ClusterDnsError", "corefile", "resolv_conf"]
