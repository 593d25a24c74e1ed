"""KServe v2 inference requests and answers, encoded and decoded for the client's hot path.

Owns the bytes of one ``infer`` call on both protocols: the HTTP body (JSON header followed by the
binary tensors, the layout ``tritonclient.http.InferenceServerClient.generate_request_body``
produces) and the gRPC ``ModelInferRequest`` (``tritonclient.grpc.service_pb2``, tensors in
``raw_input_contents``), and the ``{output name: ndarray}`` of their answers. The one encoder and
decoder of infer calls: the client, the load tests' payloads (bodies built once per payload) and
their Locust users (the answers of the ``lean`` HTTP and the ``wire`` gRPC transports) all use it.

Why not ``InferInput``/``InferResult``: built per call, those objects are most of what
``tritonclient`` spends on a small request in Python. ``tritonclient.http.InferResult`` defines a
class on every answer (about 10 µs), and the gRPC ``InferInput`` builds a protobuf message that is
then copied into the request. The client validates every request against the model before it
gets here (:meth:`tritonkit.client.spec.ModelSpec.prepare`), so this module only lays out bytes.
The client sends these bytes on ``tritonclient``'s connection objects (the load tests on their own
gevent connections); the byte conversions of BYTES tensors are ``tritonclient.utils``'.

Fixed-size tensors that arrive as binary data are decoded into read-only views of the answer's
bytes, as ``tritonclient`` returns them (BYTES tensors, JSON data and empty tensors are new arrays).
An answer the codec cannot read raises :class:`AnswerError`, which the client reports as the
server's fault (``InternalServerError``), never as a bad request.
"""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

import grpc
import numpy as np
import rapidjson
from google.protobuf.message import DecodeError
from numpy.typing import NDArray
from tritonclient.grpc import service_pb2
from tritonclient.utils import (
    InferenceServerException,
    deserialize_bytes_tensor,
    serialize_byte_tensor,
)

from tritonkit.config.dtypes import NUMPY_DTYPES

__all__ = [
    "HEADER_LENGTH",
    "HTTP_HEADERS",
    "AnswerError",
    "HttpRequest",
    "MissingOutputError",
    "grpc_answer",
    "grpc_error",
    "grpc_request",
    "grpc_result",
    "http_answer",
    "http_body",
    "http_error",
    "http_request",
    "http_result",
    "tensor_bytes",
]

#: The HTTP header that carries the JSON part's length of a binary-tensor body (both directions).
HEADER_LENGTH = "Inference-Header-Content-Length"

#: Headers of every infer call: Triton compresses answers for clients that accept it (aiohttp does).
HTTP_HEADERS = {"Accept-Encoding": "identity"}

#: An encoded HTTP infer call: (path, body, length of the body's JSON header).
HttpRequest = tuple[str, bytes, int]

#: Triton datatype -> NumPy dtype of every fixed-size type (a dict: ``triton_to_np_dtype`` is a chain of ifs).
_DTYPES: dict[str, np.dtype[Any]] = NUMPY_DTYPES


#: The ``InferTensorContents`` field of each datatype that has one (grpc_service.proto).
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


class AnswerError(Exception):
    """The server's answer cannot be read as the call expects (the client maps it to ``InternalServerError``)."""


class MissingOutputError(AnswerError):
    """An answer lacks an output the call expects."""

    def __init__(self, name: str, names: tuple[str, ...]) -> None:
        super().__init__(f"the answer lacks output `{name}`; expected {', '.join(f'`{n}`' for n in names)}")
        self.name = name


def _dtype(datatype: str) -> np.dtype[Any]:
    dtype = _DTYPES.get(datatype)
    if dtype is None:
        raise AnswerError(f"unknown datatype {datatype!r} in the server's answer")
    return dtype


#: The most bytes one tensor may declare. Triton 2.51 does not check a declared shape against the data
#: on gRPC: it sizes tensors in 32 bits, so ``[2**32 + 1, 16]`` FP32 with one row of data is served as
#: that one row, silently; its HTTP endpoint reads lengths as int32. Refused here, before sending.
MAX_TENSOR_BYTES = 2**31 - 1


class RequestError(ValueError):
    """A request the client will not send (the client reports it as ``InvalidInputError``)."""


def checked_bytes(name: str, datatype: str, array: NDArray[Any]) -> bytes:
    """:func:`tensor_bytes` after checking that the shape declares what the bytes hold, within
    :data:`MAX_TENSOR_BYTES` (a broadcast view can declare terabytes over one row of memory)."""
    declared = array.size * (4 if datatype == "BYTES" else array.itemsize)  # BYTES: at least its lengths
    if declared > MAX_TENSOR_BYTES:
        raise RequestError(
            f"input `{name}`: shape {list(array.shape)} declares {declared} bytes; Triton takes at most "
            f"{MAX_TENSOR_BYTES} per tensor (its gRPC endpoint truncates larger shapes silently)"
        )
    data = tensor_bytes(datatype, array)
    if datatype != "BYTES" and len(data) != declared:
        raise RequestError(
            f"input `{name}`: shape {list(array.shape)} needs {declared} bytes; got {len(data)}"
        )
    return data


