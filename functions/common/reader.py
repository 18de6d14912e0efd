"""The one way a kind is read: a pydantic model of what the function reads, refused as
`path: rule`.

Every reader of a kind (ModelReplica, ModelCache, the InferenceCluster as the serving
stack reads it, the AdaptivePolicy the runtime reads) declares the fields it reads as a
frozen pydantic model on `Spec` and reads it with `read`, which turns the first
validation error into the reader's own `InputError` subclass naming the field's path
and the rule — the message a person gets in `kubectl describe`.

Why pydantic and not dataclasses: both give typed, frozen values, but a dataclass only
holds values; every type check, default, alias (`providerConfigRef` →
`provider_config_ref`) and bound would again be written by hand beside it, which is the
style this replaces. pydantic is already pinned and already reads the two largest kinds
(ModelReplica, AdaptivePolicy); its validators run in order of declaration, so a model
whose fields are declared in the order the rules are checked refuses the same input
with the same first error; and an error carries its location, so the path in a message
is derived from the model, not written again beside each check.

Two conventions keep messages exactly as a person has seen them:

- A rule of ours is raised as `rule(...)` (a PydanticCustomError whose message is the
  rule, verbatim; pydantic would prefix a ValueError with "Value error, "). `at` names a
  path below the field the validator runs on (a check over a whole object that names
  one of its fields); `path` replaces the location outright (a path the model's shape
  does not have, such as `members[leader]`).
- Where an older reader took any value and made a string of it (`str(x or "")`), the
  model does the same (`Text`), so nothing that was read before is refused now; a value
  of the wrong JSON type where an object or list goes (which the XRD itself refuses) is
  refused with its path and pydantic's own rule.

On this base: ModelReplica (compose_model_replica/model.py), AdaptivePolicy
(runtime/shared/policy.py), the InferenceCluster as compose-serving-stack reads it
(compose_serving_stack/compose.py) and ModelCache (compose_model_deployment/modelcache.py).
Still read by hand, each because a declarative model would change which error is
reported first, or what a reconcile costs:

- ModelDeployment (compose_model_deployment/model.py `read_deployment`): its rules
  interleave levels of the document (the engines under spec.template.spec before
  spec.source and spec.replicas, the clusterSelector beside the engines after them), and
  whether a member may be a Worker depends on its siblings, checked between that
  member's role and its devices.
- The InferenceCluster and ModelReplica as placement reads them (same module,
  `read_cluster`, `read_holding`): memoized per fleet object on the hot path, with
  paths prefixed by the object's name and a catch-all answer measured in the benches.
- Label selectors (`read_selector`): shared with `read_deployment`; ModelCache reads it
  through `bridge`.
- MetricMapping (common/metricmapping.py `parse_mapping`): most of its rules depend on
  the entries before them (a target or source already mapped by spec.metrics[i], a
  select against the label renames declared after the metrics), and its type rules
  name the value's type (`must be a string, got int`), not pydantic's words.
- TelemetryDestination (common/telemetrydestination.py `parse_destination`): it lists
  every error in one message, in an order that crosses levels (providerConfigRef's
  kind before gateway.replicas, its name after them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NoReturn, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

RULE_ERROR = "modelplane_rule"

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class InputError(ValueError):
    """Input a function cannot act on: `path: rule`. Each reader raises its own subclass
    (InvalidReplica, InvalidCluster, ...), so a shell catches only its kind's."""

    def __init__(self, path: str, rule: str) -> None:
        super().__init__(f"{path}: {rule}")
        self.path = path
        self.rule = rule


class Spec(BaseModel):
    """A kind's view: frozen, read by the XRD's camelCase names (aliases) or by field
    name, and unknown fields kept out rather than refused (the XRD is the schema; this
    is what the function reads of it)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


def rule(message: str, *, at: str = "", path: str = "") -> PydanticCustomError:
    """Our rule, to raise from a validator: `message` verbatim; `at` a path below the
    field, `path` a whole path that replaces the field's."""
    return PydanticCustomError(RULE_ERROR, "{rule}", {"rule": message, "at": at, "path": path})


def refuse(message: str, *, at: str = "", path: str = "") -> NoReturn:
    raise rule(message, at=at, path=path)


def join_path(root: str, loc: Sequence[str | int]) -> str:
    """`root` and a pydantic location as a field path: `spec.engines[0].port`."""
    path = root
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def error_path(error: dict[str, Any], root: str = "") -> str:
    """The path one pydantic error names (see `rule` for `at` and `path`)."""
    ctx = error.get("ctx") or {}
    if error.get("type") == RULE_ERROR and ctx.get("path"):
        return str(ctx["path"])
    path = join_path(root, error["loc"])
    at = ctx.get("at") if error.get("type") == RULE_ERROR else ""
    if at:
        path = f"{path}{at}" if at.startswith("[") else f"{path}.{at}" if path else at
    return path


def read(model: type[M], data: Any, *, error: type[InputError] = InputError, root: str = "") -> M:
    """`data` as `model`; the first failing rule as `error(path, rule)` (paths under
    `root`)."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        raise error(error_path(first, root), first["msg"]) from None


def _text(value: Any) -> str:
    return str(value or "")


# Any value as a string, "" for a falsy one: what `str(x or "")` read before.
Text = Annotated[str, BeforeValidator(_text)]
# Any value as a string (`str(x)`; a field left out takes the model's default).
Str = Annotated[str, BeforeValidator(str)]


def bridge(reader: Callable[..., T], *, cannot_read_at: str | None = None) -> Callable[..., T]:
    """A reader that raises InputError(path, rule), as a validator: the same path and
    rule, as a rule of ours (pydantic would wrap a ValueError as "Value error, ...").
    For a part read the same way by a kind not yet on this base (a label selector).

    `cannot_read_at`: a reader that used to answer any wrong type inside it with
    `<path>: cannot be read (TypeError: a field has the wrong type)` keeps that answer,
    as a rule of this field (so an earlier field's rule is still reported first)."""

    @functools.wraps(reader)
    def validate(*args: Any, **kwargs: Any) -> T:
        try:
            return reader(*args, **kwargs)
        except PydanticCustomError:
            raise  # a rule of ours already (a ValueError too)
        except InputError as err:
            refuse(err.rule, path=err.path)
        except WRONG_TYPE_ERRORS as err:
            if cannot_read_at is None:
                raise
            refuse(cannot_read(err), path=cannot_read_at)

    return validate


# What a dict reader raises when a value has another type than it reads.
WRONG_TYPE_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError)


def cannot_read(err: Exception) -> str:
    return f"cannot be read ({type(err).__name__}: a field has the wrong type)"


def _object_or_empty(value: Any) -> Any:
    return value or {}


def _list_or_empty(value: Any) -> Any:
    return value or []


# An object (a list) that may be absent, null or empty (`x.get(...) or {}`): read as empty.
OrEmpty = BeforeValidator(_object_or_empty)
OrEmptyList = BeforeValidator(_list_or_empty)


def object_or_refuse(value: Any, *, path: str = "", at: str = "") -> dict:
    """`value or {}` where a validator reads a raw object: one of another JSON type is
    refused with pydantic's own rule, as a declared object field would be."""
    value = value or {}
    if not isinstance(value, dict):
        refuse("Input should be a valid dictionary", path=path, at=at)
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        refuse(f"must be true or false, got {str(value)[:40]!r}")
    return value


# true or false, nothing else (bool("false") is True: a string must not turn a switch on).
Flag = Annotated[Any, AfterValidator(_flag)]
