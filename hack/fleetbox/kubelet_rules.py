"""What the kubelet decides from a pod spec before it starts a container, ported from
Kubernetes v1.35 (the release of our API server) so a pod run as a local process starts
exactly as a kubelet would start it (hack/fleetbox/podrunner.py runs it).

Ported, each from the named source of k8s.io/kubernetes v1.35.8:
- `expand`: third_party/forked/golang/expansion/expand.go. `$(VAR)` is replaced when VAR
  is known; `$$` is one literal `$`; an unknown or unterminated reference stays as written.
- `container_env`: pkg/kubelet/kubelet_pods.go makeEnvironmentVariables. envFrom first
  (a later source overrides an earlier one), then env in order: a `value` expands from
  the variables defined EARLIER (envFrom's and env's) and the service variables, never a
  later one; `valueFrom` is not expanded. Service variables are added last, where the
  container did not define the name.
- `command_line`: pkg/kubelet/container/helpers.go ExpandContainerCommandAndArgs: command
  and args expand from the container's FINAL environment (every variable, whatever its
  position), then the image rules: `command` replaces the image's entrypoint and its CMD,
  `args` replaces only the CMD.
- `field_ref_value`: podFieldSelectorRuntimeValue and pkg/fieldpath; `resource_field_value`:
  pkg/api/v1/resource (a limit the container does not set is the node's allocatable).
- `service_env`: getServiceEnvVarMap and pkg/kubelet/envvars (Docker-link variables).

Pure: every input is a plain dict as the API serves it (a pod, a Service, a ConfigMap's
data); nothing here talks to a server, reads the clock or the environment.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

_OPERATOR = "$"
_OPENER = "("
_CLOSER = ")"


class ContainerConfigError(ValueError):
    """The kubelet cannot build the container's configuration (a missing ConfigMap key,
    an unsupported field path, ...): the container waits with reason
    CreateContainerConfigError and this message, and the kubelet retries."""


# --- $(VAR) expansion --------------------------------------------------------------------


def expand(text: str, lookup: Mapping[str, str] | Callable[[str], str | None]) -> str:
    """`text` with each `$(NAME)` that `lookup` knows replaced, as the kubelet expands
    env values, command and args.

    `$$` is one `$` (so `$$(NAME)` is the literal `$(NAME)`); `$(NAME)` with NAME unknown
    stays `$(NAME)`; `$(` without a closing parenthesis and a `$` before any other
    character (or at the end) stay as written. A name is everything up to the first `)`,
    whatever it contains (`$(A B)` looks up "A B")."""
    find = lookup.get if isinstance(lookup, Mapping) else lookup
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == _OPERATOR and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == _OPERATOR:
                out.append(_OPERATOR)
                advance = 1
            elif rest[0] == _OPENER:
                closer = rest.find(_CLOSER, 1)
                if closer == -1:
                    out.append(_OPERATOR + _OPENER)
                    advance = 1
                else:
                    name = rest[1:closer]
                    value = find(name)
                    out.append(f"$({name})" if value is None else value)
                    advance = closer + 1
            else:
                out.append(_OPERATOR + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


# --- service links ------------------------------------------------------------------------

# The services every pod gets variables for, from the default namespace, even with
# enableServiceLinks false (pkg/kubelet/kubelet_pods.go masterServices).
MASTER_SERVICES = frozenset({"kubernetes"})


def _env_name(service_name: str) -> str:
    return service_name.replace("-", "_").upper()


def _service_ip_set(service: Mapping) -> bool:
    ip = (service.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def _link_variables(service: Mapping) -> dict[str, str]:
    spec = service.get("spec") or {}
    prefix = _env_name(service["metadata"]["name"])
    ip = spec["clusterIP"]
    variables: dict[str, str] = {}
    for index, port in enumerate(spec.get("ports") or []):
        protocol = port.get("protocol") or "TCP"
        number = int(port["port"])
        host_port = f"[{ip}]:{number}" if ":" in ip else f"{ip}:{number}"
        url = f"{protocol.lower()}://{host_port}"
        if index == 0:
            variables[f"{prefix}_PORT"] = url  # Docker special-cases the first port
        port_prefix = f"{prefix}_PORT_{number}_{protocol.upper()}"
        variables[port_prefix] = url
        variables[f"{port_prefix}_PROTO"] = protocol.lower()
        variables[f"{port_prefix}_PORT"] = str(number)
        variables[f"{port_prefix}_ADDR"] = ip
    return variables


def service_env(
    services: Iterable[Mapping], namespace: str, enable_service_links: bool = True
) -> dict[str, str]:
    """The service variables a pod in `namespace` gets: the master services of the
    default namespace always, the services of its own namespace when service links are
    on; services without a cluster IP (headless) never."""
    chosen: dict[str, Mapping] = {}
    for service in services:
        if not _service_ip_set(service):
            continue
        name = service["metadata"]["name"]
        service_namespace = service["metadata"].get("namespace")
        if service_namespace == "default" and name in MASTER_SERVICES:
            chosen.setdefault(name, service)
        elif service_namespace == namespace and enable_service_links:
            chosen[name] = service
    variables: dict[str, str] = {}
    for name in sorted(chosen):
        service = chosen[name]
        spec = service["spec"]
        prefix = _env_name(name)
        ports = spec.get("ports") or []
        variables[f"{prefix}_SERVICE_HOST"] = spec["clusterIP"]
        if ports:
            variables[f"{prefix}_SERVICE_PORT"] = str(int(ports[0]["port"]))
        for port in ports:
            if port.get("name"):
                variables[f"{prefix}_SERVICE_PORT_{_env_name(port['name'])}"] = str(
                    int(port["port"])
                )
        variables.update(_link_variables(service))
    return variables


# --- downward API -------------------------------------------------------------------------

_SUBSCRIPTED = re.compile(r"^(?P<path>.+?)\['(?P<key>.*)'\]$", re.DOTALL)
# Accepted by the API for env fieldRef (ConvertDownwardAPIFieldLabel); the kubelet then
# resolves only some of them.
_POD_FIELDS = frozenset(
    {
        "metadata.annotations",
        "metadata.labels",
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.schedulerName",
        "status.phase",
        "status.hostIP",
        "status.hostIPs",
        "status.podIP",
        "status.podIPs",
    }
)


def go_quote(text: str) -> str:
    """Go's strconv.Quote: how the kubelet writes each value of metadata.labels."""
    escapes = {
        "\a": r"\a",
        "\b": r"\b",
        "\f": r"\f",
        "\n": r"\n",
        "\r": r"\r",
        "\t": r"\t",
        "\v": r"\v",
        "\\": r"\\",
        '"': r"\"",
    }
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def _format_map(values: Mapping[str, str]) -> str:
    return "\n".join(f"{k}={go_quote(values[k])}" for k in sorted(values))


