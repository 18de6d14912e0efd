"""The MetricMappings that ship: vLLM, SGLang and TensorRT-LLM, in effect on a fresh install.

The YAML files beside this module are the one source of their content. They are package
data, so the function image carries them, and compose-serving-stack reads them here as
if a platform team had applied them; nobody has to `kubectl apply` anything for the
engines Modelplane knows. They are also valid MetricMapping resources: applying one by
hand (or a changed copy under any name) makes it a platform team's mapping, which
replaces the built-in for its engine type (metricmapping.resolve_mappings).

Read once per process: they change only with a release.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml

PACKAGE = __name__
# The files themselves, for tools that need paths (crossplane render, the tests).
DIRECTORY: Final = Path(__file__).resolve().parent


@functools.cache
def _loaded() -> tuple[tuple[str, str], ...]:
    files = sorted(
        (f for f in resources.files(PACKAGE).iterdir() if f.name.endswith(".yaml")),
        key=lambda f: f.name,
    )
    return tuple((f.name, f.read_text(encoding="utf-8")) for f in files)


def builtin_mapping_files() -> tuple[str, ...]:
    """The file names of the built-in mappings, sorted."""
    return tuple(name for name, _ in _loaded())


def builtin_mapping_resources() -> list[dict[str, Any]]:
    """Every built-in MetricMapping as the API server would return it (a fresh copy)."""
    return [yaml.safe_load(text) for _, text in _loaded()]
