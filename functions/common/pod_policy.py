"""The pod policy an InferenceCluster sets for tenants' workloads, and the check of a pod
template against it.

A ModelDeployment's pod templates are written by an ML team and reach every member the
model is placed on. The platform team sets, per InferenceCluster, a Pod Security
Standards level (`spec.podSecurity.level`: `baseline` by default, or `restricted`) and
the exceptions it grants (`allow`, `allowedCapabilities`, `allowedTolerations`).
compose-model-deployment refuses a template that escapes the policy of a cluster the
deployment selects, naming the field's path and the rule, before anything is placed;
the composed tenant Namespace on each member carries the Pod Security Admission labels
of the same policy, so the member's API server enforces it too (a second line, and the
only one for what the function does not see).

The rules are the Kubernetes Pod Security Standards (baseline and restricted, as
published for Kubernetes 1.33) plus two of ours that no admission level covers: a pod
template may not pin itself to a node (`nodeName`, or a `nodeSelector` / node affinity
on the node's host name or `metadata.name`: all under the rule `nodeName`), may not name
the scheduling policy the platform keeps (`priorityClassName`, `runtimeClassName`,
`schedulerName`: each its own rule), and may tolerate only the taints the platform
declared on the cluster's pools or allowed by key. An exception the platform
grants that the declared level would refuse lowers the Namespace's enforced level to
the lowest that admits it (the declared level stays as the `warn` and `audit` labels).

Pure: no I/O. Bounded: every list is walked once and nothing grows with the input but
the list of violations, which is cut at `MAX_VIOLATIONS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from functions.common.reader import InputError

LEVEL_BASELINE: Final = "baseline"
LEVEL_RESTRICTED: Final = "restricted"
LEVEL_PRIVILEGED: Final = "privileged"
LEVELS: Final = (LEVEL_BASELINE, LEVEL_RESTRICTED)
DEFAULT_LEVEL: Final = LEVEL_BASELINE

# Rule names (what `spec.podSecurity.allow` lists), each with the lowest Pod Security
# level that refuses it ("" for ours, which no admission level covers).
RULE_LEVEL: Final = {
    # baseline
    "hostProcess": LEVEL_BASELINE,
    "hostNamespaces": LEVEL_BASELINE,
    "privileged": LEVEL_BASELINE,
    "capabilities": LEVEL_BASELINE,
    "hostPath": LEVEL_BASELINE,
    "hostPorts": LEVEL_BASELINE,
    "appArmor": LEVEL_BASELINE,
    "seLinux": LEVEL_BASELINE,
    "procMount": LEVEL_BASELINE,
    "seccomp": LEVEL_BASELINE,
    "sysctls": LEVEL_BASELINE,
    # restricted
    "volumeTypes": LEVEL_RESTRICTED,
    "allowPrivilegeEscalation": LEVEL_RESTRICTED,
    "runAsNonRoot": LEVEL_RESTRICTED,
    "runAsUser": LEVEL_RESTRICTED,
    # ours
    "nodeName": "",
    "tolerations": "",
    "priorityClassName": "",
    "runtimeClassName": "",
    "schedulerName": "",
}
RULES: Final = tuple(RULE_LEVEL)

# Pod Security Admission's namespace labels.
LABEL_ENFORCE: Final = "pod-security.kubernetes.io/enforce"
LABEL_WARN: Final = "pod-security.kubernetes.io/warn"
LABEL_AUDIT: Final = "pod-security.kubernetes.io/audit"

# baseline: the capabilities a container may add.
BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_CAPABILITIES: Final = frozenset({"NET_BIND_SERVICE"})
# baseline: the "safe" sysctls.
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES: Final = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# restricted: the volume sources a pod may use.
RESTRICTED_VOLUMES: Final = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
# Taints the API server's DefaultTolerationSeconds plugin tolerates on every pod: a
# toleration of them asks for nothing the platform did not already give.
DEFAULT_TOLERATED: Final = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)
APPARMOR_ANNOTATION: Final = "container.apparmor.security.beta.kubernetes.io/"
# Node pinning by label or field: the well-known host-name label and a node's own name.
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
NODE_NAME_FIELD: Final = "metadata.name"
# Fields that pick the pod's scheduling policy: the platform's, each refused unless the
# cluster's policy allows it by the field's name.
SCHEDULING_FIELDS: Final = ("priorityClassName", "runtimeClassName", "schedulerName")

MAX_VIOLATIONS: Final = 20
# The schema's bounds on the policy's lists (apis/inferenceclusters/definition.yaml).
MAX_ALLOWED: Final = 64


@dataclass(frozen=True)
class PodPolicy:
    """One cluster's policy for tenants' pods."""

    level: str = DEFAULT_LEVEL
    allow: frozenset[str] = frozenset()
    capabilities: frozenset[str] = frozenset()  # added capabilities allowed beyond the level
    toleration_keys: frozenset[str] = frozenset()  # taint keys tolerable beyond the pools'

    @property
    def enforced_level(self) -> str:
        """The Pod Security level the tenant Namespace enforces: the declared one, lowered
        to the lowest that admits every exception the platform grants."""
        granted = {RULE_LEVEL[r] for r in self.allow} - {""}
        if self.capabilities - BASELINE_CAPABILITIES:
            granted.add(LEVEL_BASELINE)
        if LEVEL_BASELINE in granted:
            return LEVEL_PRIVILEGED
        if LEVEL_RESTRICTED in granted or (
            self.level == LEVEL_RESTRICTED and self.capabilities - RESTRICTED_CAPABILITIES
        ):
            return LEVEL_BASELINE
        return self.level

    def namespace_labels(self) -> dict[str, str]:
        return {
            LABEL_ENFORCE: self.enforced_level,
            LABEL_WARN: self.level,
            LABEL_AUDIT: self.level,
        }


DEFAULT_POLICY: Final = PodPolicy()


def _names(raw: Any, path: str) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        raise InputError(path, "must be a list of non-empty strings")
    if len(raw) > MAX_ALLOWED:
        raise InputError(path, f"has {len(raw)} entries; at most {MAX_ALLOWED}")
    return frozenset(raw)


def read_policy(raw: Any, path: str = "spec.podSecurity") -> PodPolicy:
    """An InferenceCluster's `spec.podSecurity` (absent: baseline, no exceptions)."""
    if raw is None:
        return DEFAULT_POLICY
    if not isinstance(raw, dict):
        raise InputError(path, "must be an object")
    level = raw.get("level") if raw.get("level") is not None else DEFAULT_LEVEL
    if level not in LEVELS:
        raise InputError(f"{path}.level", f"{str(level)[:40]!r} is not one of {', '.join(LEVELS)}")
    allow = _names(raw.get("allow"), f"{path}.allow")
    unknown = sorted(allow - set(RULES))
    if unknown:
        raise InputError(
            f"{path}.allow",
            f"{unknown[0][:40]!r} is not a rule (rules: {', '.join(RULES)})",
        )
    return PodPolicy(
        level=level,
        allow=allow,
        capabilities=_names(raw.get("allowedCapabilities"), f"{path}.allowedCapabilities"),
        toleration_keys=_names(raw.get("allowedTolerations"), f"{path}.allowedTolerations"),
    )


