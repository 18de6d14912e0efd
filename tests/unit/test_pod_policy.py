"""Tenants' pod templates under the pod policy each InferenceCluster sets (issue 34, item 2).

What a platform team relies on: a ModelDeployment whose pod template escapes the policy
of a cluster it selects is refused with the field's path and the rule, as a fatal result
that composes and drops nothing; the platform can waive a rule per cluster; the engines
the examples compose pass under baseline as they are; the tenant Namespace carries the
matching Pod Security Admission labels.
"""

import asyncio
import copy
from pathlib import Path

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from functions.common import pod_policy
from functions.common.pod_policy import (
    DEFAULT_POLICY,
    PodPolicy,
    check_pod_template,
    read_policy,
)
from functions.common.reader import InputError
from functions.compose_model_deployment import pod_security
from functions.compose_model_deployment.fn import (
    REQUIRED_CLUSTERS,
    FunctionRunner,
)
from functions.compose_model_deployment.manifests import model_replica
from functions.compose_model_deployment.model import read_cluster, read_deployment
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse as parse_replica

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DEPLOYMENT = EXAMPLES / "modeldeployments" / "llama-8b-vllm.yaml"
CLUSTERS = sorted((EXAMPLES / "inferenceclusters").glob("*.yaml"))
ENGINE = "spec.template.spec.engines[0].members[0].template"
# Baseline, with the user's tolerations (checked against the fleet's taints elsewhere).
USERS_TOLERATIONS = PodPolicy(allow=frozenset({"tolerations"}))


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _deployment(mutate=None) -> dict:
    xr = _load(DEPLOYMENT)
    if mutate is not None:
        mutate(xr["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"])
    return xr


def _clusters(policy: dict | None = None) -> list[dict]:
    out = []
    for path in CLUSTERS:
        ic = _load(path)
        if policy is not None:
            ic["spec"]["podSecurity"] = policy
        out.append(ic)
    return out


def _container(spec: dict) -> dict:
    return spec["containers"][0]


