"""client.codec against tritonclient's own encoders and decoders, tensor for tensor.

The reference for every request is what ``tritonclient`` builds from ``InferInput`` objects; the
reference for every answer is what ``tritonclient``'s ``InferResult`` reads from the same bytes. The
real server's side of both is tested end to end (tests/repository/test_e2e_serving.py,
tests/client/test_sync.py and test_aio.py).
"""

from __future__ import annotations

import gzip
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import rapidjson
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request
from tritonclient.utils import InferenceServerException

from tritonkit.client.codec import (
    AnswerError,
    MissingOutputError,
    grpc_answer,
    grpc_request,
    grpc_result,
    http_error,
    http_request,
    http_result,
)

rng = np.random.default_rng(7)

#: (Triton datatype, an array of it) for every type the client sends.
TENSORS: list[tuple[str, np.ndarray[Any, Any]]] = [
    ("FP32", rng.standard_normal((2, 3)).astype(np.float32)),
    ("FP16", rng.standard_normal((2, 3)).astype(np.float16)),
    ("FP64", rng.standard_normal((1, 5))),
    ("BF16", rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16)),
    ("INT8", rng.integers(-100, 100, (3, 1)).astype(np.int8)),
    ("INT32", rng.integers(-(2**31), 2**31 - 1, (2, 4)).astype(np.int32)),
    ("INT64", rng.integers(-(2**62), 2**62, (2, 2)).astype(np.int64)),
    ("UINT8", rng.integers(0, 255, (4,)).astype(np.uint8)),
    ("UINT64", np.array([[0, 2**64 - 1]], np.uint64)),
    ("BOOL", np.array([[True, False, True]])),
    ("BYTES", np.array([[b"a", "ü".encode()], [b"", b"\x00\xff"]], dtype=object)),
    ("FP32", np.zeros((0, 4), np.float32)),  # an empty batch
    ("FP32", np.asfortranarray(rng.standard_normal((3, 2)).astype(np.float32))),  # not C-contiguous
]
IDS = [f"{d}{list(a.shape)}" for d, a in TENSORS]


def _prepared(datatype: str, array: np.ndarray[Any, Any]) -> list[tuple[str, str, np.ndarray[Any, Any]]]:
    return [("IN", datatype, array), ("OTHER", "INT32", np.arange(6, dtype=np.int32).reshape(2, 3))]


def _split(body: bytes, header_length: int) -> tuple[dict[str, Any], bytes]:
    return rapidjson.loads(body[:header_length]), body[header_length:]


@pytest.mark.parametrize(("datatype", "array"), TENSORS, ids=IDS)
@pytest.mark.parametrize("outputs", [None, ["OUT"]], ids=["all-outputs", "named-outputs"])
def test_http_request_matches_tritonclient(
    datatype: str, array: np.ndarray[Any, Any], outputs: list[str] | None
) -> None:
    prepared = _prepared(datatype, array)
    path, body, length = http_request("m", "", prepared, outputs)
    assert path == "/v2/models/m/infer"
    items = []
    for name, dt, a in prepared:
        item = httpclient.InferInput(name, list(a.shape), dt)
        item.set_data_from_numpy(a, binary_data=True)
        items.append(item)
    requested = (
        None if outputs is None else [httpclient.InferRequestedOutput(n, binary_data=True) for n in outputs]
    )
    want_body, want_length = httpclient.InferenceServerClient.generate_request_body(items, outputs=requested)
    ours, our_tensors = _split(body, length)
    theirs, their_tensors = _split(bytes(want_body), want_length)
    if outputs is None:
        # tritonclient asks for binary answers output by output, so it must name them; without names
        # we ask for all, binary, by the request-level parameter Triton documents for that.
        assert ours.pop("parameters") == {"binary_data_output": True}
        theirs.pop("parameters", None)
    assert ours == theirs
    assert our_tensors == their_tensors


def test_http_request_path_names_the_version_and_quotes_the_model() -> None:
    path, _, _ = http_request("a b/c", "3", [("X", "FP32", np.ones((1, 1), np.float32))], None)
    assert path == "/v2/models/a%20b/c/versions/3/infer"


