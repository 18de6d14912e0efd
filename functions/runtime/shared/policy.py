"""The AdaptivePolicy as typed values: spec with its defaults, durations, and the spec hash.

Every member holds an identical copy of the policy. The hub trusts a member's report
only if the member computed it from the same inputs the hub would, so the report
carries `specHash` over exactly those inputs: the workload, the signals, the capacity
and the member's *own* `clusters[]` entry. Fields only the hub reads (mode, route,
SLOs, escalation timings, traffic, other members' entries) are left out on purpose:
changing them takes effect without waiting for every member to catch up, and two
members legitimately show different hashes when their own entries differ.

The runtime's timings that the policy does not carry (report period, staleness, hub
step, intent lifetime) are constants here, so the agent, the hub and the tests agree.
"""

from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import Field, field_validator, model_validator

from functions.common import vocabulary
from functions.common.adaptivepolicy import DEFAULT_VOCABULARY_SIGNALS
from functions.common.durations import parse_duration
from functions.common.naming import stable_hash
from functions.common.reader import Spec

REPORT_INTERVAL_SECONDS: Final = 30.0
REPORT_STALE_SECONDS: Final = 120.0
HUB_STEP_SECONDS: Final = 10.0
INTENT_TTL_SECONDS: Final = 300.0  # floors lapse 5 minutes after the hub stops renewing
INTENT_RENEW_SECONDS: Final = 60.0  # rewrite an unchanged intent this often

MODE_OFF: Final = "off"
MODE_SHADOW: Final = "shadow"
MODE_AUTO: Final = "auto"

PLACEMENT_LOCAL_FIRST: Final = "LocalFirst"
PLACEMENT_STATIC_FIRST: Final = "StaticFirst"
DEFAULT_SATURATION_THRESHOLD: Final = 0.9
# Fields of a member's own clusters[] entry that only the hub reads: left out of the spec
# hash, so changing them takes effect without waiting for members (the guide's "Changes
# only the hub reads (intent, escalation, weights, placement)").
HUB_ONLY_CLUSTER_FIELDS: Final = ("weight", "minWeight", "maxWeight", "costRank")
# Built-in signal names; an extra named metric may not reuse one.
BUILTIN_SIGNALS: Final = ("demand", "pressure", "latency", "errorRate", "saturation")


def rfc3339(seconds: float) -> str:
    """A wall-clock time in status and logs: UTC, whole seconds, `Z`."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float:
    """An RFC 3339 time from a status or a Kubernetes object, as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def format_duration(seconds: float) -> str:
    """The shortest readable form for messages: 600 -> 10m, 90 -> 1m30s, 2.5 -> 2.5s."""
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts) or "0s"


class Workload(Spec):
    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str


class ClusterEntry(Spec):
    name: str
    max_replicas: int = Field(alias="maxReplicas", ge=0)
    region: str | None = None
    node_pools: tuple[str, ...] = Field(default=(), alias="nodePools")
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    # The route backendRef that sends traffic to this member; its name by default.
    backend_ref: str | None = Field(default=None, alias="backendRef")
    # Its Steady share of the traffic in percent (unset: an equal share of what the
    # members with a weight leave), and the bounds every weight the hub writes keeps.
    weight: int | None = Field(default=None, ge=0, le=100)
    min_weight: int = Field(default=0, alias="minWeight", ge=0, le=100)
    max_weight: int = Field(default=100, alias="maxWeight", ge=0, le=100)
    # Cheaper clusters (lower rank) are asked first among equal candidates.
    cost_rank: int = Field(default=0, alias="costRank", ge=0, le=1000)
    # What one replica serves here, when it differs from capacity.replicaCapacity.
    replica_capacity: float | None = Field(default=None, alias="replicaCapacity", gt=0)

    @model_validator(mode="after")
    def _bounds(self) -> "ClusterEntry":
        where = f"clusters[{self.name}]"
        if self.min_weight > self.max_weight:
            raise ValueError(f"{where}: minWeight must not exceed maxWeight")
        if self.weight is not None and not self.min_weight <= self.weight <= self.max_weight:
            raise ValueError(f"{where}: weight must lie within minWeight and maxWeight")
        return self

    @property
    def backend_name(self) -> str:
        return self.backend_ref or self.name


class Route(Spec):
    name: str
    namespace: str | None = None


