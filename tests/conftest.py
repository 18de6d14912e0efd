"""Shared test plumbing: where the repo and the pinned tools are, and how a test asks
for a tool.

Under CI=true a missing tool fails the test and names the command that installs it; a
developer without the tool gets a skip that names the same command.
"""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from xdist.scheduler import LoadScopeScheduling

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))

import render  # noqa: E402  (hack/render.py: the harness the demo uses too)

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# No per-example deadline and no too-slow health check: `make test` runs two workers on
# two cores beside API servers and engines, and a wall-clock deadline there fails on
# load, not on the code. Work is bounded where it matters by the code's own budgets,
# which the tests assert. Under CI the examples are derandomized, as the fuzz tier's are:
# a CI result is reproducible, and a failure found by a random local run is reported
# with its example (`make fuzz-long` and local runs keep exploring).
settings.register_profile(
    "modelplane",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=IN_CI,
)
settings.load_profile("modelplane")


def require_tool(name: str, tool: str = "") -> Path:
    """The path of a pinned tool; fails under CI, skips elsewhere, if it is missing.

    `tool`: the hack/tools.sh tool that installs it, named in the message so the command
    installs only that one (`bash hack/tools.sh vllm`); without it, every tool.
    """
    path = render.tools_bin() / name
    if path.exists():
        return path
    command = f"'bash hack/tools.sh {tool}'" if tool else "'bash hack/tools.sh' (or 'make tools')"
    message = f"{name} is not installed at {path}: run {command}"
    if IN_CI:
        pytest.fail(f"CI requires {message}")
    pytest.skip(message)  # not in CI: under CI=true the test already failed above
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def crossplane() -> Path:
    return require_tool("crossplane")


@pytest.fixture(scope="session")
def function_servers(crossplane):
    """The four functions, served once for every render test in the session."""
    with render.running_functions() as servers:
        yield servers


@pytest.fixture(scope="session")
def fleet(function_servers, tmp_path_factory) -> render.Fleet:
    """The examples rendered as one fleet, as `make demo` and `make render` render them."""
    return render.render_fleet(function_servers, tmp_path_factory.mktemp("fleet"))


# The end-to-end tier's real-engine modules: together the longest scope but one, and the
# only ones that spend most of their time in engine processes, so a worker of its own
# runs them (on one fleet box of their own, its real serving turned on once for both)
# while the other runs the rest of the tier, CI's critical path.
REAL_SERVING = "tests/e2e/test_serving_real.py"
REAL_ROLLOUTS = "tests/e2e/test_rollouts_live.py"
REAL_ENGINE_MODULES = (REAL_SERVING, REAL_ROLLOUTS)
REAL_ENGINE_SCOPE = "tests/e2e (real engine)"
# The package-install module runs a control plane of its own, not the tier's fleet box:
# a scope of its own keeps it off the worker that runs the tier.
PACKAGE_INSTALL = "tests/e2e/test_package_install.py"


def _scope(nodeid: str) -> str:
    """What one pytest-xdist worker runs whole: the end-to-end tier (its fleet box is
    package-scoped, started once for the tier) but its real-engine modules, which form
    a scope of their own, and the package install (no fleet box: a module of its own),
    else a module (its module-scoped fixtures — a fleet box, a collector, a live fleet —
    start once)."""
    path = nodeid.split("::", 1)[0]
    if path in REAL_ENGINE_MODULES:
        return REAL_ENGINE_SCOPE
    if path.startswith("tests/e2e/") and path != PACKAGE_INSTALL:
        return "tests/e2e"
    return path


class TierScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return _scope(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs two workers, each taking whole scopes (`_scope`). (xdist's own
    `loadgroup` cannot do it here: it renames node ids, which pytest 9 no longer lets a
    plugin do.) The scopes go out in collection order (pytest_collection_modifyitems),
    not xdist's default of the scope with the most tests first, which put the real-engine
    modules last, behind every unit module."""
    config.option.loadscopereorder = False
    return TierScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """The end-to-end tier first, then its real-engine modules: under `make test` the two
    longest scopes start at once, one on each worker, and the rest fill in around them.
    (Stable: within a scope the modules keep their order.)"""
    rank = {"tests/e2e": 0, REAL_ENGINE_SCOPE: 1}
    items.sort(key=lambda item: rank.get(_scope(item.nodeid), 2))
