"""Which MetricMappings may enter a collector's config, read into typed values.

Every name in a MetricMapping ends up inside an OTTL statement or a collector key, so
each is held to the vocabulary's strict patterns here again, even though the XRD
enforces the same patterns on apply: a mapping written before a rule tightened, or one
that reached us by a path that skipped validation, must never reach a generated
expression. A mapping is taken whole or refused whole, with the field and the rule,
so a collector never runs half a mapping; the other mappings still render.

Shared: compose-serving-stack renders the mappings that parse here, and compose-telemetry
reports a mapping's status from the same parse, so the two can never disagree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from functions.common import contracts, vocabulary
from functions.common.exposition import ottl_float

ENGINE_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
ENGINE_RE: Final = re.compile(ENGINE_PATTERN)
ENGINE_MAX: Final = 63
NAME_MAX: Final = 200
LABEL_MAX: Final = 100
VALUE_MAX: Final = 100
DEFAULT_METRICS_PATH: Final = "/metrics"
# A label value a mapping selects by, and text a source's HELP must contain: both end
# up inside OTTL string literals, so only characters that need no escaping are taken.
SELECT_VALUE_PATTERN: Final = r"^[A-Za-z0-9_.:/-]+$"
SELECT_VALUE_RE: Final = re.compile(SELECT_VALUE_PATTERN)
HELP_TEXT_PATTERN: Final = r"^[A-Za-z0-9 _,-]+$"
HELP_TEXT_RE: Final = re.compile(HELP_TEXT_PATTERN)
METRICS_PATH_PATTERN: Final = r"^/[A-Za-z0-9_./-]*$"
METRICS_PATH_RE: Final = re.compile(METRICS_PATH_PATTERN)

# Labels a rename may not produce: the histogram and summary intrinsics, Prometheus'
# own, the per-instance labels the collector aggregates away (a rename onto one would
# have a model's series summed into nonsense or silently dropped), and the collector's
# own scratch label for the renames themselves.
RESERVED_LABELS: Final = (
    frozenset({"le", "quantile", "__name__", "job", "instance", "pod", "pod_uid", "container_id"})
    | contracts.ROLLUP_LABELS
    | {contracts.SCRAPE_ENGINE_LABEL}
)


@dataclass(frozen=True)
class MetricRename:
    """One vocabulary target and the engine names (across its releases) it comes from."""

    target: str
    sources: tuple[str, ...]
    scale: float = 1.0
    # A `modelplane_` name outside the vocabulary, asked for explicitly (`custom: true`):
    # renamed and scaled like the rest, but neither merged across pods nor rolled up,
    # since nothing says whether a sum or a mean is right for it.
    custom: bool = False
    # Only the source series whose labels have these values (label, value), sorted: an
    # engine that reports several quantities as one metric split by a label (Triton's
    # nv_trt_llm_request_metrics{request_type="waiting"|"active"|...}).
    select: tuple[tuple[str, str], ...] = ()
    # Only source metrics whose HELP text contains this: the engine's own definition,
    # which is how releases that changed a counter's meaning under one name are kept
    # apart (vLLM's prefix-cache counters counted blocks, then tokens).
    help_contains: str | None = None
    # The source is a histogram and the target a counter of its running sum (the `_sum`
    # series of the exposition): an engine whose only count of something is a
    # per-request histogram of it (Triton's TensorRT-LLM backend counts tokens only as
    # nv_llm_input_token_len / nv_llm_output_token_len).
    histogram_sum: bool = False

    @property
    def scale_literal(self) -> str:
        """The scale as an OTTL float literal: plain decimal digits, always with a point."""
        return ottl_float(self.scale)


@dataclass(frozen=True)
class LabelRename:
    source: str
    target: str


@dataclass(frozen=True)
class ScrapeEndpoint:
    """Where the engine serves Prometheus text: a path, and a port number or (None) the
    container port named `http`. Some engines serve something else on `/metrics` of the
    serving port (trtllm-serve: JSON iteration stats) or serve metrics on a port of
    their own (Triton: 8002)."""

    path: str = DEFAULT_METRICS_PATH
    port: int | None = None

    @property
    def is_default(self) -> bool:
        return self.path == DEFAULT_METRICS_PATH and self.port is None


@dataclass(frozen=True)
class MetricMapping:
    """A MetricMapping that passed every check: safe to render into OTTL."""

    name: str
    engine: str
    metrics: tuple[MetricRename, ...]
    labels: tuple[LabelRename, ...] = ()
    scrape: ScrapeEndpoint = ScrapeEndpoint()


@dataclass(frozen=True)
class RefusedMapping:
    """A MetricMapping left out of the collector, and why (field path and rule)."""

    name: str
    field: str
    rule: str

    @property
    def message(self) -> str:
        return f"MetricMapping {self.name}: {self.field}: {self.rule}"


@dataclass(frozen=True)
class ParsedMappings:
    accepted: tuple[MetricMapping, ...]
    refused: tuple[RefusedMapping, ...]

    @property
    def mapped_engines(self) -> frozenset[str]:
        return frozenset(m.engine for m in self.accepted)


class _Refusal(Exception):
    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


def _string(value: Any, field: str, pattern: re.Pattern[str], max_length: int, what: str) -> str:
    if not isinstance(value, str):
        raise _Refusal(field, f"must be a string, got {type(value).__name__}")
    if len(value) > max_length:
        raise _Refusal(field, f"is {len(value)} characters; at most {max_length}")
    if not pattern.fullmatch(value):
        # repr() so a newline or a quote in the refused value cannot forge a message.
        # Never echoed when it may carry a credential (user:password@host).
        shown = "the value given" if "@" in value else repr(value)
        raise _Refusal(field, f"{shown} is not {what} ({pattern.pattern})")
    return value


def _list(value: Any, field: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Refusal(field, f"must be a list, got {type(value).__name__}")
    return value


def _scale(value: Any, field: str) -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Refusal(field, f"must be a number, got {type(value).__name__}")
    scale = float(value)
    if not math.isfinite(scale) or scale <= 0:
        raise _Refusal(field, f"{value!r} must be a finite number above 0")
    return scale


def _target(entry: Mapping[str, Any], at: str) -> tuple[str, bool]:
    """A metric's target name, and whether it is a custom name outside the vocabulary."""
    target = _string(
        entry.get("to"),
        f"{at}.to",
        vocabulary.TARGET_NAME_RE,
        NAME_MAX,
        "a vocabulary name",
    )
    custom = entry.get("custom", False)
    if not isinstance(custom, bool):
        raise _Refusal(f"{at}.custom", "must be true or false")
    if custom and target in vocabulary.VOCABULARY_BY_NAME:
        raise _Refusal(
            f"{at}.custom", f"{target!r} is a vocabulary name; custom is for names outside it"
        )
    derived = vocabulary.VOCABULARY_BY_NAME.get(target)
    if derived is not None and derived.derived_from is not None:
        raise _Refusal(
            f"{at}.to",
            f"{target!r} is derived by the collector from {derived.derived_from}; "
            f"map {derived.derived_from} instead",
        )
    if not custom and target not in vocabulary.VOCABULARY_BY_NAME:
        known = ", ".join(sorted(vocabulary.VOCABULARY_BY_NAME))
        raise _Refusal(
            f"{at}.to",
            f"{target!r} is not in the vocabulary (known: {known}); "
            "set custom: true for a name of your own",
        )
    return target, custom


