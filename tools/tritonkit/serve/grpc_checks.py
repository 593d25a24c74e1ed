"""Checks of a gRPC ``ModelInferRequest`` before Triton sees it (the gRPC guard, :mod:`.grpc_guard`).

Triton 2.51's gRPC endpoint trusts a request's shapes: ``[1, 2^32, 2^32]`` with no data (its byte count
wraps to 0), ``[1, 2^62, 4]`` with no data and ``[1, -4, -4]`` over 64 bytes each kill the model's python
stub, and a declared batch of 2^32+1 over one row of data is served as that row. :func:`check_infer`
refuses, each in one line:

* a message that is not a ``ModelInferRequest`` protobuf;
* a shape with a negative dim, more than :data:`MAX_RANK` dims, or whose bytes pass 2^63-1;
* data that does not match the shape and datatype: ``raw_input_contents`` of another byte count (one
  per input, or none), BYTES elements whose 4-byte length prefixes do not add up, typed ``contents``
  of another count or of another datatype's field, both at once, or no data for a non-empty tensor
  (shared-memory inputs excepted);
* a first dim over the model's ``max_batch_size`` where it batches (the config, from ``max_batch``);
* a ``parameters`` map of more than :data:`MAX_PARAMETERS` entries (Triton spends seconds of CPU on
  tens of thousands of keys).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from tritonkit.errors import TritonKitError
from tritonkit.serve.grpc_parse import Raw, parse_infer

__all__ = [
    "INTERNAL",
    "INVALID_ARGUMENT",
    "MAX_PARAMETERS",
    "MAX_RANK",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "CallRefusedError",
    "check_infer",
]

#: gRPC status codes the guard answers with
INVALID_ARGUMENT, RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE = 3, 8, 13, 14
#: entries one ``parameters`` map may hold (the request's, each input's, each output's)
MAX_PARAMETERS = 128
#: dims one shape may have
MAX_RANK = 64
_INT64_MAX = (1 << 63) - 1
_DTYPE_BYTES = {
    "BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
    "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8, "BYTES": 0,
}  # fmt: skip
#: the ``InferTensorContents`` field each datatype's typed data goes in (FP16 and BF16: raw only)
_CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
    "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
    "FP64": "fp64_contents", "BYTES": "bytes_contents",
}  # fmt: skip
_LENGTH = struct.Struct("<I")


class CallRefusedError(TritonKitError):
    """A gRPC call the guard refuses: its status ``code`` and a one-line ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> CallRefusedError:
    return CallRefusedError(INVALID_ARGUMENT, message[:300])


def _too_many_parameters(where: str, count: int) -> CallRefusedError:
    return _invalid(f"{where} has {count} parameters; at most {MAX_PARAMETERS} are served")


def _elements(name: str, shape: list[int]) -> int:
    if len(shape) > MAX_RANK:
        raise _invalid(f"input `{name}` has {len(shape)} dims; at most {MAX_RANK} are served")
    for dim in shape:
        if dim < 0:
            raise _invalid(f"input `{name}`: shape {shape[:8]} has a negative dim ({dim})")
    count = math.prod(shape)
    if count * 8 > _INT64_MAX:
        raise _invalid(f"input `{name}`: shape {shape[:8]} declares {count} elements, past 2^63-1 bytes")
    return count


def _check_strings(name: str, data: bytes | memoryview, count: int) -> None:
    """BYTES raw data: ``count`` elements, each a 4-byte little-endian length and that many bytes."""
    if count * 4 > len(data):
        raise _invalid(f"input `{name}` (BYTES): {count} elements cannot fit in {len(data)} bytes")
    offset, end, unpack = 0, len(data), _LENGTH.unpack_from
    for _ in range(count):
        if offset + 4 > end:
            break
        offset += 4 + unpack(data, offset)[0]
    if offset != end:
        raise _invalid(
            f"input `{name}` (BYTES): {len(data)} bytes do not hold exactly {count} length-prefixed elements"
        )


