"""Request payloads: what a model takes (from Triton's metadata) and seeded data for it.

The one generator of request data: the Locust users (:mod:`tritonkit.loadtest.users`) and the load
generator of ``profile`` and ``tune`` (:mod:`.loadgen`) both draw their requests from :func:`make_payloads`, so both tools
load a model alike. A :class:`~tritonkit.client.spec.ModelSpec` (the client's) is read once from the
server (``/v2/models/<m>`` metadata plus the config). :func:`make_payloads` builds a small pool of
requests per batch size of the *batch mix* (random data of the right dtype and shape from a seeded
generator, or real text for ``BYTES`` inputs), and users draw from the pool by the mix's weights, so
a run is repeatable and no time is spent generating data while load is on. The bytes of each
request are the client's codec's (:mod:`tritonkit.client.codec`), built once per payload. Every
variable (-1) dim past the batch axis is :data:`VARIABLE_DIM` long in generated requests
(:func:`generated_lengths` is the line ``tritonkit profile`` prints about it).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
from collections.abc import Mapping, Sequence
from pydoc_data.topics import topics
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from tritonkit.client.codec import grpc_request, http_body, tensor_bytes
from tritonkit.client.spec import ModelMetadata, ModelSpec, config_from_json
from tritonkit.config.dtypes import numpy_to_triton
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.inputs.data import synthetic_images
from tritonkit.errors import ConfigError, LoadTestError
from tritonkit.measure.input_data import requests
from tritonkit.measure.validation import OutputCheck, dtype_of

__all__ = [
    "INPUT_DATA",
    "SOURCES",
    "VARIABLE_DIM",
    "BatchMix",
    "ModelSpec",
    "Payload",
    "PayloadSet",
    "fetch_model_spec",
    "generated_lengths",
    "make_payloads",
    "output_checks",
    "parse_batch_mix",
    "raw_bytes",
    "request_body",
    "sample_sentences",
    "triton_dtype",
]

#: batch size → relative weight
BatchMix = Mapping[int, float]


def triton_dtype(array: NDArray[Any]) -> str:
    """Triton data type of an array (object/bytes arrays are ``BYTES``)."""
    try:
        return numpy_to_triton(array.dtype)
    except ConfigError:
        raise LoadTestError(f"arrays of dtype {array.dtype} cannot be sent to Triton") from None


def raw_bytes(array: NDArray[Any]) -> bytes:
    """Triton's binary wire form: little-endian C order, ``BYTES`` elements with a u32 length prefix."""
    return tensor_bytes(triton_dtype(array), array)


def output_checks(spec: ModelSpec, batch: int) -> list[OutputCheck]:
    """What the answer to a request of ``batch`` rows must look like."""
    checks = []
    for out in spec.metadata.outputs:
        shape = list(out.shape)
        if spec.max_batch_size > 0 and shape:
            shape[0] = batch
        checks.append(OutputCheck(out.name, out.datatype, tuple(shape)))
    return checks


def fetch_model_spec(
    url: str, model: str, version: str = "", *, protocol: str = "http", timeout: float = 10.0
) -> ModelSpec:
    """Read ``model``'s inputs, outputs and batching from a server, over ``protocol``.

    Raises :class:`LoadTestError` naming the model and the server when it is unknown or not ready,
    and when the server cannot be reached, so that no load is sent to a wrong target.
    """
    host = re.sub(r"^[a-z]+://", "", url).rstrip("/")
    client: Any
    try:
        if protocol == "grpc":
            client = grpcclient.InferenceServerClient(host)
        else:
            client = httpclient.InferenceServerClient(
                host, connection_timeout=timeout, network_timeout=timeout
            )
    except Exception as exc:
        raise LoadTestError(f"cannot use server address {url!r}: {_one_line(exc)}") from None
    extra: dict[str, Any] = {"client_timeout": timeout} if protocol == "grpc" else {}
    json_kw: dict[str, Any] = {"as_json": True} if protocol == "grpc" else {}
    try:
        try:
            live = client.is_server_live(**extra)
        except (InferenceServerException, OSError) as exc:
            raise LoadTestError(f"cannot reach Triton at {host} over {protocol}: {_one_line(exc)}") from None
        if not live:
            raise LoadTestError(f"Triton at {host} is not live; expected its health check to pass")
        try:
            metadata: dict[str, Any] = client.get_model_metadata(model, version, **json_kw, **extra)
            config: dict[str, Any] = client.get_model_config(model, version, **json_kw, **extra)
            ready = client.is_model_ready(model, version, **extra)
        except InferenceServerException as exc:
            served = _served_models(client, json_kw)
            raise LoadTestError(
                f"model `{model}` is not served by {host}: {_one_line(exc)}; served models: {served}"
            ) from None
        if not ready:
            raise LoadTestError(f"model `{model}` version {version or 'latest'} is not ready on {host}")
    finally:
        client.close()
    config = config.get("config", config)  # gRPC wraps the config in {"config": ...}
    return ModelSpec(ModelMetadata.from_json(metadata), config_from_json(config), version)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _served_models(client: Any, json_kw: Mapping[str, Any]) -> str:
    try:
        index = client.get_model_repository_index(**json_kw)
    except Exception:
        return "unknown (the repository index is restricted)"
    entries = index.get("models", []) if isinstance(index, dict) else index
    names = sorted({str(entry.get("name")) for entry in entries})
    return ", ".join(names) or "none"


