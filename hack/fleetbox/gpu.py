"""Fleet-box members that look like GPU clusters: a real kube-scheduler binds pods to
KWOK nodes by allocating DRA devices, and KWOK plays the kubelet.

Per GPU member (opt-in: `FleetBox(..., gpu=[names])`):
- kube-controller-manager runs, beyond part 1's garbage collector and namespaces, the
  controllers a workload needs to get pods: serviceaccount (the admission plugin wants
  each namespace's `default` ServiceAccount), deployment, replicaset, resourceclaim (a
  ResourceClaim per pod from its ResourceClaimTemplate) and horizontalpodautoscaling
  (KEDA's HPAs, issue #13).
- kube-scheduler (the release of our API server) and KWOK's controller run out of
  cluster with the member's kubeconfig.
- From the example InferenceCluster naming this member (examples/inferenceclusters, the
  one source of truth), each node pool's `nodes` become KWOK Nodes carrying the pool's
  nodeSelector labels, taints, and a fabric label per declared fabric (`FABRIC_LABEL`,
  and the pool's `fabricNodeLabel` when it names one; nodes beyond the declared fabrics
  get none), and each node's devices are
  published as a resource.k8s.io/v1 ResourceSlice the way the NVIDIA DRA GPU driver
  (github.com/NVIDIA/k8s-dra-driver-gpu, gpu-kubelet-plugin) does: driver
  `gpu.nvidia.com`, one pool per node, devices `gpu-<minor>` with the attributes `type`
  ("gpu"), `uuid`, `pcieBusID` and the pool's declared attributes (productName,
  architecture, cudaComputeCapability, driverVersion, ...: unqualified, in the driver's
  domain), and capacity `memory`. Attributes the pool does not declare are not made up.
  A pool's `additionalDevices` (e.g. DraNet's RDMA NICs) get a slice of their own per
  node, with their declared attributes and capacity.
- A DeviceClass per driver the pools use, named as the driver's chart names it
  (`gpu.nvidia.com`, selecting the driver's devices of type "gpu"): our
  ResourceClaimTemplates name the pool's driver as their class.

Pod lifecycle (KWOK Stages, `STAGES`): a bound pod becomes Running and Ready after
about `START_DELAY_MS`, with the status a kubelet writes. The switch for a pod that
fails to start like a broken model is the pod annotation `FAIL_ANNOTATION`
(`fleetbox.modelplane.ai/fail`), set on the ModelDeployment's pod template:
- `CrashLoopBackOff`: the first container exits 1 (reason Error) again every
  `CRASH_PERIOD_MS`; its `restartCount` climbs, its state is `waiting: CrashLoopBackOff`
  with the last termination in `lastState.terminated`, the pod stays Running, not Ready
  (what the runtime's health agent counts as start failures).
- `ErrImagePull`: the first container waits with reason ErrImagePull (the pod stays
  Pending), as when an image does not exist.
A deleted pod is removed at once (no grace period to wait out: there is no process).

Nothing here creates the pods of LeaderWorkerSets or Grove PodCliqueSets. On a member
that serves for real (serving.py) the LeaderWorkerSet controller runs and makes them;
Grove's operator cannot be fetched here (see the README: which example pods exist).
KWOK's Stages skip pods labelled to run for real (`podrunner.skip_real_pods`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import yaml

from fleetbox import REPO
from fleetbox.clusters import Clusters, component_flags
from fleetbox.podrunner import skip_real_pods
from fleetbox.process import Process
from functions.compose_serving_stack.device_classes import needed
from tests.ports import free_port

EXAMPLE_CLUSTERS = REPO / "examples" / "inferenceclusters"

# Controllers a GPU member's kube-controller-manager runs (part 1's two first).
CONTROLLERS = (
    "garbagecollector",
    "namespace",
    "serviceaccount-controller",
    "deployment-controller",
    "replicaset-controller",
    "resourceclaim-controller",
    "horizontal-pod-autoscaler-controller",
    # A pod bound to a node that is gone is marked (DisruptionTarget) and deleted, as in a
    # cluster; its workload replaces it (the parking scenario's node loss).
    "pod-garbage-collector-controller",
    # A LeaderWorkerSet's leaders and workers are StatefulSets (serving.py runs its
    # controller on members that serve for real), and a pod's projected service-account
    # token volume needs its namespace's kube-root-ca.crt.
    "statefulset-controller",
    "root-ca-certificate-publisher-controller",
    # A Service's EndpointSlices over its pods' IPs (KWOK's or the pod runner's), with a
    # pod's hostname where it names the Service as its subdomain: what cluster DNS
    # (dns.py) serves as `<hostname>.<subdomain>.<namespace>.svc`.
    "endpointslice-controller",
)
# What KWOK manages: only the nodes the box made (a node annotated so).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
FABRIC_LABEL = "fleetbox.modelplane.ai/fabric"
POOL_LABEL = "fleetbox.modelplane.ai/node-pool"
FAIL_ANNOTATION = "fleetbox.modelplane.ai/fail"
FAIL_CRASH_LOOP = "CrashLoopBackOff"
FAIL_IMAGE_PULL = "ErrImagePull"
START_DELAY_MS = 1000
START_JITTER_MS = 1000
CRASH_PERIOD_MS = 2000
# A GPU node's other resources (a p5.48xlarge-like host); pools declare only devices.
NODE_CAPACITY = {"cpu": "192", "memory": "2000Gi", "pods": "110", "ephemeral-storage": "4Ti"}

# --- the NVIDIA DRA driver's shape ------------------------------------------------------


GPU_DRIVER = "gpu.nvidia.com"


def device_class(driver: str) -> dict:
    """The DeviceClass the driver's chart installs: for the NVIDIA driver, whole GPUs;
    for another driver (a pool's additionalDevices, e.g. DraNet's `dra.net`), every
    device it publishes."""
    expression = f"device.driver == '{driver}'"
    if driver == GPU_DRIVER:
        expression += f" && device.attributes['{driver}'].type == 'gpu'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _typed(value: dict) -> dict:
    """A pool attribute ({string|int|bool|version: v}) as a ResourceSlice attribute."""
    ((kind, raw),) = value.items()
    return {kind: raw if kind in ("int", "bool") else str(raw)}


def resource_slice(node: str, driver: str, per_node: int, attributes: dict, capacity: dict) -> dict:
    """The ResourceSlice the driver's kubelet plugin publishes for one node."""
    devices = []
    gpu = driver == GPU_DRIVER
    for minor in range(per_node):
        uid = hashlib.sha256(f"{node}/{driver}/{minor}".encode()).hexdigest()
        device_attributes = {}
        if gpu:  # what the NVIDIA plugin reads from NVML for every GPU
            device_attributes = {
                "type": {"string": "gpu"},
                "uuid": {
                    "string": f"GPU-{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:32]}"
                },
                "pcieBusID": {"string": f"0000:{0x18 + minor * 0x10:02x}:00.0"},
            }
        device_attributes.update({k: _typed(v) for k, v in attributes.items()})
        devices.append({
            "name": f"gpu-{minor}" if gpu else f"dev-{minor}",
            "attributes": device_attributes,
            "capacity": {k: {"value": str(v)} for k, v in capacity.items()},
        })  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


