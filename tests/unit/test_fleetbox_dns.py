"""The resolver configuration the box gives a real pod (hack/fleetbox/podrunner.py
`pod_resolv_conf`), held to what the kubelet writes (pkg/kubelet/network/dns: the
ClusterFirst search path and ndots, dnsPolicy and dnsConfig), and the member CoreDNS's
Corefile (hack/fleetbox/dns.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetbox.dns import corefile, resolv_conf
from fleetbox.podrunner import pod_resolv_conf

DNS = "127.0.0.101"


def pod(namespace: str = "ml-team", **spec) -> dict:
    return {"metadata": {"name": "p", "namespace": namespace}, "spec": {"containers": [], **spec}}


def test_a_cluster_first_pod_gets_the_cluster_nameserver_and_its_namespace_first():
    assert pod_resolv_conf(pod(), DNS, "cluster.local") == (
        "search ml-team.svc.cluster.local svc.cluster.local cluster.local\n"
        f"nameserver {DNS}\n"
        "options ndots:5\n"
    )


def test_the_default_policy_is_cluster_first():
    assert pod_resolv_conf(pod(dnsPolicy="ClusterFirst"), DNS, "cluster.local") == (
        pod_resolv_conf(pod(), DNS, "cluster.local")
    )


def test_the_box_and_the_runner_write_the_same_file():
    assert resolv_conf(DNS, "ml-team") == pod_resolv_conf(pod(), DNS, "cluster.local")


@pytest.mark.parametrize(
    "spec",
    [
        {"dnsPolicy": "Default"},
        {"dnsPolicy": "ClusterFirst", "hostNetwork": True},
    ],
    ids=["default_policy_resolves_as_the_node", "host_network_cluster_first_resolves_as_the_node"],
)
def test_pods_that_resolve_as_their_node_keep_the_hosts_resolver(spec):
    assert pod_resolv_conf(pod(**spec), DNS, "cluster.local") is None


def test_cluster_first_with_host_net_uses_cluster_dns():
    spec = {"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": True}
    assert f"nameserver {DNS}\n" in pod_resolv_conf(pod(**spec), DNS, "cluster.local")


def test_without_cluster_dns_a_cluster_first_pod_keeps_the_hosts_resolver():
    assert pod_resolv_conf(pod(), None, "cluster.local") is None


def test_dns_config_appends_servers_and_searches_and_overrides_options():
    config = {
        "nameservers": ["10.0.0.53"],
        "searches": ["corp.example"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
    }
    assert pod_resolv_conf(pod(dnsConfig=config), DNS, "cluster.local") == (
        "search ml-team.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
        f"nameserver {DNS}\n"
        "nameserver 10.0.0.53\n"
        "options ndots:2 edns0\n"
    )


def test_policy_none_is_only_the_dns_config():
    config = {"nameservers": ["10.0.0.53"], "searches": ["a.example"]}
    assert pod_resolv_conf(pod(dnsPolicy="None", dnsConfig=config), DNS, "cluster.local") == (
        "search a.example\nnameserver 10.0.0.53\n"
    )


def test_the_corefile_serves_the_cluster_domain_from_the_members_api_server():
    text = corefile(DNS, Path("/box/us-east-1/kubeconfig"), 18181)
    assert text.startswith(".:53 {\n")
    assert f"    bind {DNS}\n" in text
    assert f"    ready {DNS}:18181\n" in text
    assert "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n" in text
    assert "        kubeconfig /box/us-east-1/kubeconfig\n" in text
    assert "    forward . /etc/resolv.conf\n" in text
