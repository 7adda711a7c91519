"""The canonical encoding and ids, pinned forever by test vectors; ref names."""

from __future__ import annotations

import msgspec
import pytest
from blake3 import blake3

from sesstree import InvalidEventError, InvalidRefNameError, make_node
from sesstree.node import ID_VERSION, check_ref_name, decode_data, encode_data, node_id

ROOT_DATA = {"role": "user", "content": "I need to get into the Cave of Echoes."}
ROOT_ID = "2a5e1e242f4fc1625dbd332553eca456fd7754ff53cc9bfaeca5d4182f00cb28"
CHILD_ID = "3fb06b167aff099a1b0f49a4f878794000b8cb220abb9c0a39883fedcb80d049"
NESTED_ID = "b1bc19e63b9d7051b139c71f292b663cc27384141dbb461b1b6fb8def2872332"
UNICODE_ID = "67eb412f50c244a1e4bb017e7be0c29e74651b87d29898b1b83b1f56c57628a2"
SCALARS_ID = "2a10af2dd6f810dbde72ccc7e916b1ff3f121a36190c170b4fcff86b6f5a600a"


# -- pinned vectors: if one of these changes, every stored id in the world changes -----------


def test_vector_root_user_message() -> None:
    assert ID_VERSION == 1
    assert node_id(None, "user/message", ROOT_DATA) == ROOT_ID


def test_vector_child_with_parent() -> None:
    data = {"role": "assistant", "content": "Ask the mayor."}
    assert node_id(ROOT_ID, "assistant/message", data) == CHILD_ID  # type: ignore[arg-type]


def test_vector_nested_dict_any_key_order() -> None:
    a = {"role": "tool", "tool_call_id": "call_1",
         "content": {"z": [1, {"b": 2, "a": 1}], "a": None}}
    b = {"content": {"a": None, "z": [1, {"a": 1, "b": 2}]}, "tool_call_id": "call_1",
         "role": "tool"}
    assert node_id(ROOT_ID, "tool/result", a) == NESTED_ID  # type: ignore[arg-type]
    assert node_id(ROOT_ID, "tool/result", b) == NESTED_ID  # type: ignore[arg-type]


def test_vector_unicode() -> None:
    data = {"role": "user", "content": "Höhle der Echos — 回声洞 🦇"}
    assert node_id(None, "user/message", data) == UNICODE_ID


def test_vector_scalars() -> None:
    data = {"f": 1.5, "i": -7, "big": 2**40, "t": True, "fa": False, "n": None, "e": [], "o": {}}
    assert node_id(None, "usage", data) == SCALARS_ID


def test_id_is_blake3_of_the_whole_canonical_array() -> None:
    """The shortcut in node_id_from_encoded equals hashing the full 4-item array."""
    enc = msgspec.msgpack.Encoder(order="sorted")
    for parent, type_, data in [
        (None, "user/message", ROOT_DATA),
        (ROOT_ID, "assistant/message", {"role": "assistant", "content": "Ask the mayor."}),
        (ROOT_ID, "usage", {"x": [1.5, None, True, {"b": 1, "a": 2}]}),
    ]:
        raw_parent = bytes.fromhex(parent) if parent else None
        expected = blake3(enc.encode([ID_VERSION, raw_parent, type_, data])).hexdigest()
        assert node_id(parent, type_, data) == expected  # type: ignore[arg-type]


# -- properties of ids ---------------------------------------------------------------------


def test_id_shape() -> None:
    assert len(ROOT_ID) == 64
    assert ROOT_ID == ROOT_ID.lower()


def test_every_part_of_a_node_changes_its_id() -> None:
    base = node_id(None, "user/message", ROOT_DATA)
    assert node_id(ROOT_ID, "user/message", ROOT_DATA) != base  # type: ignore[arg-type]
    assert node_id(None, "message", ROOT_DATA) != base
    assert node_id(None, "user/message", {**ROOT_DATA, "content": "x"}) != base
    assert node_id(None, "user/message", {**ROOT_DATA, "name": "bob"}) != base


def test_int_float_bool_are_distinct() -> None:
    ids = {node_id(None, "usage", v) for v in (1, 1.0, True, "1", None, 0, False)}
    assert len(ids) == 7


def test_make_node_round_trip() -> None:
    node = make_node(None, "user/message", ROOT_DATA)
    assert node.id == ROOT_ID
    assert node.parent is None
    assert decode_data(encode_data(node.data)) == ROOT_DATA


def test_key_order_independence_deep() -> None:
    a = {"x": {"k3": 3, "k1": [{"q": 1, "p": 2}], "k2": {"b": None, "a": "é"}}, "y": 1}
    b = {"y": 1, "x": {"k2": {"a": "é", "b": None}, "k1": [{"p": 2, "q": 1}], "k3": 3}}
    assert encode_data(a) == encode_data(b)
    assert node_id(None, "usage", a) == node_id(None, "usage", b)


def test_list_order_matters() -> None:
    assert node_id(None, "usage", [1, 2]) != node_id(None, "usage", [2, 1])


@pytest.mark.parametrize(
    "bad",
    [object(), {1: "a"}, {"a": object()}, 2**70, {(1, 2): 3}, [1, object()]],
    ids=["object", "int-key", "nested-object", "huge-int", "tuple-key", "list-object"],
)
def test_non_json_data_raises(bad: object) -> None:
    with pytest.raises(InvalidEventError):
        encode_data(bad)
    with pytest.raises(InvalidEventError):
        make_node(None, "usage", bad)


# Guards a past bug: msgpack accepted bytes, sets and NaN, which are not JSON values.
@pytest.mark.parametrize(
    "bad",
    [b"raw", {"a", "b"}, float("nan"), float("inf")],
    ids=["bytes", "set", "nan", "inf"],
)
def test_non_json_values_msgpack_accepts_are_refused(bad: object) -> None:
    # A set has no canonical order (string hashes are randomised per process), bytes and NaN
    # cannot be exported as JSON: each would break ids or the round trip.
    with pytest.raises(InvalidEventError):
        encode_data(bad)


# -- ref names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["main", "quest-1", "a/b", "team/alice/quest_2", "x.y", "Quest.1", "ünï", "a@b", "v1.0"],
)
def test_ref_name_accepted(name: str) -> None:
    assert check_ref_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "", "../x", "-x", "a..b", "x.lock", "a/x.lock", "has space", "tab\there", "nl\n",
        "nul\x00", "del\x7f", "HEAD", "/abs", "trail/", "a//b", ".hidden", "a/.b", "end.",
        "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "@", "a@{1}", "x" * 201,
    ],
)
def test_ref_name_refused(name: str) -> None:
    with pytest.raises(InvalidRefNameError):
        check_ref_name(name)