SIGNAL_FUNCTIONS: Final = {
    "rate": (vocabulary.MetricType.COUNTER, vocabulary.MetricType.HISTOGRAM),
    "gauge": (vocabulary.MetricType.GAUGE,),
    "perReadyReplica": (vocabulary.MetricType.GAUGE, vocabulary.MetricType.COUNTER),
    "quantile": (vocabulary.MetricType.HISTOGRAM,),
    "fractionAbove": (vocabulary.MetricType.HISTOGRAM,),
    "ratio": (vocabulary.MetricType.COUNTER,),
}
DEFAULT_SIGNAL_WINDOW_SECONDS: Final = 120.0
PROMQL_MAX_LENGTH: Final = 2048


class VocabularySignal(Spec):
    """A signal named in the vocabulary (see functions/runtime/agent/signals.py), or, for
    one outside it, a PromQL query against the endpoint the operator names."""

    metric: str | None = None
    function: (
        Literal["rate", "gauge", "perReadyReplica", "quantile", "fractionAbove", "ratio"] | None
    ) = None
    quantile: float | None = Field(default=None, gt=0, lt=1)
    threshold: float | None = Field(default=None, ge=0)
    where: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    promql: str | None = Field(default=None, max_length=PROMQL_MAX_LENGTH)

    @model_validator(mode="before")
    @classmethod
    def _query_string(cls, value: Any) -> Any:
        # Before vocabulary signals a signal was a bare PromQL string: it still means that.
        return {"promql": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> "VocabularySignal":
        if (self.metric is None) == (self.promql is None):
            raise ValueError("name either `metric` (with `function`) or `promql`, not both")
        if self.promql is not None:
            return self
        known = vocabulary.VOCABULARY_BY_NAME.get(self.metric)
        if known is None:
            raise ValueError(
                f"metric {self.metric!r} is not in the vocabulary (known: "
                f"{', '.join(sorted(vocabulary.VOCABULARY_BY_NAME))}); for another series "
                "write `promql`"
            )
        if self.function is None:
            raise ValueError(f"metric {self.metric}: `function` is required")
        if known.type not in SIGNAL_FUNCTIONS[self.function]:
            fits = sorted(f for f, types in SIGNAL_FUNCTIONS.items() if known.type in types)
            raise ValueError(
                f"function {self.function} does not apply to {known.type} {self.metric}"
                f" (use one of: {', '.join(fits)})"
            )
        if (self.function == "quantile") != (self.quantile is not None):
            raise ValueError("`quantile` is set exactly when function is quantile")
        if (self.function == "fractionAbove") != (self.threshold is not None):
            raise ValueError("`threshold` is set exactly when function is fractionAbove")
        unknown = sorted(set(self.where) - set(known.labels))
        if unknown:
            raise ValueError(
                f"where: {', '.join(unknown)} is not a label of {self.metric}"
                f" (it keeps: {', '.join(known.labels)})"
            )
        if self.function == "ratio" and not self.where:
            raise ValueError("function ratio needs `where` (the share of which series)")
        return self


# What a deployment that names no signal at all is scaled by.
DEFAULT_SIGNALS: Final = {
    name: VocabularySignal(**signal) for name, signal in DEFAULT_VOCABULARY_SIGNALS.items()
}


class NamedSignal(VocabularySignal):
    """A further signal recorded in each report and the decision log, not acted on."""

    name: str = Field(pattern=r"^[a-z][A-Za-z0-9]{0,62}$")


class Signals(Spec):
    window: float = DEFAULT_SIGNAL_WINDOW_SECONDS
    demand: VocabularySignal | None = None
    pressure: VocabularySignal | None = None
    latency: VocabularySignal | None = None
    error_rate: VocabularySignal | None = Field(default=None, alias="errorRate")
    # 0-1 (e.g. KV-cache usage); at or over saturationThreshold a member is under strain.
    saturation: VocabularySignal | None = None
    # Further named metrics: recorded in each report and the decision log, not acted on.
    extra: tuple[NamedSignal, ...] = Field(default=(), max_length=8)

    @model_validator(mode="after")
    def _names(self) -> "Signals":
        names = [q.name for q in self.extra]
        for name in names:
            if name in BUILTIN_SIGNALS:
                raise ValueError(f"signals.extra[].name {name!r} is a built-in signal")
        if len(set(names)) != len(names):
            raise ValueError("signals.extra[].name must be unique")
        return self

    @field_validator("window", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value) if isinstance(value, str) else float(value)

    def configured(self) -> dict[str, VocabularySignal]:
        """Signal name (as in status.report) -> how it is computed, only the ones set."""
        named = {
            "demand": self.demand,
            "pressure": self.pressure,
            "latency": self.latency,
            "errorRate": self.error_rate,
            "saturation": self.saturation,
        }
        return {name: signal for name, signal in named.items() if signal is not None}

    def extra_signals(self) -> dict[str, VocabularySignal]:
        """Extra metric name (as in status.report.extra) -> how it is computed."""
        return {q.name: q for q in self.extra}


class Capacity(Spec):
    replica_capacity: float | None = Field(default=None, alias="replicaCapacity", gt=0)


class Escalation(Spec):
    step: int = Field(default=2, ge=1)
    after: float = 120.0
    early_after: float = Field(default=30.0, alias="earlyAfter")
    ready_timeout: float = Field(default=600.0, alias="readyTimeout")
    calm_for: float = Field(default=600.0, alias="calmFor")
    cooldown: float = 60.0

    @field_validator("after", "early_after", "ready_timeout", "calm_for", "cooldown", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value) if isinstance(value, str) else float(value)


class Traffic(Spec):
    step_percent: int = Field(default=10, alias="stepPercent", ge=1, le=100)
    # The HTTPRoutes whose backendRefs (one per member) carry the weights; every one
    # gets the same weights.
    routes: tuple[Route, ...] = Field(default=(), max_length=16)

    @model_validator(mode="after")
    def _unique(self) -> "Traffic":
        # Not a CEL rule: the API server's cost estimate refuses a pairwise one here.
        keys = [(r.name, r.namespace or "") for r in self.routes]
        if len(set(keys)) != len(keys):
            raise ValueError("traffic.routes[] must be unique")
        return self


class SecretKeyRef(Spec):
    name: str
    key: str = "apiKey"


class ChatEndpoint(Spec):
    """An OpenAI-compatible Chat Completions endpoint (the official `openai` client)."""

    endpoint: str
    model: str
    # A Secret in the policy's namespace on the hub's member; unset: no API key.
    api_key_secret_ref: SecretKeyRef | None = Field(default=None, alias="apiKeySecretRef")
    timeout: float = 5.0
    response_format: Literal["json_schema", "json_object"] = Field(
        default="json_schema", alias="responseFormat"
    )

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value) if isinstance(value, str) else float(value)


