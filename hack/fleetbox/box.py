"""FleetBox: the fleet box as one object that starts its parts in order and stops them.

The order is the one a platform team would follow: every cluster's API server, their
controller managers, the control plane's CRDs, each member's substrate, the GPU members'
nodes and scheduler (gpu.py), then our functions, Crossplane core, provider-kubernetes,
the members' connections and our APIs (control_plane.py). A part that fails stops the
whole box and says why. The runtime (runtime.py) is started on a running box by whoever
wants it.

A process that did not start the box reaches it through the state the box saves
(`save_state`, a JSON file naming its folder, tools and kubeconfigs): `FleetBox.attach`
reads it back as `Clusters`, which reads and applies but starts and stops nothing.
`make fleet`'s supervisor saves it once the box and its runtime are up; `up` and
`status` attach to it.

Every process is started in its own process group and dies with the process that
started it (process.py); `close()` stops them all and removes the box's folder. `make
fleet` keeps a box running in a detached supervisor (cli.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from fleetbox import control_plane
from fleetbox.certificates import Certificates
from fleetbox.clusters import CONTROL_PLANE, Clusters
from fleetbox.control_plane import FunctionServer
from fleetbox.gpu import REQUIRED_TOOLS as GPU_TOOLS
from fleetbox.gpu import equip, install_drivers
from fleetbox.members import (
    EXAMPLE_MEMBERS,
    install_substrate,
    start_api_servers,
    start_controller_managers,
)
from fleetbox.podrunner import PodRunner
from fleetbox.serving import REQUIRED_TOOLS as REAL_TOOLS
from fleetbox.serving import serve_for_real
from fleetbox.wait import FleetBoxError
from render import tools_bin
from tests.runtime.cluster import Member

REQUIRED_TOOLS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "crossplane-core",
    "provider-kubernetes",
    "schemas",
)
# What `save_state` writes into the folder it is given, and `attach` reads.
STATE_FILE = "fleetbox.json"


def missing_tools(gpu: bool = False, real: bool = False) -> list[str]:
    """The tools a box needs that are not installed (with a GPU member's, if `gpu`, and
    a member's that serves for real, if `real`)."""
    wanted = (*REQUIRED_TOOLS, *(GPU_TOOLS if gpu or real else ()), *(REAL_TOOLS if real else ()))
    return [name for name in wanted if not (tools_bin() / name).exists()]


class FleetBox(Clusters):
    """The control plane, its members and every process that makes them a fleet."""

    def __init__(
        self,
        members: Iterable[str] = EXAMPLE_MEMBERS,
        root: Path | None = None,
        gpu: Iterable[str] = (),
        real: Iterable[str] = (),
        provider_watches: bool = True,
    ) -> None:
        """`gpu`: members that schedule and run pods on KWOK GPU nodes (gpu.py). `real`:
        GPU members that also run the LeaderWorkerSet controller and start the pods
        labelled to run for real as local processes (serving.py)."""
        bin_dir = tools_bin()
        self.gpu = tuple(gpu)
        self.real = tuple(real)
        self.provider_watches = provider_watches
        if set(self.real) - set(self.gpu):
            raise FleetBoxError(
                f"real={sorted(set(self.real) - set(self.gpu))}: only GPU members (gpu=...) "
                "schedule pods to run for real"
            )
        missing = missing_tools(gpu=bool(self.gpu), real=bool(self.real))
        if missing:
            raise FleetBoxError(
                f"missing tools {', '.join(missing)} in {bin_dir}: run 'bash hack/tools.sh'"
            )
        root = root or Path(tempfile.mkdtemp(prefix="modelplane-fleetbox-"))
        root.mkdir(parents=True, exist_ok=True)
        etcd, apiserver = bin_dir / "etcd", bin_dir / "kube-apiserver"
        super().__init__(
            bin_dir,
            root,
            Member(CONTROL_PLANE, root / CONTROL_PLANE, etcd, apiserver),
            {name: Member(name, root / name, etcd, apiserver) for name in members},
        )
        self.functions: dict[str, FunctionServer] = {}
        self.timings: dict[str, float] = {}
        self.runners: dict[str, PodRunner] = {}

    def start(self) -> FleetBox:
        began = time.monotonic()
        try:
            start_api_servers(self)
            self.timings["api_servers"] = time.monotonic() - began
            start_controller_managers(self, self.gpu)
            control_plane.install_crds(self)
            install_substrate(self)
            for name in self.gpu:
                equip(self, name)
            for name in self.members:
                if name not in self.gpu:
                    install_drivers(self, name)
            self.certs = Certificates(self.root / "pki")
            self.core_client_certs = self.certs.pair("crossplane-core", None, "clientAuth")
            self.functions = control_plane.start_functions(self, self.certs)
            self.package_refs = control_plane.start_crossplane(
                self, self.certs, self.core_client_certs, self.functions
            )
            control_plane.start_provider_kubernetes(self, self.certs, self.provider_watches)
            control_plane.connect_members(self, self.certs)
            control_plane.install_apis(self)
            for name in self.real:
                self.serve_for_real(name)
        except BaseException:
            self.close()
            raise
        self.timings["start"] = time.monotonic() - began
        return self

    def serve_for_real(self, member: str) -> PodRunner:
        """Run `member`'s LeaderWorkerSet controller and pod runner (serving.py), on a
        started box too: a test that needs real engines turns them on for itself."""
        if member not in self.gpu:
            raise FleetBoxError(f"{member} is not a GPU member: it cannot serve for real")
        if member not in self.runners:
            missing = [t for t in REAL_TOOLS if not (self.bin / t).exists()]
            if missing:
                raise FleetBoxError(
                    f"missing tools {', '.join(missing)} in {self.bin}: run "
                    "'bash hack/tools.sh lws vllm coredns'"
                )
            began = time.monotonic()
            self.runners[member] = serve_for_real(self, member, self.certs)
            self.timings[f"real_{member}"] = time.monotonic() - began
        return self.runners[member]

    def wait_function(self, server: FunctionServer) -> None:
        """Until a function (restarted, say) listens again."""
        control_plane.wait_function(server)

    def point_functions(self) -> None:
        """Point every active FunctionRevision at our servers again (after core restarts)."""
        control_plane.point_functions(self, self.functions)

    def apply_examples(self) -> None:
        self.apply(CONTROL_PLANE, control_plane.example_paths())

    def save_state(self, state_dir: Path) -> Path:
        """Write what `attach` needs to reach this running box from another process: its
        folder, the tools' folder, the members and every cluster's kubeconfig. Written
        whole or not at all, so a process polling for the file never reads half of it."""
        state = {
            "root": str(self.root),
            "bin": str(self.bin),
            "members": list(self.members),
            "kubeconfigs": {name: str(path) for name, path in self.kubeconfigs.items()},
            "start_seconds": round(self.timings["start"], 1),
        }
        path = Path(state_dir) / STATE_FILE
        partial = path.with_name(f".{STATE_FILE}.partial")
        partial.write_text(json.dumps(state, indent=2) + "\n")
        partial.replace(path)
        return path

    @staticmethod
    def read_state(state_dir: Path) -> dict:
        """What `save_state` wrote into `state_dir` (FileNotFoundError: no box saved one)."""
        return json.loads((Path(state_dir) / STATE_FILE).read_text())

    @classmethod
    def attach(cls, state_dir: Path) -> Clusters:
        """The clusters of a box another process started and saved to `state_dir`, to
        read, apply and run kubectl against. Not a FleetBox: it starts, restarts and
        stops nothing; the box stays its starter's to stop."""
        state = cls.read_state(state_dir)
        bin_dir, root = Path(state["bin"]), Path(state["root"])
        kubeconfigs = {name: Path(path) for name, path in state["kubeconfigs"].items()}

        def running(name: str) -> Member:
            # The API server's port and admin token, from the kubeconfig the box wrote
            # for it; its CA stays in the member's folder (Member.ca_file).
            config = yaml.safe_load(kubeconfigs[name].read_text())
            server = urlsplit(config["clusters"][0]["cluster"]["server"])
            return Member(
                name,
                root / name,
                bin_dir / "etcd",
                bin_dir / "kube-apiserver",
                token=config["users"][0]["user"]["token"],
                api_port=server.port,
            )

        return Clusters(
            bin_dir,
            root,
            running(CONTROL_PLANE),
            {name: running(name) for name in state["members"]},
            kubeconfigs,
        )

    def close(self) -> None:
        for runner in self.runners.values():
            with contextlib.suppress(Exception):
                runner.stop()
        for process in reversed(list(self.processes.values())):
            with contextlib.suppress(Exception):
                process.stop(grace=5)
        for cluster in self.all_clusters:
            with contextlib.suppress(Exception):
                cluster.close()
        if not os.environ.get("MODELPLANE_KEEP_FLEETBOX"):
            shutil.rmtree(self.root, ignore_errors=True)


__all__ = ["REQUIRED_TOOLS", "STATE_FILE", "FleetBox", "missing_tools"]
