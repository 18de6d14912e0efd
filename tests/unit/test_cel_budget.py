"""Selector work is bounded by what it does, counted while it runs (issue #34, item 4).

The estimate made when a selector compiles cannot see values built at run time (`+`
doubles a list 16 elements at a time to 65,536 in a dozen binds while the estimator
takes an unknown range as 64), so the interpreter counts: one step per node visited,
elements for what operators copy and compare. These cases hold that a selector stops at
MAX_COST steps, a request at MAX_DEPLOYMENT_COST whatever the cache holds, a request
whose caller left stops at once, and the answer names the field and the rule.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.common import budget
from functions.compose_model_deployment import cel_env
from functions.compose_model_deployment.cel_env import (
    ELEMENTS_PER_STEP,
    MAX_COST,
    MAX_DEPLOYMENT_COST,
    MAX_VALUE_SIZE,
    DeviceProfile,
    SelectorError,
    evaluate,
)
from functions.compose_model_deployment.fn import FunctionRunner
from tests.unit.test_hostile_input import _cluster, _request, _severities
from tests.unit.test_placement_status import NOW

GPU = DeviceProfile("gpu.nvidia.com", (("gpu.nvidia.com/slots", "int", 2),), ())
# A single charge may overshoot the limit by what one operator copies or compares.
MOST_STEPS = MAX_COST + MAX_VALUE_SIZE // ELEMENTS_PER_STEP + 1
SIXTEEN = "[" + ",".join("0" * 16) + "]"


def doubling(times: int, tail: str = "x{n}.all(e, e == 0)", seed: str = SIXTEEN) -> str:
    """The issue's shape: a 16-element list (or string) doubled by `+` in nested binds."""
    expression = tail.format(n=times)
    for i in range(times, 0, -1):
        expression = f"cel.bind(x{i}, x{i - 1} + x{i - 1}, {expression})"
    return f"cel.bind(x0, {seed}, {expression})"


def nested_copies(levels: int, name: str) -> str:
    """Lists of references to lists: each level is 16 times the last in leaves, for a
    handful of steps (the `map` body is one identifier)."""
    expression = "{body}"
    for i in range(1, levels + 1):
        expression = expression.format(
            body=f"cel.bind({name}{i}, {name}{i - 1}.map(v, {name}{i - 1}), {{body}})"
        )
    return f"cel.bind({name}0, {SIXTEEN}, " + expression + ")"


HOSTILE = {
    # 16 x 2^12 = 65,536 elements, estimated at under 2,000 steps.
    "list_doubled_to_65536_then_walked": doubling(12),
    "list_doubled_then_searched_per_element": doubling(10, "x{n}.all(e, e in x{n})"),
    "string_doubled_to_65536_then_matched_per_element": doubling(
        12, SIXTEEN + ".all(i, !x{n}.matches('(a|aa)*b'))", seed='"' + "a" * 16 + '"'
    ),
    # 16^4 = 65,536 leaves each side, built in a few dozen steps, compared with `==`.
    "nested_references_compared_deeply": nested_copies(4, "a").format(
        body=nested_copies(4, "b").format(body="a4 == b4")
    ),
}


