import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.common.naming import dns_label, resource_key, stable_hash

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def test_stable_hash_ignores_key_order():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})


def test_stable_hash_differs_when_a_value_differs():
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (("llama", "us-east-1"), "llama-us-east-1"),
        (("llama", "", "h100"), "llama-h100"),
    ],
)
def test_dns_label_keeps_names_that_are_already_valid(parts, expected):
    assert dns_label(*parts) == expected


def test_dns_label_makes_lossy_names_unique():
    # Both lower-case to "a-b"; the original spelling must still yield two names.
    assert dns_label("A_b") != dns_label("a.b")


def test_resource_key_is_a_dns_label_for_long_names():
    key = resource_key("x" * 80, "cluster")
    assert len(key) <= 63
    assert key == resource_key("x" * 80, "cluster")


@given(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=4))
def test_dns_label_is_always_valid_and_deterministic(parts):
    label = dns_label(*parts)
    assert re.match(DNS_LABEL, label), label
    assert len(label) <= 63
    assert label == dns_label(*parts)
