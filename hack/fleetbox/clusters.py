"""The box's clusters as a caller talks to them: the control plane's API server and the
members', through the real kubectl (at the API servers' release) or a Kubernetes client,
and the processes running against them.

This is all a caller needs of a running box, whoever started it: the e2e tests and
`make fleet`'s summary use nothing else, and `FleetBox.attach` hands one of these to a
process that did not start the box. Starting and stopping the clusters is box.py's.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

from kubernetes import client

from fleetbox.process import Process
from fleetbox.wait import FleetBoxError, wait_for
from tests.ports import free_port
from tests.runtime.cluster import Member

CONTROL_PLANE = "control-plane"


class Clusters:
    """The control plane (`"control-plane"`) and the members, by name: their kubeconfigs,
    the tools' folder, and the processes of the box by name."""

    def __init__(
        self,
        bin_dir: Path,
        root: Path,
        control: Member,
        members: dict[str, Member],
        kubeconfigs: dict[str, Path] | None = None,
    ) -> None:
        self.bin = bin_dir
        self.root = root
        self.control = control
        self.members = members
        self.kubeconfigs: dict[str, Path] = dict(kubeconfigs or {})
        self.processes: dict[str, Process] = {}
        # Each member's cluster DNS, where one runs (serving.py: members that serve for real).
        self.dns: dict = {}
        # Crossplane core's metrics port, once it runs (control_plane.start_crossplane).
        self.core_metrics_port: int | None = None

    @property
    def all_clusters(self) -> list[Member]:
        """The control plane first, then the members."""
        return [self.control, *self.members.values()]

    def api(self, cluster: str = CONTROL_PLANE) -> client.ApiClient:
        member = self.control if cluster == CONTROL_PLANE else self.members[cluster]
        return member.client()

    def kubectl(
        self, cluster: str, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        """The real kubectl against one cluster of the box."""
        result = subprocess.run(  # noqa: PLW1510 - the caller decides (check=...)
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfigs[cluster]}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise FleetBoxError(f"kubectl {' '.join(args)} on {cluster}: {result.stderr.strip()}")
        return result

    def apply(self, cluster: str, paths: Iterable[Path]) -> None:
        args = ["apply"]
        for path in paths:
            args += ["-f", str(path)]
        self.kubectl(cluster, *args)

    def get(self, cluster: str, resource: str, namespace: str | None = None) -> list[dict]:
        args = ["get", resource, "-o", "json"]
        args += ["-n", namespace] if namespace else ["-A"]
        result = self.kubectl(cluster, *args, check=False)
        if result.returncode != 0:
            return []
        return json.loads(result.stdout)["items"]

    def wait_crds_established(self, cluster: str) -> None:
        def established() -> bool:
            out = self.kubectl(cluster, "get", "crd", "-o", "json").stdout
            items = json.loads(out)["items"]
            pending = [
                c["metadata"]["name"]
                for c in items
                if not any(
                    x["type"] == "Established" and x["status"] == "True"
                    for x in c.get("status", {}).get("conditions", [])
                )
            ]
            return not pending

        wait_for(f"CRDs established on {cluster}", established)

    def start_process(self, process: Process) -> Process:
        """Start a process of the box and keep it by name (`close()` stops it)."""
        process.start()
        self.processes[process.name] = process
        return process

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail()}" for p in self.processes.values())


def component_flags(kubeconfig: Path, cert_dir: Path) -> list[str]:
    """How a control-plane component (controller manager, scheduler) runs out of cluster
    against one API server: its kubeconfig for everything, one instance, its own port."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
        f"--cert-dir={cert_dir}",
    ]


__all__ = ["CONTROL_PLANE", "Clusters", "component_flags"]