def parse_mapping(resource: Mapping[str, Any]) -> MetricMapping:
    """One MetricMapping resource (as the API server returns it) into a typed mapping.

    Raises _Refusal naming the field and the rule it broke.
    """
    spec = resource.get("spec")
    if not isinstance(spec, Mapping):
        raise _Refusal("spec", "is missing")
    engine = _string(spec.get("engine"), "spec.engine", ENGINE_RE, ENGINE_MAX, "a label value")

    metrics: list[MetricRename] = []
    seen_targets: dict[str, int] = {}
    seen_sources: dict[tuple[str, tuple[tuple[str, str], ...], bool], int] = {}
    selects: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    entries = _list(spec.get("metrics"), "spec.metrics")
    if not entries:
        raise _Refusal("spec.metrics", "must name at least one metric")
    for i, entry in enumerate(entries):
        at = f"spec.metrics[{i}]"
        if not isinstance(entry, Mapping):
            raise _Refusal(at, "must be an object with from, to and scale")
        target, custom = _target(entry, at)
        if target in seen_targets:
            raise _Refusal(
                f"{at}.to",
                f"{target!r} is already the target of spec.metrics[{seen_targets[target]}]",
            )
        seen_targets[target] = i
        select = _select(entry.get("select"), f"{at}.select")
        if select:
            selects.append((f"{at}.select", select))
        help_contains = _help(entry.get("help"), f"{at}.help")
        histogram_sum = _histogram_sum(entry.get("histogramSum"), f"{at}.histogramSum", target)
        sources = _list(entry.get("from"), f"{at}.from")
        if not sources:
            raise _Refusal(f"{at}.from", "must name at least one source metric")
        parsed_sources = []
        for j, source in enumerate(sources):
            name = _string(
                source,
                f"{at}.from[{j}]",
                vocabulary.SOURCE_NAME_RE,
                NAME_MAX,
                "a Prometheus metric name",
            )
            if name in vocabulary.VOCABULARY_BY_NAME:
                raise _Refusal(
                    f"{at}.from[{j}]",
                    f"{name!r} is already a vocabulary name; sources are the engine's own names",
                )
            # One source may feed several targets, each selecting its own label values
            # (and a histogram both a histogram target and a counter of its sum).
            key = (name, select, histogram_sum)
            if key in seen_sources:
                raise _Refusal(
                    f"{at}.from[{j}]",
                    f"{name!r} is already mapped by spec.metrics[{seen_sources[key]}]"
                    + (" with the same select" if select else ""),
                )
            seen_sources[key] = i
            parsed_sources.append(name)
        metrics.append(
            MetricRename(
                target,
                tuple(parsed_sources),
                _scale(entry.get("scale"), f"{at}.scale"),
                custom=custom,
                select=select,
                help_contains=help_contains,
                histogram_sum=histogram_sum,
            )
        )

    labels = _labels(spec.get("labels"))
    _check_selects_against_renames(selects, labels)

    name = str(resource.get("metadata", {}).get("name", ""))
    return MetricMapping(
        name=name,
        engine=engine,
        metrics=tuple(sorted(metrics, key=lambda m: m.target)),
        labels=labels,
        scrape=_scrape(spec.get("scrape"), "spec.scrape"),
    )