@dataclass(frozen=True)
class Addresses:
    """The addresses the kubelet knows when it starts a container."""

    pod_ips: tuple[str, ...]
    host_ips: tuple[str, ...] = ()

    @property
    def pod_ip(self) -> str:
        return self.pod_ips[0] if self.pod_ips else ""


def field_ref_value(pod: Mapping, field_ref: Mapping, addresses: Addresses) -> str:
    """The value of an env `valueFrom.fieldRef`."""
    path = field_ref.get("fieldPath", "")
    version = field_ref.get("apiVersion") or "v1"
    if version != "v1":
        raise ContainerConfigError(f"unsupported pod version: {version}")
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    subscripted = _SUBSCRIPTED.match(path)
    if subscripted and subscripted["path"]:
        kind, key = subscripted["path"], subscripted["key"]
        if kind == "metadata.labels":
            return (metadata.get("labels") or {}).get(key, "")
        if kind == "metadata.annotations":
            return (metadata.get("annotations") or {}).get(key, "")
        raise ContainerConfigError(f"field label does not support subscript: {path}")
    if path == "spec.host":  # an old client's name for spec.nodeName
        path = "spec.nodeName"
    if path not in _POD_FIELDS:
        raise ContainerConfigError(f"field label not supported: {path}")
    simple = {
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": addresses.pod_ip,
        "status.podIPs": ",".join(addresses.pod_ips),
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "metadata.labels": _format_map(metadata.get("labels") or {}),
        "metadata.annotations": _format_map(metadata.get("annotations") or {}),
    }
    if path in simple:
        return simple[path]
    if path in ("status.hostIP", "status.hostIPs"):
        if not addresses.host_ips:
            raise ContainerConfigError("the node has no address to give status.hostIP")
        return addresses.host_ips[0] if path == "status.hostIP" else ",".join(addresses.host_ips)
    # spec.restartPolicy, spec.schedulerName, status.phase pass API validation but the
    # kubelet resolves them through ExtractFieldPathAsString, which knows only metadata.
    raise ContainerConfigError(f"unsupported fieldPath: {path}")


def _milli_value(quantity: Decimal) -> int:
    return math.ceil(quantity * 1000)


def _value(quantity: Decimal) -> int:
    return math.ceil(quantity)


def resource_field_value(
    pod: Mapping, container: Mapping, selector: Mapping, allocatable: Mapping[str, str]
) -> str:
    """The value of an env `valueFrom.resourceFieldRef`: the container's request or limit
    divided by `divisor` and rounded up; a cpu, memory or ephemeral-storage limit the
    container does not set (or sets to zero) is the node's allocatable."""
    name = selector.get("containerName") or ""
    if name:
        matches = [c for c in (pod.get("spec") or {}).get("containers") or [] if c["name"] == name]
        if not matches:
            raise ContainerConfigError(f"container {name} not found")
        container = matches[0]
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = resources.get("requests") or {}
    for resource in ("cpu", "memory", "ephemeral-storage"):
        if parse_quantity(limits.get(resource, "0")) == 0 and resource in allocatable:
            limits[resource] = allocatable[resource]
    divisor_text = str(selector.get("divisor") or "0")
    divisor = parse_quantity(divisor_text)
    if divisor == 0:
        divisor = Decimal(1)
    wanted = selector.get("resource", "")
    kind, _, resource = wanted.partition(".")
    source = {"limits": limits, "requests": requests}.get(kind)
    if source is None or not (
        resource in ("cpu", "memory", "ephemeral-storage") or resource.startswith("hugepages-")
    ):
        raise ContainerConfigError(f"unsupported container resource : {wanted}")
    quantity = parse_quantity(str(source.get(resource, "0")))
    if resource == "cpu":
        return str(math.ceil(_milli_value(quantity) / _milli_value(divisor)))
    return str(math.ceil(_value(quantity) / _value(divisor)))


