"""Everything one InferenceCluster becomes, from typed inputs: the substrate, the runtime,
and (only while something reads it) the collector.

The collector has two possible readers: the fleet's TelemetryDestination (it pushes
there) and the member's runtime agent, which computes vocabulary signals from the
collector's in-cluster signals page for every ModelReplica here that autoscales from
them (`signals_for`, from the ModelReplicas the shell is sent; the rule per replica is
functions/common/adaptivepolicy.py). Neither: no collector. A destination that exists
but is invalid is not the same as no destination: the collector that already runs keeps
its last config (the shell keeps the observed resources) rather than being deleted
because someone mistyped an endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from pydantic import Field, ValidationInfo, field_validator

from functions.common import contracts
from functions.common.cost import PRICE_FIELD, PoolPrice, pool_prices_of_pools, price_problem
from functions.common.inventory import (
    CpuPool,
    FabricLabel,
    cpu_pools_of_pools,
    fabric_labels_of_pools,
    format_fabric_label,
    parse_fabric_label,
)
from functions.common.metricmapping import ResolvedMappings
from functions.common.naming import cluster_name_problem, is_object_name
from functions.common.reader import (
    Flag,
    InputError,
    OrEmpty,
    OrEmptyList,
    Spec,
    Text,
    object_or_refuse,
    read,
    refuse,
)
from functions.common.redact import url_credentials
from functions.compose_serving_stack import (
    access,
    collector,
    collector_objects,
    device_classes,
    runtime_hosting,
    substrate,
)
from functions.compose_serving_stack.envelope import Composed, Target
from functions.compose_serving_stack.status import (
    MODE_DISABLED,
    MODE_LOCAL,
    MODE_PUSH,
    Telemetry,
)

# The same rule as the XRD's spec.runtime.prometheusURL pattern: it becomes a process argument.
_PROMETHEUS_URL = re.compile(r"""https?://[^\s"'`]+""")
_STACKS: Final = (contracts.STACK_STANDARD, contracts.STACK_DYNAMO)
_PROVIDER_CONFIG_KINDS: Final = ("ClusterProviderConfig", "ProviderConfig")


class InvalidCluster(InputError):
    """An InferenceCluster no resource can be built from: `field: rule`."""

    @property
    def field(self) -> str:
        return self.path


@dataclass(frozen=True)
class Cluster:
    name: str
    stack: str
    region: str
    target: Target
    node_tier: bool = False
    prometheus_url: str = ""
    kubeconfig: access.KubeconfigSecret | None = None
    # Which node label names each pool's fabric, for the agent's inventory.
    fabric_labels: tuple[FabricLabel, ...] = ()
    # The priced pools, for the agent's cost series.
    pool_prices: tuple[PoolPrice, ...] = ()
    # The CPU-only pools (cpu and memory, no devices): the agent's inventory counts them.
    cpu_pools: tuple[CpuPool, ...] = ()
    # The DeviceClasses the pools' devices are claimed by, read back from the member.
    device_classes: tuple[str, ...] = ()


# --- What the stack reads of an InferenceCluster (functions/common/reader.py) ------------
# Fields are declared in the order their rules are checked, so the first error is the
# first rule broken.


class _Metadata(Spec):
    name: Any = Field(default=None, validate_default=True)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, name: Any) -> Any:
        problem = cluster_name_problem(name)
        if problem is not None:
            refuse(problem)
        return name


# The XRD's pattern for a pool's name, checked again.
_POOL_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class _Runtime(Spec):
    prometheus_url: Text = Field(default="", alias="prometheusURL")

    @field_validator("prometheus_url")
    @classmethod
    def _plain_url(cls, url: str) -> str:
        credentials = url_credentials(url) if url else []
        if credentials:
            # Named, never echoed: the URL reaches the runtime's flags, events and logs.
            refuse(f"must not carry credentials (found {', '.join(credentials)})")
        if url and not _PROMETHEUS_URL.fullmatch(url):
            refuse(f"{url[:200]!r} must be an http(s) URL without spaces or quotes")
        return url


