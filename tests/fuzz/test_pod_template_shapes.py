"""A tenant's pod template in any shape (issue 44): compose-model-deployment, and
compose-model-replica with whatever the deployment composed, answer it with a result that
names the field, never "unexpected error in the function".

The shapes: one value of a hostile type put at the template, its metadata or labels, its
spec, a spec field, a container, a container field, or a field one level inside a
container's or the spec's lists and objects (env, ports, resources, volumeMounts,
securityContext, volumes, affinity, tolerations, resourceClaims).
"""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from functions.compose_model_deployment import fn as deployment_fn
from functions.compose_model_replica import fn as replica_fn
from tests.fuzz import profile
from tests.fuzz.test_functions_fuzz import (
    CLUSTERS,
    DEPLOYMENT,
    _composed_replicas,
    _deployment_request,
    _fatal,
    _replica_cluster,
    _replica_request,
    _run,
    _struct_safe,
)

UNEXPECTED = "unexpected error in the function"
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3).map(float),
    st.text(max_size=3),
    st.sampled_from([[], {}, [1], ["x"], [None], [{}], [[]], {"a": 1}, {"a": None}]),
)
CONTAINER_FIELDS = [
    "name", "image", "args", "command", "env", "envFrom", "ports", "resources",
    "securityContext", "volumeMounts", "readinessProbe", "livenessProbe", "startupProbe",
    "lifecycle", "workingDir",
]  # fmt: skip
SPEC_FIELDS = [
    "containers", "initContainers", "volumes", "affinity", "tolerations", "nodeSelector",
    "securityContext", "resourceClaims", "imagePullSecrets", "serviceAccountName",
    "hostAliases", "topologySpreadConstraints", "dnsConfig", "nodeName", "schedulerName",
]  # fmt: skip
INSIDE = {
    ("container", "env"): ["name", "value", "valueFrom"],
    ("container", "ports"): ["name", "containerPort", "protocol", "hostPort"],
    ("container", "volumeMounts"): ["name", "mountPath"],
    ("container", "resources"): ["requests", "limits", "claims"],
    ("container", "securityContext"): ["capabilities", "runAsUser", "privileged"],
    ("spec", "volumes"): ["name", "emptyDir", "secret", "hostPath"],
    ("spec", "tolerations"): ["key", "operator", "effect"],
    ("spec", "resourceClaims"): ["name", "resourceClaimTemplateName"],
    ("spec", "affinity"): ["nodeAffinity", "podAffinity", "podAntiAffinity"],
}
LISTS = {"env", "ports", "volumeMounts", "volumes", "tolerations", "resourceClaims"}


@st.composite
def deployments(draw) -> dict:
    xr = copy.deepcopy(DEPLOYMENT)
    member = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
    template = member["template"]
    spec, container = template["spec"], template["spec"]["containers"][0]
    value = draw(VALUES)
    where = draw(st.sampled_from(["template", "metadata", "labels", "spec", "field", "inside"]))
    if where == "template":
        member["template"] = value
    elif where == "metadata":
        template["metadata"] = value
    elif where == "labels":
        template.setdefault("metadata", {})[draw(st.sampled_from(["labels", "annotations"]))] = (
            value
        )
    elif where == "spec":
        template["spec"] = value
    elif where == "field":
        on = draw(st.sampled_from(["spec", "container", "containers[0]"]))
        if on == "spec":
            spec[draw(st.sampled_from(SPEC_FIELDS))] = value
        elif on == "container":
            container[draw(st.sampled_from(CONTAINER_FIELDS))] = value
        else:
            spec["containers"][0] = value
    else:
        (owner, field) = draw(st.sampled_from(sorted(INSIDE)))
        item = {draw(st.sampled_from(INSIDE[(owner, field)])): value}
        (spec if owner == "spec" else container)[field] = [item] if field in LISTS else item
    return xr


@given(xr=deployments())
@profile.FUZZ
def test_a_pod_template_of_any_shape_is_answered_naming_its_field(xr):
    if not _struct_safe(xr):
        return
    rsp = _run(deployment_fn.FunctionRunner(), _deployment_request(xr, CLUSTERS, []))
    fatal = _fatal(rsp)
    assert not any(UNEXPECTED in m for m in fatal), fatal
    if fatal:
        assert any("spec.template" in m for m in fatal), fatal
        return
    for replica in _composed_replicas(rsp):
        answer = _run(
            replica_fn.FunctionRunner(), _replica_request(replica, _replica_cluster(replica))
        )
        assert not any(UNEXPECTED in m for m in _fatal(answer)), _fatal(answer)