# Each hostile field: (how to set it on the engine's pod spec, the path below ENGINE, rule).
HOSTILE = {
    "privileged": (
        lambda s: _container(s).setdefault("securityContext", {}).update(privileged=True),
        ".spec.containers[0].securityContext.privileged",
        "privileged",
    ),
    "hostPath_root": (
        lambda s: s.setdefault("volumes", []).append({"name": "root", "hostPath": {"path": "/"}}),
        ".spec.volumes[0].hostPath",
        "hostPath",
    ),
    "hostNetwork": (lambda s: s.update(hostNetwork=True), ".spec.hostNetwork", "hostNamespaces"),
    "hostPID": (lambda s: s.update(hostPID=True), ".spec.hostPID", "hostNamespaces"),
    "hostIPC": (lambda s: s.update(hostIPC=True), ".spec.hostIPC", "hostNamespaces"),
    "nodeName": (lambda s: s.update(nodeName="gpu-node-1"), ".spec.nodeName", "nodeName"),
    # The same pin by label or field (issue 44): nodeName's rule by another road.
    "nodeSelector_hostname": (
        lambda s: s.update(nodeSelector={"kubernetes.io/hostname": "gpu-node-1"}),
        ".spec.nodeSelector[kubernetes.io/hostname]",
        "nodeName",
    ),
    "required_affinity_hostname": (
        lambda s: s.update(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": ["gpu-node-1"],
                                    }
                                ]
                            },
                        ]
                    }
                }
            }
        ),
        ".spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[1].matchExpressions[0].key",
        "nodeName",
    ),
    "required_affinity_node_field": (
        lambda s: s.update(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": ["gpu-node-1"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        ),
        ".spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchFields[0].key",
        "nodeName",
    ),
    "preferred_affinity_hostname": (
        lambda s: s.update(
            affinity={
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "preference": {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": ["gpu-node-1"],
                                    }
                                ]
                            },
                        }
                    ]
                }
            }
        ),
        ".spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".preference.matchExpressions[0].key",
        "nodeName",
    ),
    "priorityClassName": (
        lambda s: s.update(priorityClassName="system-node-critical"),
        ".spec.priorityClassName",
        "priorityClassName",
    ),
    "runtimeClassName": (
        lambda s: s.update(runtimeClassName="unsandboxed"),
        ".spec.runtimeClassName",
        "runtimeClassName",
    ),
    "schedulerName": (
        lambda s: s.update(schedulerName="my-scheduler"),
        ".spec.schedulerName",
        "schedulerName",
    ),
    "tolerate_everything": (
        lambda s: s.update(tolerations=[{"operator": "Exists"}]),
        ".spec.tolerations[0]",
        "tolerations",
    ),
    "tolerate_the_control_plane": (
        lambda s: s.update(
            tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]
        ),
        ".spec.tolerations[0].key",
        "tolerations",
    ),
    "sys_admin": (
        lambda s: (
            _container(s)
            .setdefault("securityContext", {})
            .update(capabilities={"add": ["SYS_ADMIN"]})
        ),
        ".spec.containers[0].securityContext.capabilities.add[0]",
        "capabilities",
    ),
    "hostPort": (
        lambda s: (
            _container(s)
            .setdefault("ports", [])
            .append({"name": "x", "containerPort": 22, "hostPort": 22})
        ),
        ".spec.containers[0].ports[0].hostPort",
        "hostPorts",
    ),
    "procMount": (
        lambda s: _container(s).setdefault("securityContext", {}).update(procMount="Unmasked"),
        ".spec.containers[0].securityContext.procMount",
        "procMount",
    ),
    "unsafe_sysctl": (
        lambda s: s.setdefault("securityContext", {}).update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
        ".spec.securityContext.sysctls[0].name",
        "sysctls",
    ),
    "selinux_user": (
        lambda s: (
            _container(s)
            .setdefault("securityContext", {})
            .update(seLinuxOptions={"user": "system_u"})
        ),
        ".spec.containers[0].securityContext.seLinuxOptions.user",
        "seLinux",
    ),
    "apparmor_unconfined": (
        lambda s: s.setdefault("securityContext", {}).update(
            appArmorProfile={"type": "Unconfined"}
        ),
        ".spec.securityContext.appArmorProfile.type",
        "appArmor",
    ),
    "seccomp_unconfined": (
        lambda s: (
            _container(s)
            .setdefault("securityContext", {})
            .update(seccompProfile={"type": "Unconfined"})
        ),
        ".spec.containers[0].securityContext.seccompProfile.type",
        "seccomp",
    ),
    "privileged_init_container": (
        lambda s: s.setdefault("initContainers", []).append(
            {"name": "init", "image": "busybox", "securityContext": {"privileged": True}}
        ),
        ".spec.initContainers[0].securityContext.privileged",
        "privileged",
    ),
    "windows_host_process": (
        lambda s: s.setdefault("securityContext", {}).update(windowsOptions={"hostProcess": True}),
        ".spec.securityContext.windowsOptions.hostProcess",
        "hostProcess",
    ),
}


def _run(xr: dict, clusters: list[dict], observed: dict | None = None):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for key, body in (observed or {}).items():
        req.observed.resources[key].resource.update(body)
    req.required_resources[REQUIRED_CLUSTERS].SetInParent()
    for c in clusters:
        req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(c)
    return asyncio.run(FunctionRunner().RunFunction(req))


def _fatal(rsp) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_pod_template_is_a_fatal_naming_the_field_and_the_rule(case):
    mutate, path, rule = case
    rsp = _run(_deployment(mutate), _clusters())
    (message,) = _fatal(rsp)
    assert f"{ENGINE}{path}: " in message, message
    assert f"(rule {rule})" in message
    assert "baseline pod policy of InferenceCluster" in message
    # Nothing placed, nothing dropped: a fatal result composes nothing.
    assert not rsp.desired.resources


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_rule_the_platform_waives_is_not_refused(case):
    mutate, _path, rule = case
    policy = {"allow": [rule]}
    if rule == "capabilities":
        policy = {"allowedCapabilities": ["SYS_ADMIN"]}
    if rule == "tolerations":
        policy = {"allow": ["tolerations"]}
    rsp = _run(_deployment(mutate), _clusters(policy))
    assert not _fatal(rsp), _fatal(rsp)


