"""The shape of a tenant's pod template: every field the suite reads, or that a member's
API server would refuse in the wrong shape, has the type Kubernetes gives it.

A ModelDeployment's `engines[].members[].template` is free-form in the XRD (a whole
PodTemplateSpec), so its shape reaches the functions unchecked. Before anything reads it
(placement, the pod policy, the engine wiring), a template whose field has the wrong type
(a string where a list is, a list where an object is) is refused naming the field and
what it must be, instead of failing deeper inside as "unexpected error in the function".
Fields not listed here are left to the member's API server, which has the full schema.

Pure, bounded: one walk over the template, every list at most MAX_ITEMS long.
"""

from __future__ import annotations

from typing import Any, Final

from functions.common.reader import InputError

MAX_ITEMS: Final = 8192

# Types: "str", "int" (a whole number), "bool", "num-or-str" (a quantity or an int-or-
# string port), "obj" (any object), ("map", t) (an object of t values), ("list", t) (a
# list of t), or a dict of field -> type (an object with those fields, others unchecked).
_STRS = ("list", "str")
_QUANTITIES = ("map", "num-or-str")
_SELECTOR_TERM = {
    "matchExpressions": ("list", {"key": "str", "operator": "str", "values": _STRS}),
    "matchFields": ("list", {"key": "str", "operator": "str", "values": _STRS}),
}
_LABEL_SELECTOR = {
    "matchLabels": ("map", "str"),
    "matchExpressions": ("list", {"key": "str", "operator": "str", "values": _STRS}),
}
_POD_AFFINITY_TERM = {
    "labelSelector": _LABEL_SELECTOR,
    "namespaceSelector": _LABEL_SELECTOR,
    "namespaces": _STRS,
    "topologyKey": "str",
}
_POD_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": ("list", _POD_AFFINITY_TERM),
    "preferredDuringSchedulingIgnoredDuringExecution": (
        "list",
        {"weight": "int", "podAffinityTerm": _POD_AFFINITY_TERM},
    ),
}
_SECURITY_CONTEXT = {
    "capabilities": {"add": _STRS, "drop": _STRS},
    "privileged": "bool",
    "allowPrivilegeEscalation": "bool",
    "runAsNonRoot": "bool",
    "runAsUser": "int",
    "runAsGroup": "int",
    "readOnlyRootFilesystem": "bool",
    "procMount": "str",
    "seccompProfile": {"type": "str", "localhostProfile": "str"},
    "appArmorProfile": {"type": "str", "localhostProfile": "str"},
    "seLinuxOptions": {"user": "str", "role": "str", "type": "str", "level": "str"},
    "windowsOptions": {"hostProcess": "bool"},
    "sysctls": ("list", {"name": "str", "value": "str"}),
    "fsGroup": "int",
    "supplementalGroups": ("list", "int"),
}
_PROBE = {
    "httpGet": {"path": "str", "port": "num-or-str", "scheme": "str"},
    "tcpSocket": {"port": "num-or-str"},
    "grpc": {"port": "int", "service": "str"},
    "exec": {"command": _STRS},
    "initialDelaySeconds": "int",
    "periodSeconds": "int",
    "timeoutSeconds": "int",
    "failureThreshold": "int",
    "successThreshold": "int",
}
_ENV = {
    "name": "str",
    "value": "str",
    "valueFrom": {
        "fieldRef": {"fieldPath": "str", "apiVersion": "str"},
        "resourceFieldRef": {"resource": "str", "containerName": "str"},
        "secretKeyRef": {"name": "str", "key": "str", "optional": "bool"},
        "configMapKeyRef": {"name": "str", "key": "str", "optional": "bool"},
    },
}
_CONTAINER = {
    "name": "str",
    "image": "str",
    "imagePullPolicy": "str",
    "command": _STRS,
    "args": _STRS,
    "workingDir": "str",
    "env": ("list", _ENV),
    "envFrom": (
        "list",
        {"prefix": "str", "secretRef": {"name": "str"}, "configMapRef": {"name": "str"}},
    ),
    "ports": (
        "list",
        {
            "name": "str",
            "containerPort": "int",
            "hostPort": "int",
            "protocol": "str",
            "hostIP": "str",
        },
    ),
    "resources": {
        "requests": _QUANTITIES,
        "limits": _QUANTITIES,
        "claims": ("list", {"name": "str", "request": "str"}),
    },
    "volumeMounts": (
        "list",
        {"name": "str", "mountPath": "str", "subPath": "str", "readOnly": "bool"},
    ),
    "securityContext": _SECURITY_CONTEXT,
    "readinessProbe": _PROBE,
    "livenessProbe": _PROBE,
    "startupProbe": _PROBE,
    "lifecycle": "obj",
    "terminationMessagePolicy": "str",
    "terminationMessagePath": "str",
    "stdin": "bool",
    "tty": "bool",
}
_POD_SPEC = {
    "containers": ("list", _CONTAINER),
    "initContainers": ("list", _CONTAINER),
    "ephemeralContainers": ("list", _CONTAINER),
    "volumes": ("list", {"name": "str", "hostPath": {"path": "str", "type": "str"}}),
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": ("list", _SELECTOR_TERM)
            },
            "preferredDuringSchedulingIgnoredDuringExecution": (
                "list",
                {"weight": "int", "preference": _SELECTOR_TERM},
            ),
        },
        "podAffinity": _POD_AFFINITY,
        "podAntiAffinity": _POD_AFFINITY,
    },
    "tolerations": (
        "list",
        {
            "key": "str",
            "operator": "str",
            "value": "str",
            "effect": "str",
            "tolerationSeconds": "int",
        },
    ),
    "nodeSelector": ("map", "str"),
    "nodeName": "str",
    "securityContext": _SECURITY_CONTEXT,
    "resourceClaims": (
        "list",
        {
            "name": "str",
            "resourceClaimName": "str",
            "resourceClaimTemplateName": "str",
        },
    ),
    "imagePullSecrets": ("list", {"name": "str"}),
    "serviceAccountName": "str",
    "priorityClassName": "str",
    "runtimeClassName": "str",
    "schedulerName": "str",
    "hostNetwork": "bool",
    "hostPID": "bool",
    "hostIPC": "bool",
    "topologySpreadConstraints": (
        "list",
        {
            "maxSkew": "int",
            "topologyKey": "str",
            "whenUnsatisfiable": "str",
            "labelSelector": _LABEL_SELECTOR,
        },
    ),
    "hostAliases": ("list", {"ip": "str", "hostnames": _STRS}),
    "dnsConfig": "obj",
    "terminationGracePeriodSeconds": "int",
}
POD_TEMPLATE: Final = {
    "metadata": {"labels": ("map", "str"), "annotations": ("map", "str")},
    "spec": _POD_SPEC,
}
_WHAT = {
    "str": "a string",
    "int": "a whole number",
    "bool": "true or false",
    "num-or-str": "a number or a string",
    "obj": "an object",
}


