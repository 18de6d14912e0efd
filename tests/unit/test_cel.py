"""The DRA selector environment answers as the kube-scheduler would.

Each expected answer is justified by the DRA DeviceSelector rules (k8s.io/api
resource/v1 CELDeviceSelector) or the Kubernetes CEL quantity/semver libraries:
- an unknown domain under device.attributes / device.capacity is an empty map, and any
  reference to an unknown field is an evaluation error (the device does not match);
- capacities are Quantities, compared by exact value (resource.Quantity.Cmp), so 1Gi and
  1073741824 are equal and 1G is less than 1Gi;
- version attributes are semver values (precedence per semver 2.0, build ignored);
- values of different types are unequal at run time (CEL heterogeneous equality), while
  an ordering between a string and an int has no overload: an error.
"""

import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.common.quantity import parse_quantity
from functions.compose_model_deployment import cel_env
from functions.compose_model_deployment.cel_env import (
    DeviceProfile,
    SelectorError,
    compile_selector,
    evaluate,
)
from functions.compose_model_deployment.model import InputError, read_cluster

H100 = DeviceProfile(
    "gpu.nvidia.com",
    (
        ("gpu.nvidia.com/architecture", "string", "Hopper"),
        ("gpu.nvidia.com/cudaComputeCapability", "version", "9.0.0"),
        ("gpu.nvidia.com/migCapable", "bool", True),
        ("gpu.nvidia.com/productName", "string", "NVIDIA H100 80GB HBM3"),
        ("gpu.nvidia.com/slots", "int", 2),
        ("topology.example.com/rack", "string", "r7"),
    ),
    (("gpu.nvidia.com/memory", "80Gi"),),
)


@pytest.mark.parametrize(
    ("selector", "matched"),
    [
        # quantity comparison: 80Gi >= 40Gi
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("81Gi")) >= 0', False),
        # exact value: 80Gi == 80 * 2^30 bytes written without a suffix
        (
            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("85899345920")) == 0',
            True,
        ),
        # decimal G is smaller than binary Gi: 86G = 86e9 > 80Gi (85.9e9)
        ('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("86G"))', True),
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("85G"))', True),
        ('quantity("1Gi") == quantity("1024Mi")', True),
        ('quantity("500m").isInteger()', False),
        ('quantity("2k").asInteger() == 2000', True),
        # string, int and bool attributes
        ('device.attributes["gpu.nvidia.com"].architecture == "Hopper"', True),
        ('device.attributes["gpu.nvidia.com"].slots >= 2', True),
        ('device.attributes["gpu.nvidia.com"].migCapable', True),
        ('device.driver == "gpu.nvidia.com"', True),
        # a qualified attribute lives under its own domain
        ('device.attributes["topology.example.com"].rack == "r7"', True),
        # semver: 9.0.0 > 8.9.0, and the parts are ints
        (
            'device.attributes["gpu.nvidia.com"].cudaComputeCapability'
            '.isGreaterThan(semver("8.9.0"))',
            True,
        ),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() == 9', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
        ('semver("1.0.0-alpha.2").isLessThan(semver("1.0.0-alpha.10"))', True),
        ('semver("1.0.0+build.1") == semver("1.0.0+build.2")', True),
        # heterogeneous equality: a version is not equal to a string, and that is no error
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability == "9.0.0"', False),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability != "9.0.0"', True),
        ("1 == 1.0", True),
        # an unknown domain is an empty map: has() is false, not an error
        ('has(device.attributes["other.example.com"].rack)', False),
        ('!has(device.attributes["other.example.com"].rack)', True),
        # cel.bind, which DRA enables, names a value once for the expression
        (
            'cel.bind(dra, device.attributes["gpu.nvidia.com"], '
            'dra.slots == 2 && dra.architecture == "Hopper")',
            True,
        ),
        ('cel.bind(dra, device.attributes["gpu.nvidia.com"], dra.slots > 2)', False),
        # logical operators absorb an error when the other side decides
        ('device.attributes["gpu.nvidia.com"].nope == 1 || true', True),
    ],
)
def test_selector_answers_as_dra_does(selector, matched):
    result = evaluate(selector, H100)
    assert result.error == ""
    assert result.matched is matched