def parse_batch_mix(text: str) -> dict[int, float]:
    """``"1"`` or ``"1:0.7,8:0.3"`` → {batch: weight}; one line naming expected vs given otherwise."""
    mix: dict[int, float] = {}
    for part in text.split(","):
        batch_text, _, weight_text = part.strip().partition(":")
        try:
            batch = int(batch_text)
            weight = float(weight_text) if weight_text else 1.0
        except ValueError:
            raise LoadTestError(
                f"batch mix {text!r}: expected BATCH[:WEIGHT],... with integers, got {part!r}"
            ) from None
        if batch < 1 or not weight > 0:
            raise LoadTestError(f"batch mix {text!r}: expected batch >= 1 and weight > 0, got {part!r}")
        mix[batch] = mix.get(batch, 0.0) + weight
    return mix


@functools.cache
def sample_sentences() -> tuple[str, ...]:
    """Real English sentences that ship with CPython (the language reference topics)."""
    sentences: list[str] = []
    for text in topics.values():
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            if 20 <= len(sentence) <= 300 and sentence[0].isalpha():
                sentences.append(sentence)
    return tuple(sentences)


@dataclasses.dataclass(frozen=True)
class Payload:
    """One ready request: inputs by name, its batch size, and the checks its answer must pass."""

    inputs: dict[str, NDArray[Any]]
    batch: int
    checks: tuple[OutputCheck, ...]

    @property
    def nbytes(self) -> int:
        return sum(len(raw_bytes(a)) for a in self.inputs.values())


@dataclasses.dataclass
class PayloadSet:
    """A pool of payloads and the weights to draw them by."""

    spec: ModelSpec
    payloads: list[Payload]
    weights: list[float]

    def pick(self, rng: random.Random) -> int:
        """Index of a payload drawn by the batch mix."""
        return rng.choices(range(len(self.payloads)), weights=self.weights)[0]


SOURCES = ("auto", "random", "text", "image")
#: the length generated requests give every variable (-1) dim past the batch axis
VARIABLE_DIM = 16
#: a payload source naming a perf_analyzer ``--input-data`` file: ``input-data:PATH``
INPUT_DATA = "input-data:"


def _random_tensor(
    spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator, source: str
) -> NDArray[Any]:
    if spec.datatype == "BYTES":
        if source in ("text", "auto"):
            sentences = sample_sentences()
            picks = rng.integers(0, len(sentences), size=shape)
            return np.array([sentences[i].encode() for i in picks.reshape(-1)], dtype=object).reshape(shape)
        return (
            np.array([bytes(rng.integers(97, 123, size=16).astype(np.uint8))], dtype=object)
            .repeat(int(np.prod(shape)))
            .reshape(shape)
        )
    if (
        source in ("image", "auto")
        and spec.datatype in ("FP32", "FP16")
        and len(shape) == 4
        and shape[1] in (1, 3)
    ):
        # An image classifier's input (N, C, H, W): the converter's seeded, image-like pictures
        # (smooth structure plus noise, ImageNet-normalised), not white noise.
        seed = int(rng.integers(0, 2**31))
        return synthetic_images(shape[0], shape[1:], seed).astype(dtype_of(spec.datatype))  # type: ignore[arg-type]
    dtype = dtype_of(spec.datatype)
    if dtype is None:
        raise LoadTestError(
            f"input `{spec.name}` has datatype {spec.datatype}, which load tests cannot generate"
        )
    lowered = spec.name.lower()
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        # Token-style inputs: masks are all ones, type ids zeros, ids a small vocabulary range.
        if "mask" in lowered:
            return np.ones(shape, dtype=dtype)
        if "type" in lowered:
            return np.zeros(shape, dtype=dtype)
        high = min(1000, int(np.iinfo(dtype).max))  # type: ignore[type-var]
        return rng.integers(0, high, size=shape).astype(dtype)
    return rng.standard_normal(size=shape).astype(dtype)


