"""Serving for real on chosen members: the LeaderWorkerSet controller and a pod runner.

A GPU member (gpu.py) binds pods to KWOK nodes, and KWOK plays every pod's kubelet. On a
member that serves for real (`FleetBox(..., real=[names])`, or `serve_for_real(box,
name)` on a running box), two more parts run:

- the LeaderWorkerSet controller v0.8.0 (lws.py), its webhooks served on loopback by URL
  with a serving certificate of the box's CA, so a LeaderWorkerSet becomes leader and
  worker StatefulSets and pods with the controller's own labels, env and ordering (the
  member's controller manager runs the statefulset controller: gpu.CONTROLLERS);
- the member's cluster DNS (dns.py): CoreDNS v1.15.0 with its kubernetes plugin reading
  the member's API server, on a host-side address of the pods' network (podnet.py),
  port 53;
- a pod runner (podrunner.py) for the pods labelled `modelplane.test/run: real`: it
  starts their containers as local processes, the way the kubelet would, from the pod
  spec the member's API server holds, each with the resolv.conf the kubelet writes
  naming that CoreDNS (so a worker finds its leader by the record the LeaderWorkerSet's
  headless Service makes, and by nothing else). KWOK's Stages skip those pods
  (`podrunner.skip_real_pods`, applied on every GPU member: without the label nothing
  changes). Every other pod stays a KWOK pod.

CoreDNS runs only on members that serve for real: its only clients are the pods the
runner starts (KWOK's pods resolve nothing, and the box's host processes reach Services
through service_proxy.py).

The image table (`images`) maps the engine image the examples pin
(`vllm/vllm-openai:v0.32.0`, engines.CHECKED_IMAGES) to the vLLM CPU build of the same
version in the tool cache (hack/tools/vllm.sh): the image's entrypoint `vllm serve`
becomes that virtualenv's `vllm serve`, through a two-line launcher (`LAUNCHER`) that
gives vLLM the pod's address as its host address (`VLLM_HOST_IP`), which a container
finds as its only interface's and a process on this host does not.

Where the model comes from (the least-magic mapping): the deployment names the tiny
model as a Hugging Face repository, `hf://modelplane/tiny-llama` (`TINY_MODEL_URI`), and
compose-model-replica passes the engine its id (`modelplane/tiny-llama`) as it would for
any Hugging Face model. The image's environment points the Hugging Face hub's cache
(`HF_HUB_CACHE`) at a cache the box lays out once, holding the tiny model made by
hack/tools/vllm/tiny_model.py under that id, and sets `HF_HUB_OFFLINE=1`: the engine
resolves the id from the cache as an image with baked-in weights would, and nothing is
downloaded. Our composed pod spec is served as rendered; nothing in it is rewritten.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kubernetes import client

from fleetbox.clusters import Clusters
from fleetbox.dns import ClusterDns
from fleetbox.kubelet_rules import Image
from fleetbox.lws import GROUP, PLURAL, VERSION, LwsController
from fleetbox.podrunner import CLUSTER_HOST_ADDRESSES, CLUSTER_POD_ADDRESSES, PodRunner
from fleetbox.process import Process
from functions.compose_model_replica.engines import CHECKED_IMAGES

VLLM_IMAGE = CHECKED_IMAGES["vllm"]
VLLM_VERSION = VLLM_IMAGE.rsplit(":v", 1)[1]
TINY_MODEL_REPO = "modelplane/tiny-llama"
TINY_MODEL_URI = f"hf://{TINY_MODEL_REPO}"
# The tools a member that serves for real needs besides a GPU member's.
REQUIRED_TOOLS = ("lws-controller", "vllm", "coredns")
# Where a pod's mounts may create their mount points on this host (podrunner.py): the
# projected service-account token and the default termination-message path.
MOUNT_POINT_ROOTS = ("/var/run/secrets/kubernetes.io", "/dev/termination-log")
# The engine's environment, as the image would set it beside the weights: no hub, a KV
# cache that fits this machine (GiB), no usage reports.
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
DEFAULTED_ANNOTATION = "fleetbox.modelplane.ai/lws-defaulted"
LAUNCHER = """#!/bin/sh
# The pod's address is the container's only interface's: vLLM's host address.
export VLLM_HOST_IP="${VLLM_HOST_IP:-$PODRUNNER_POD_IP}"
exec "%s" "$@"
"""


def vllm_venv(bin_dir: Path) -> Path:
    return bin_dir.parent / f"vllm-cpu-{VLLM_VERSION}" / "venv"


def tiny_model(bin_dir: Path) -> Path:
    return bin_dir.parent / "tiny-model"


def hub_cache(root: Path, model: Path, repo: str = TINY_MODEL_REPO) -> Path:
    """A Hugging Face hub cache (the layout `huggingface_hub` reads offline) holding
    `model`'s files as `repo` at one revision, named by the model's checksums; the
    cache's folder (HF_HUB_CACHE)."""
    cache = root / "hf-hub"
    sums = model / "SHA256SUMS"
    revision = hashlib.sha1(sums.read_bytes()).hexdigest()
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in sorted(model.iterdir()):
        link = snapshot / path.name
        if path.is_file() and not link.exists():
            link.symlink_to(path.resolve())
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return cache