@pytest.mark.parametrize(
    ("selector", "error", "missing"),
    [
        # an unknown field inside a known domain is an evaluation error
        (
            'device.attributes["gpu.nvidia.com"].memroy == "x"',
            "no such attribute 'memroy'",
            "memroy",
        ),
        (
            'device.capacity["gpu.nvidia.com"]["vram"].sign() == 1',
            "no such attribute 'vram'",
            "vram",
        ),
        # a field of an unknown domain is an error too (the empty map has no such field)
        ('device.attributes["other.example.com"].rack == "r7"', "no such attribute 'rack'", "rack"),
        # ordering a string against an int has no overload
        ('device.attributes["gpu.nvidia.com"].architecture > 5', "type error", ""),
        # comparing a quantity with a version has no overload either
        (
            'device.capacity["gpu.nvidia.com"].memory.compareTo(semver("1.0.0")) > 0',
            "type error",
            "",
        ),
        ('quantity("lots").sign() == 1', "invalid quantity", ""),
        # a selector must be a predicate
        ('device.attributes["gpu.nvidia.com"].architecture', "must evaluate to bool", ""),
    ],
)
def test_errors_do_not_match_and_say_why(selector, error, missing):
    result = evaluate(selector, H100)
    assert result.matched is False
    assert error in result.error
    assert result.missing_name == missing


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ('device.attributes["gpu.nvidia.com"', "does not compile"),
        ('device.attributes["gpu.nvidia.com"].productName.lower() == "h100"', "'lower'"),
        ('node.labels["zone"] == "a"', "'node'"),
        ('cel.bind(d, device.attributes["gpu.nvidia.com"], zone == "a")', "'zone'"),
        ("cel.bind(d, device.driver)", "cel.bind takes a name, a value and an expression"),
    ],
)
def test_selectors_that_cannot_run_anywhere_fail_to_compile(selector, message):
    with pytest.raises(SelectorError, match=message):
        compile_selector(selector)


def test_comprehension_variables_are_not_free_variables():
    compile_selector(
        '["Hopper", "Blackwell"].exists(a, a == device.attributes["gpu.nvidia.com"].architecture)'
    )
    assert evaluate(
        '["Hopper", "Blackwell"].exists(a, a == device.attributes["gpu.nvidia.com"].architecture)',
        H100,
    ).matched


def test_bare_attribute_names_belong_to_the_drivers_domain():
    ic = {
        "metadata": {"name": "c"},
        "spec": {
            "region": "r",
            "providerConfigRef": {"name": "c"},
            "nodePools": [
                {
                    "name": "p",
                    "nodes": 1,
                    "devices": {
                        "driver": "gpu.nvidia.com",
                        "perNode": 8,
                        "attributes": {
                            "productName": {"string": "NVIDIA H100"},
                            "topology.example.com/rack": {"string": "r1"},
                        },
                        "capacity": {"memory": "80Gi"},
                    },
                }
            ],
        },
    }
    profile = read_cluster(ic).pools[0].profile
    assert evaluate(
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100"', profile
    ).matched
    assert evaluate('device.attributes["topology.example.com"].rack == "r1"', profile).matched
    assert evaluate('device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")', profile).matched


def test_each_selector_and_profile_pair_is_evaluated_once(monkeypatch):
    calls = []
    selector = 'device.attributes["gpu.nvidia.com"].slots == 2 && true'
    program = compile_selector(selector)
    original = type(program).evaluate

    def counting(self, activation):
        calls.append(1)
        return original(self, activation)

    monkeypatch.setattr(type(program), "evaluate", counting)
    evaluate.cache_clear()
    for _ in range(50):
        assert evaluate(selector, H100).matched
    assert len(calls) == 1


_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(_SUFFIXES)))
def test_quantities_parse_to_their_exact_value(number, suffix):
    assert parse_quantity(f"{number}{suffix}") == Fraction(number * _SUFFIXES[suffix])


@settings(deadline=None)
@given(
    st.integers(min_value=0, max_value=10**4),
    st.sampled_from(sorted(_SUFFIXES)),
    st.integers(min_value=0, max_value=10**4),
    st.sampled_from(sorted(_SUFFIXES)),
)
def test_compare_to_is_antisymmetric_and_agrees_with_value(a, sa, b, sb):
    qa = cel_env._quantity(cel_env.celtypes.StringType(f"{a}{sa}"))
    qb = cel_env._quantity(cel_env.celtypes.StringType(f"{b}{sb}"))
    forward, backward = int(cel_env._compare_to(qa, qb)), int(cel_env._compare_to(qb, qa))
    assert forward == -backward
    va, vb = a * _SUFFIXES[sa], b * _SUFFIXES[sb]
    assert forward == (va > vb) - (va < vb)


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (
            {"attributes": {"cudaComputeCapability": {"version": "9.0"}}},
            "devices.attributes.cudaComputeCapability.version: '9.0' is not a semantic version",
        ),
        ({"capacity": {"memory": "80 GiB"}}, "devices.capacity.memory: '80 GiB' is not a resource"),
    ],
)
def test_a_pool_whose_devices_cannot_be_read_names_the_field(devices, message):
    ic = {
        "metadata": {"name": "c"},
        "spec": {
            "nodePools": [
                {"name": "p", "nodes": 1, "devices": {"driver": "d", "perNode": 1, **devices}}
            ]
        },
    }
    with pytest.raises(
        InputError, match=re.escape(f"InferenceCluster c: spec.nodePools[0].{message}")
    ):
        read_cluster(ic)