def _is_int(value: Any) -> bool:
    # A protobuf Struct carries every number as a float: 8 arrives as 8.0.
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


def _describe(kind: Any) -> str:
    if isinstance(kind, str):
        return _WHAT[kind]
    if isinstance(kind, dict):
        return "an object"
    if kind[0] == "map":
        return f"an object of {_describe(kind[1]).removeprefix('a ').removeprefix('an ')}s"
    return "a list"


def _check(value: Any, kind: Any, path: str) -> None:
    ok = True
    if kind == "str":
        ok = isinstance(value, str)
    elif kind == "int":
        ok = _is_int(value)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "num-or-str":
        ok = isinstance(value, str) or (
            isinstance(value, int | float) and not isinstance(value, bool)
        )
    elif kind == "obj" or isinstance(kind, dict) or kind[0] == "map":
        ok = isinstance(value, dict)
    elif kind[0] == "list":
        ok = isinstance(value, list)
    if not ok:
        raise InputError(path, f"must be {_describe(kind)}")
    if isinstance(kind, dict):
        for field, sub in kind.items():
            if field not in value:
                continue
            if value[field] is None:
                if isinstance(sub, str) and sub != "obj":
                    continue  # a null scalar reads as absent
                raise InputError(
                    f"{path}.{field}", f"must be {_describe(sub)}; leave it out rather than null"
                )
            _check(value[field], sub, f"{path}.{field}")
    elif isinstance(kind, tuple) and kind[0] == "map":
        for key, item in value.items():
            _check(item, kind[1], f"{path}[{key}]")
    elif isinstance(kind, tuple) and kind[0] == "list":
        if len(value) > MAX_ITEMS:
            raise InputError(path, f"has {len(value)} items; at most {MAX_ITEMS}")
        for i, item in enumerate(value):
            _check(item, kind[1], f"{path}[{i}]")


def check_pod_template(template: Any, path: str) -> None:
    """Raise InputError naming the first field of `template` (a PodTemplateSpec; absent
    is an empty one) whose type is not Kubernetes'."""
    if template is None:
        return
    _check(template, POD_TEMPLATE, path)


def check_pod_metadata(metadata: Any, path: str) -> None:
    """The same for a template's `metadata` alone (labels and annotations)."""
    if metadata is None:
        return
    _check(metadata, POD_TEMPLATE["metadata"], path)
