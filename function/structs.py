"""Struct <-> dict without protobuf's json_format.

The SDK's struct_to_dict and dict_to_struct go through json_format, and
`Struct.update` through protobuf's pure-Python well-known-type helpers; between
them they were most of the time this function spent per call (cProfile: about
three quarters of a gateway call, more for a route with many backends).
Reading walks each Value's oneof directly. Writing keeps the encoded bytes of
what it built before and lets protobuf's C parser rebuild the message from
them. As with the SDK, every number comes back as a float.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from google.protobuf import struct_pb2


def _scalar(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    if kind == "number_value":
        return v.number_value
    if kind == "bool_value":
        return v.bool_value
    return None


def to_dict(s: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain Python data."""
    converted: dict[str, Any] = plain(StructView(s))
    return converted


class StructView(Mapping[str, Any]):
    """A read-only Mapping over a Struct that converts only what is read.

    Observed composed resources carry whole objects (an Envoy Deployment's
    manifest holds its bootstrap configuration), of which readiness needs a
    few fields; converting all of it on every call would be most of the call.
    Nested objects are views too; lists are converted when read.
    """

    __slots__ = ("_fields", "_struct")

    def __init__(self, s: struct_pb2.Struct) -> None:
        self._struct = s
        self._fields = s.fields

    def __getitem__(self, key: str) -> Any:
        # Indexing a protobuf map inserts a missing key: look before reading.
        if key not in self._fields:
            raise KeyError(key)
        return _view(self._fields[key])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def _view(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "struct_value":
        return StructView(v.struct_value)
    if kind == "list_value":
        return [_view(item) for item in v.list_value.values]
    return _scalar(v)


def plain(value: Any) -> Any:
    """Views (and lists of them) as plain dicts and lists, for re-emitting."""
    if isinstance(value, StructView):
        return {key: plain(value[key]) for key in value}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


# Encoded Structs by the pickled dict they came from. Crossplane calls the
# function with the same inputs on every reconcile, so the same composed
# resources are encoded again and again; pickling a dict (C) is a few times
# cheaper than building a Struct from it (Python), and parsing the cached bytes
# is done in C. Bounded, least recently used first out.
_CACHE_SIZE = 4096
_encoded: OrderedDict[bytes, bytes] = OrderedDict()


def fill(s: struct_pb2.Struct, d: dict[str, Any]) -> None:
    """Replace a Struct's content with a dict's."""
    key = pickle.dumps(d, protocol=pickle.HIGHEST_PROTOCOL)
    encoded = _encoded.get(key)
    if encoded is not None:
        _encoded.move_to_end(key)
        s.ParseFromString(encoded)
        return
    s.Clear()
    s.update(d)
    _encoded[key] = s.SerializeToString(deterministic=True)
    if len(_encoded) > _CACHE_SIZE:
        _encoded.popitem(last=False)


def canonical_bytes(value: Any) -> bytes:
    """One encoding of a JSON object whatever form it arrives in, for digests.

    A view's Struct is serialised in C with map keys sorted; a plain dict is
    made into a Struct first, so both forms of the same object give the same
    bytes (every number a double, as in any Struct).
    """
    if isinstance(value, StructView):
        return value._struct.SerializeToString(deterministic=True)
    s = struct_pb2.Struct()
    if isinstance(value, Mapping):
        s.update(plain(value))
    return s.SerializeToString(deterministic=True)