# --- nodes from node pools --------------------------------------------------------------


@dataclass(frozen=True)
class FakeNode:
    """One KWOK node and what its driver publishes."""

    name: str
    labels: dict
    taints: list
    driver: str
    per_node: int
    attributes: dict
    capacity: dict
    resources: dict
    # A pool's additionalDevices: (driver, perNode, attributes, capacity) each.
    additional: tuple = ()

    def node(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
            },
            "spec": {"taints": self.taints} if self.taints else {},
        }

    def status(self, address: str) -> dict:
        return {
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": address},
                    {"type": "Hostname", "address": self.name},
                ],
                "capacity": self.resources,
                "allocatable": self.resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                    }
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                    "kubeProxyVersion": "fake",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                    "kernelVersion": "",
                    "osImage": "kwok",
                    "containerRuntimeVersion": "kwok",
                },
                "phase": "Running",
            }
        }

    def slices(self) -> list[dict]:
        published = [(self.driver, self.per_node, self.attributes, self.capacity)]
        return [
            resource_slice(self.name, *device)
            for device in (*published, *self.additional)
            if device[0] and device[1] > 0
        ]

    @property
    def drivers(self) -> list[str]:
        return [s["spec"]["driver"] for s in self.slices()]


def pool_nodes(cluster: dict, pool: dict, prefix: str = "") -> list[FakeNode]:
    """A node pool's `nodes` (not maxNodes: those are yet to be launched) as KWOK nodes:
    the declared fabrics first, then the nodes outside any fabric."""
    devices = pool.get("devices") or {}
    region = (cluster.get("spec") or {}).get("region", "")
    fabrics = [(f["name"], int(f["nodes"])) for f in pool.get("fabrics") or []]
    count = int(pool.get("nodes") or 0)
    slots: list[str] = [name for name, n in fabrics for _ in range(n)][:count]
    slots += [""] * (count - len(slots))
    nodes = []
    for index, fabric in enumerate(slots):
        name = f"{prefix}{pool['name']}-{index}"
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "type": "kwok",
            POOL_LABEL: pool["name"],
            **(pool.get("nodeSelector") or {}),
        }
        if region:
            labels["topology.kubernetes.io/region"] = region
        if fabric:
            labels[FABRIC_LABEL] = fabric
            if pool.get("fabricNodeLabel"):
                labels[pool["fabricNodeLabel"]] = fabric
        nodes.append(
            FakeNode(
                name=name,
                labels=labels,
                taints=[dict(t) for t in pool.get("taints") or []],
                driver=str(devices.get("driver", "")),
                per_node=int(devices.get("perNode", 0) if devices else 0),
                attributes=dict(devices.get("attributes") or {}),
                capacity=dict(devices.get("capacity") or {}),
                additional=tuple(
                    (
                        str(extra.get("driver", "")),
                        int(extra.get("perNode", 0)),
                        dict(extra.get("attributes") or {}),
                        dict(extra.get("capacity") or {}),
                    )
                    for extra in pool.get("additionalDevices") or []
                ),
                resources=dict(NODE_CAPACITY)
                if "cpu" not in pool
                else {**NODE_CAPACITY, "cpu": str(pool["cpu"]), "memory": str(pool["memory"])},
            )
        )
    return nodes