# --- the container's environment --------------------------------------------------------


@dataclass(frozen=True)
class EnvSources:
    """What a container's env may read besides the pod: ConfigMaps' and Secrets' data by
    name (Secret values decoded), the Services the kubelet sees, the node's
    allocatable. A name absent from `config_maps`/`secrets` is one that does not exist."""

    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    services: tuple[Mapping, ...] = ()
    allocatable: Mapping[str, str] = field(default_factory=dict)


def referenced_objects(container: Mapping) -> tuple[set[str], set[str]]:
    """The ConfigMap and Secret names a container's env reads (for the caller to fetch)."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    for source in container.get("envFrom") or []:
        if source.get("configMapRef"):
            config_maps.add(source["configMapRef"]["name"])
        elif source.get("secretRef"):
            secrets.add(source["secretRef"]["name"])
    for variable in container.get("env") or []:
        value_from = variable.get("valueFrom") or {}
        if value_from.get("configMapKeyRef"):
            config_maps.add(value_from["configMapKeyRef"]["name"])
        elif value_from.get("secretKeyRef"):
            secrets.add(value_from["secretKeyRef"]["name"])
    return config_maps, secrets


def _key_ref(kind: str, pod: Mapping, ref: Mapping, objects: Mapping) -> str | None:
    """A ConfigMap or Secret key's value; None when an optional one is missing."""
    optional = bool(ref.get("optional"))
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    data = objects.get(ref["name"])
    if data is None:
        if optional:
            return None
        raise ContainerConfigError(f'{kind.lower()} "{ref["name"]}" not found')
    if ref["key"] not in data:
        if optional:
            return None
        raise ContainerConfigError(
            f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}"
        )
    return data[ref["key"]]


def container_env(
    pod: Mapping, container: Mapping, addresses: Addresses, sources: EnvSources = EnvSources()
) -> dict[str, str]:
    """The container's final environment, as the kubelet hands it to the runtime."""
    spec = pod.get("spec") or {}
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    links = spec.get("enableServiceLinks")
    services = service_env(sources.services, namespace, True if links is None else bool(links))
    defined: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        ref = source.get("configMapRef") or source.get("secretRef")
        if not ref:
            continue
        kind, objects = (
            ("ConfigMap", sources.config_maps)
            if source.get("configMapRef")
            else ("Secret", sources.secrets)
        )
        data = objects.get(ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise ContainerConfigError(f'{kind.lower()} "{ref["name"]}" not found')
        for key, value in data.items():
            defined[prefix + key] = value

    def known(name: str) -> str | None:
        if name in defined:
            return defined[name]
        return services.get(name)

    for variable in container.get("env") or []:
        value = variable.get("value") or ""
        value_from = variable.get("valueFrom")
        if value:
            value = expand(value, known)
        elif value_from:
            if value_from.get("fieldRef"):
                value = field_ref_value(pod, value_from["fieldRef"], addresses)
            elif value_from.get("resourceFieldRef"):
                value = resource_field_value(
                    pod, container, value_from["resourceFieldRef"], sources.allocatable
                )
            elif value_from.get("configMapKeyRef"):
                found = _key_ref(
                    "ConfigMap", pod, value_from["configMapKeyRef"], sources.config_maps
                )
                if found is None:
                    continue
                value = found
            elif value_from.get("secretKeyRef"):
                found = _key_ref("Secret", pod, value_from["secretKeyRef"], sources.secrets)
                if found is None:
                    continue
                value = found
            elif value_from.get("fileKeyRef"):
                raise ContainerConfigError(
                    f"env {variable['name']}: fileKeyRef is not supported by this runner"
                )
        defined[variable["name"]] = value
    return {**{k: v for k, v in services.items() if k not in defined}, **defined}


# --- the command line ----------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """What the runner knows of an image: its ENTRYPOINT and CMD (the local programs that
    stand in for the image's), its ENV (PATH decides how a bare command name resolves)
    and its WORKDIR."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = ""


def command_line(container: Mapping, image: Image, env: Mapping[str, str]) -> list[str]:
    """The process's argv: command and args expanded from the final environment, then
    the image's entrypoint and CMD where the container does not override them."""
    command = [expand(part, env) for part in container.get("command") or []]
    args = [expand(part, env) for part in container.get("args") or []]
    argv = [*command, *args] if command else [*image.entrypoint, *(args or image.cmd)]
    if not argv:
        raise ContainerConfigError(
            f"container {container.get('name')}: no command specified (the image has no "
            "entrypoint and the container no command)"
        )
    return argv