class RankingModel(ChatEndpoint):
    """experimental.model: ranks candidate clusters within a tier."""

    mode: Literal["shadow", "apply"] = "shadow"
    confidence_threshold_percent: int = Field(
        default=70, alias="confidenceThresholdPercent", ge=0, le=100
    )


class Adaptive(Spec):
    """experimental.adaptive: a planner proposing up to three plans a step."""

    planner: ChatEndpoint
    mode: Literal["shadow", "apply"] = "shadow"


class Experimental(Spec):
    model: RankingModel | None = None
    adaptive: Adaptive | None = None


class PolicySpec(Spec):
    mode: Literal["off", "shadow", "auto"] = MODE_SHADOW
    workload: Workload
    clusters: tuple[ClusterEntry, ...] = Field(min_length=1)
    route: Route | None = None
    # None: the deployment named no signal, and DEFAULT_SIGNALS apply.
    signals: Signals | None = None
    capacity: Capacity = Field(default_factory=Capacity)
    latency_slo: float | None = Field(default=None, alias="latencySLO")
    error_rate_slo: float | None = Field(default=None, alias="errorRateSLO")
    saturation_threshold: float = Field(
        default=DEFAULT_SATURATION_THRESHOLD, alias="saturationThreshold", gt=0, le=1
    )
    placement: Literal["LocalFirst", "StaticFirst"] = PLACEMENT_LOCAL_FIRST
    escalation: Escalation = Field(default_factory=Escalation)
    traffic: Traffic = Field(default_factory=Traffic)
    experimental: Experimental = Field(default_factory=Experimental)

    @model_validator(mode="after")
    def _weights(self) -> "PolicySpec":
        if sum(c.weight or 0 for c in self.clusters) > 100:
            raise ValueError("clusters[].weight: the weights set must sum to at most 100")
        every = all(c.weight is not None for c in self.clusters)
        if every and sum(c.weight for c in self.clusters) != 100:
            raise ValueError("clusters[].weight: when every member has one they sum to 100")
        if sum(c.min_weight for c in self.clusters) > 100:
            raise ValueError("clusters[].minWeight must sum to at most 100")
        if sum(c.max_weight for c in self.clusters) < 100:
            raise ValueError("clusters[].maxWeight must sum to at least 100")
        return self

    def model_post_init(self, context: Any, /) -> None:
        # Looked up for every member several times a step, so plain instance attributes
        # (pydantic's private attributes go through __getattr__: 5 ms a step at 200
        # members). Not fields: equality and dumps ignore them; the spec is frozen.
        object.__setattr__(self, "by_name", {c.name: c for c in self.clusters})
        object.__setattr__(self, "member_hashes", {})

    @property
    def effective_signals(self) -> dict[str, VocabularySignal]:
        return dict(DEFAULT_SIGNALS) if self.signals is None else self.signals.configured()

    @property
    def extra_signals(self) -> dict[str, VocabularySignal]:
        """signals.extra by name (recorded in the report, never acted on)."""
        return {} if self.signals is None else self.signals.extra_signals()

    @property
    def signal_window(self) -> float:
        return DEFAULT_SIGNAL_WINDOW_SECONDS if self.signals is None else self.signals.window

    def cluster(self, name: str) -> ClusterEntry | None:
        return self.by_name.get(name)

    def member_hash(self, member: str) -> str:
        """`spec_hash(self, member)`, computed once per member of this (frozen) spec:
        the agent keeps a policy's parsed spec while its object is unchanged."""
        found = self.member_hashes.get(member)
        if found is None:
            found = self.member_hashes[member] = spec_hash(self, member)
        return found

    @property
    def routes(self) -> tuple[Route, ...]:
        """Every route the hub weights: `traffic.routes`, and `route` (the older single form)."""
        listed = self.traffic.routes
        if self.route is not None and all(
            (r.name, r.namespace) != (self.route.name, self.route.namespace) for r in listed
        ):
            listed = (self.route, *listed)
        return listed

    @property
    def manages_traffic(self) -> bool:
        return bool(self.route is not None or self.traffic.routes)

    def replica_capacity(self, member: str) -> float | None:
        """What one replica serves on this member: its own entry's, else the policy's."""
        entry = self.cluster(member)
        own = entry.replica_capacity if entry is not None else None
        return own or self.capacity.replica_capacity

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return tuple(sorted(c.name for c in self.clusters))


