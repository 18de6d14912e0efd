"""Every cluster of the box as API servers run it, and what a member's substrate installs.

Each cluster (the control plane and every member) is a member of the runtime tier
(tests/runtime/cluster.py): its own etcd and kube-apiserver on loopback with token
auth, plus a kube-controller-manager running the garbage collector and namespace
controllers (a GPU member's runs more: gpu.CONTROLLERS). A member's API server also
runs the aggregation layer, through which the HPA controller reaches KEDA's metrics
adapter (runtime.py). On every member, the CRDs of the schema bundle we pin stand in
for what its substrate's charts would install.
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from fleetbox import gpu
from fleetbox.certificates import Certificates
from fleetbox.clusters import Clusters, component_flags
from fleetbox.process import Process

# The members of examples/inferenceclusters: the two GPU members (the runtime scenarios'
# pair) and the CPU-only one (KWOK nodes with CPU and memory, no devices).
DEFAULT_MEMBERS = ("us-east-1", "eu-west-1")
CPU_MEMBERS = ("eu-central-1",)
EXAMPLE_MEMBERS = (*DEFAULT_MEMBERS, *CPU_MEMBERS)
FRONT_PROXY_CLIENT = "front-proxy-client"
# The cluster inventory API's ClusterProfile, which compose-serving-stack writes one of
# per peer on every member. Its CRD is a prerequisite the platform installs (no chart of
# the substrate carries it, and its module is not served here), so the box stands in with
# a structural CRD that keeps whatever it is given.
CLUSTER_PROFILE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterprofiles.multicluster.x-k8s.io"},
    "spec": {
        "group": "multicluster.x-k8s.io",
        "scope": "Namespaced",
        "names": {
            "plural": "clusterprofiles", "singular": "clusterprofile",
            "kind": "ClusterProfile", "listKind": "ClusterProfileList",
        },
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }],
    },
}  # fmt: skip


def aggregation_args(pki: Path) -> list[str]:
    """kube-apiserver flags for an aggregation layer that proxies to EndpointSlices."""
    certs = Certificates(pki)
    client = certs.pair(FRONT_PROXY_CLIENT, None, "clientAuth")
    return [
        f"--requestheader-client-ca-file={certs.ca_crt}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={client / 'tls.crt'}",
        f"--proxy-client-key-file={client / 'tls.key'}",
        "--enable-aggregator-routing=true",
    ]


def start_api_servers(box: Clusters) -> None:
    """Every cluster's etcd and kube-apiserver, started together and waited for in
    parallel; then each cluster's kubeconfig, written to its folder."""
    for cluster in box.members.values():
        # KEDA's metrics adapter is reached through each member's aggregation layer.
        cluster.apiserver_args = aggregation_args(cluster.workdir / "front-proxy")
    for cluster in box.all_clusters:
        cluster.start_etcd()
    for cluster in box.all_clusters:
        cluster.start_apiserver(wait=False)
    with ThreadPoolExecutor(len(box.all_clusters)) as pool:
        list(pool.map(lambda c: c.wait_ready(), box.all_clusters))
    for cluster in box.all_clusters:
        path = cluster.workdir / "kubeconfig"
        path.write_text(yaml.safe_dump(cluster.kubeconfig()))
        box.kubeconfigs[cluster.name] = path


def start_controller_managers(box: Clusters, gpu_members: Collection[str]) -> None:
    for cluster in box.all_clusters:
        path = box.kubeconfigs[cluster.name]
        box.start_process(
            Process(
                f"kube-controller-manager-{cluster.name}",
                [
                    str(box.bin / "kube-controller-manager"),
                    *component_flags(path, cluster.workdir / "kcm-certs"),
                    "--controllers="
                    + ",".join(
                        gpu.CONTROLLERS
                        if cluster.name in gpu_members
                        else ("garbagecollector", "namespace")
                    ),
                ],
                cluster.workdir / "kube-controller-manager.log",
            )
        )


def install_substrate(box: Clusters) -> None:
    """What each member's substrate would install: the CRDs of the schema bundle we
    pin (LeaderWorkerSet, Grove, Gateway API, the Inference Extension, KEDA)."""
    documents = []
    for path in sorted((box.bin / "schemas" / "crds").glob("*.yaml")):
        if path.name.split("_")[0].endswith("crossplane.io"):
            continue  # the providers' own kinds live on the control plane only
        crd = yaml.safe_load(path.read_text())
        # A conversion webhook names an in-cluster Service no member has; with the
        # stored version only, None conversion serves the same objects.
        crd["spec"].pop("conversion", None)
        documents.append(crd)
    documents.append(CLUSTER_PROFILE_CRD)
    # KEDA's own namespace, which its install creates: the scaler's client-certificate
    # Secret goes there (KEDA reads ClusterTriggerAuthentication Secrets from it).
    documents.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "keda"}})
    for name in box.members:
        box.kubectl(name, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(documents))
    for name in box.members:
        box.wait_crds_established(name)


__all__ = [
    "CLUSTER_PROFILE_CRD",
    "CPU_MEMBERS",
    "DEFAULT_MEMBERS",
    "EXAMPLE_MEMBERS",
    "aggregation_args",
    "install_substrate",
    "start_api_servers",
    "start_controller_managers",
]
