"""google.protobuf.Struct in and out, at the speed a fleet-wide request needs.

SDK glue, like sdk.py: only shells import it. The SDK's converters go value by value
through the pure-Python well-known-type helpers (a wrapper object and a type check per
key), which made converting Structs the largest part of compose-model-deployment's
RunFunction (issue 17). Here:

- `plain` reads a Struct straight from its `fields` map, once per value, integral numbers
  as int (a Struct carries every number as a double);
- `struct_bytes` writes a dict as a Struct's wire bytes, which upb then parses in C in
  one call (`Struct.MergeFromString`). A body that repeats across composed resources can
  be written once: `entry_bytes` gives one key's bytes, and a Struct's bytes are the
  concatenation of its entries' (a map is a repeated field), so the shared entries are
  reused as they are and only what differs is written per resource.

Both take exactly the values `Struct.update` takes (None, bool, str, int, float, dict,
list, tuple) and produce the same Struct; anything else is a ValueError, as there.
"""

from __future__ import annotations

import struct as _struct
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from google.protobuf import struct_pb2

_double = _struct.Struct("<d").pack

# Wire tags (field number << 3 | wire type) of struct.proto.
_STRUCT_FIELDS = b"\x0a"  # Struct.fields (1, length-delimited map entry)
_ENTRY_KEY = b"\x0a"  # map entry key (1)
_ENTRY_VALUE = b"\x12"  # map entry value (2)
_NULL = b"\x08\x00"  # Value.null_value (1, varint NULL_VALUE)
_NUMBER = b"\x11"  # Value.number_value (2, 64-bit)
_STRING = b"\x1a"  # Value.string_value (3)
_TRUE = b"\x20\x01"  # Value.bool_value (4, varint)
_FALSE = b"\x20\x00"
_STRUCT = b"\x2a"  # Value.struct_value (5)
_LIST = b"\x32"  # Value.list_value (6)
_LIST_VALUES = b"\x0a"  # ListValue.values (1)

_SMALL = [bytes((n,)) for n in range(128)]
# Keys and short strings recur in every resource a function writes (names, labels,
# drivers): their encoded bytes are kept, up to a bound (then forgotten and rebuilt).
_MEMO_LIMIT = 16384
_SHORT = 128
_keys: dict[str, bytes] = {}
_strings: dict[str, bytes] = {}


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(value: str) -> bytes:
    found = _strings.get(value)
    if found is None:
        data = value.encode()
        found = _STRING + _varint(len(data)) + data
        if len(value) <= _SHORT:
            if len(_strings) >= _MEMO_LIMIT:
                _strings.clear()
            _strings[value] = found
    return found


def _value(value: Any) -> bytes:
    """A google.protobuf.Value's wire bytes."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if kind is dict:
        data = struct_bytes(value)
        return _STRUCT + _varint(len(data)) + data
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is int or kind is float:
        return _NUMBER + _double(value)
    if kind is list or kind is tuple:
        data = _list(value)
        return _LIST + _varint(len(data)) + data
    if value is None:
        return _NULL
    # Subclasses, in Struct.update's order (bool before int: True is an int).
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, str):
        return _string(str(value))
    if isinstance(value, int | float):
        return _NUMBER + _double(value)
    if isinstance(value, Mapping):
        return _value(dict(value))
    if isinstance(value, list | tuple):
        return _value(list(value))
    raise ValueError(f"Unexpected type {kind.__name__} in a Struct")


def _list(values: list | tuple) -> bytes:
    parts = []
    for item in values:
        data = _value(item)
        parts.append(_LIST_VALUES + _varint(len(data)) + data)
    return b"".join(parts)


def _key(key: str) -> bytes:
    """A map entry's key field and the value field's tag."""
    found = _keys.get(key)
    if found is None:
        if not isinstance(key, str):
            raise ValueError(f"a Struct key must be a string, got {type(key).__name__}")
        name = key.encode()
        found = _ENTRY_KEY + _varint(len(name)) + name + _ENTRY_VALUE
        if len(_keys) >= _MEMO_LIMIT:
            _keys.clear()
        _keys[key] = found
    return found


def entry_bytes(key: str, value: Any) -> bytes:
    """One key of a Struct, as wire bytes; a Struct's bytes are its entries joined."""
    head = _key(key)
    data = _value(value)
    size = _varint(len(data))
    return b"".join((_STRUCT_FIELDS, _varint(len(head) + len(size) + len(data)), head, size, data))


def struct_bytes(body: Mapping[str, Any]) -> bytes:
    """A dict as a google.protobuf.Struct's wire bytes."""
    return b"".join([entry_bytes(k, v) for k, v in body.items()])


def nested_entry_bytes(key: str, entries: bytes) -> bytes:
    """A key whose value is a Struct already written as entry bytes."""
    head = _key(key)
    size = _varint(len(entries))
    data_len = 1 + len(size) + len(entries)
    size_outer = _varint(data_len)
    return b"".join(
        (
            _STRUCT_FIELDS,
            _varint(len(head) + len(size_outer) + data_len),
            head,
            size_outer,
            _STRUCT,
            size,
            entries,
        )
    )


