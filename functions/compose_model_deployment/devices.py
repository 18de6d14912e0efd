"""Which node pools have the devices a deployment asks for.

A pool's accelerators are alike (one driver, one set of attributes and capacity), and so
is each kind of device it lists beside them (`additionalDevices`: NICs, one driver each).
A request without a `deviceClassName` is for the accelerators; one with a class is for
the additional devices of that driver. A pool matches a deployment when every request
finds its kind and every selector of the request is true for that kind's profile (and an
additional request's count fits one node); accelerators per pod are checked by placement,
which counts whole nodes in them. When a pool does not match, the mismatch names the
request that blocks there and why; across pools, the one closest to matching (the most
requests matched) is the one explained. Pools share profiles (a
fleet has a few GPU models and many pools), so the answer is computed once per distinct
profile and each (selector, profile) pair is evaluated once per process: cel-python
costs a fraction of a millisecond per evaluation, and re-evaluating per replica and pool
is what makes a naive scheduler take a minute on a large fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.common.budget import WorkStopped
from functions.compose_model_deployment.cel_env import (
    MAX_COST,
    MAX_DEPLOYMENT_COST,
    MAX_VALUE_SIZE,
    DeviceProfile,
    SelectorError,
    compile_selector,
    evaluate,
    selector_cost,
)
from functions.compose_model_deployment.model import Deployment, DeviceRequest, InputError, Pool


@dataclass(frozen=True)
class Mismatch:
    """The request a pool cannot serve, and why (a selector, or no such device)."""

    path: str  # ...nodeSelector.devices[k].selectors[i].cel, or ...devices[k]
    selector: str
    error: str = ""  # empty: the selector evaluated to false
    missing_name: str = ""
    # Set when the pool has no devices of the request's class, or too few per node.
    missing_class: str = ""
    per_node: int = 0
    # Set when the request and the pool are of different kinds: "cpu" (the deployment
    # asks for CPU and memory, the pool has devices) or "devices" (the other way round).
    wrong_kind: str = ""


@dataclass(frozen=True)
class ProfileMatch:
    matched: bool
    mismatch: Mismatch | None = None
    matched_requests: int = 0  # how close a pool that does not match came


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


def match_pool(deployment: Deployment, pool: Pool) -> ProfileMatch:
    """Whether the pool's devices satisfy every request of every member; if not, the
    first request that blocks and how many requests did match. A CPU deployment matches
    only a CPU-only pool, a device deployment only a pool with devices."""
    kind = _kind_problem(deployment, pool)
    if kind is not None:
        return ProfileMatch(False, kind, 0)
    matched = 0
    blocking: Mismatch | None = None
    for engine in deployment.engines:
        for member in engine.members:
            for request in member.devices:
                problem = _request_problem(request, pool)
                if problem is None:
                    matched += 1
                elif blocking is None:
                    blocking = problem
    return ProfileMatch(blocking is None, blocking, matched)


def _kind_problem(deployment: Deployment, pool: Pool) -> Mismatch | None:
    member = deployment.engines[0].members[0] if deployment.engines else None
    if member is None or deployment.cpu_only == pool.cpu_only:
        return None
    if deployment.cpu_only:
        return Mismatch(f"{member.path}.nodeSelector.cpu", "", wrong_kind="cpu")
    return Mismatch(f"{member.path}.nodeSelector.devices", "", wrong_kind="devices")


def _request_problem(request: DeviceRequest, pool: Pool) -> Mismatch | None:
    profile = pool.profile
    if request.device_class:
        kind = next(
            (e for e in pool.extra_devices if e.profile.driver == request.device_class), None
        )
        if kind is None:
            return Mismatch(request.path, "", missing_class=request.device_class)
        if request.count > kind.per_node:
            return Mismatch(
                f"{request.path}.count",
                "",
                missing_class=request.device_class,
                per_node=kind.per_node,
            )
        profile = kind.profile
    for i, text in enumerate(request.selectors):
        path = f"{request.path}.selectors[{i}].cel"
        try:
            result = evaluate(text, profile)
        except WorkStopped as stopped:
            raise WorkStopped(path, stopped.rule) from None
        if result.over_budget:
            # Work counted while it ran, so the same selector stops the same way on every
            # reconcile: the deployment is refused, naming the field, as an estimate over
            # the budget is when it compiles.
            detail = result.error.removeprefix("over the runtime cost budget: ")
            raise WorkStopped(
                path,
                f"over its budget on {profile.driver} devices ({detail}): a selector may "
                f"take at most {MAX_COST:,} evaluation steps, counted while it runs, and "
                f"build values of at most {MAX_VALUE_SIZE:,} elements; simplify it",
            )
        if not result.matched:
            return Mismatch(path, text, result.error, result.missing_name)
    return None


def describe_mismatch(mismatch: Mismatch, profiles: list[DeviceProfile]) -> str:
    """One line a person can act on: the path, the rule, and what would be valid."""
    if mismatch.wrong_kind == "cpu":
        return (
            f"{mismatch.path}: asks for CPU and memory, which only a CPU-only pool (a "
            "nodePools[] entry with cpu and memory and no devices) offers; no selected "
            "cluster has one"
        )
    if mismatch.wrong_kind == "devices":
        return (
            f"{mismatch.path}: asks for devices, and the closest pool is CPU-only (cpu and "
            "memory, no devices)"
        )
    if mismatch.missing_class and mismatch.per_node:
        return (
            f"{mismatch.path}: more {mismatch.missing_class} devices than the closest pool "
            f"has on one node ({mismatch.per_node})"
        )
    if mismatch.missing_class:
        return (
            f"{mismatch.path}: the closest pool has no {mismatch.missing_class} devices "
            f"(deviceClassName names a driver in the pool's additionalDevices)"
        )
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
