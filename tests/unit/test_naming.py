import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.common.contracts import LABEL_DEPLOYMENT
from functions.common.naming import (
    cluster_name_problem,
    deployment_pod_selector,
    dns_label,
    label_value,
    resource_key,
    service_name,
    serving_service_name,
    stable_hash,
)

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


LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# A valid namespaced object name can be any DNS subdomain of up to 253 characters.
SUBDOMAINS = st.from_regex(r"\A[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")


@given(SUBDOMAINS)
def test_label_values_are_valid_for_any_valid_object_name(name):
    value = label_value(name)
    assert len(value) <= 63
    assert re.fullmatch(LABEL_VALUE, value)
    if len(name) <= 63:
        assert value == name  # a name that already fits is used whole


@given(SUBDOMAINS)
def test_a_deployments_pod_selector_is_one_equality_on_its_pod_label(name):
    # The scale subresource's selector: one `key=value` requirement a selector parser
    # accepts, on the label value compose-model-replica stamps on the pods.
    key, value = deployment_pod_selector(name).split("=")
    assert key == LABEL_DEPLOYMENT
    assert value == label_value(name)
    assert value
    assert re.fullmatch(LABEL_VALUE, value)


def test_label_values_keep_long_names_apart():
    assert label_value("a" * 100 + "x") != label_value("a" * 100 + "y")


@given(SUBDOMAINS)
def test_service_names_start_with_a_letter_and_fit(name):
    assert re.fullmatch(DNS_1035, service_name(name))
    assert len(service_name(name, "epp")) <= 63


@given(SUBDOMAINS)
def test_the_serving_service_never_takes_a_name_a_workload_controller_needs(name):
    """The workload is named dns_label(deployment): LWS's headless Service takes that
    name, Grove's takes `<podcliqueset>-<replica index>`."""
    serving = serving_service_name(name)
    assert re.fullmatch(DNS_1035, serving)
    workload = dns_label(name)
    assert serving != workload
    assert not re.fullmatch(rf"{re.escape(workload)}-[0-9]+", serving)


def test_the_serving_service_is_the_deployment_and_serving():
    assert serving_service_name("deepseek-v3") == "deepseek-v3-serving"
    assert serving_service_name("8b-model") == "svc-8b-model-serving"


def test_service_names_that_are_valid_stay_as_they_are():
    assert service_name("llama") == "llama"
    assert service_name("8b-model").startswith("svc-8b-model")


@pytest.mark.parametrize(
    "name",
    ["us-east-1", "a" * 63],
)
def test_a_dns_label_is_a_valid_cluster_name(name):
    assert cluster_name_problem(name) is None


@pytest.mark.parametrize(
    "name",
    ["us.east.1", "a" * 64, "US-EAST", "us-east-1\n", "", None, 7],
)
def test_other_cluster_names_are_refused_with_the_rule(name):
    assert cluster_name_problem(name)