def test_a_refusal_keeps_what_was_composed_before():
    """The fatal-result rule: a refusal drops no ModelReplica composed before (Crossplane
    applies nothing from a fatal result; whatever is desired is the observed as it is)."""
    ok = _run(_deployment(), _clusters())
    assert not _fatal(ok)
    assert ok.desired.resources
    observed = {k: json_format.MessageToDict(v.resource) for k, v in ok.desired.resources.items()}
    mutate, _, _ = HOSTILE["privileged"]
    refused = _run(_deployment(mutate), _clusters(), observed)
    assert _fatal(refused)
    for key, kept in refused.desired.resources.items():
        assert json_format.MessageToDict(kept.resource) == observed[key]


def test_every_example_deployment_passes_under_baseline_as_it_is():
    """The engines we ship and compose (with their /dev/shm emptyDir and DRA claims) run
    under baseline."""
    clusters = [read_cluster(c) for c in _clusters()]
    for path in sorted((EXAMPLES / "modeldeployments").glob("*.yaml")):
        pod_security.check(read_deployment(_load(path)), clusters)


def test_every_composed_engine_pod_passes_under_baseline():
    """What compose-model-replica adds to an engine pod (the memory-backed /dev/shm, the
    claims, the env) escapes nothing."""
    inputs = sorted((REPO / "tests/unit/testdata/model_replica/inputs").glob("*.yaml"))
    assert inputs
    for path in inputs:
        for c in compose(parse_replica(_load(path))).composed:
            manifest = c.manifest
            kind = manifest.get("kind")
            template = None
            if kind == "Deployment":
                template = manifest["spec"]["template"]
            elif kind == "LeaderWorkerSet":
                template = manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]
            if template is not None:
                found = check_pod_template(template, f"{path.name}:{c.key}", USERS_TOLERATIONS)
                assert not found, [str(v) for v in found]


def test_a_restricted_cluster_refuses_what_baseline_admits():
    clusters = _clusters({"level": "restricted"})
    rsp = _run(_deployment(), clusters)
    (message,) = _fatal(rsp)
    assert "(rule allowPrivilegeEscalation)" in message
    assert "restricted pod policy" in message

    def harden(spec):
        spec["securityContext"] = {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        _container(spec)["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }

    assert not _fatal(_run(_deployment(harden), clusters))


def test_only_the_selected_clusters_policies_count():
    """A restricted cluster the deployment does not select does not refuse it."""
    clusters = _clusters()
    clusters[0]["spec"]["podSecurity"] = {"level": "restricted"}
    clusters[0]["metadata"].setdefault("labels", {})["tier-x"] = "only-this"

    def away(spec):
        pass

    xr = _deployment(away)
    xr["spec"]["template"]["spec"]["clusterSelector"] = {
        "matchExpressions": [{"key": "tier-x", "operator": "DoesNotExist"}]
    }
    assert not _fatal(_run(xr, clusters))
    xr["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": {"tier-x": "only-this"}}
    assert _fatal(_run(xr, clusters))


def test_a_toleration_of_a_declared_pool_taint_is_allowed():
    xr = _load(EXAMPLES / "modeldeployments" / "qwen-sglang.yaml")
    assert not _fatal(_run(xr, _clusters()))
    xr["spec"]["template"]["spec"]["tolerations"] = [{"key": "team-b-only", "operator": "Exists"}]
    (message,) = _fatal(_run(xr, _clusters()))
    assert "spec.template.spec.tolerations[0].key: " in message
    assert not _fatal(_run(xr, _clusters({"allowedTolerations": ["team-b-only"]})))


def test_no_cluster_selected_checks_against_the_default_policy():
    mutate, path, _ = HOSTILE["hostNetwork"]
    (message,) = _fatal(_run(_deployment(mutate), []))
    assert f"{ENGINE}{path}: " in message
    assert "default pod policy" in message


def test_many_violations_are_listed_up_to_a_bound():
    def everything(spec):
        for mutate, _, _ in HOSTILE.values():
            mutate(spec)
        spec["volumes"] += [{"name": f"h{i}", "hostPath": {"path": "/"}} for i in range(5000)]

    (message,) = _fatal(_run(_deployment(everything), _clusters()))
    assert "more; remove the field" in message
    assert len(message) < 4096


def test_an_apparmor_annotation_on_the_deployments_template_is_checked():
    xr = _deployment()
    xr["spec"]["template"].setdefault("metadata", {})["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/engine": "unconfined"
    }
    (message,) = _fatal(_run(xr, _clusters()))
    assert "spec.template.metadata.annotations[container.apparmor" in message
    assert "(rule appArmor)" in message


# --- the policy and the namespace labels -------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "enforced"),
    [
        (None, "baseline"),
        ({"level": "restricted"}, "restricted"),
        ({"level": "restricted", "allow": ["runAsNonRoot"]}, "baseline"),
        ({"level": "restricted", "allowedCapabilities": ["CHOWN"]}, "baseline"),
        ({"allow": ["hostPath"]}, "privileged"),
        ({"allowedCapabilities": ["IPC_LOCK"]}, "privileged"),
        ({"allow": ["nodeName", "tolerations"]}, "baseline"),
    ],
)
def test_the_enforced_level_admits_every_waived_rule(raw, enforced):
    policy = read_policy(raw)
    assert policy.enforced_level == enforced
    labels = policy.namespace_labels()
    assert labels[pod_policy.LABEL_ENFORCE] == enforced
    assert labels[pod_policy.LABEL_WARN] == policy.level


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"level": "privileged"}, "spec.podSecurity.level"),
        ({"allow": ["everything"]}, "spec.podSecurity.allow"),
        ({"allow": "privileged"}, "spec.podSecurity.allow"),
        ({"allowedCapabilities": [""] * 2}, "spec.podSecurity.allowedCapabilities"),
        ({"allowedTolerations": ["k"] * 65}, "spec.podSecurity.allowedTolerations"),
        ("baseline", "spec.podSecurity"),
    ],
)
def test_a_malformed_policy_is_refused_naming_the_field(raw, path):
    with pytest.raises(InputError) as err:
        read_policy(raw)
    assert err.value.path == path