class _Telemetry(Spec):
    node_tier: Flag = Field(default=False, alias="nodeTier")


class _ClusterSpec(Spec):
    stack: Any = Field(default=None, validate_default=True)
    provider_config_ref: Any = Field(default=None, alias="providerConfigRef")
    kubeconfig: access.KubeconfigSecret | None = Field(
        default=None, alias="kubeconfigSecretRef", validate_default=True
    )
    region: Text = ""
    runtime: Annotated[_Runtime, OrEmpty] = Field(default_factory=_Runtime)
    telemetry: Annotated[_Telemetry, OrEmpty] = Field(default_factory=_Telemetry)
    node_pools: Annotated[list[Any], OrEmptyList] = Field(default_factory=list, alias="nodePools")

    @field_validator("stack")
    @classmethod
    def _known_stack(cls, stack: Any) -> str:
        stack = stack or contracts.STACK_STANDARD
        if stack not in _STACKS:
            refuse(f"{stack!r} is not one of {', '.join(_STACKS)}")
        return stack

    @field_validator("kubeconfig", mode="wrap")
    @classmethod
    def _one_way_in(cls, raw: Any, _handler: Any, info: ValidationInfo) -> Any:
        """How the cluster is reached: either a provider config someone made
        (providerConfigRef) or a kubeconfig Secret (then the provider configs are ours,
        named after the cluster), each complete. Checked here, in the order a person
        fixes them, each path naming the field at fault."""
        ref = info.data.get("provider_config_ref") or {}
        kubeconfig = _kubeconfig(raw, has_ref=bool(ref))
        if kubeconfig is None:
            ref = object_or_refuse(ref, path="spec.providerConfigRef")
            name = ref.get("name")
            if not isinstance(name, str) or not name:
                refuse(
                    "is required unless spec.kubeconfigSecretRef is set: it is how the cluster "
                    "is reached",
                    path="spec.providerConfigRef.name",
                )
            if not is_object_name(name):
                # Never echoed: it names every composed resource's provider config.
                refuse(
                    "must be a provider config's name (a DNS subdomain, at most 253)",
                    path="spec.providerConfigRef.name",
                )
            kind = ref.get("kind") or "ClusterProviderConfig"
            if kind not in _PROVIDER_CONFIG_KINDS:
                refuse(
                    f"{kind!r} is not one of {', '.join(_PROVIDER_CONFIG_KINDS)}",
                    path="spec.providerConfigRef.kind",
                )
        return kubeconfig

    @field_validator("node_pools")
    @classmethod
    def _pools_the_agent_can_name(cls, pools: list[Any]) -> list[Any]:
        for i, pool in enumerate(pools):
            if isinstance(pool, dict):
                object_or_refuse(pool.get("nodeSelector"), at=f"[{i}].nodeSelector")
                if not _POOL_NAME.fullmatch(str(pool.get("name", ""))):
                    # Never echoed: it reaches the agent's arguments and the cost series.
                    refuse(
                        "must be a DNS label (lowercase letters, digits and '-', at most 63)",
                        at=f"[{i}].name",
                    )
        _check_fabric_labels(pools)
        _check_prices(pools)
        for i, pool in enumerate(pools):
            if isinstance(pool, dict) and pool.get(PRICE_FIELD) is not None:
                # A priced pool's driver names the devices its price is for.
                object_or_refuse(pool.get("devices"), at=f"[{i}].devices")
                if not pool.get("devices"):
                    refuse(
                        "prices a pool's devices; a CPU-only pool (cpu and memory) has none",
                        at=f"[{i}].{PRICE_FIELD}",
                    )
        return pools


class _InferenceCluster(Spec):
    metadata: Annotated[_Metadata, OrEmpty] = Field(default_factory=dict, validate_default=True)
    spec: Annotated[_ClusterSpec, OrEmpty] = Field(default_factory=dict, validate_default=True)


