"""How `make test` splits the tiers between its two workers (tests/conftest.py): the
end-to-end tier's real-engine modules run together on one worker, beside the rest of the
tier on the other (CI's critical path), never split across the two."""

from __future__ import annotations

import pytest

from tests.conftest import PACKAGE_INSTALL, REAL_ENGINE_MODULES, REAL_ENGINE_SCOPE, _scope


@pytest.mark.parametrize("module", REAL_ENGINE_MODULES)
def test_each_real_engine_module_runs_in_the_real_engine_scope(module):
    assert _scope(f"{module}::test_x") == REAL_ENGINE_SCOPE
    assert _scope(f"{module}::test_y[param]") == REAL_ENGINE_SCOPE


def test_the_rollout_module_runs_with_the_real_engine_not_on_the_critical_path():
    assert _scope("tests/e2e/test_rollouts_live.py::test_x") == _scope(
        "tests/e2e/test_serving_real.py::test_y"
    )
    assert _scope("tests/e2e/test_scheduling.py::test_z") == "tests/e2e"
    assert _scope("tests/unit/test_rollout.py::test_z") == "tests/unit/test_rollout.py"


def test_the_package_install_is_a_scope_of_its_own_off_the_tiers_worker():
    """It starts no fleet box, only a control plane of its own: held by the tier's
    worker it would wait behind the whole tier."""
    scope = _scope(f"{PACKAGE_INSTALL}::test_x")
    assert scope == PACKAGE_INSTALL
    assert scope not in ("tests/e2e", REAL_ENGINE_SCOPE)