def test_the_namespace_carries_the_clusters_pod_security_labels():
    cluster = _clusters({"level": "restricted", "allow": ["runAsNonRoot"]})[0]
    deployment = read_deployment(_deployment())
    parsed = read_cluster(cluster)
    body = model_replica(
        deployment, parsed, parsed.pools[0], 1, autoscaling=None
    )  # what compose-model-replica reads
    assert body["spec"]["cluster"]["podSecurity"] == {"level": "restricted", "enforce": "baseline"}
    replica = copy.deepcopy(body)
    replica.setdefault("metadata", {}).update(name="r", namespace="ml-team")
    composed = compose(parse_replica(replica)).composed
    (namespace,) = [c.manifest for c in composed if c.manifest["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"] == {
        pod_policy.LABEL_ENFORCE: "baseline",
        pod_policy.LABEL_WARN: "restricted",
        pod_policy.LABEL_AUDIT: "restricted",
    }


def test_a_replica_without_the_field_gets_baseline_labels():
    inputs = sorted((REPO / "tests/unit/testdata/model_replica/inputs").glob("*.yaml"))
    composed = compose(parse_replica(_load(inputs[0]))).composed
    (namespace,) = [c.manifest for c in composed if c.manifest["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"][pod_policy.LABEL_ENFORCE] == "baseline"


def test_the_policy_value_is_frozen():
    assert PodPolicy() == DEFAULT_POLICY


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("https://admin:hunter2@evil.example.com/v1", ".spec.containers[0].name"),
        ("admin:hunter2@collector.example.com:4317", ".spec.containers[0].name"),
        ("https://hub.example.com/?api_key=hunter2", ".spec.containers[0].name"),
    ],
)
def test_a_credential_anywhere_in_a_template_is_refused_never_echoed(value, where):
    (message,) = _fatal(_run(_deployment(lambda s: _container(s).update(name=value)), _clusters()))
    assert f"{ENGINE}{where}: must not carry credentials" in message
    assert "hunter2" not in message


def test_an_image_pinned_by_digest_is_not_a_credential():
    digest = "vllm:0.32.0@sha256:" + "a" * 64
    assert not _fatal(_run(_deployment(lambda s: _container(s).update(image=digest)), _clusters()))