def example_cluster(member: str) -> dict | None:
    """The example InferenceCluster whose provider config is this member, if any."""
    for path in sorted(EXAMPLE_CLUSTERS.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        if ((document.get("spec") or {}).get("providerConfigRef") or {}).get("name") == member:
            return document
    return None


def member_nodes(member: str) -> list[FakeNode]:
    cluster = example_cluster(member)
    if cluster is None:
        return []
    return [n for pool in cluster["spec"].get("nodePools") or [] for n in pool_nodes(cluster, pool)]


# --- KWOK stages ------------------------------------------------------------------------

# Addresses once: a repeated stage (the crash loop) must not allocate a second pod IP.
_IPS = """\
{{ if not .status.podIP }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
hostIPs:
- ip: {{ . | Quote }}
{{ end }}
{{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ . | Quote }}
podIPs:
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
"""


def _condition(kind: str, status: str, reason: str = "", message: str = "") -> str:
    text = f'- type: {kind}\n  status: "{status}"\n  lastTransitionTime: {{{{ $now | Quote }}}}\n'
    if reason:
        text += f"  reason: {reason}\n"
    if message:
        text += f"  message: {json.dumps(message)}\n"
    return text


_RUNNING_CONTAINER = """\
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
"""
_RUNNING_TEMPLATE = (
    "{{ $now := Now }}\nconditions:\n"
    + _condition("PodReadyToStartContainers", "True")
    + _condition("Initialized", "True")
    + _condition("Ready", "True")
    + _condition("ContainersReady", "True")
    + _condition("PodScheduled", "True")
    + """\
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: {{ printf "%s@sha256:0" .image | Quote }}
  containerID: {{ printf "containerd://%s" .name | Quote }}
"""
    + _RUNNING_CONTAINER
    + """\
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""
    + _IPS
)

# The first container crash-loops; the others run. restartCount is the previous one + 1.
_CRASH_TEMPLATE = (
    "{{ $now := Now }}\n{{ $root := . }}\n{{ $first := (index .spec.containers 0).name }}\n"
    "{{ $prev := 0 }}\n"
    "{{ range .status.containerStatuses }}{{ if eq .name $first }}"
    "{{ $prev = or .restartCount 0 }}{{ end }}{{ end }}\n"
    "conditions:\n"
    + _condition("PodReadyToStartContainers", "True")
    + _condition("Initialized", "True")
    + _condition(
        "Ready", "False", "ContainersNotReady", "containers with unready status: [{{ $first }}]"
    )
    + _condition(
        "ContainersReady",
        "False",
        "ContainersNotReady",
        "containers with unready status: [{{ $first }}]",
    )
    + _condition("PodScheduled", "True")
    + """\
containerStatuses:
{{ range $i, $c := .spec.containers }}
- name: {{ $c.name | Quote }}
  image: {{ $c.image | Quote }}
  imageID: {{ printf "%s@sha256:0" $c.image | Quote }}
  containerID: {{ printf "containerd://%s" $c.name | Quote }}
{{ if eq $i 0 }}
  ready: false
  started: false
  restartCount: {{ add1 $prev }}
  state:
    waiting:
      reason: CrashLoopBackOff
      message: {{ printf "back-off 10s restarting failed container=%s pod=%s_%s(%s)" \
$c.name $root.metadata.name $root.metadata.namespace $root.metadata.uid | Quote }}
  lastState:
    terminated:
      exitCode: 1
      reason: Error
      message: "fleet box: the engine exited before it served (fleetbox.modelplane.ai/fail)"
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ else }}
"""
    + _RUNNING_CONTAINER
    + """\
{{ end }}
{{ end }}
phase: Running
startTime: {{ or $root.status.startTime $now | Quote }}
"""
    + _IPS
)

_PULL_TEMPLATE = (
    "{{ $now := Now }}\n{{ $first := (index .spec.containers 0) }}\nconditions:\n"
    + _condition("PodReadyToStartContainers", "True")
    + _condition("Initialized", "True")
    + _condition(
        "Ready",
        "False",
        "ContainersNotReady",
        "containers with unready status: [{{ $first.name }}]",
    )
    + _condition(
        "ContainersReady",
        "False",
        "ContainersNotReady",
        "containers with unready status: [{{ $first.name }}]",
    )
    + _condition("PodScheduled", "True")
    + """\
