"""Malformed pod templates are refused naming the field (issue 44): each shape below
ended in "unexpected error in the function" before functions/common/pod_shape.py."""

from __future__ import annotations

import asyncio
import copy

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common.pod_shape import check_pod_template
from functions.common.reader import InputError
from functions.compose_model_deployment import fn as deployment_fn
from tests.fuzz.test_functions_fuzz import CLUSTERS, DEPLOYMENT, _deployment_request

ENGINE = "spec.template.spec.engines[0].members[0].template"
# (how to break the engine's template, the field named, what it must be)
SHAPES = {
    "template_a_string": (lambda m: m.update(template="x"), ENGINE, "an object"),
    "spec_a_list": (lambda m: m["template"].update(spec=[1]), f"{ENGINE}.spec", "an object"),
    "containers_a_string": (
        lambda m: m["template"]["spec"].update(containers="x"),
        f"{ENGINE}.spec.containers",
        "a list",
    ),
    "container_a_number": (
        lambda m: m["template"]["spec"]["containers"].__setitem__(0, 1.0),
        f"{ENGINE}.spec.containers[0]",
        "an object",
    ),
    "env_item_a_string": (
        lambda m: m["template"]["spec"]["containers"][0].update(env=["x"]),
        f"{ENGINE}.spec.containers[0].env[0]",
        "an object",
    ),
    "ports_an_object": (
        lambda m: m["template"]["spec"]["containers"][0].update(ports={"a": 1}),
        f"{ENGINE}.spec.containers[0].ports",
        "a list",
    ),
    "resources_requests_a_list": (
        lambda m: m["template"]["spec"]["containers"][0].update(resources={"requests": []}),
        f"{ENGINE}.spec.containers[0].resources.requests",
        "an object",
    ),
    "volume_a_list": (
        lambda m: m["template"]["spec"].update(volumes=[[]]),
        f"{ENGINE}.spec.volumes[0]",
        "an object",
    ),
    "tolerations_a_string": (
        lambda m: m["template"]["spec"].update(tolerations="x"),
        f"{ENGINE}.spec.tolerations",
        "a list",
    ),
    "node_selector_a_list": (
        lambda m: m["template"]["spec"].update(nodeSelector=["x"]),
        f"{ENGINE}.spec.nodeSelector",
        "an object",
    ),
    "affinity_terms_a_string": (
        lambda m: m["template"]["spec"].update(
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}}
        ),
        f"{ENGINE}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        "an object",
    ),
    "labels_a_list": (
        lambda m: m["template"].update(metadata={"labels": [1]}),
        f"{ENGINE}.metadata.labels",
        "an object",
    ),
    "metadata_null": (
        lambda m: m["template"].update(metadata=None),
        f"{ENGINE}.metadata",
        "leave it out rather than null",
    ),
    "capabilities_add_a_string": (
        lambda m: m["template"]["spec"]["containers"][0].update(
            securityContext={"capabilities": {"add": "SYS_ADMIN"}}
        ),
        f"{ENGINE}.spec.containers[0].securityContext.capabilities.add",
        "a list",
    ),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_a_malformed_template_is_a_fatal_naming_the_field(case):
    mutate, path, rule = SHAPES[case]
    xr = copy.deepcopy(DEPLOYMENT)
    mutate(xr["spec"]["template"]["spec"]["engines"][0]["members"][0])
    rsp = asyncio.run(
        deployment_fn.FunctionRunner().RunFunction(_deployment_request(xr, CLUSTERS, []))
    )
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1, fatal
    assert "unexpected error" not in fatal[0]
    assert f"{path}: must be" in fatal[0]
    assert rule in fatal[0]


def test_a_well_formed_template_passes_and_numbers_from_a_struct_are_whole_numbers():
    template = copy.deepcopy(
        DEPLOYMENT["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]
    )
    template["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 8000.0}]
    check_pod_template(template, "t")
    template["spec"]["containers"][0]["ports"][0]["containerPort"] = 8000.5
    with pytest.raises(InputError) as err:
        check_pod_template(template, "t")
    assert err.value.path == "t.spec.containers[0].ports[0].containerPort"


def test_a_list_is_bounded():
    template = {"spec": {"containers": [{"name": "c", "args": ["x"] * 9000}]}}
    with pytest.raises(InputError) as err:
        check_pod_template(template, "t")
    assert err.value.path == "t.spec.containers[0].args"
