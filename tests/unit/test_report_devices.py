"""The report counts DRA devices as room: a pod whose claims take devices fits on a node
only while the node's ResourceSlices have that many free (found false by the fleet box's
scheduler, tests/e2e/test_scheduling.py: the room counted pods by cpu and memory only)."""

from functions.runtime.agent.parse import (
    claim_template_devices,
    device_class_drivers,
    node_devices,
    node_info,
    pod_needs_from_template,
)
from functions.runtime.shared.report import PodNeeds, static_room

CLASS = {
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}


def _slice(node: str, devices: int) -> dict:
    return {
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        }
    }


def _claim(node: str, devices: int) -> dict:
    return {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{i}"}
                        for i in range(devices)
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "values": [node]}]}
                    ]
                },
            }
        }
    }


def _template(count: int, device_class: str = "gpu") -> dict:
    return {
        "metadata": {"name": "t"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": device_class,
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            }
        },
    }


POD = {"spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "t"}]}}


def _node(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "status": {
            "allocatable": {"cpu": "64", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_claim_template_counts_its_devices_per_class():
    assert claim_template_devices(_template(4)) == {"devices/gpu": 4.0}
    needs = pod_needs_from_template(POD, claim_templates={"t": _template(2)})
    assert needs.requests == {"devices/gpu": 2.0}


def test_the_class_driver_is_read_from_its_selector():
    assert device_class_drivers([CLASS]) == {"gpu": "gpu.nvidia.com"}


def test_room_is_bounded_by_free_devices_not_by_pods():
    drivers = device_class_drivers([CLASS])
    total, used = node_devices([_slice("n1", 8), _slice("n2", 8)], [_claim("n1", 6)], drivers)
    nodes = tuple(node_info(_node(n), [], total.get(n), used.get(n)) for n in ("n1", "n2"))
    needs = pod_needs_from_template(POD, claim_templates={"t": _template(4)})
    room, _ = static_room(nodes, needs, (), {"pool": "a"})
    assert room == 2  # n1 has 2 free (none fits), n2 has 8 (two fit)


def test_a_node_without_the_class_has_no_room_for_it():
    nodes = (node_info(_node("cpu-only"), []),)
    needs = PodNeeds(requests={"devices/gpu": 1.0})
    assert static_room(nodes, needs, (), {"pool": "a"})[0] == 0