@pytest.mark.parametrize("selector", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_selector_stops_at_the_step_budget_in_bounded_time(selector):
    assert cel_env.selector_cost(selector) <= MAX_COST  # the estimate lets it through
    cel_env.evaluate.cache_clear()
    # CPU time of this thread, not the wall clock: bounded work is what the budget
    # promises, and a loaded machine (make test's two workers) stretches wall time.
    began = time.thread_time()
    result = evaluate(selector, GPU)
    elapsed = time.thread_time() - began
    assert result.over_budget, result
    assert not result.matched
    assert MAX_COST < result.steps <= MOST_STEPS
    assert elapsed < 1.0, f"{elapsed:.2f}s of CPU"


def test_a_benign_selector_is_charged_what_it_did():
    result = evaluate('device.attributes["gpu.nvidia.com"].slots == 2', GPU)
    assert result.matched
    assert 0 < result.steps < 100


def test_a_hostile_selector_is_a_fatal_naming_the_field_and_the_rule():
    req = _request([_cluster("us-east-1")], {})
    engines = req.observed.composite.resource["spec"]["template"]["spec"]["engines"]
    selectors = engines[0]["members"][0]["nodeSelector"]["devices"][0]["selectors"]
    selectors[0]["cel"] = HOSTILE["list_doubled_to_65536_then_walked"]
    rsp = asyncio.run(FunctionRunner(clock=lambda: NOW).RunFunction(req))
    fatal = _severities(rsp, fnv1.SEVERITY_FATAL)
    assert len(fatal) == 1, fatal
    assert (
        "engines[0].members[0].nodeSelector.devices[0].selectors[0].cel: over its budget"
        in fatal[0]
    )
    assert f"at most {MAX_COST:,} evaluation steps, counted while it runs" in fatal[0]


def _costly(i: int) -> str:
    """A selector under MAX_COST that costs a few thousand steps (distinct per i)."""
    return f"[{','.join(str(j) for j in range(40))}].all(a, a + {i} >= 0)"


def _evaluate_all(selectors: list[str]) -> None:
    for text in selectors:
        evaluate(text, GPU)


def test_the_request_budget_counts_answers_from_the_cache_too():
    selectors = [_costly(i) for i in range(40)]
    per_selector = evaluate(selectors[0], GPU).steps
    assert per_selector * len(selectors) > MAX_DEPLOYMENT_COST
    for _ in ("answers computed", "answers from the cache"):  # the same outcome
        _, token = budget.begin(None)
        try:
            with pytest.raises(budget.WorkStopped, match="budget of 50,000 evaluation steps"):
                _evaluate_all(selectors)
        finally:
            budget.end(token)


def test_evaluation_stops_at_the_deadline_while_it_runs():
    ticks = iter(range(1_000_000))
    work = budget.WorkBudget(deadline=10, clock=lambda: next(ticks))
    token = budget._CURRENT.set(work)
    try:
        cel_env.evaluate.cache_clear()
        with pytest.raises(budget.WorkStopped, match="deadline passed"):
            evaluate(_costly(999), GPU)
    finally:
        budget.end(token)
    # Stopped by the request, not by the selector: nothing was cached for it.
    assert evaluate(_costly(999), GPU).matched


def test_evaluation_stops_when_the_caller_cancels():
    work, token = budget.begin(None)
    try:
        work.cancel()
        with pytest.raises(budget.WorkStopped, match="cancelled"):
            evaluate(_costly(998), GPU)
    finally:
        budget.end(token)


def _hostile_deployment_request() -> fnv1.RunFunctionRequest:
    """Eight selectors, each estimated at under 1,600 steps and taking about 9,300 (a
    list doubled to 512 elements, then walked): none is over MAX_COST, together they
    are over the request's budget, the longest a request may work."""
    req = _request([_cluster("us-east-1")], {})
    engines = req.observed.composite.resource["spec"]["template"]["spec"]["engines"]
    device = engines[0]["members"][0]["nodeSelector"]["devices"][0]
    device["selectors"] = [
        {"cel": doubling(5, "x{n}.all(e, e == 0) || " + str(i) + " < 0")} for i in range(8)
    ]
    return req


def test_selectors_that_together_outrun_the_request_budget_are_a_fatal_naming_the_field():
    cel_env.evaluate.cache_clear()
    rsp = asyncio.run(FunctionRunner(clock=lambda: NOW).RunFunction(_hostile_deployment_request()))
    fatal = _severities(rsp, fnv1.SEVERITY_FATAL)
    assert len(fatal) == 1, fatal
    assert re.search(
        r"devices\[0\]\.selectors\[[0-7]\]\.cel: the device selectors of this request used "
        r"their budget of 50,000 evaluation steps together",
        fatal[0],
    ), fatal[0]


class _Caller:
    """A gRPC context whose caller waits `seconds` more."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def time_remaining(self) -> float | None:
        return self.seconds


def _finished_when(runner: FunctionRunner) -> threading.Event:
    finished = threading.Event()
    original = runner.run

    def run(req):
        try:
            return original(req)
        finally:
            finished.set()

    runner.run = run
    return finished


def test_no_worker_thread_outlives_a_caller_that_cancelled():
    cel_env.evaluate.cache_clear()
    runner = FunctionRunner(clock=lambda: NOW)
    began = time.perf_counter()
    asyncio.run(runner.RunFunction(_hostile_deployment_request(), _Caller(None)))
    uncancelled = time.perf_counter() - began

    cel_env.evaluate.cache_clear()
    finished = _finished_when(runner)

    async def cancelled_early() -> float:
        task = asyncio.create_task(runner.RunFunction(_hostile_deployment_request()))
        await asyncio.sleep(0.02)
        task.cancel()
        cancelled_at = time.perf_counter()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled_at

    cancelled_at = asyncio.run(cancelled_early())
    assert finished.wait(5)
    after_cancel = time.perf_counter() - cancelled_at
    assert after_cancel < max(0.05, uncancelled / 4), (after_cancel, uncancelled)


def test_a_request_past_its_deadline_is_a_fatal_that_keeps_what_runs():
    cel_env.evaluate.cache_clear()
    rsp = asyncio.run(
        FunctionRunner(clock=lambda: NOW).RunFunction(_hostile_deployment_request(), _Caller(0))
    )
    fatal = _severities(rsp, fnv1.SEVERITY_FATAL)
    assert len(fatal) == 1
    assert "stopped: the request's deadline passed" in fatal[0]


# --- Hostile CEL, generated ----------------------------------------------------------------

_atoms = st.sampled_from(
    [
        SIXTEEN,
        "[1, 2, 3]",
        '"aaaaaaaaaaaaaaaa"',
        "device.driver",
        'device.attributes["gpu.nvidia.com"]',
        'device.attributes["gpu.nvidia.com"].slots',
        "1",
        "x",
    ]
)


def _combine(parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pair = st.tuples(parts, parts)
    return st.one_of(
        pair.map(lambda p: f"({p[0]} + {p[1]})"),
        pair.map(lambda p: f"({p[0]} == {p[1]})"),
        pair.map(lambda p: f"({p[0]} in {p[1]})"),
        pair.map(lambda p: f"cel.bind(x, {p[0]}, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.map(x, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.filter(x, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.all(x, {p[1]})"),
        pair.map(lambda p: f"{p[0]}.exists(x, {p[1]})"),
        parts.map(lambda p: f"size({p})"),
        parts.map(lambda p: f"string({p}).matches('(a|aa)*b')"),
        parts.map(lambda p: f"cel.bind(x, {p}, x + x)"),
    )


_hostile = st.recursive(_atoms, _combine, max_leaves=24)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(_hostile)
def test_any_generated_selector_is_refused_or_answered_within_its_budget(selector):
    try:
        cel_env.compile_selector(selector)
    except SelectorError:
        return  # refused when it compiles, with the rule: fine
    cel_env.evaluate.cache_clear()
    began = time.thread_time()  # CPU, not wall: see the test above
    first = evaluate(selector, GPU)
    elapsed = time.thread_time() - began
    assert first.steps <= MOST_STEPS
    assert first.over_budget or first.steps <= MAX_COST
    assert elapsed < 2.0, (selector, elapsed)
    cel_env.evaluate.cache_clear()
    assert evaluate(selector, GPU) == first  # counted the same way every time


def test_a_benign_render_finishes_while_hostile_selectors_are_still_in_flight():
    """The measurement with figures is tests/bench/bench_cel_isolation.py; here the
    order alone: a benign render (its selector answered from the memo, as on every
    reconcile after the first) does not wait for four hostile requests to finish."""
    runner = FunctionRunner(clock=lambda: NOW)
    benign = _request([_cluster("us-east-1")], {})
    asyncio.run(runner.RunFunction(benign))  # memoized from here on

    def hostile(seed: int) -> fnv1.RunFunctionRequest:
        req = _hostile_deployment_request()
        engines = req.observed.composite.resource["spec"]["template"]["spec"]["engines"]
        for i, selector in enumerate(
            engines[0]["members"][0]["nodeSelector"]["devices"][0]["selectors"]
        ):
            selector["cel"] = doubling(5, f"x{{n}}.all(e, e == 0) || {seed * 10 + i} < 0")
        return req

    async def race() -> tuple[float, int]:
        hostile_tasks = [asyncio.create_task(runner.RunFunction(hostile(s))) for s in range(4)]
        await asyncio.sleep(0.05)
        began = time.perf_counter()
        rsp = await runner.RunFunction(benign)
        took = time.perf_counter() - began
        assert not _severities(rsp, fnv1.SEVERITY_FATAL)
        still_running = sum(not t.done() for t in hostile_tasks)
        await asyncio.gather(*hostile_tasks)
        return took, still_running

    took, still_running = asyncio.run(race())
    assert still_running >= 1, took
    assert took < 2.0, took
