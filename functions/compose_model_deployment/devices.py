"""Which node pools have the devices a deployment asks for.

Every device of a pool is alike (one driver, one set of attributes and capacity), so a
pool matches a deployment when every selector of every device request is true for the
pool's device profile, and each pod's devices fit on one node. Pools share profiles (a
fleet has a few GPU models and many pools), so the answer is computed once per distinct
profile and each (selector, profile) pair is evaluated once per process: cel-python
costs a fraction of a millisecond per evaluation, and re-evaluating per replica and pool
is what makes a naive scheduler take a minute on a large fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.compose_model_deployment.cel_env import (
    MAX_DEPLOYMENT_COST,
    DeviceProfile,
    SelectorError,
    compile_selector,
    evaluate,
    selector_cost,
)
from functions.compose_model_deployment.model import Deployment, InputError


@dataclass(frozen=True)
class Mismatch:
    """The first selector a profile fails, and why."""

    path: str  # ...nodeSelector.devices[k].selectors[i].cel
    selector: str
    error: str = ""  # empty: the selector evaluated to false
    missing_name: str = ""


@dataclass(frozen=True)
class ProfileMatch:
    matched: bool
    mismatch: Mismatch | None = None


def check_selectors(deployment: Deployment) -> None:
    """Compile every selector once; InputError (path, rule) for one that cannot run, or
    for a deployment whose selectors together are over MAX_DEPLOYMENT_COST."""
    total = 0
    for engine in deployment.engines:
        for member in engine.members:
            for request in member.devices:
                for i, text in enumerate(request.selectors):
                    try:
                        compile_selector(text)
                    except SelectorError as err:
                        raise InputError(f"{request.path}.selectors[{i}].cel", str(err)) from None
                    total += selector_cost(text)
    if total > MAX_DEPLOYMENT_COST:
        raise InputError(
            "spec.template.spec.engines",
            f"the device selectors together have an estimated cost of {total} evaluation "
            f"steps; at most {MAX_DEPLOYMENT_COST} (drop or simplify selectors)",
        )


def match_profile(deployment: Deployment, profile: DeviceProfile) -> ProfileMatch:
    """Whether devices of this profile satisfy every request of every member."""
    for engine in deployment.engines:
        for member in engine.members:
            for request in member.devices:
                for i, text in enumerate(request.selectors):
                    result = evaluate(text, profile)
                    if not result.matched:
                        return ProfileMatch(
                            False,
                            Mismatch(
                                f"{request.path}.selectors[{i}].cel",
                                text,
                                result.error,
                                result.missing_name,
                            ),
                        )
    return ProfileMatch(True)


def describe_mismatch(mismatch: Mismatch, profiles: list[DeviceProfile]) -> str:
    """One line a person can act on: the path, the rule, and what would be valid."""
    if mismatch.missing_name:
        known_attributes = sorted({a[0] for p in profiles for a in p.attributes})
        known_capacity = sorted({c[0] for p in profiles for c in p.capacity})
        return (
            f"{mismatch.path}: no such attribute {mismatch.missing_name!r} on any selected "
            f"pool's devices (known attributes: {', '.join(known_attributes) or 'none'}; "
            f"capacity: {', '.join(known_capacity) or 'none'})"
        )
    if mismatch.error:
        return f"{mismatch.path}: {mismatch.error}"
    # A selector written as a YAML block carries line ends: quote it on one line.
    selector = " ".join(mismatch.selector.split())
    return f"{mismatch.path}: no selected pool's devices satisfy {selector!r}"