def _labels(value: Any) -> tuple[LabelRename, ...]:
    """spec.labels: each engine label renamed once, never onto another rename's source."""
    labels: list[LabelRename] = []
    label_targets: set[str] = set()
    label_sources: set[str] = set()
    for i, entry in enumerate(_list(value, "spec.labels")):
        at = f"spec.labels[{i}]"
        if not isinstance(entry, Mapping):
            raise _Refusal(at, "must be an object with from and to")
        source = _string(
            entry.get("from"), f"{at}.from", vocabulary.LABEL_NAME_RE, LABEL_MAX, "a label name"
        )
        target = _string(
            entry.get("to"), f"{at}.to", vocabulary.LABEL_NAME_RE, LABEL_MAX, "a label name"
        )
        for field, name in ((f"{at}.from", source), (f"{at}.to", target)):
            if name in RESERVED_LABELS:
                reserved = ", ".join(sorted(RESERVED_LABELS))
                raise _Refusal(field, f"{name!r} is reserved (reserved: {reserved})")
        # Several sources may share a target (a label an engine renamed between
        # releases); a source is renamed once, and never onto another rename's source.
        if source in label_sources or source in label_targets or target in label_sources:
            raise _Refusal(at, "each label is renamed once, and never onto a name renamed itself")
        label_sources.add(source)
        label_targets.add(target)
        labels.append(LabelRename(source, target))
    return tuple(labels)


