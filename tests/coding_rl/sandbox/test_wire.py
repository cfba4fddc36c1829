"""The wire between the sandbox and the grader: the value codec, framing, and the server's defences
against frames a candidate forges (too deep, too many, too large to relay)."""

from __future__ import annotations

import json
import math
import os
import struct
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transferlab.coding_rl.sandbox import sandbox_server as wire
from transferlab.coding_rl.sandbox.sandbox_server import UnsupportedValue, decode_value, encode_value

# --------------------------------------------------------------------------------------------------
# The codec
# --------------------------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Exact structural equality: same types at every level, NaN equal to NaN, dict order kept."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    return bool(a == b)


def through_the_wire(value: Any) -> Any:
    """Encode, send as JSON the way frames travel, parse, decode."""
    return decode_value(json.loads(json.dumps(encode_value(value), separators=(",", ":"))))


keys = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.tuples(inner, inner),
    max_leaves=4,
)
plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=5).map(tuple)
        | st.dictionaries(keys, inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(plain)
def test_plain_data_round_trips_exactly(value: Any) -> None:
    assert same(through_the_wire(value), value)


@pytest.mark.parametrize(
    "value",
    [
        (1, 2),
        [(1, [2, (3,)])],
        ((),),
        {"a": (1, 2)},
        {(1, "x"): [None]},
        {1: "int key"},
        {True: "bool key", None: "none key", 1.5: "float key"},
        float("nan"),
        float("inf"),
        -float("inf"),
        [float("nan"), {"x": -float("inf")}],
        -0.0,
        "\u00e9\U0001f600\x00",
        2**9999,
    ],
)
def test_tuples_stay_tuples_and_special_floats_survive(value: Any) -> None:
    assert same(through_the_wire(value), value)


def test_encoded_form_is_tagged_plain_json() -> None:
    assert encode_value((1, [2])) == {"__tuple__": [1, [2]]}
    assert encode_value({"k": 1}) == {"__dict__": [["k", 1]]}
    assert encode_value(float("nan")) == {"__float__": "nan"}
    assert encode_value(-float("inf")) == {"__float__": "-inf"}


class MyStr(str):
    pass


class MyInt(int):
    pass


class MyList(list):  # type: ignore[type-arg]
    pass


class MyDict(dict):  # type: ignore[type-arg]
    pass


class MyTuple(tuple):  # type: ignore[type-arg]
    pass


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


@pytest.mark.parametrize(
    "value",
    [
        MyStr("x"),
        MyInt(1),
        MyList(),
        MyDict(),
        MyTuple(),
        OrderedDict(),
        defaultdict(int),
        AlwaysEqual(),
        {1, MyStr("x")},
        frozenset([AlwaysEqual()]),
        b"bytes",
        bytearray(b"x"),
        1j,
        object(),
        [1, [2, MyStr("deep")]],
        {"k": AlwaysEqual()},
        {frozenset([MyStr("k")]): 1},
        {AlwaysEqual(): 1},
        {MyStr("k"): 1},
        range(3),
        iter([]),
    ],
    ids=lambda v: type(v).__name__,
)
def test_anything_else_is_rejected(value: Any) -> None:
    with pytest.raises(UnsupportedValue, match="unsupported"):
        encode_value(value)


def test_size_and_depth_limits() -> None:
    encode_value([0] * 999_999)
    with pytest.raises(UnsupportedValue, match="too large"):
        encode_value([0] * 1_000_000)
    with pytest.raises(UnsupportedValue, match="integer too large"):
        encode_value(2**10_001)
    nested: Any = []
    for _ in range(200):
        nested = [nested]
    encode_value(nested)
    with pytest.raises(UnsupportedValue, match="deeper than 200"):
        encode_value([nested])


@pytest.mark.parametrize(
    "data",
    [
        {"__tuple__": 1},
        {"__tuple__": [1], "x": 2},
        {"__dict__": [["k"]]},
        {"__dict__": [[[1], "list key"]]},
        {"__dict__": "k"},
        {"__float__": "1.5"},
        {"__float__": "NaN"},
        {"plain": "object"},
        {},
        b"bytes",
        ...,
    ],
    ids=repr,
)
def test_decode_rejects_what_encode_cannot_produce(data: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        decode_value(data)


# --------------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------------


def test_frames_round_trip_over_a_pipe() -> None:
    r, w = os.pipe()
    try:
        objs = [{"e": "start"}, {"e": "result", "i": 0, "ok": True, "value": encode_value((1, "é"))}, [1, 2]]
        wire.write_all(w, b"".join(wire.pack_frame(o) for o in objs))
        os.close(w)
        w = -1
        assert [wire.read_frame(r) for _ in objs] == objs
        assert wire.read_frame(r) is None  # a clean end of stream
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_stream_ending_inside_a_frame_is_an_error() -> None:
    r, w = os.pipe()
    os.write(w, wire.pack_frame({"e": "done"})[:-1])
    os.close(w)
    with pytest.raises(EOFError):
        wire.read_frame(r)
    os.close(r)


def test_pack_frame_is_length_prefixed_compact_json() -> None:
    data = wire.pack_frame({"e": "result", "i": 1})
    assert data == struct.pack(">I", 20) + b'{"e":"result","i":1}'


def test_split_frames_handles_any_chunking() -> None:
    stream = b"".join(wire.pack_frame({"e": "result", "i": i, "ok": True, "value": i}) for i in range(5))
    buf, frames = bytearray(), []
    for byte in stream:  # one byte at a time
        buf.append(byte)
        frames += wire.split_frames(buf)
    assert [f["i"] for f in frames] == list(range(5)) and buf == bytearray()


def _raw(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'"a string"', b"\xff\xfe", b"", b"{" * 10 + b"}" * 10, b'{"e": "x"'],
    ids=["not-json", "a-list", "a-string", "not-utf8", "empty", "unbalanced", "truncated"],
)
def test_malformed_frames_become_garbage_and_the_stream_goes_on(body: bytes) -> None:
    buf = bytearray(_raw(body) + wire.pack_frame({"e": "done"}))
    assert wire.split_frames(buf) == [{"e": "garbage"}, {"e": "done"}]


def test_an_oversized_length_breaks_the_stream() -> None:
    buf = bytearray(struct.pack(">I", wire.MAX_RESULT_FRAME + 1) + b"x" * 10)
    assert wire.split_frames(buf) == [{"e": "broken"}] and buf == bytearray()


def test_a_frame_past_the_element_budget_breaks_the_stream_unparsed() -> None:
    budget = [10]
    small, big = b"[1,2,3]", b"[" + b"0," * 20 + b"0]"
    buf = bytearray(_raw(small) + _raw(big) + _raw(small))
    assert wire.split_frames(buf, budget) == [{"e": "garbage"}, {"e": "broken"}] and buf == bytearray()
    assert budget[0] < 0


@pytest.mark.parametrize(
    "value",
    [[], [1, 2, 3], {"a": [1, {"b": None}]}, "a,b,[c]{d}" * 5000, ["x,y"] * 5000, [[]] * 20_000],
    ids=["empty", "list", "nested", "commas-in-a-string", "commas-in-strings", "many-lists"],
)
def test_count_elements_bounds_the_values_from_above(value: Any) -> None:
    body = json.dumps(value, separators=(",", ":")).encode()
    stack, values = [json.loads(body)], 0
    while stack:
        node = stack.pop()
        values += 1
        stack.extend(node if type(node) is list else node.values() if type(node) is dict else ())
    assert values <= wire.count_elements(body) <= 2 * values + 1


def test_sets_round_trip_with_exact_element_types() -> None:
    for value in ({True, "x", (1, False)}, frozenset({0.5, None}), {frozenset({1}): {2}}):
        encoded = wire.encode_value(value)
        decoded = wire.decode_value(json.loads(json.dumps(encoded)))
        assert decoded == value and type(decoded) is type(value)
    with pytest.raises(ValueError):
        wire.decode_value({"__set__": [[1]]})  # a list is not hashable


@pytest.mark.parametrize("depth", [wire.MAX_JSON_DEPTH + 1, 5_000, 200_000])
def test_frames_nested_deeper_than_the_limit_are_garbage(depth: int) -> None:
    body = b'{"e":"result","i":0,"ok":true,"value":' + b"[" * depth + b"]" * depth + b"}"
    buf = bytearray(_raw(body) + wire.pack_frame({"e": "done"}))
    assert wire.split_frames(buf) == [{"e": "garbage"}, {"e": "done"}]


def test_the_deepest_value_encode_value_makes_still_passes() -> None:
    nested: Any = 1
    for _ in range(199):  # the tuple key's items sit two levels below its dict: depth 200
        nested = {(1, 2): nested}  # a dict with a tuple key: the most JSON levels per level
    body = json.dumps({"e": "result", "i": 0, "ok": True, "value": encode_value(nested)}).encode()
    (frame,) = wire.split_frames(bytearray(_raw(body)))
    assert frame["e"] == "result"
    assert same(decode_value(frame["value"]), nested)


def test_pack_reply_turns_a_reply_too_large_to_relay_into_output_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reply = {
        "reason": None,
        "frames": [{"e": "result", "i": 0, "ok": True, "value": "é" * 500}],
        "output": "x",
    }
    assert json.loads(wire.pack_reply(reply)[4:]) == reply
    monkeypatch.setattr(wire, "MAX_FRAME", 1000)  # "é" relays as a 6-byte escape
    assert json.loads(wire.pack_reply(reply)[4:]) == {"reason": "output_limit", "frames": [], "output": ""}


# --------------------------------------------------------------------------------------------------
# Cleanup of job directories
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def fast_dir(tmp_path: Path) -> Any:
    """A directory on a tmpfs when there is one (like the jail: thousands of mkdirs in milliseconds)."""
    import tempfile

    shm = Path("/dev/shm")
    path = (
        Path(tempfile.mkdtemp(dir=shm, prefix="transferlab-wire-")) if os.access(shm, os.W_OK) else tmp_path
    )
    yield path
    wire.remove_tree(str(path))


def test_remove_tree_handles_a_chain_deeper_than_the_recursion_limit(fast_dir: Path) -> None:
    # shutil.rmtree (Python 3.11) recurses once per level and raised RecursionError here: the job's
    # cleanup failed, the fork server answered infra_error and the subprocess backend lost a uid
    root = fast_dir / "job"
    root.mkdir()
    here = os.open(root, os.O_RDONLY)
    try:
        for i in range(3000):
            os.close(os.open(f"f{i % 3}", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=here))
            os.symlink("/etc", "link", dir_fd=here)
            os.mkdir("d", dir_fd=here)
            below = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = below
    finally:
        os.close(here)
    wire.remove_tree(str(root))
    assert not root.exists()
    assert Path("/etc/passwd").exists()  # links are removed, never followed


def test_remove_tree_on_ordinary_and_missing_paths(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c").write_text("x")
    wire.remove_tree(str(tmp_path / "a"))
    assert not (tmp_path / "a").exists()
    wire.remove_tree(str(tmp_path / "missing"))  # nothing to do, no error