containerStatuses:
- name: {{ $first.name | Quote }}
  image: {{ $first.image | Quote }}
  imageID: ""
  ready: false
  started: false
  restartCount: 0
  state:
    waiting:
      reason: ErrImagePull
      message: {{ printf "failed to pull and unpack image %q: not found" $first.image | Quote }}
phase: Pending
startTime: {{ $now | Quote }}
"""
    + _IPS
)


def _stage(
    name: str,
    expressions: list[dict],
    template: str | None,
    *,
    delay_ms: int = 0,
    jitter_ms: int = 0,
    delete: bool = False,
) -> dict:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": expressions},
        "next": {"delete": True} if delete else {"statusTemplate": template},
    }
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms}
        if jitter_ms:
            spec["delay"]["jitterDurationMilliseconds"] = delay_ms + jitter_ms
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


# KWOK manages the pods of the nodes its node controller manages, and runs that
# controller only when it has a node stage. The box writes each node's status itself
# (`add_nodes`); this stage only puts a node KWOK finds not Ready back to Ready.
_NODE_READY = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "node-ready"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Node"},
        "selector": {
            "matchExpressions": [{
                "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                "operator": "NotIn",
                "values": ["True"],
            }]
        },
        "next": {
            "statusTemplate": "conditions:\n"
            + _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
            .replace("{{ $now | Quote }}", "{{ Now | Quote }}")
        },
    },
}  # fmt: skip
_LIVE = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_FAIL_KEY = f'.metadata.annotations["{FAIL_ANNOTATION}"]'

STAGES = [
    _NODE_READY,
    _stage(
        "pod-delete",
        [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
        None,
        delete=True,
    ),
    _stage(
        "pod-ready",
        [
            _LIVE,
            {"key": _FAIL_KEY, "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
        ],
        _RUNNING_TEMPLATE,
        delay_ms=START_DELAY_MS,
        jitter_ms=START_JITTER_MS,
    ),
    _stage(
        "pod-crash-loop",
        [_LIVE, {"key": _FAIL_KEY, "operator": "In", "values": [FAIL_CRASH_LOOP]}],
        _CRASH_TEMPLATE,
        delay_ms=CRASH_PERIOD_MS,
    ),
    _stage(
        "pod-image-pull",
        [
            _LIVE,
            {"key": _FAIL_KEY, "operator": "In", "values": [FAIL_IMAGE_PULL]},
            {"key": ".status.containerStatuses", "operator": "DoesNotExist"},
        ],
        _PULL_TEMPLATE,
        delay_ms=START_DELAY_MS,
    ),
]


# --- equipping a member -----------------------------------------------------------------


def equip(
    box: Clusters,
    member: str,
    nodes: list[FakeNode] | None = None,
    *,
    kwok_runs_real_pods: bool = False,
) -> None:
    """Start a GPU member's scheduler and KWOK, and create its nodes (`nodes`, else the
    example cluster's: `member_nodes`), slices and DeviceClasses (its controller manager
    runs `CONTROLLERS`: members.py). `kwok_runs_real_pods`: a member that never serves
    for real, whose KWOK also plays the pods labelled to run for real (a deployment
    spread over a real member and KWOK ones carries the label everywhere)."""
    cluster = box.members[member]
    kubeconfig = box.kubeconfigs[member]
    stages = cluster.workdir / "kwok-stages.yaml"
    # Pods labelled to run for real are a pod runner's (serving.py), never KWOK's.
    chosen = STAGES if kwok_runs_real_pods else skip_real_pods(STAGES)
    stages.write_text(yaml.safe_dump_all(chosen, sort_keys=False))
    scheduler = Process(
        f"kube-scheduler-{member}",
        [
            str(box.bin / "kube-scheduler"),
            *component_flags(kubeconfig, cluster.workdir / "scheduler-certs"),
        ],
        cluster.workdir / "kube-scheduler.log",
    )
    kwok = Process(
        f"kwok-{member}",
        [
            str(box.bin / "kwok"),
            f"--kubeconfig={kubeconfig}",
            f"--config={stages}",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
            f"--server-address=127.0.0.1:{free_port()}",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.96.0.1",
        ],
        cluster.workdir / "kwok.log",
    )
    for process in (scheduler, kwok):
        box.start_process(process)
    add_nodes(box, member, member_nodes(member) if nodes is None else nodes)


def install_drivers(box: Clusters, member: str) -> None:
    """The DeviceClass of every driver the example clusters' pools name, on a member with
    no GPU nodes (the spare members tests compose clusters on). A real cluster whose pools
    name a driver has that driver's chart, and so its DeviceClass, installed; without it
    compose-serving-stack reports the class Missing and placement keeps replicas off the
    cluster, as it should on a cluster that lacks the driver."""
    pools = [
        pool
        for path in sorted(EXAMPLE_CLUSTERS.glob("*.yaml"))
        for pool in (yaml.safe_load(path.read_text()).get("spec") or {}).get("nodePools") or []
    ]
    documents = [device_class(driver) for driver in needed(pools)]
    box.kubectl(member, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(documents))


def add_nodes(box: Clusters, member: str, nodes: list[FakeNode]) -> None:
    """Create KWOK nodes (Ready, with their allocatable) and their ResourceSlices, and
    the DeviceClass of each driver they use."""
    if not nodes:
        return
    drivers = sorted({d for n in nodes for d in n.drivers})
    documents = [device_class(d) for d in drivers]
    documents += [n.node() for n in nodes]
    documents += [s for n in nodes for s in n.slices()]
    box.kubectl(member, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(documents))
    for node in nodes:
        # A stable address per name (10.96.0.0/16), as a node's InternalIP.
        digest = hashlib.sha256(node.name.encode()).digest()
        address = f"10.96.{digest[0]}.{max(1, digest[1])}"
        box.kubectl(
            member, "patch", "node", node.name, "--subresource=status", "--type=merge",
            "-p", json.dumps(node.status(address)),
        )  # fmt: skip
        # The API server's admission plugin TaintNodesByCondition taints every new
        # node not-ready:NoSchedule; the node lifecycle controller (not run here: it
        # would want kubelet heartbeats) lifts it once the node is Ready. Do that here.
        box.kubectl(
            member, "patch", "node", node.name, "--type=merge",
            "-p", json.dumps({"spec": {"taints": node.taints or None}}),
        )  # fmt: skip


def remove_nodes(box: Clusters, member: str, nodes: list[FakeNode]) -> None:
    names = [n.name for n in nodes]
    if not names:
        return
    box.kubectl(member, "delete", "node", "--ignore-not-found", "--wait=false", *names)
    slices = [f"{n.name}-{d}" for n in nodes for d in n.drivers]
    if slices:
        box.kubectl(
            member, "delete", "resourceslice", "--ignore-not-found", "--wait=false", *slices
        )


REQUIRED_TOOLS = ("kube-scheduler", "kwok")

__all__ = [
    "CONTROLLERS",
    "FABRIC_LABEL",
    "FAIL_ANNOTATION",
    "FAIL_CRASH_LOOP",
    "FAIL_IMAGE_PULL",
    "REQUIRED_TOOLS",
    "FakeNode",
    "add_nodes",
    "device_class",
    "equip",
    "member_nodes",
    "pool_nodes",
    "remove_nodes",
    "resource_slice",
]
