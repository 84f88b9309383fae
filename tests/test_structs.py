"""Our Struct conversions give exactly what the SDK's json_format ones give."""

from __future__ import annotations

from typing import Any

from crossplane.function import resource
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from function import structs
from function.readiness import template_id
from function.structs import StructView
from tests.support import examples

json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=40,
)


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.text(max_size=10), json_like, max_size=6))
def test_fill_and_to_dict_match_the_sdk(d: dict[str, Any]) -> None:
    ours = struct_pb2.Struct()
    structs.fill(ours, d)
    assert ours == resource.dict_to_struct(d)
    assert structs.to_dict(ours) == resource.struct_to_dict(ours)
    # A second fill of the same dict comes from the cache and is the same message.
    again = struct_pb2.Struct()
    structs.fill(again, d)
    assert again == ours


def test_fill_replaces_what_the_struct_held() -> None:
    s = resource.dict_to_struct({"old": 1})
    structs.fill(s, {"new": 2})
    assert structs.to_dict(s) == {"new": 2.0}


def test_a_template_digest_is_the_same_from_a_view_and_from_plain_data() -> None:
    """settledTemplate is written from views at serving time and compared in tests with plain data."""
    template = {
        "metadata": {"annotations": {"a": "1"}},
        "spec": {"containers": [{"name": "envoy", "ports": [80]}]},
    }
    s = struct_pb2.Struct()
    s.update(template)
    assert template_id(StructView(s)) == template_id(template)
    changed = {**template, "metadata": {"annotations": {"a": "2"}}}
    assert template_id(changed) != template_id(template)
