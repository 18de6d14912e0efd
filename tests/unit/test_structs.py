"""The fast Struct conversions build and read exactly what the SDK's would.

compose-model-deployment writes its ModelReplicas through `structs.struct_bytes` and reads
the fleet through `structs.plain`; a difference from `Struct.update` / the SDK's reading
would change what Crossplane applies, so both are checked against the protobuf runtime's
own well-known-type helpers on arbitrary JSON-like values.
"""

from __future__ import annotations

import copy
import math

import pytest
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.common import structs
from functions.compose_model_deployment.model import (
    CLUSTER_FIELDS,
    HOLDING_FIELDS,
    read_cluster,
    read_holding,
)
from tests.bench.bench_fleet_resync import Fleet

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)
bodies = st.dictionaries(st.text(), values, max_size=6)


def reference_struct(body: dict) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(body)
    return out


def reference_plain(value):
    """What the shell read before: the SDK's Struct view, integral numbers as int."""
    if isinstance(value, struct_pb2.Struct):
        return {k: reference_plain(v) for k, v in value.items()}
    if isinstance(value, struct_pb2.ListValue):
        return [reference_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@settings(max_examples=300)
@given(bodies)
def test_struct_bytes_parse_to_the_struct_update_builds(body):
    assert structs.to_struct(body) == reference_struct(body)


@settings(max_examples=300)
@given(bodies)
def test_plain_reads_what_the_sdk_view_reads(body):
    struct = reference_struct(body)
    assert structs.plain(struct) == reference_plain(struct)


@given(bodies, bodies)
def test_a_struct_is_its_entries_joined(first, second):
    """What the shell relies on to reuse the entries its ModelReplicas share."""
    joined = {**first, **{k: v for k, v in second.items() if k not in first}}
    written = b"".join(
        [structs.entry_bytes(k, v) for k, v in first.items()]
        + [structs.entry_bytes(k, v) for k, v in second.items() if k not in first]
    )
    assert struct_pb2.Struct.FromString(written) == reference_struct(joined)


def test_a_nested_struct_from_its_entries():
    inner = {"name": "a", "replicas": 3}
    written = structs.nested_entry_bytes("spec", structs.struct_bytes(inner))
    assert struct_pb2.Struct.FromString(written) == reference_struct({"spec": inner})


@pytest.mark.parametrize(
    "value",
    [True, False, 0, -1, 2.5, 1e300, math.inf, "", "ü", None, [], {}, (1, "x")],
    ids=repr,
)
def test_each_kind_of_value_round_trips(value):
    assert structs.to_struct({"v": value}) == reference_struct({"v": value})


def test_a_value_struct_update_refuses_is_refused():
    with pytest.raises(ValueError, match="Unexpected type"):
        structs.struct_bytes({"v": object()})
    with pytest.raises(ValueError, match="key must be a string"):
        structs.struct_bytes({1: "v"})


def test_metadata_strings_read_only_strings():
    struct = reference_struct({"metadata": {"uid": "u", "resourceVersion": 7}})
    assert structs.metadata_strings(struct, "uid", "resourceVersion", "name") == ("u", None, None)
    assert structs.metadata_strings(reference_struct({"metadata": "x"}), "uid") == (None,)
    assert structs.metadata_strings(reference_struct({}), "uid", "name") == (None, None)


# --- Reading only what a parser reads -----------------------------------------------------


def _fleet_resources():
    fleet = Fleet(6, 4)
    return fleet.clusters, fleet.all_replicas


def _broken(body: dict, path: tuple[str, ...], value) -> dict:
    broken = copy.deepcopy(body)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return broken


def _read(reader, body) -> str:
    """The outcome as text: a Cluster compares by identity, so its repr is compared."""
    try:
        return repr(reader(body))
    except Exception as err:  # the comparison is of the outcome, error included
        return f"{type(err).__name__}: {err}"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ((), None),
        (("spec", "cluster"), "not-an-object"),
        (("spec", "replicas"), 2.5),
        (("spec", "engines"), [1, {"members": "x"}]),
        (("metadata",), ["a"]),
        (("status", "readyReplicas"), "three"),
        (("status", "health"), {"consecutiveFailures": 2, "definitionHash": "h"}),
    ],
)
def test_a_replica_read_from_its_fields_is_the_replica_read_whole(path, value):
    _, replicas = _fleet_resources()
    for listed in replicas:
        struct = reference_struct(_broken(listed, path, value) if path else listed)
        whole = _read(read_holding, structs.plain(struct))
        assert _read(read_holding, structs.plain_only(struct, HOLDING_FIELDS)) == whole


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ((), None),
        (("spec", "nodePools"), "x"),
        (("metadata", "labels"), {"tier": "gold"}),
        (("status",), {"telemetry": {"tracesEndpoint": "otel.example:4317"}, "x": [1]}),
        (("metadata", "name"), 7),
    ],
)
def test_a_cluster_read_from_its_fields_is_the_cluster_read_whole(path, value):
    clusters, _ = _fleet_resources()
    for listed in clusters:
        struct = reference_struct(_broken(listed, path, value) if path else listed)
        whole = _read(read_cluster, structs.plain(struct))
        assert _read(read_cluster, structs.plain_only(struct, CLUSTER_FIELDS)) == whole