def tensor_bytes(datatype: str, array: NDArray[Any]) -> bytes:
    """The raw bytes of a validated tensor: row-major elements, or length-prefixed items for BYTES."""
    if datatype == "BYTES":
        serialized = serialize_byte_tensor(array)
        return bytes(serialized.item()) if serialized.size > 0 else b""
    return array.tobytes()


def _from_bytes(
    name: str, datatype: str, data: Any, offset: int, size: int, shape: Sequence[int]
) -> NDArray[Any]:
    """Output ``name``'s array from ``size`` bytes of ``data`` at ``offset``; :class:`AnswerError` when
    they do not hold ``shape``."""
    if datatype == "BYTES":
        try:
            items: NDArray[Any] = deserialize_bytes_tensor(bytes(data[offset : offset + size]))
            return items.reshape(shape)
        except (ValueError, struct.error):
            raise AnswerError(f"output `{name}` (BYTES) does not hold shape {list(shape)}") from None
    dtype = _dtype(datatype)
    if size != math.prod(shape) * dtype.itemsize or offset + size > len(data):
        raise _size_error(name, datatype, shape, min(size, len(data) - offset))
    if size == 0:
        return np.empty(shape, dtype)
    return np.frombuffer(data, dtype, size // dtype.itemsize, offset).reshape(shape)


def _size_error(name: str, datatype: str, shape: Sequence[int], size: int) -> AnswerError:
    expected = math.prod(shape) * _dtype(datatype).itemsize
    return AnswerError(
        f"output `{name}` carries {size} bytes, expected {expected} for shape {list(shape)} {datatype}"
    )


def _pick(found: dict[str, NDArray[Any]], names: tuple[str, ...] | None) -> dict[str, NDArray[Any]]:
    """``found`` (in the answer's order) as ``{name: array}`` in the order of ``names`` (None: as found)."""
    if names is None or tuple(found) == names:  # the usual case: the server answers in the order asked
        return found
    out = {}
    for name in names:
        value = found.get(name)
        if value is None:
            raise MissingOutputError(name, names)
        out[name] = value
    return out


# -- HTTP -------------------------------------------------------------------------------------------
def http_body(
    inputs: Sequence[tuple[str, str, NDArray[Any]]], outputs: Sequence[str] | None
) -> tuple[bytes, int]:
    """(body, length of its JSON header) of an infer request, every tensor sent as binary.

    ``outputs`` None asks for every output (``binary_data_output``); otherwise just those, binary.
    """
    described = []
    chunks: list[bytes] = [b""]
    for name, datatype, array in inputs:
        data = checked_bytes(name, datatype, array)
        described.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": len(data)},
            }
        )
        chunks.append(data)
    request: dict[str, Any] = {"inputs": described}
    if outputs is None:
        request["parameters"] = {"binary_data_output": True}
    else:
        request["outputs"] = [{"name": n, "parameters": {"binary_data": True}} for n in outputs]
    header = rapidjson.dumps(request).encode()
    chunks[0] = header
    return b"".join(chunks), len(header)


def http_request(
    model: str,
    version: str,
    inputs: Sequence[tuple[str, str, NDArray[Any]]],
    outputs: Sequence[str] | None,
) -> HttpRequest:
    """(path, body, length of the body's JSON header) of an infer call (see :func:`http_body`)."""
    path = f"/v2/models/{quote(model)}" + (f"/versions/{version}/infer" if version else "/infer")
    return (path, *http_body(inputs, outputs))


def http_result(
    body: bytes, header_length: int | None, names: tuple[str, ...] | None, encoding: str | None = None
) -> dict[str, NDArray[Any]]:
    """``{name: array}`` for ``names`` (None: every output, in the answer's order) from an infer
    answer's body (binary or JSON tensor data).

    ``encoding`` is the answer's ``Content-Encoding`` (the transports ask for ``identity``, but a
    proxy may still compress). Raises :class:`MissingOutputError` when the answer lacks one of ``names``.
    """
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    header = rapidjson.loads(body if header_length is None else body[:header_length])
    offset = header_length or 0
    found: dict[str, NDArray[Any]] = {}
    for output in header.get("outputs", ()):
        datatype = output["datatype"]
        params = output.get("parameters")
        size = None if params is None else params.get("binary_data_size")
        if size is None:
            array = np.array(output["data"], dtype=_dtype(datatype) if datatype != "BYTES" else object)
            array = array.reshape(output["shape"])
        else:
            array = _from_bytes(output["name"], datatype, body, offset, size, output["shape"])
            offset += size
        found[output["name"]] = array
    return _pick(found, names)