def _check_selects_against_renames(
    selects: Sequence[tuple[str, tuple[tuple[str, str], ...]]], labels: Sequence[LabelRename]
) -> None:
    """A select names the engine's own labels, and the collector applies it after the
    label renames (they run as the scrape's relabel rules), reading each selected label
    under the name it is renamed to. That is the engine's value only when one label alone
    is renamed onto that name: selecting by a rename's target, or by one of several
    labels renamed onto one name, would test whichever label the renames left there."""
    sources_of: dict[str, list[str]] = {}
    for label in labels:
        sources_of.setdefault(label.target, []).append(label.source)
    renamed = {label.source: label.target for label in labels}
    for field, select in selects:
        for name, _value in select:
            if name in sources_of:
                raise _Refusal(
                    f"{field}.{name}",
                    f"spec.labels renames {', '.join(sources_of[name])} onto {name!r}, so its "
                    "value is not the engine's own: select by a label no rename writes to",
                )
            target = renamed.get(name)
            if target is not None and len(sources_of[target]) > 1:
                raise _Refusal(
                    f"{field}.{name}",
                    f"spec.labels renames {', '.join(sources_of[target])} all onto "
                    f"{target!r}, so a selected value could be another label's: select by "
                    "a label renamed alone",
                )


def _select(value: Any, field: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise _Refusal(field, f"must be a map of label to value, got {type(value).__name__}")
    if len(value) > 4:
        raise _Refusal(field, f"selects by {len(value)} labels; at most 4")
    pairs = []
    for key, wanted in value.items():
        label = _string(key, f"{field} key", vocabulary.LABEL_NAME_RE, LABEL_MAX, "a label name")
        if label in ("le", "quantile", "__name__"):
            raise _Refusal(f"{field}.{label}", "a histogram or summary intrinsic cannot select")
        pairs.append(
            (
                label,
                _string(
                    wanted, f"{field}.{label}", SELECT_VALUE_RE, VALUE_MAX, "a plain label value"
                ),
            )
        )
    return tuple(sorted(pairs))


def _histogram_sum(value: Any, field: str, target: str) -> bool:
    """histogramSum: only a counter can be a histogram's running sum (a gauge or a
    histogram target would take a sum of observations for something else)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _Refusal(field, "must be true or false")
    known = vocabulary.VOCABULARY_BY_NAME.get(target)
    if value and known is not None and known.type is not vocabulary.MetricType.COUNTER:
        raise _Refusal(
            field,
            f"{target!r} is a {known.type}; only a counter can be a histogram's running sum",
        )
    return value


def _help(value: Any, field: str) -> str | None:
    if value is None:
        return None
    return _string(value, field, HELP_TEXT_RE, NAME_MAX, "plain words")


def _scrape(value: Any, field: str) -> ScrapeEndpoint:
    if value is None:
        return ScrapeEndpoint()
    if not isinstance(value, Mapping):
        raise _Refusal(field, f"must be an object with path and port, got {type(value).__name__}")
    path = value.get("path", DEFAULT_METRICS_PATH)
    path = _string(path, f"{field}.path", METRICS_PATH_RE, NAME_MAX, "an absolute URL path")
    if "/.." in path or "//" in path:
        raise _Refusal(f"{field}.path", f"{path!r} must not climb or repeat slashes")
    port = value.get("port")
    # A protobuf Struct carries every number as a double: 8002 arrives as 8002.0.
    if isinstance(port, float) and port.is_integer():
        port = int(port)
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
    ):
        raise _Refusal(f"{field}.port", f"{port!r} must be a port number from 1 to 65535")
    return ScrapeEndpoint(path, port)


def _mapping_name(resource: Any) -> str:
    meta = resource.get("metadata") if isinstance(resource, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def parse_mappings(resources: Iterable[Mapping[str, Any]]) -> ParsedMappings:
    """Every MetricMapping the cluster's collector may use, and every one it may not.

    Sorted by name, so the same set always renders the same config. Two mappings for
    one engine are ambiguous: the first by name is used and the others are refused.
    """
    ordered = sorted(resources, key=_mapping_name)
    accepted: list[MetricMapping] = []
    refused: list[RefusedMapping] = []
    by_engine: dict[str, str] = {}
    for resource in ordered:
        name = _mapping_name(resource)
        try:
            mapping = parse_mapping(resource)
        except _Refusal as refusal:
            refused.append(RefusedMapping(name, refusal.field, refusal.rule))
            continue
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as err:
            # One broken mapping is refused; it never stops every cluster's collector.
            refused.append(
                RefusedMapping(
                    name,
                    "spec",
                    f"cannot be read ({type(err).__name__}: a field has the wrong type)",
                )
            )
            continue
        if mapping.engine in by_engine:
            refused.append(
                RefusedMapping(
                    name,
                    "spec.engine",
                    f"engine {mapping.engine!r} is already mapped by MetricMapping "
                    f"{by_engine[mapping.engine]}; one mapping per engine type",
                )
            )
            continue
        by_engine[mapping.engine] = name
        accepted.append(mapping)
    return ParsedMappings(tuple(accepted), tuple(refused))


SOURCE_BUILTIN: Final = "BuiltIn"
SOURCE_METRIC_MAPPING: Final = "MetricMapping"


@dataclass(frozen=True)
class MappingInUse:
    """Which mapping normalizes one engine type's metrics, and where it comes from."""

    engine: str
    name: str
    source: str  # SOURCE_BUILTIN or SOURCE_METRIC_MAPPING

    def to_status(self) -> dict[str, str]:
        return {"engineType": self.engine, "mapping": self.name, "source": self.source}


@dataclass(frozen=True)
class ResolvedMappings:
    """The mappings a collector uses: one per engine type, a platform team's first.

    `refused` holds only platform teams' mappings: the built-ins are held to the same
    parse by the tests, and one that failed it would be a bug in a release, not
    something a cluster's status could help anyone fix.
    """

    accepted: tuple[MetricMapping, ...]
    refused: tuple[RefusedMapping, ...]
    builtin_engines: frozenset[str] = frozenset()

    @property
    def mapped_engines(self) -> frozenset[str]:
        return frozenset(m.engine for m in self.accepted)

    @property
    def in_use(self) -> tuple[MappingInUse, ...]:
        return tuple(
            MappingInUse(
                m.engine,
                m.name,
                SOURCE_BUILTIN if m.engine in self.builtin_engines else SOURCE_METRIC_MAPPING,
            )
            for m in self.accepted
        )


def resolve_mappings(
    applied: Iterable[Mapping[str, Any]], builtin: Iterable[Mapping[str, Any]]
) -> ResolvedMappings:
    """The built-in mappings, each replaced by a platform team's mapping for its engine type.

    Replacement is whole, by engine type, never merged entry by entry: a team that maps
    vLLM itself gets exactly its mapping, not a mix whose result nobody wrote down. A
    platform team's mapping that is refused does not take its engine type away from the
    built-in: the built-in keeps normalizing it (the refusal is reported), since falling
    back to raw names would break every dashboard for a typo. Sorted by engine type, so
    the same inputs render the same config.
    """
    parsed = parse_mappings(applied)
    taken = parsed.mapped_engines
    builtins = parse_mappings(builtin)
    if builtins.refused:
        raise ValueError(
            "a built-in MetricMapping does not parse: "
            + "; ".join(r.message for r in builtins.refused)
        )
    kept_builtins = [m for m in builtins.accepted if m.engine not in taken]
    accepted = sorted([*parsed.accepted, *kept_builtins], key=lambda m: m.engine)
    return ResolvedMappings(
        tuple(accepted),
        parsed.refused,
        frozenset(m.engine for m in kept_builtins),
    )