def parse_cluster(xr: Mapping[str, Any]) -> Cluster:
    """The InferenceCluster, with the field and the rule for anything unusable."""
    read_as = read(_InferenceCluster, xr, error=InvalidCluster)
    name, spec = read_as.metadata.name, read_as.spec
    ref = spec.provider_config_ref or {}
    if spec.kubeconfig is not None:
        provider_config, kind = name, "ClusterProviderConfig"
    else:
        provider_config, kind = ref["name"], ref.get("kind") or "ClusterProviderConfig"
    return Cluster(
        name=name,
        stack=spec.stack,
        region=spec.region,
        target=Target(name, provider_config, kind),
        node_tier=spec.telemetry.node_tier,
        prometheus_url=spec.runtime.prometheus_url,
        kubeconfig=spec.kubeconfig,
        fabric_labels=fabric_labels_of_pools([p for p in spec.node_pools if isinstance(p, dict)]),
        pool_prices=pool_prices_of_pools([p for p in spec.node_pools if isinstance(p, dict)]),
        device_classes=device_classes.needed(spec.node_pools),
        cpu_pools=cpu_pools_of_pools([p for p in spec.node_pools if isinstance(p, dict)]),
    )


def peer_names(clusters: Iterable[Mapping[str, Any]]) -> list[str]:
    """The fleet's InferenceClusters by name (this one among them), as fetched; one
    without a name is nobody's peer."""
    names = []
    for c in clusters:
        meta = c.get("metadata") if isinstance(c, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def _check_prices(pools: list) -> None:
    """A price the schema should have refused is refused here too."""
    for i, pool in enumerate(pools):
        if isinstance(pool, dict) and pool.get(PRICE_FIELD) is not None:
            problem = price_problem(pool[PRICE_FIELD])
            if problem is not None:
                refuse(problem, at=f"[{i}].{PRICE_FIELD}")


def _check_fabric_labels(pools: list) -> None:
    """A pool whose fabric label or nodeSelector would not survive the agent's
    `--fabric-label` argument is refused here, not at agent start."""
    labels = fabric_labels_of_pools([p for p in pools if isinstance(p, dict)])
    for i, fabric in enumerate(labels):
        try:
            same = parse_fabric_label(format_fabric_label(fabric)) == fabric
        except ValueError:
            same = False
        if not same:
            refuse(
                "fabricNodeLabel and nodeSelector must be label keys and values "
                "(no ':', ',' or '=' inside them)",
                at=f"[{i}]",
            )


def _kubeconfig(raw: Any, *, has_ref: bool) -> access.KubeconfigSecret | None:
    if not raw:
        return None
    if has_ref:
        refuse("set either providerConfigRef or kubeconfigSecretRef, not both")
    raw = object_or_refuse(raw)
    secret = access.KubeconfigSecret(
        str(raw.get("namespace") or ""), str(raw.get("name") or ""), str(raw.get("key") or "")
    )
    for field_name in ("namespace", "name", "key"):
        if not getattr(secret, field_name):
            refuse("is required", at=field_name)
    return secret


@dataclass(frozen=True)
class GatewayDestination:
    """The active TelemetryDestination, as a cluster's collector needs it."""

    name: str
    endpoint: str
    token_namespace: str
    token_name: str
    token_key: str
    # Its exporter carries traces and logs (OTLP) as well as metrics.
    traces_and_logs: bool = True


@dataclass(frozen=True)
class DestinationState:
    """None, one usable destination, or one that exists but cannot be used (and why)."""

    active: GatewayDestination | None = None
    problem: str = ""  # non-empty: a destination exists but is invalid

    @property
    def exists(self) -> bool:
        return self.active is not None or bool(self.problem)


@dataclass
class Plan:
    composed: list[Composed]
    telemetry: Telemetry
    stack_keys: list[str]
    collector_keys: list[str] = field(default_factory=list)
    # An invalid destination: keep whatever collector resources were observed.
    keep_observed_collector: bool = False
    # Composed resources with no readiness of their own (provider configs).
    always_ready: list[str] = field(default_factory=list)


def plan(
    cluster: Cluster,
    mappings: ResolvedMappings,
    *,
    destination: DestinationState,
    peers: Sequence[str],
    unmapped: Sequence[str],
    runtime_image: str,
    signals_for: Sequence[str] = (),
    health_records: Sequence[tuple[str, str]] = (),
) -> Plan:
    """`health_records`: (namespace, ModelReplica) of the replicas on this cluster, whose
    health records the agent may write (runtime_hosting)."""
    stack = substrate.substrate(cluster.target, cluster.stack)
    stack += runtime_hosting.runtime_hosting(
        cluster.target,
        runtime_image,
        peers,
        prometheus_url=cluster.prometheus_url,
        fabric_labels=cluster.fabric_labels,
        pool_prices=cluster.pool_prices,
        cpu_pools=cluster.cpu_pools,
        health_records=health_records,
    )
    # Provider configs report no readiness of their own; they are not part of the
    # stack's (the Objects sent through them are). Nor do the DeviceClass observers: a
    # missing class is reported, not waited for.
    reach = access.provider_configs(cluster.name, cluster.kubeconfig) if cluster.kubeconfig else []
    reach += device_classes.observers(cluster.target, cluster.device_classes)
    unmapped_types = tuple(sorted(set(unmapped)))
    in_use = mappings.in_use
    mapped = {m.engine for m in in_use}
    components = tuple(c for c in collector.component_types(cluster.stack) if c not in mapped)
    readers = tuple(sorted(set(signals_for)))

    if destination.problem:
        telemetry = Telemetry(
            MODE_PUSH,
            f"{destination.problem}; the collector keeps its last config",
            unmapped_engine_types=unmapped_types,
            mappings=in_use,
            unmapped_components=components,
            signals_for=readers,
        )
        return Plan(
            reach + stack,
            telemetry,
            [c.key for c in stack],
            keep_observed_collector=True,
            always_ready=[c.key for c in reach],
        )
    active = destination.active
    if active is None and not readers:
        telemetry = Telemetry(
            MODE_DISABLED,
            "no TelemetryDestination exists and no replica here autoscales from vocabulary"
            " signals, so no collector runs on this cluster",
            unmapped_engine_types=unmapped_types,
            mappings=in_use,
        )
        return Plan(
            reach + stack, telemetry, [c.key for c in stack], always_ready=[c.key for c in reach]
        )

    collector_cluster = collector.CollectorCluster(cluster.name, cluster.stack)
    gateway = (
        collector.CollectorDestination(
            active.endpoint,
            traces_and_logs=active.traces_and_logs,
            cluster_state=cluster.node_tier,
        )
        if active is not None
        else None
    )
    config = collector.render_cluster_collector_config(
        collector_cluster, mappings.accepted, gateway, signals=bool(readers)
    )
    telemetry_resources = []
    if active is not None:
        telemetry_resources.append(
            collector_objects.token_secret(
                cluster.target, active.token_namespace, active.token_name, active.token_key
            )
        )
    telemetry_resources += collector_objects.cluster_tier(
        cluster.target, config, gateway=active is not None, signals=bool(readers)
    )
    if cluster.node_tier and gateway is not None:
        node_config = collector.render_node_collector_config(collector_cluster, gateway)
        telemetry_resources += collector_objects.node_tier(cluster.target, node_config)
    if active is not None:
        telemetry = Telemetry(
            MODE_PUSH,
            f"pushing OTLP to the gateway of TelemetryDestination {active.name}",
            destination=active.endpoint,
            traces_endpoint=(
                contracts.COLLECTOR_OTLP_GRPC_HOST_PORT if active.traces_and_logs else ""
            ),
            unmapped_engine_types=unmapped_types,
            mappings=in_use,
            unmapped_components=components,
            signals_for=readers,
        )
    else:
        telemetry = Telemetry(
            MODE_LOCAL,
            f"no TelemetryDestination exists; the collector serves vocabulary signals to the"
            f" runtime agent for {len(readers)} replica(s) and pushes nothing",
            unmapped_engine_types=unmapped_types,
            mappings=in_use,
            unmapped_components=components,
            signals_for=readers,
        )
    return Plan(
        reach + stack + telemetry_resources,
        telemetry,
        [c.key for c in stack],
        [c.key for c in telemetry_resources],
        always_ready=[c.key for c in reach],
    )
