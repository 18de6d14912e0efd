"""CPU-only pools in the member's inventory and in `modelplane status`: the agent is told
which pools are CPU-only, counts their nodes' allocatable CPU and memory and what pods
there request, and the fleet view shows it as it shows GPUs."""

import json

import jsonschema
from click.testing import CliRunner

from functions.common.inventory import CpuPool, cpu_pools_of_pools, parse_cpu_pool
from functions.compose_serving_stack import runtime_hosting
from functions.compose_serving_stack.compose import parse_cluster
from functions.runtime import cli
from functions.runtime.agent.cpu_pools import cpu_pool_use, pod_requests
from functions.runtime.operator import fleet_status
from tests.conftest import REPO

SCHEMA = json.loads((REPO / "schemas" / "fleet-status.schema.json").read_text())
SELECTOR = {"node.kubernetes.io/instance-type": "c7i.8xlarge"}


def node(name, cpu="31", memory="60Gi", labels=SELECTOR):
    return {
        "metadata": {"name": name, "labels": dict(labels)},
        "status": {"allocatable": {"cpu": cpu, "memory": memory}},
    }


def pod(node_name, cpu="8", memory="16Gi", phase="Running", init=None):
    spec = {
        "nodeName": node_name,
        "containers": [
            {"name": "engine", "resources": {"requests": {"cpu": cpu, "memory": memory}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": "100m"}}},
        ],
    }
    if init:
        spec["initContainers"] = [{"name": "init", "resources": {"requests": init}}]
    return {"spec": spec, "status": {"phase": phase}}


def test_a_pools_cpu_and_memory_and_what_pods_there_request():
    nodes = [node("a"), node("b"), node("gpu-1", labels={"pool": "h100"})]
    pods = [
        pod("a"),
        pod("b", cpu="1500m", memory="3Gi"),
        pod("b", phase="Succeeded"),  # finished: holds nothing
        pod("gpu-1", cpu="60"),  # not in the pool
    ]
    use = cpu_pool_use(nodes, pods, [CpuPool("c7i", tuple(SELECTOR.items()))])
    assert use == [
        {
            "pool": "c7i",
            "nodes": 2,
            "cpu": "62",
            "cpuRequested": "9700m",
            "memory": "120Gi",
            "memoryRequested": "19Gi",
        }
    ]


def test_a_pods_request_counts_its_largest_init_container_when_that_is_more():
    assert pod_requests(pod("a", cpu="1", memory="1Gi", init={"cpu": "4"})) == (4000, 2**30)


def test_compose_serving_stack_names_each_cpu_pool_to_the_agent():
    pools = [
        {"name": "h100", "nodes": 1, "devices": {"driver": "gpu.nvidia.com", "perNode": 8}},
        {"name": "c7i", "nodes": 2, "cpu": "31", "memory": "60Gi", "nodeSelector": SELECTOR},
    ]
    xr = {
        "metadata": {"name": "eu-central-1"},
        "spec": {"providerConfigRef": {"name": "eu-central-1"}, "nodePools": pools},
    }
    cluster = parse_cluster(xr)
    assert cluster.cpu_pools == cpu_pools_of_pools(pools)
    composed = runtime_hosting.runtime_hosting(
        cluster.target, "img", [], cpu_pools=cluster.cpu_pools
    )
    agent = next(
        c.resource["spec"]["forProvider"]["manifest"]
        for c in composed
        if c.resource["spec"]["forProvider"]["manifest"]["kind"] == "Deployment"
        and "agent" in c.resource["spec"]["forProvider"]["manifest"]["metadata"]["name"]
    )
    args = agent["spec"]["template"]["spec"]["containers"][0]["args"]
    value = args[args.index("--cpu-pool") + 1]
    assert value == "c7i:node.kubernetes.io/instance-type=c7i.8xlarge"
    assert parse_cpu_pool(value) == cluster.cpu_pools[0]
    # And the agent's command line takes it.
    assert cli.parse_cpu_pools(None, None, (value,)) == cluster.cpu_pools


def test_the_agent_refuses_a_cpu_pool_it_cannot_read():
    result = CliRunner().invoke(cli.main, ["agent", "--cpu-pool", "c7i:nokeyvalue"])
    assert result.exit_code != 0
    assert "is not key=value" in result.output


def test_the_fleet_view_shows_what_a_cpu_pool_holds():
    cluster = {
        "metadata": {"name": "eu-central-1"},
        "spec": {"nodePools": [{"name": "c7i", "nodes": 2, "cpu": "31", "memory": "60Gi"}]},
        "status": {
            "inventory": {
                "observedAt": "2026-01-01T00:00:00Z",
                "nodes": {"total": 2, "ready": 2},
                "cpuPools": [
                    {
                        "pool": "c7i",
                        "nodes": 2,
                        "cpu": "62",
                        "cpuRequested": "16",
                        "memory": "120Gi",
                        "memoryRequested": "32Gi",
                    }
                ],
            }
        },
    }
    fleet = fleet_status.summarize([cluster], [], [])
    jsonschema.validate(fleet.to_dict(), SCHEMA)
    table = fleet_status.render_table(fleet)
    assert "eu-central-1  c7i       2      62   16         120Gi   32Gi" in table
    assert fleet_status.room_lines([cluster]) == [
        "  room on eu-central-1 (as of 2026-01-01T00:00:00Z): pool c7i 16 of 62 CPU and "
        "32Gi of 120Gi requested"
    ]
