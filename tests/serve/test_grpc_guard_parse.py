"""The gRPC guard's walk of a ModelInferRequest (serve/grpc_parse.py) against protobuf's own parse of the
same message: valid requests, hostile ones (reordered and repeated fields, unknown fields, groups,
overlong varints, truncations, flipped bytes), whole and cut into pieces at any point."""

from __future__ import annotations

import struct

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from tritonkit.serve.grpc_checks import CallRefusedError, check_infer
from tritonkit.serve.grpc_parse import Raw, parse_infer


def _request(shapes: list[list[int]], sizes: list[int], datatype: str = "FP32") -> bytes:
    request = service_pb2.ModelInferRequest(model_name="image_sum", model_version="1", id="r")
    request.parameters["priority"].int64_param = 1
    for i, shape in enumerate(shapes):
        request.inputs.add(name=f"X{i}", datatype=datatype, shape=shape)
    request.outputs.add(name="Y")
    for size in sizes:
        request.raw_input_contents.append(bytes(range(256)) * (size // 256) + b"\x07" * (size % 256))
    return request.SerializeToString()


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _raw(data: bytes) -> bytes:
    return _field(7, 2, _varint(len(data)) + data)


VALID = _request([[1, 3, 224, 224]], [602_112])
HOSTILE = {
    "raw first, inputs after": _raw(b"\0" * 64) + _request([[1, -4, -4]], []),
    "model name twice (the last wins)": _request([[1, 4]], [16]) + _field(1, 2, b"\x05other"),
    "inputs split around the raws": _request([[1, 4]], [16]) + _request([[2, 4]], [32]),
    "field 7 as a varint (an unknown field)": _request([[1, 4]], [16]) + _field(7, 0, b"\x05"),
    "unknown fields of each wire type": _field(99, 0, b"\x01")
    + _field(98, 1, b"\0" * 8)
    + _field(97, 5, b"\0" * 4)
    + _field(96, 2, b"\x02ab")
    + VALID,
    "a group": _field(50, 3, b"") + _field(51, 0, b"\x01") + _field(50, 4, b"") + VALID,
    "an overlong tag": b"\xba\x00" + _varint(16) + b"\0" * 16,
    "an overlong raw length": b"\x3a\x90\x80\x00" + b"\0" * 16 + VALID,
    "a raw past the end": b"\x3a" + _varint(1 << 20) + b"\0" * 100,
    "a truncated varint": VALID + b"\x3a\xff",
    "field number 0": b"\x02\x00" + VALID,
    "wire type 7": b"\x0f" + VALID,
    "a tag past 32 bits": b"\xff\xff\xff\xff\x7f" + VALID,
    "invalid UTF-8 in model_name": _field(1, 2, b"\x02\xff\xfe") + VALID,
    "a shape as packed and unpacked": _field(
        5,
        2,
        _varint(
            len(inner := _field(2, 2, b"\x04FP32") + _field(3, 0, b"\x01") + _field(3, 2, b"\x02\x03\x04"))
        )
        + inner,
    )
    + _raw(b"\0" * 96),
    "more top-level fields than the walk takes": _field(99, 0, b"\x01") * 1100 + VALID,
    "BYTES elements": _request([[1, 2]], [], "BYTES")
    + _raw(struct.pack("<I", 3) + b"abc" + struct.pack("<I", 0)),
    "BYTES elements that do not add up": _request([[1, 2]], [], "BYTES")
    + _raw(struct.pack("<I", 9) + b"abc"),
}


def _reference(message: bytes) -> tuple[service_pb2.ModelInferRequest, list[bytes]] | None:
    try:
        request = service_pb2.ModelInferRequest.FromString(message)
    except DecodeError:
        return None
    raws = list(request.raw_input_contents)
    del request.raw_input_contents[:]
    return request, raws


def _pieces(message: bytes, cuts: list[int]) -> list[bytes | memoryview]:
    view, out, at = memoryview(message), [], 0
    for cut in sorted({c % (len(message) + 1) for c in cuts}):
        out.append(view[at:cut])
        at = cut
    out.append(view[at:])
    return out


def _assert_same(message: bytes, cuts: list[int]) -> None:
    expected = _reference(message)
    for whole_bytes in (0, 1 << 30):  # the walk, and protobuf's parse of the whole message
        try:
            request, raws = parse_infer(_pieces(message, cuts), whole_bytes=whole_bytes)
        except DecodeError:
            assert expected is None, "refused a message protobuf parses"
            continue
        assert expected is not None, "parsed a message protobuf refuses"
        del request.raw_input_contents[:]
        assert request == expected[0]
        assert [bytes(raw if isinstance(raw, bytes) else raw.data()) for raw in raws] == expected[1]
        assert [len(raw) for raw in raws] == [len(data) for data in expected[1]]


@pytest.mark.parametrize("case", [*HOSTILE, "valid"])
def test_walk_matches_protobuf(case: str) -> None:
    message = VALID if case == "valid" else HOSTILE[case]
    for cuts in ([], [1], [3, 7, 11], [len(message) // 2], list(range(0, len(message), 4099))):
        _assert_same(message, cuts)


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from([VALID, *HOSTILE.values()]),
    edits=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 1 << 20),
    pieces=st.lists(st.integers(0, 1 << 20), max_size=6),
)
def test_walk_matches_protobuf_on_mutations(
    base: bytes, edits: list[tuple[int, int]], cut: int, pieces: list[int]
) -> None:
    """Flipped bytes and truncations: the walk refuses and parses exactly what protobuf does."""
    message = bytearray(base)
    for at, value in edits:
        message[at % len(message)] = value
    if cut % 3 == 0:
        del message[cut % len(message) :]
    _assert_same(bytes(message), pieces)


def _outcome(message: bytes | list[bytes | memoryview]) -> str:
    try:
        check_infer(message, lambda model, version: 8)
    except CallRefusedError as exc:
        return f"{exc.code}: {exc.message}"
    return "served"


@pytest.mark.parametrize("case", [*HOSTILE, "valid"])
def test_checks_see_the_same_request_in_pieces(case: str) -> None:
    """check_infer decides alike on the message whole and on the pieces it was read in."""
    message = VALID if case == "valid" else HOSTILE[case]
    whole = _outcome(message)
    assert _outcome(_pieces(message, list(range(0, len(message), 16_384)))) == whole
    if case == "valid":
        assert whole == "served"
    if case in ("BYTES elements that do not add up", "raw first, inputs after", "a raw past the end"):
        assert whole.startswith("3: "), whole


def test_walk_reads_no_tensor_bytes_of_a_large_request() -> None:
    """A 602 KB request in 16 KB pieces: its raw contents stay where they were read (no copy)."""
    pieces = _pieces(VALID, list(range(0, len(VALID), 16_384)))
    request, raws = parse_infer(pieces)
    assert [len(raw) for raw in raws] == [602_112] and list(request.inputs[0].shape) == [1, 3, 224, 224]
    assert isinstance(raws[0], Raw)  # a span of the pieces, not protobuf's copy
