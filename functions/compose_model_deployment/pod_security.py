"""A ModelDeployment's pod templates against the pod policy of every cluster it selects.

Checked before placement, in the shell, so a refusal is a fatal result on the
ModelDeployment itself (its Synced condition says the field and the rule) and nothing is
placed or changed: Crossplane applies nothing from a fatal result, so what was composed
before stays as it was.

Which clusters: every InferenceCluster the deployment's clusterSelector selects (not
only those placement would choose now, so a refusal does not come and go with free
capacity); none selected, the default policy (`baseline`; tolerations are judged only
against a selected cluster's pools), so a hostile template is refused before the fleet
has a cluster for it. The policy rules live in
functions/common/pod_policy.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

from functions.common import pod_policy
from functions.common.reader import InputError
from functions.common.redact import url_credentials
from functions.compose_model_deployment.model import Cluster, Deployment

# With no cluster selected: baseline, tolerations aside (no pool declares a taint yet, so
# a toleration cannot be judged until a cluster is selected).
NO_CLUSTER_POLICY: Final = pod_policy.PodPolicy(allow=frozenset({"tolerations"}))
# user:password@host without a scheme (a DSN, an OTLP endpoint); not an image digest
# (`name:tag@sha256:...`).
_BARE_USERINFO: Final = re.compile(
    r"(?:^|[\s'\"=])[^\s/:@'\"=]+:[^\s/@'\"]+@(?!sha\d+:)[A-Za-z0-9]"
)
# How many violations one message lists (the rest are counted).
SHOWN: Final = 3


def _violations(
    deployment: Deployment, policy: pod_policy.PodPolicy, tolerable: frozenset[str]
) -> list[pod_policy.Violation]:
    found = pod_policy.check_tolerations(
        deployment.raw_tolerations, "spec.template.spec.tolerations", policy, tolerable
    )
    found += pod_policy.check_pod_template(
        {"metadata": deployment.pod_metadata}, "spec.template", policy, tolerable
    )
    for engine in deployment.engines:
        for member in engine.members:
            found += pod_policy.check_pod_template(
                member.template, f"{member.path}.template", policy, tolerable
            )
    return found


def _declared_taints(clusters: Iterable[Cluster]) -> frozenset[str]:
    """The taint keys the platform declared on the pools of the selected clusters: a
    toleration of one asks for nothing the platform keeps from placement (placement
    honours them), wherever the deployment lands."""
    return frozenset(t.key for c in clusters for pool in c.pools for t in pool.taints)


def _strings(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, value) of every string in a template (keys and values), depth first."""
    stack = [(node, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            yield where, value
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                yield f"{where}.{key}", str(key)
                stack.append((item, f"{where}.{key}"))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]") for i, item in reversed(list(enumerate(value))))


def _copied(deployment: Deployment) -> Iterator[tuple[str, Any]]:
    """(path, value) of what the deployment copies verbatim into every ModelReplica."""
    yield "spec.source", deployment.source
    if deployment.autoscaling is not None:
        yield "spec.autoscaling", deployment.autoscaling
    yield "spec.template.metadata", deployment.pod_metadata
    yield "spec.template.spec.tolerations", deployment.raw_tolerations
    for engine in deployment.engines:
        for member in engine.members:
            yield f"{member.path}.template", member.template
            for device in member.devices:
                for i, selector in enumerate(device.selectors):
                    yield f"{device.path}.selectors[{i}].cel", selector


def _refuse_credentials(deployment: Deployment) -> None:
    """A URL carrying a credential anywhere the deployment copies into its ModelReplicas
    (a pod template, a selector, the source, autoscaling) is refused, named, never
    echoed: the copies live in every ModelReplica and Object on the control plane, where
    anyone who may read them would read it."""
    for base, node in _copied(deployment):
        for where, text in _strings(node, base):
            found = url_credentials(text) if ("@" in text or "=" in text) else []
            if not found and _BARE_USERINFO.search(text):
                found = ["user-info (user:password@host)"]
            if found:
                raise InputError(
                    where,
                    f"must not carry credentials (found {', '.join(found)}); read them from "
                    "a Secret (env valueFrom.secretKeyRef, or a mounted Secret)",
                )


def check(deployment: Deployment, clusters: Iterable[Cluster]) -> None:
    """InputError naming the first field that escapes a selected cluster's policy, the
    rule, and the cluster; nothing if every selected cluster admits the templates. A
    credential in a template is refused first, whatever the policy."""
    _refuse_credentials(deployment)
    selected = [c for c in clusters if deployment.cluster_selector.matches(c.labels)]
    declared = _declared_taints(selected)
    checks: list[tuple[str, pod_policy.PodPolicy, frozenset[str]]] = [
        (f"InferenceCluster {c.name}", c.pod_policy, declared)
        for c in sorted(selected, key=lambda c: c.name)
    ] or [
        (
            "the default pod policy (no InferenceCluster is selected)",
            NO_CLUSTER_POLICY,
            frozenset(),
        )
    ]
    for where, policy, tolerable in checks:
        found = _violations(deployment, policy, tolerable)
        if not found:
            continue
        first, rest = found[0], found[1:]
        shown = "; ".join(str(v) for v in rest[: SHOWN - 1])
        more = len(rest) - min(len(rest), SHOWN - 1)
        also = f"; also {shown}" if shown else ""
        also += f" and {more} more" if more else ""
        raise InputError(
            first.path,
            f"{first.detail} (rule {first.rule}) under the {policy.level} pod policy of "
            f"{where} (spec.podSecurity){also}; remove the field, narrow "
            "spec.template.spec.clusterSelector, or ask the platform team to allow the rule "
            "in spec.podSecurity.allow",
        )