def images(bin_dir: Path, root: Path) -> dict[str, Image]:
    """The image table of the box's pod runners: the pinned vLLM image → the local
    engine of the same version, with the tiny model in its hub cache."""
    launcher = root / "vllm-entrypoint"
    launcher.write_text(LAUNCHER % (vllm_venv(bin_dir) / "bin" / "vllm"))
    launcher.chmod(0o755)
    cache = hub_cache(root, tiny_model(bin_dir))
    return {
        VLLM_IMAGE: Image(
            entrypoint=(str(launcher), "serve"),
            env={**VLLM_ENV, "HF_HUB_CACHE": str(cache)},
        )
    }


def default_existing(api) -> None:
    """LeaderWorkerSets created before the controller's webhooks (the examples, on a box
    that turns real serving on later) lack the defaults its mutating webhook sets (the
    rollout strategy), and the controller panics on them. An update goes through the
    webhook (it mutates on UPDATE too): one annotation, as an upgrade would default
    them."""
    custom = client.CustomObjectsApi(api)
    for found in custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        metadata = found["metadata"]
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            metadata["namespace"],
            PLURAL,
            metadata["name"],
            {"metadata": {"annotations": {DEFAULTED_ANNOTATION: "true"}}},
        )


def serve_for_real(box: Clusters, member: str, certs) -> PodRunner:
    """Start `member`'s LeaderWorkerSet controller (installed, ready for a
    LeaderWorkerSet), its CoreDNS (ready) and its pod runner; the runner, which the
    caller stops."""
    cluster = box.members[member]
    serving_certs = certs.pair(f"lws-webhook-{member}", "127.0.0.1", "serverAuth")
    lws = LwsController(
        box.kubeconfigs[member], serving_certs, cluster.workdir / "lws", name=f"lws-{member}"
    )
    api = box.api(member)
    try:
        lws.install(api)
        process = box.start_process(Process(f"lws-controller-{member}", lws.command(), lws.log))
        lws.wait_ready(api, alive=process.running)
        default_existing(api)
    finally:
        api.close()
    dns = ClusterDns(
        box.bin / "coredns",
        box.kubeconfigs[member],
        cluster.workdir / "coredns",
        CLUSTER_HOST_ADDRESSES.allocate(f"coredns/{member}"),
        CLUSTER_POD_ADDRESSES.netns,
    )
    process = box.start_process(Process(f"coredns-{member}", dns.command(), dns.log))
    dns.wait_ready(process.running)
    box.dns[member] = dns
    root = box.root / "real"
    root.mkdir(exist_ok=True)
    runner = PodRunner(
        box.api(member),
        None,
        images(box.bin, root),
        cluster.workdir / "pods",
        mount_point_roots=MOUNT_POINT_ROOTS,
        nameserver=dns.address,
        # Pod IPs an EndpointSlice may hold (not loopback), so CoreDNS can name the pods.
        addresses=CLUSTER_POD_ADDRESSES,
    )
    return runner.start()


def engine_rss(pids: list[int]) -> int:
    """The resident memory of `pids` and all their descendants, in bytes (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, stack, seen = 0, list(pids), set()
    page = os.sysconf("SC_PAGE_SIZE")
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except OSError:
            continue
        stack += children.get(pid, [])
    return total


__all__ = [
    "REQUIRED_TOOLS",
    "TINY_MODEL_REPO",
    "TINY_MODEL_URI",
    "VLLM_IMAGE",
    "engine_rss",
    "hub_cache",
    "images",
    "serve_for_real",
]