def make_payloads(
    spec: ModelSpec,
    batch_mix: BatchMix | None = None,
    *,
    per_batch: int = 4,
    seed: int = 0,
    source: str = "auto",
    variable_dim: int = VARIABLE_DIM,
) -> PayloadSet:
    """Build ``per_batch`` payloads for each batch size of the mix (default: batch 1 only).

    ``source``: ``random`` (seeded data of each input's dtype), ``text`` (real English sentences
    for ``BYTES`` inputs), ``image`` (seeded image-like pictures for ``N, C, H, W`` float inputs),
    or ``auto`` (text for ``BYTES``, images for image-shaped inputs, random elsewhere; the
    default), or ``input-data:PATH`` (the requests of a perf_analyzer ``--input-data`` file, see
    :mod:`tritonkit.measure.input_data`). ``variable_dim`` fills non-batch ``-1`` axes.
    """
    if source.startswith(INPUT_DATA):
        return _from_file(spec, dict(batch_mix or {1: 1.0}), source.removeprefix(INPUT_DATA))
    if source not in SOURCES:
        raise LoadTestError(f"payload source {source!r}: expected one of {', '.join(SOURCES)}")
    mix = dict(batch_mix or {1: 1.0})
    for batch in mix:
        if spec.max_batch_size == 0 and batch != 1:
            raise LoadTestError(
                f"model `{spec.name}` does not batch (max_batch_size 0); expected a batch mix of 1 only, got {batch}"
            )
        if spec.max_batch_size and batch > spec.max_batch_size:
            raise LoadTestError(
                f"batch {batch} exceeds model `{spec.name}`'s max_batch_size {spec.max_batch_size}; "
                f"expected a batch mix within 1..{spec.max_batch_size}"
            )
    rng = np.random.default_rng(seed)
    payloads: list[Payload] = []
    weights: list[float] = []
    total = sum(mix.values())
    for batch, weight in sorted(mix.items()):
        for _ in range(per_batch):
            inputs = {}
            for tensor in spec.metadata.inputs:
                dims = list(tensor.shape)
                if spec.max_batch_size > 0 and dims:
                    dims[0] = batch
                shape = tuple(variable_dim if d < 0 else d for d in dims)
                inputs[tensor.name] = _random_tensor(tensor, shape, rng, source)
            payloads.append(Payload(inputs, batch, tuple(output_checks(spec, batch))))
            weights.append(weight / total / per_batch)
    return PayloadSet(spec, payloads, weights)


def generated_lengths(
    inputs: Sequence[TensorSpec], max_batch_size: int, variable_dim: int = VARIABLE_DIM
) -> str | None:
    """The line saying which length generated requests give a variable (-1) dim past the batch axis,
    with each such input's request shape (None: no input has one)."""
    shapes = []
    for tensor in inputs:
        dims = list(tensor.shape)
        if max_batch_size > 0 and dims:
            dims[0] = 1
        if any(d < 0 for d in dims):
            shapes.append(f"{tensor.name} {[variable_dim if d < 0 else d for d in dims]}")
    if not shapes:
        return None
    return (
        f"generated requests: every variable (-1) dim is {variable_dim} long ({', '.join(shapes)}); "
        "--input-data FILE sends real lengths"
    )


def _from_file(spec: ModelSpec, mix: dict[int, float], path: str) -> PayloadSet:
    """Every request of an input-data file once per batch size of the mix, weighted by the mix."""
    payloads: list[Payload] = []
    weights: list[float] = []
    total = sum(mix.values())
    for batch, weight in sorted(mix.items()):
        if spec.max_batch_size and batch > spec.max_batch_size:
            raise LoadTestError(
                f"batch {batch} exceeds model `{spec.name}`'s max_batch_size {spec.max_batch_size}; "
                f"expected a batch mix within 1..{spec.max_batch_size}"
            )
        found = requests(path, spec.metadata.inputs, spec.max_batch_size, batch)
        checks = tuple(output_checks(spec, batch))
        payloads += [Payload(inputs, batch, checks) for inputs in found]
        weights += [weight / total / len(found)] * len(found)
    return PayloadSet(spec, payloads, weights)


def request_body(model: str, version: str, inputs: dict[str, Any], outputs: Sequence[str] = ()) -> bytes:
    """A serialized ``ModelInferRequest`` with raw (binary) input contents, built once per payload."""
    return bytes(grpc_request(model, version, _typed(inputs), list(outputs) or None).SerializeToString())


def http_request(payload: Payload) -> tuple[list[Any], list[Any], bytes, int]:
    """``tritonclient.http`` inputs and requested outputs of one payload (for the ``tritonclient``
    transport), and the body and JSON-header length the client library sends for it (binary tensors)."""
    inputs = []
    for name, array in payload.inputs.items():
        infer_input = httpclient.InferInput(name, list(array.shape), triton_dtype(array))
        infer_input.set_data_from_numpy(array, binary_data=True)
        inputs.append(infer_input)
    names = [c.name for c in payload.checks]
    outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in names]
    body, json_size = http_body(_typed(payload.inputs), names or None)
    return inputs, outputs, body, json_size


def _typed(inputs: dict[str, Any]) -> list[tuple[str, str, NDArray[Any]]]:
    return [(name, triton_dtype(array), array) for name, array in inputs.items()]