@dataclass(frozen=True)
class Violation:
    path: str  # the field's path in the ModelDeployment
    rule: str  # a key of RULE_LEVEL
    detail: str  # what the rule says, for a person

    def __str__(self) -> str:
        return f"{self.path}: {self.detail} (rule {self.rule})"


def _shown(value: Any) -> str:
    return repr(str(value)[:60])


def _obj(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


class _Checker:
    def __init__(self, policy: PodPolicy, tolerable: frozenset[str]) -> None:
        self.policy = policy
        self.tolerable = tolerable | policy.toleration_keys | DEFAULT_TOLERATED
        self.restricted = policy.level == LEVEL_RESTRICTED
        self.found: list[Violation] = []

    def applies(self, rule: str) -> bool:
        if rule in self.policy.allow:
            return False
        level = RULE_LEVEL[rule]
        return level != LEVEL_RESTRICTED or self.restricted

    def refuse(self, path: str, rule: str, detail: str) -> None:
        if self.applies(rule) and len(self.found) < MAX_VIOLATIONS:
            self.found.append(Violation(path, rule, detail))

    # -- the pod -------------------------------------------------------------------------

    def pod(self, spec: Mapping, path: str, metadata: Mapping | None = None) -> None:
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(field) is True:
                self.refuse(f"{path}.{field}", "hostNamespaces", "host namespaces are not allowed")
        if spec.get("nodeName"):
            self.refuse(
                f"{path}.nodeName",
                "nodeName",
                "a pod may not pin itself to a node; placement chooses the nodes",
            )
        self.node_pinning(spec, path)
        for field in SCHEDULING_FIELDS:
            if spec.get(field) not in (None, ""):
                self.refuse(
                    f"{path}.{field}",
                    field,
                    f"{_shown(spec[field])}: the scheduling policy is the platform's "
                    f"(spec.podSecurity.allow: {field})",
                )
        psc = _obj(spec.get("securityContext"))
        self.security_context(psc, f"{path}.securityContext")
        for i, sysctl in enumerate(_list(psc.get("sysctls"))):
            name = _obj(sysctl).get("name")
            if name not in SAFE_SYSCTLS:
                self.refuse(
                    f"{path}.securityContext.sysctls[{i}].name",
                    "sysctls",
                    f"{_shown(name)} is not one of the safe sysctls",
                )
        for i, volume in enumerate(_list(spec.get("volumes"))):
            self.volume(_obj(volume), f"{path}.volumes[{i}]")
        self.tolerations(spec.get("tolerations"), f"{path}.tolerations")
        pod_non_root = psc.get("runAsNonRoot") is True
        pod_seccomp = _obj(psc.get("seccompProfile")).get("type") in ("RuntimeDefault", "Localhost")
        for field in ("initContainers", "containers", "ephemeralContainers"):
            for i, container in enumerate(_list(spec.get(field))):
                self.container(
                    _obj(container),
                    f"{path}.{field}[{i}]",
                    pod_non_root=pod_non_root,
                    pod_seccomp=pod_seccomp,
                )
        annotations = _obj(_obj(metadata).get("annotations"))
        for key, value in annotations.items():
            if str(key).startswith(APPARMOR_ANNOTATION) and not (
                value == "runtime/default" or str(value).startswith("localhost/")
            ):
                self.refuse(
                    f"metadata.annotations[{key}]",
                    "appArmor",
                    f"AppArmor profile {_shown(value)} is not runtime/default or localhost/*",
                )

    def node_pinning(self, spec: Mapping, path: str) -> None:
        """A node selector or node affinity on one node's host name or name: `nodeName`
        by another road."""
        detail = "a pod may not pin itself to a node; placement chooses the nodes"
        if HOSTNAME_LABEL in _obj(spec.get("nodeSelector")):
            self.refuse(f"{path}.nodeSelector[{HOSTNAME_LABEL}]", "nodeName", detail)
        node = _obj(_obj(spec.get("affinity")).get("nodeAffinity"))
        required = _obj(node.get("requiredDuringSchedulingIgnoredDuringExecution"))
        terms = [
            (f"requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]", _obj(t))
            for i, t in enumerate(_list(required.get("nodeSelectorTerms")))
        ]
        terms += [
            (
                f"preferredDuringSchedulingIgnoredDuringExecution[{i}].preference",
                _obj(_obj(p).get("preference")),
            )
            for i, p in enumerate(
                _list(node.get("preferredDuringSchedulingIgnoredDuringExecution"))
            )
        ]
        base = f"{path}.affinity.nodeAffinity"
        for where, term in terms:
            for field, key in (
                ("matchExpressions", HOSTNAME_LABEL),
                ("matchFields", NODE_NAME_FIELD),
            ):
                for j, expression in enumerate(_list(term.get(field))):
                    if _obj(expression).get("key") == key:
                        self.refuse(f"{base}.{where}.{field}[{j}].key", "nodeName", detail)

    def volume(self, volume: Mapping, path: str) -> None:
        if "hostPath" in volume:
            self.refuse(f"{path}.hostPath", "hostPath", "hostPath volumes are not allowed")
            return
        kinds = [k for k in volume if k != "name"]
        for kind in kinds:
            if kind not in RESTRICTED_VOLUMES:
                self.refuse(
                    f"{path}.{kind}",
                    "volumeTypes",
                    f"volume type {kind!r} is not one of {', '.join(sorted(RESTRICTED_VOLUMES))}",
                )

    def tolerations(self, raw: Any, path: str) -> None:
        for i, toleration in enumerate(_list(raw)):
            key = _obj(toleration).get("key") or ""
            if not key:
                self.refuse(
                    f"{path}[{i}]",
                    "tolerations",
                    "a toleration without a key tolerates every taint, including those "
                    "that keep nodes for the platform",
                )
            elif key not in self.tolerable:
                self.refuse(
                    f"{path}[{i}].key",
                    "tolerations",
                    f"{_shown(key)} is not a taint of the cluster's pools or one the platform "
                    "allows (spec.podSecurity.allowedTolerations)",
                )

    # -- security contexts ----------------------------------------------------------------

    def security_context(self, sc: Mapping, path: str) -> None:
        if _obj(sc.get("windowsOptions")).get("hostProcess") is True:
            self.refuse(
                f"{path}.windowsOptions.hostProcess",
                "hostProcess",
                "Windows HostProcess pods are not allowed",
            )
        se = _obj(sc.get("seLinuxOptions"))
        if se.get("type", "") not in SELINUX_TYPES:
            self.refuse(
                f"{path}.seLinuxOptions.type",
                "seLinux",
                f"{_shown(se.get('type'))} is not a container SELinux type",
            )
        for field in ("user", "role"):
            if se.get(field):
                self.refuse(
                    f"{path}.seLinuxOptions.{field}",
                    "seLinux",
                    f"a custom SELinux {field} is not allowed",
                )
        seccomp = _obj(sc.get("seccompProfile")).get("type")
        if seccomp == "Unconfined":
            self.refuse(
                f"{path}.seccompProfile.type",
                "seccomp",
                "an Unconfined seccomp profile is not allowed",
            )
        apparmor = _obj(sc.get("appArmorProfile")).get("type")
        if apparmor == "Unconfined":
            self.refuse(
                f"{path}.appArmorProfile.type",
                "appArmor",
                "an Unconfined AppArmor profile is not allowed",
            )
        if sc.get("runAsUser") == 0:
            self.refuse(f"{path}.runAsUser", "runAsUser", "running as UID 0 is not allowed")
        if sc.get("runAsNonRoot") is False:
            self.refuse(f"{path}.runAsNonRoot", "runAsNonRoot", "runAsNonRoot must not be false")

    def container(
        self, container: Mapping, path: str, *, pod_non_root: bool, pod_seccomp: bool
    ) -> None:
        sc = _obj(container.get("securityContext"))
        scpath = f"{path}.securityContext"
        if sc.get("privileged") is True:
            self.refuse(
                f"{scpath}.privileged", "privileged", "privileged containers are not allowed"
            )
        self.security_context(sc, scpath)
        if sc.get("procMount") not in (None, "Default"):
            self.refuse(
                f"{scpath}.procMount", "procMount", f"{_shown(sc['procMount'])} is not Default"
            )
        caps = _obj(sc.get("capabilities"))
        allowed = RESTRICTED_CAPABILITIES if self.restricted else BASELINE_CAPABILITIES
        for i, cap in enumerate(_list(caps.get("add"))):
            if cap not in allowed and cap not in self.policy.capabilities:
                level = self.policy.level
                self.refuse(
                    f"{scpath}.capabilities.add[{i}]",
                    "capabilities",
                    f"adding {_shown(cap)} is not allowed under {level} "
                    "(or spec.podSecurity.allowedCapabilities)",
                )
        for i, port in enumerate(_list(container.get("ports"))):
            if _obj(port).get("hostPort") not in (None, 0):
                self.refuse(
                    f"{path}.ports[{i}].hostPort", "hostPorts", "host ports are not allowed"
                )
        if not self.restricted:
            return
        if sc.get("allowPrivilegeEscalation") is not False:
            self.refuse(
                f"{scpath}.allowPrivilegeEscalation",
                "allowPrivilegeEscalation",
                "must be false under restricted",
            )
        if not (sc.get("runAsNonRoot") is True or (pod_non_root and "runAsNonRoot" not in sc)):
            self.refuse(
                f"{scpath}.runAsNonRoot",
                "runAsNonRoot",
                "must be true (here or in the pod's securityContext) under restricted",
            )
        seccomp = _obj(sc.get("seccompProfile")).get("type")
        if not (seccomp in ("RuntimeDefault", "Localhost") or (pod_seccomp and seccomp is None)):
            self.refuse(
                f"{scpath}.seccompProfile.type",
                "seccomp",
                "must be RuntimeDefault or Localhost (here or in the pod's securityContext) "
                "under restricted",
            )
        if "ALL" not in _list(caps.get("drop")):
            self.refuse(
                f"{scpath}.capabilities.drop",
                "capabilities",
                "must drop ALL under restricted",
            )


def check_pod_template(
    template: Any,
    path: str,
    policy: PodPolicy,
    tolerable: frozenset[str] = frozenset(),
) -> list[Violation]:
    """Every way a pod template (`{metadata, spec}`) escapes the policy, at most
    MAX_VIOLATIONS, in the order of the fields. `tolerable`: the taint keys of the
    cluster's pools."""
    checker = _Checker(policy, tolerable)
    template = _obj(template)
    checker.pod(_obj(template.get("spec")), f"{path}.spec", _obj(template.get("metadata")))
    # A pod-level annotation's path is relative to the template.
    return [
        Violation(f"{path}.{v.path}", v.rule, v.detail) if v.path.startswith("metadata.") else v
        for v in checker.found
    ]


def check_tolerations(
    tolerations: Any, path: str, policy: PodPolicy, tolerable: frozenset[str] = frozenset()
) -> list[Violation]:
    checker = _Checker(policy, tolerable)
    checker.tolerations(tolerations, path)
    return checker.found


def iter_rules() -> Iterator[tuple[str, str]]:
    """(rule, level) for the docs: "" is ours."""
    yield from RULE_LEVEL.items()