def http_answer(
    status: int, body: bytes, header: Callable[[str], str | None], names: tuple[str, ...] | None
) -> dict[str, NDArray[Any]]:
    """``{name: array}`` of an infer answer, given its status, body and header lookup; raises
    :func:`http_error`'s exception for a non-200 status."""
    if status != 200:
        raise http_error(status, body)
    length = header(HEADER_LENGTH)
    return http_result(body, None if length is None else int(length), names, header("Content-Encoding"))


def http_error(status: int, body: bytes) -> InferenceServerException:
    """The exception ``tritonclient`` raises for a non-200 answer: Triton's ``error`` text and the status.

    A body that is not Triton's JSON (a proxy's error page) is cut to its first line, at most 200
    characters, with the whole of it in ``debug_details``.
    """
    text = body.decode("utf-8", "replace")
    if not text:
        return InferenceServerException(
            msg="client received an empty response from the server.", status=str(status)
        )
    try:
        return InferenceServerException(msg=str(rapidjson.loads(text)["error"]), status=str(status))
    except (ValueError, KeyError, TypeError):
        first = text.strip().splitlines()[0] if text.strip() else text
        return InferenceServerException(msg=first[:200], status=str(status), debug_details=text)


# -- gRPC -------------------------------------------------------------------------------------------
def grpc_request(
    model: str,
    version: str,
    inputs: Sequence[tuple[str, str, NDArray[Any]]],
    outputs: Sequence[str] | None,
) -> service_pb2.ModelInferRequest:
    """The ``ModelInferRequest`` of a call, every tensor in ``raw_input_contents``."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    add_input = request.inputs.add
    raw = request.raw_input_contents
    for name, datatype, array in inputs:
        tensor = add_input()  # attribute stores: cheaper than keyword construction in upb
        tensor.name = name
        tensor.datatype = datatype
        tensor.shape[:] = array.shape
        raw.append(checked_bytes(name, datatype, array))
    if outputs is not None:
        for name in outputs:
            request.outputs.add(name=name)
    return request


def grpc_result(
    response: service_pb2.ModelInferResponse, names: tuple[str, ...] | None
) -> dict[str, NDArray[Any]]:
    """``{name: array}`` for ``names`` (None: every output, in the answer's order) from a ``ModelInferResponse``.

    Raises :class:`MissingOutputError` when the answer lacks one of ``names``.
    """
    raw = response.raw_output_contents
    found: dict[str, NDArray[Any]] = {}
    dtypes = _DTYPES
    # Output i's bytes are raw_output_contents[i] when there are that many (always, from Triton);
    # outputs past the end carry typed ``contents``, as tritonclient reads them.
    try:
        for output, data in zip(response.outputs, raw):  # noqa: B905 - the rest are read below
            dtype = dtypes.get(output.datatype)
            # shape[:] copies the repeated field to a list in C: a third of what tuple(shape) costs
            if dtype is not None and data:  # the usual case, inline: it runs for every output
                found[output.name] = np.frombuffer(data, dtype).reshape(output.shape[:])
            else:
                found[output.name] = _from_bytes(
                    output.name, output.datatype, data, 0, len(data), output.shape[:]
                )
    except ValueError:  # some output's bytes do not hold its shape: name it
        for output, data in zip(response.outputs, raw):  # noqa: B905
            dtype = dtypes.get(output.datatype)
            if dtype is not None and len(data) != math.prod(output.shape) * dtype.itemsize:
                raise _size_error(output.name, output.datatype, output.shape[:], len(data)) from None
        raise
    for output in response.outputs[len(raw) :]:
        field = _CONTENTS.get(output.datatype)
        if field is None:
            raise AnswerError(
                f"output `{output.name}` ({output.datatype}) came without raw bytes, which that datatype needs"
            )
        values = list(getattr(output.contents, field))
        kind = np.dtype(object) if output.datatype == "BYTES" else _DTYPES[output.datatype]
        found[output.name] = np.array(values, dtype=kind).reshape(output.shape[:])
    return _pick(found, names)


def grpc_answer(message: bytes, names: tuple[str, ...] | None) -> dict[str, NDArray[Any]]:
    """:func:`grpc_result` of a serialized ``ModelInferResponse`` (a gRPC answer's message bytes)."""
    try:
        response = service_pb2.ModelInferResponse.FromString(message)
    except DecodeError as exc:
        raise AnswerError(f"the answer is not a ModelInferResponse ({exc})") from None
    return grpc_result(response, names)


def grpc_error(exc: grpc.RpcError) -> InferenceServerException:
    """The exception ``tritonclient.grpc`` raises for a failed call: gRPC's details and status code."""
    call: Any = exc  # a failed unary call's error is also its grpc.Call, with code() and details()
    return InferenceServerException(
        msg=call.details(), status=str(call.code()), debug_details=call.debug_error_string()
    )