def _check_input(
    tensor: service_pb2.ModelInferRequest.InferInputTensor, raw: Raw | bytes | None, model: str
) -> int:
    """The checks of one input; returns its first dim (-1 for a scalar)."""
    name, datatype = tensor.name[:60], tensor.datatype
    shape = list(tensor.shape)
    if len(tensor.parameters) > MAX_PARAMETERS:
        raise _too_many_parameters(f"input `{name}`", len(tensor.parameters))
    count = _elements(name, shape)
    size = _DTYPE_BYTES.get(datatype)
    if size is None:
        raise _invalid(f"input `{name}`: unknown datatype `{datatype[:20]}`")
    typed = tensor.HasField("contents")
    if "shared_memory_region" in tensor.parameters:
        if typed or raw:
            raise _invalid(f"input `{name}` names a shared-memory region and also carries data")
        return shape[0] if shape else -1
    if typed:
        if raw is not None:
            raise _invalid(  # Triton's own words (NVIDIA's grpc_explicit_*_content_client checks them)
                f"contents field must not be specified when using raw_input_contents for '{name}' "
                f"for model '{model[:60]}'"
            )
        fields = [field.name for field, _ in tensor.contents.ListFields()]
        wanted = _CONTENTS.get(datatype, "")
        if fields != [wanted]:
            raise _invalid(
                f"input `{name}` ({datatype}): typed data must be in `{wanted or 'raw_input_contents'}`, "
                f"got {', '.join(fields) or 'no field'}"
            )
        given = len(getattr(tensor.contents, wanted))
        if given != count:
            raise _invalid(f"input `{name}`: shape {shape[:8]} needs {count} elements, {given} given")
    elif raw is not None:
        if size == 0:
            _check_strings(name, raw if isinstance(raw, bytes) else raw.data(), count)
        elif len(raw) != count * size:
            raise _invalid(
                f"input `{name}` ({datatype}): shape {shape[:8]} needs {count * size} bytes, {len(raw)} given"
            )
    elif count:
        raise _invalid(f"input `{name}`: shape {shape[:8]} declares {count} elements and no data is given")
    return shape[0] if shape else -1


def check_infer(
    message: bytes | bytearray | memoryview | Sequence[bytes | memoryview],
    max_batch: Callable[[str, str], int | None],
) -> None:
    """Refuse (:class:`CallRefusedError`) a serialized ``ModelInferRequest`` Triton would mishandle.

    ``message`` is the serialized request, whole or as the pieces it was read in (:mod:`.grpc_parse`
    reads its tensor bytes where they lie). ``max_batch(model, version)`` is the model's
    ``max_batch_size`` (0: no batching; None: unknown, Triton answers for the model).
    """
    try:
        request, raws = parse_infer(message)
    except DecodeError:
        raise _invalid("the message is not a ModelInferRequest protobuf") from None
    if len(request.parameters) > MAX_PARAMETERS:
        raise _too_many_parameters("the request", len(request.parameters))
    for output in request.outputs:
        if len(output.parameters) > MAX_PARAMETERS:
            raise _too_many_parameters(f"output `{output.name[:60]}`", len(output.parameters))
    model = request.model_name
    firsts = [
        _check_input(tensor, raws[i] if i < len(raws) else None, model)
        for i, tensor in enumerate(request.inputs)
    ]
    if raws and len(raws) != len(request.inputs):
        raise _invalid(f"{len(raws)} raw_input_contents for {len(request.inputs)} inputs; expected one each")
    if not firsts:
        return
    limit = max_batch(request.model_name, request.model_version)
    if limit:
        worst = max(firsts)
        if worst > limit or min(firsts) < 0:
            shown = worst if worst > limit else "no batch dim"
            raise _invalid(
                f"model `{request.model_name[:60]}` takes batches of at most {limit}; the request declares {shown}"
            )
