"""The AdaptivePolicy CRD that compose-serving-stack installs in every member.

apis/adaptivepolicies/definition.yaml is the source; the function image carries only the
`functions` package, so the CRD travels as a byte-identical copy beside this module
(adaptivepolicy_crd.yaml, package data in pyproject.toml), read once at import.
tests/unit/test_serving_stack_compose.py fails if the two differ, and refreshes the copy
with UPDATE_GOLDEN=1.
"""

import copy
from importlib import resources
from typing import Final

import yaml

CRD_FILE: Final = "adaptivepolicy_crd.yaml"
_CRD: Final = yaml.safe_load(resources.files(__package__).joinpath(CRD_FILE).read_text())


def crd() -> dict:
    """A fresh copy each call: callers may place it into a response they then change."""
    return copy.deepcopy(_CRD)
