"""Each Function package's metadata is what Crossplane's package manager can read: one
YAML document, a meta.pkg.crossplane.io Function named as the Configuration depends on
it. (The fleet box found a description with an unquoted ': ' that no YAML parser reads.)"""

from pathlib import Path

import pytest
import yaml

from functions.common.contracts import FUNCTIONS

PACKAGES = Path(__file__).resolve().parents[2] / "package" / "functions"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_function_package_metadata_parses_and_names_the_function(function):
    path = PACKAGES / function.removeprefix("function-") / "crossplane.yaml"
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(documents) == 1
    (meta,) = documents
    assert meta["apiVersion"].startswith("meta.pkg.crossplane.io/")
    assert meta["kind"] == "Function"
    assert meta["metadata"]["name"] == function
    assert isinstance(meta["metadata"]["annotations"]["meta.crossplane.io/description"], str)