def _answer(outputs: list[tuple[str, str, np.ndarray[Any, Any]]], binary: bool = True) -> tuple[bytes, int]:
    """A KServe v2 HTTP answer as Triton writes it: JSON header, then the binary tensors."""
    header: dict[str, Any] = {"model_name": "m", "model_version": "1", "outputs": []}
    blobs = []
    for name, datatype, array in outputs:
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            item = httpclient.InferInput(name, list(array.shape), datatype)
            item.set_data_from_numpy(array, binary_data=True)
            data = item._get_binary_data()
            entry["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            entry["data"] = [v.decode() if isinstance(v, bytes) else v for v in array.flatten().tolist()]
        header["outputs"].append(entry)
    text = rapidjson.dumps(header).encode()
    return text + b"".join(blobs), len(text)


def _same(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("datatype", "array"), TENSORS, ids=IDS)
def test_http_result_matches_tritonclient(datatype: str, array: np.ndarray[Any, Any]) -> None:
    outputs = [("FIRST", "INT32", np.arange(4, dtype=np.int32).reshape(2, 2)), ("OUT", datatype, array)]
    body, length = _answer(outputs)
    got = http_result(body, length, ("FIRST", "OUT"))
    reference = httpclient.InferResult.from_response_body(body, header_length=length)
    for name in ("FIRST", "OUT"):
        _same(got[name], reference.as_numpy(name))
    np.testing.assert_array_equal(got["OUT"], np.ascontiguousarray(array))


def test_http_result_reads_json_data_and_compressed_answers() -> None:
    outputs = [
        ("F", "FP32", np.array([[1.5, -2.0]], np.float32)),
        ("S", "BYTES", np.array([b"x", b"yz"], object)),
    ]
    body, _ = _answer(outputs, binary=False)
    got = http_result(body, None, ("S", "F"))
    reference = httpclient.InferResult.from_response_body(body)
    for name in ("F", "S"):
        _same(got[name], reference.as_numpy(name))
    assert list(got) == ["S", "F"]  # in the order asked
    binary, length = _answer(outputs)
    _same(http_result(gzip.compress(binary), length, ("F",), "gzip")["F"], outputs[0][2])


def test_missing_output_is_named() -> None:
    body, length = _answer([("A", "FP32", np.ones((1, 1), np.float32))])
    with pytest.raises(MissingOutputError, match=r"lacks output `B`; expected `A`, `B`"):
        http_result(body, length, ("A", "B"))
    response = service_pb2.ModelInferResponse()
    with pytest.raises(MissingOutputError, match="lacks output `A`"):
        grpc_result(response, ("A",))


def test_http_error_keeps_tritons_text_and_status() -> None:
    err = http_error(400, b'{"error":"unexpected shape for input \'X\'"}')
    assert isinstance(err, InferenceServerException)
    assert err.status() == "400" and err.message() == "unexpected shape for input 'X'"
    page = b"<html>\n<title>502 Bad Gateway</title>\n" + b"x" * 500 + b"\n</html>"
    proxy = http_error(502, page)
    assert proxy.status() == "502" and proxy.message() == "<html>"
    assert proxy.debug_details() == page.decode()
    assert http_error(502, b"y" * 300).message() == "y" * 200
    assert http_error(503, b"").message() == "client received an empty response from the server."


@pytest.mark.parametrize(("datatype", "array"), TENSORS, ids=IDS)
@pytest.mark.parametrize("outputs", [None, ["OUT", "OTHER"]], ids=["all-outputs", "named-outputs"])
def test_grpc_request_matches_tritonclient(
    datatype: str, array: np.ndarray[Any, Any], outputs: list[str] | None
) -> None:
    prepared = _prepared(datatype, array)
    items = []
    for name, dt, a in prepared:
        item = grpcclient.InferInput(name, list(a.shape), dt)
        item.set_data_from_numpy(a)
        items.append(item)
    requested = None if outputs is None else [grpcclient.InferRequestedOutput(n) for n in outputs]
    want = _get_inference_request(
        model_name="m",
        inputs=items,
        model_version="2",
        request_id="",
        outputs=requested,
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=None,
        parameters=None,
    )
    assert grpc_request("m", "2", prepared, outputs) == want


@pytest.mark.parametrize(("datatype", "array"), TENSORS, ids=IDS)
def test_grpc_result_matches_tritonclient(datatype: str, array: np.ndarray[Any, Any]) -> None:
    response = service_pb2.ModelInferResponse(model_name="m", model_version="1")
    for name, dt, a in [("FIRST", "INT64", np.arange(3, dtype=np.int64)), ("OUT", datatype, array)]:
        tensor = response.outputs.add(name=name, datatype=dt, shape=a.shape)
        item = grpcclient.InferInput(name, list(a.shape), dt)
        item.set_data_from_numpy(a)
        response.raw_output_contents.append(item._get_content() or b"")
        assert tensor.name == name
    got = grpc_result(response, ("OUT", "FIRST"))
    reference = grpcclient.InferResult(response)
    assert list(got) == ["OUT", "FIRST"]
    for name in ("FIRST", "OUT"):
        _same(got[name], reference.as_numpy(name))


def test_grpc_result_reads_typed_contents() -> None:
    """Not what Triton sends, but legal protobuf: tensors in ``contents`` rather than raw bytes."""
    response = service_pb2.ModelInferResponse(model_name="m")
    out = response.outputs.add(name="Y", datatype="INT32", shape=[2])
    out.contents.int_contents.extend([4, -5])
    out = response.outputs.add(name="S", datatype="BYTES", shape=[1, 2])
    out.contents.bytes_contents.extend([b"a", b"bc"])
    got = grpc_result(response, ("Y", "S"))
    _same(got["Y"], np.array([4, -5], np.int32))
    _same(got["S"], np.array([[b"a", b"bc"]], object))
    response.outputs.add(name="H", datatype="FP16", shape=[1])
    with pytest.raises(AnswerError, match=r"output `H` \(FP16\) came without raw bytes"):
        grpc_result(response, ("H",))


def test_grpc_result_reads_raw_and_typed_outputs_by_index() -> None:
    """Output i is raw_output_contents[i] when there is one; outputs past the end carry contents."""
    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="R", datatype="FP16", shape=[2])
    response.raw_output_contents.append(np.array([1.5, -2], np.float16).tobytes())
    typed = response.outputs.add(name="T", datatype="INT64", shape=[1, 1])
    typed.contents.int64_contents.append(7)
    got = grpc_result(response, ("R", "T"))
    _same(got["R"], np.array([1.5, -2], np.float16))
    _same(got["T"], np.array([[7]], np.int64))