class Policy(Spec):
    """One copy of the policy: its identity and spec (status is read by the modules that own it)."""

    namespace: str
    name: str
    spec: PolicySpec

    @property
    def key(self) -> str:
        """`namespace/name`: the policy label on metrics and in the decision log."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: dict) -> "Policy":
        meta = obj.get("metadata") or {}
        return cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            spec=PolicySpec.model_validate(obj.get("spec") or {}),
        )


def spec_hash_input(raw_spec: dict, member: str) -> dict:
    """The parts of a raw spec a member's report is computed from (see the module docstring)."""
    own = next((c for c in raw_spec.get("clusters") or [] if c.get("name") == member), None)
    if own is not None:
        own = {k: v for k, v in own.items() if k not in HUB_ONLY_CLUSTER_FIELDS}
    return {
        "workload": raw_spec.get("workload"),
        # An empty list is how a newer version writes a field an older one lacks.
        "signals": {k: v for k, v in (raw_spec.get("signals") or {}).items() if v != []},
        "capacity": raw_spec.get("capacity") or {},
        "cluster": own,
    }


def spec_hash(spec: PolicySpec, member: str) -> str:
    """The hash a member's report carries; the hub recomputes it from its own copy.

    Computed from the normalized spec (aliases, defaults applied, unset fields dropped)
    so that `{}` and an absent `capacity` hash alike, but a changed query does not.
    """
    # Only the parts the hash covers are dumped: dumping the whole spec for each member
    # made a hub step quadratic in the members (1.3 s at 200).
    entry = spec.cluster(member)
    raw = {
        "workload": _dump(spec.workload),
        # No signals at all (the defaults) hashes as {} did before vocabulary signals.
        "signals": _dump(spec.signals) if spec.signals is not None else {},
        "capacity": _dump(spec.capacity),
        "clusters": [_dump(entry)] if entry is not None else [],
    }
    return stable_hash(spec_hash_input(raw, member), 16)


def _dump(part: Spec) -> dict:
    return part.model_dump(by_alias=True, exclude_none=True, mode="json")