def shared_struct_bytes(
    body: Mapping[str, Any], varying: Mapping[str, tuple[str, ...]], shared: dict
) -> bytes:
    """A Struct's bytes for one of many bodies alike but for a few fields: the entries
    outside `varying` (section -> its fields that differ) come from `shared`, written by
    the first body and identical in the others; the rest are written for this body."""
    entries = []
    for section, value in body.items():
        fields = varying.get(section)
        if fields is None:
            written = shared.get((section,))
            if written is None:
                written = shared[(section,)] = entry_bytes(section, value)
            entries.append(written)
            continue
        inner = []
        for field, item in value.items():
            if field in fields:
                inner.append(entry_bytes(field, item))
                continue
            written = shared.get((section, field))
            if written is None:
                written = shared[(section, field)] = entry_bytes(field, item)
            inner.append(written)
        entries.append(nested_entry_bytes(section, b"".join(inner)))
    return b"".join(entries)


def to_struct(body: Mapping[str, Any]) -> struct_pb2.Struct:
    """A dict as a new Struct (as `Struct().update(body)`, in one parse)."""
    return struct_pb2.Struct.FromString(struct_bytes(body))


# --- Reading ---------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A Struct (or ListValue, or a plain value) as plain Python, integral numbers as int
    (a Struct carries every number as a double)."""
    if isinstance(value, struct_pb2.Struct):
        return _plain_fields(value.fields)
    if isinstance(value, struct_pb2.ListValue):
        return _plain_list(value.values)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def plain_only(struct: struct_pb2.Struct, shape: Mapping[str, Any]) -> dict:
    """Only the keys `shape` names of a Struct, as plain Python: a reader that needs a
    few fields of a large resource (managedFields, conditions, pod templates) converts
    just those. `shape` maps a key to None (the whole value) or to a nested shape,
    applied to a Struct value and to each Struct in a list value; a value of any other
    kind is converted whole, so a reader meets the same wrong shape it would have met."""
    out = {}
    fields = struct.fields
    for key, inner in shape.items():
        value = fields.get(key)
        if value is None:
            continue
        kind = value.WhichOneof("kind")
        if inner is not None and kind == "struct_value":
            out[key] = plain_only(value.struct_value, inner)
        elif inner is not None and kind == "list_value":
            out[key] = [
                plain_only(item.struct_value, inner)
                if item.WhichOneof("kind") == "struct_value"
                else _plain_list([item])[0]
                for item in value.list_value.values
            ]
        else:
            out[key] = _plain_list([value])[0]
    return out


def _plain_fields(fields) -> dict:
    out = {}
    for key, value in fields.items():
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            out[key] = value.string_value
        elif kind == "struct_value":
            out[key] = _plain_fields(value.struct_value.fields)
        elif kind == "number_value":
            number = value.number_value
            out[key] = int(number) if number.is_integer() else number
        elif kind == "list_value":
            out[key] = _plain_list(value.list_value.values)
        elif kind == "bool_value":
            out[key] = value.bool_value
        elif kind == "null_value":
            out[key] = None
        else:
            raise ValueError(f"Value of {key!r} not set")
    return out


def _plain_list(values) -> list:
    out = []
    for value in values:
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            out.append(value.string_value)
        elif kind == "struct_value":
            out.append(_plain_fields(value.struct_value.fields))
        elif kind == "number_value":
            number = value.number_value
            out.append(int(number) if number.is_integer() else number)
        elif kind == "list_value":
            out.append(_plain_list(value.list_value.values))
        elif kind == "bool_value":
            out.append(value.bool_value)
        elif kind == "null_value":
            out.append(None)
        else:
            raise ValueError("Value in a list not set")
    return out


def metadata_strings(struct: struct_pb2.Struct, *names: str) -> tuple[str | None, ...]:
    """`metadata.<name>` of a resource for each name, when it is a string, else None;
    reads only those map entries, converting nothing else."""
    meta = struct.fields.get("metadata")
    if meta is None or meta.WhichOneof("kind") != "struct_value":
        return (None,) * len(names)
    fields = meta.struct_value.fields
    found = []
    for name in names:
        value = fields.get(name)
        kind = value.WhichOneof("kind") if value is not None else None
        found.append(value.string_value if kind == "string_value" else None)
    return tuple(found)


# --- Parsing once per content -------------------------------------------------------------

T = TypeVar("T")
PARSED_LIMIT = 20000


def content_key(struct: struct_pb2.Struct) -> object:
    """What identifies a resource's content: its uid and resourceVersion when the API
    server set them (any change bumps the version), else its exact bytes."""
    uid, version = metadata_strings(struct, "uid", "resourceVersion")
    if uid and version is not None:
        return (uid, version)
    return struct.SerializeToString(deterministic=True)


class ParsedByContent(Generic[T]):
    """Parsed values by the content they were parsed from (bounded): the same fleet
    arrives on every reconcile, and converting Structs is the costliest part of a large
    request. Only the fields the parser reads (`fields`, a `plain_only` shape) are
    converted."""

    def __init__(self, parse: Callable[[dict], T], fields: dict) -> None:
        self.parse = parse
        self.fields = fields
        self.values: dict[object, T] = {}

    def __call__(self, struct: struct_pb2.Struct) -> T:
        key = content_key(struct)
        found = self.values.get(key)
        if found is None:
            if len(self.values) >= PARSED_LIMIT:
                self.values.clear()
            found = self.values[key] = self.parse(plain_only(struct, self.fields))
        return found