def test_unknown_datatype_in_an_answer_is_an_answer_error() -> None:
    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="Q", datatype="FP8", shape=[1])
    response.raw_output_contents.append(b"\x01")
    with pytest.raises(AnswerError, match="unknown datatype 'FP8'"):
        grpc_result(response, ("Q",))


def test_no_names_asked_gives_every_output_in_the_answers_order() -> None:
    """What the load tests' users decode: the whole answer, whatever it holds, for their own checks."""
    outputs = [("B", "INT32", np.arange(4, dtype=np.int32)), ("A", "FP16", np.ones((1, 2), np.float16))]
    body, length = _answer(outputs)
    got = http_result(body, length, None)
    assert list(got) == ["B", "A"]
    for (_, _, array), value in zip(outputs, got.values(), strict=True):
        _same(value, array)
    response = service_pb2.ModelInferResponse(model_name="m")
    for name, datatype, array in outputs:
        response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        response.raw_output_contents.append(array.tobytes())
    got = grpc_answer(response.SerializeToString(), None)
    assert list(got) == ["B", "A"]
    _same(got["A"], outputs[1][2])


@pytest.mark.parametrize("datatype", ["FP32", "BF16"])
def test_answer_bytes_that_do_not_hold_the_shape_are_answer_errors(datatype: str) -> None:
    array = np.ones((2, 3), np.float32).astype(ml_dtypes.bfloat16 if datatype == "BF16" else np.float32)
    short = array.tobytes()[:8]
    wanted = rf"output `Y` carries 8 bytes, expected {array.nbytes} for shape \[2, 3\] {datatype}"
    header = {
        "outputs": [
            {"name": "Y", "datatype": datatype, "shape": [2, 3], "parameters": {"binary_data_size": 8}}
        ]
    }
    text = rapidjson.dumps(header).encode()
    with pytest.raises(AnswerError, match=wanted):
        http_result(text + short, len(text), None)
    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="Y", datatype=datatype, shape=[2, 3])
    response.raw_output_contents.append(short)
    with pytest.raises(AnswerError, match=wanted):
        grpc_result(response, ("Y",))
    with pytest.raises(AnswerError, match="not a ModelInferResponse"):
        grpc_answer(b"\xff\xff\xff", None)
