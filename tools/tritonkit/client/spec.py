"""What the client knows about a served model, and request validation against it.

A :class:`ModelSpec` is built once per (model, version) from the server's metadata and config and
then cached by the client. It precomputes per-input lookup tables so that validating a request is
a handful of dict lookups and tuple compares (the benchmark holds the client to <= 2% overhead over
raw ``tritonclient``). Validation refuses, before anything is sent: unknown or missing input names,
dtype mismatches (casting only when lossless and asked for), wrong rank, dims fixed by the model,
batches above ``max_batch_size`` and, where the config carries ``shape_buckets``, a request longer
than the last edge of an axis (:mod:`tritonkit.client.buckets`). Every refusal is an :class:`InvalidInputError` naming the
expected and the given value.

Also here: the protocol-neutral result types (:class:`ModelMetadata`, :class:`ModelInfo`,
:class:`ModelStatistics`) that both transports convert their answers into.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf import json_format
from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2, service_pb2

from tritonkit.client.buckets import buckets_of, request_lengths
from tritonkit.client.errors import InvalidInputError
from tritonkit.config.tensors import TensorSpec

__all__ = [
    "ModelInfo",
    "ModelMetadata",
    "ModelSpec",
    "ModelStatistics",
    "PreparedInput",
    "TensorSpec",
    "config_from_json",
    "index_from_json",
    "index_from_proto",
    "metadata_from_proto",
    "statistics_from_json",
    "statistics_from_proto",
]

_OBJECT = np.dtype(object)


@dataclasses.dataclass(frozen=True)
class ModelMetadata:
    """The server's metadata for a model: same fields whichever protocol fetched it."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelMetadata:
        """From the KServe v2 JSON form (HTTP), or the gRPC message as ``MessageToDict`` gives it."""

        return cls(
            name=str(data["name"]),
            versions=tuple(str(v) for v in data.get("versions", ())),
            platform=str(data.get("platform", "")),
            inputs=tuple(TensorSpec.from_json(t) for t in data.get("inputs", ())),
            outputs=tuple(TensorSpec.from_json(t) for t in data.get("outputs", ())),
        )

    def to_json(self) -> dict[str, Any]:
        """The KServe v2 JSON form :meth:`from_json` reads."""
        return {
            "name": self.name,
            "versions": list(self.versions),
            "platform": self.platform,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """One row of the server's repository index."""

    name: str
    version: str
    state: str
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class ModelStatistics:
    """Cumulative statistics of one model version (counts, and durations in nanoseconds)."""

    name: str
    version: str
    inference_count: int
    execution_count: int
    success_count: int
    fail_count: int
    success_ns: int
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    last_inference_ms: int
    #: batch size -> number of executions at that size
    batch_executions: dict[int, int]


def statistics_from_proto(pb: service_pb2.ModelStatisticsResponse) -> list[ModelStatistics]:
    out = []
    for s in pb.model_stats:
        st = s.inference_stats
        out.append(
            ModelStatistics(
                name=s.name,
                version=s.version,
                inference_count=s.inference_count,
                execution_count=s.execution_count,
                success_count=st.success.count,
                fail_count=st.fail.count,
                success_ns=st.success.ns,
                queue_ns=st.queue.ns,
                compute_input_ns=st.compute_input.ns,
                compute_infer_ns=st.compute_infer.ns,
                compute_output_ns=st.compute_output.ns,
                last_inference_ms=s.last_inference,
                batch_executions={b.batch_size: b.compute_infer.count for b in s.batch_stats},
            )
        )
    return out


def statistics_from_json(data: Mapping[str, Any]) -> list[ModelStatistics]:
    """The HTTP statistics answer (the gRPC message's JSON form) as :class:`ModelStatistics`."""
    pb = service_pb2.ModelStatisticsResponse()
    json_format.ParseDict(dict(data), pb, ignore_unknown_fields=True)
    return statistics_from_proto(pb)


def metadata_from_proto(pb: service_pb2.ModelMetadataResponse) -> ModelMetadata:
    return ModelMetadata.from_json(json_format.MessageToDict(pb, preserving_proto_field_name=True))


def index_from_json(rows: Sequence[Mapping[str, Any]]) -> list[ModelInfo]:
    """The HTTP repository index as :class:`ModelInfo` rows."""
    return [
        ModelInfo(
            str(r.get("name", "")),
            str(r.get("version", "")),
            str(r.get("state", "")),
            str(r.get("reason", "")),
        )
        for r in rows
    ]


def index_from_proto(pb: service_pb2.RepositoryIndexResponse) -> list[ModelInfo]:
    """The gRPC repository index as :class:`ModelInfo` rows."""
    return [ModelInfo(m.name, m.version, m.state, m.reason) for m in pb.models]


def config_from_json(data: Mapping[str, Any]) -> model_config_pb2.ModelConfig:
    """The HTTP config answer (proto field names) as the protobuf message gRPC returns."""
    pb = model_config_pb2.ModelConfig()
    json_format.ParseDict(dict(data), pb, ignore_unknown_fields=True)
    return pb


#: (name, Triton datatype, array) ready for ``InferInput``.
PreparedInput = tuple[str, str, NDArray[Any]]


def _lossless(src: np.dtype[Any], dst: np.dtype[Any]) -> bool:
    """True when every value of ``src`` is exactly representable in ``dst``.

    NumPy's "safe" casting calls int64 -> float64 safe, but it is not lossless (53-bit mantissa), so
    integer -> float additionally needs the mantissa to hold every integer bit.
    """
    if not np.can_cast(src, dst, casting="safe"):
        return False
    if src.kind in "iu" and dst.kind == "f":
        value_bits = src.itemsize * 8 - (1 if src.kind == "i" else 0)
        return value_bits <= np.finfo(dst).nmant + 1
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class _InputRule:
    name: str
    datatype: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]  # full shape with the batch dim as -1 when the model batches
    fixed: tuple[tuple[int, int], ...]  # (axis, size) for every dim the model fixes
    optional: bool
    is_bytes: bool
    rank: int
    #: when every dim from ``skip`` on is fixed (the usual case), those dims: one tuple compare checks them
    tail: tuple[int, ...] | None
    skip: int


class ModelSpec:
    """One served model version: its metadata and config, and the validation tables built from them.

    The client builds one per (model, version) and calls :meth:`prepare` on every request; load tests
    use the same object (:meth:`to_json`/:meth:`from_json` carry it into Locust worker processes).
    ``version`` is the version asked for, or the newest one the metadata lists when none was.
    """

    def __init__(
        self, metadata: ModelMetadata, config: model_config_pb2.ModelConfig, version: str = ""
    ) -> None:
        self.metadata = metadata
        self.config = config
        self.name = metadata.name
        self.platform = metadata.platform
        versions = metadata.versions
        numeric = bool(versions) and all(v.isdigit() for v in versions)
        self.version = version or (max(versions, key=int) if numeric else "1")
        self.max_batch_size = int(config.max_batch_size)
        optional = {t.name for t in config.input if t.optional}
        self.inputs: dict[str, _InputRule] = {}
        for t in metadata.inputs:
            shape = t.shape
            skip = 1 if self.max_batch_size > 0 else 0
            tail = shape[skip:] if all(d >= 0 for d in shape[skip:]) else None
            self.inputs[t.name] = _InputRule(
                name=t.name,
                datatype=t.datatype,
                dtype=t.numpy_dtype,
                shape=shape,
                fixed=tuple((i, d) for i, d in enumerate(shape) if d >= 0),
                optional=t.name in optional,
                is_bytes=t.datatype == "BYTES",
                rank=len(shape),
                tail=tail,
                skip=skip,
            )
        self.required = frozenset(n for n, r in self.inputs.items() if not r.optional)
        self.output_names: tuple[str, ...] = tuple(t.name for t in metadata.outputs)
        self.outputs: dict[str, TensorSpec] = {t.name: t for t in metadata.outputs}
        #: the config's ``shape_buckets`` (:mod:`tritonkit.client.buckets`); None without them
        self.buckets = buckets_of(config, self._where())

    @classmethod
    def describe(
        cls,
        name: str,
        version: str,
        max_batch_size: int,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        platform: str = "",
    ) -> ModelSpec:
        """A spec from a plain description, for code that has no server to ask (nothing is optional)."""
        metadata = ModelMetadata(name, (version,), platform, tuple(inputs), tuple(outputs))
        return cls(metadata, model_config_pb2.ModelConfig(name=name, max_batch_size=max_batch_size), version)

    @property
    def label(self) -> str:
        """``model:version``, the name load-test reports give this model's requests."""
        return f"{self.name}:{self.version}"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (metadata in KServe v2 form, config with proto field names) for :meth:`from_json`."""
        return {
            "version": self.version,
            "metadata": self.metadata.to_json(),
            "config": json_format.MessageToDict(self.config, preserving_proto_field_name=True),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelSpec:
        return cls(
            ModelMetadata.from_json(data["metadata"]), config_from_json(data["config"]), str(data["version"])
        )

    def _where(self) -> str:
        return f"model `{self.name}`"

    def check_outputs(self, names: Sequence[str]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in self.outputs]
        if unknown:
            raise InvalidInputError(
                f"unknown output {', '.join(_q(n) for n in unknown)} for {self._where()}; "
                f"expected some of {', '.join(f'`{n}`' for n in self.output_names)}"
            )
        return tuple(names)

    def prepare(self, inputs: Mapping[str, Any], safe_cast: bool = False) -> tuple[list[PreparedInput], int]:
        """Validated (name, datatype, array) triples and the request's batch size (0 when not batching)."""
        rules = self.inputs
        if type(inputs) is not dict and not isinstance(inputs, Mapping):
            raise InvalidInputError(
                f"inputs of {self._where()} must be a mapping of input name to array, "
                f"given {type(inputs).__name__}"
            )
        if inputs.keys() != self.required:  # a set compare in C; optional inputs take the slow path
            self._check_names(inputs)
        if self.buckets is not None:  # longer than the last shape bucket: refused before sending
            request_lengths(inputs, self.buckets, self._where())
        prepared: list[PreparedInput] = []
        batch = -1
        for name, value in inputs.items():
            rule = rules[name]
            if type(value) is np.ndarray and not rule.is_bytes and value.dtype == rule.dtype:
                array = value  # the common case: no conversion, skip the call
            else:
                array = self._coerce(rule, value, safe_cast)
            shape = array.shape
            if len(shape) == rule.rank and rule.tail is not None and shape[rule.skip :] == rule.tail:
                pass  # the common case: every fixed dim checked by one tuple compare
            else:
                self._check_shape(rule, shape)
            if self.max_batch_size > 0:
                if batch == -1:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise InvalidInputError(
                        f"inputs of {self._where()} must share the batch size; `{name}` has {shape[0]}, "
                        f"expected {batch}"
                    )
            prepared.append((name, rule.datatype, array))
        if self.max_batch_size > 0:
            self._check_batch(batch)
            return prepared, batch
        return prepared, 0

    def _check_batch(self, batch: int) -> None:
        if batch > self.max_batch_size:
            raise InvalidInputError(
                f"batch of {batch} is above {self._where()}'s max_batch_size {self.max_batch_size}; "
                "send at most that many, or use infer_batch() to split"
            )
        if batch < 1:
            raise InvalidInputError(
                f"batch of {batch} for {self._where()}; expected 1..{self.max_batch_size}"
            )

    def _check_shape(self, rule: _InputRule, shape: tuple[int, ...]) -> None:
        name = rule.name
        if len(shape) != len(rule.shape):
            raise InvalidInputError(
                f"input `{name}` of {self._where()} expects rank {len(rule.shape)} "
                f"(shape {_fmt(rule.shape)}), given rank {len(shape)} (shape {_fmt(shape)})"
                + (" — the model batches: prepend a batch dimension" if self.max_batch_size > 0 else "")
            )
        for axis, size in rule.fixed:
            if shape[axis] != size:
                raise InvalidInputError(
                    f"input `{name}` of {self._where()} expects shape {_fmt(rule.shape)}, "
                    f"given {_fmt(shape)} (dim {axis} must be {size})"
                )

    def _check_names(self, inputs: Mapping[str, Any]) -> None:
        unknown = [n for n in inputs if n not in self.inputs]
        if unknown:
            raise InvalidInputError(
                f"unknown input {', '.join(_q(n) for n in unknown)} for {self._where()}; "
                f"expected {_names(self.inputs)}"
            )
        missing = sorted(self.required.difference(inputs))
        if missing:
            raise InvalidInputError(
                f"missing input {', '.join(f'`{n}`' for n in missing)} for {self._where()}; "
                f"expected {_names(self.inputs)}, given {_names(inputs)}"
            )

    def _coerce(self, rule: _InputRule, value: Any, safe_cast: bool) -> NDArray[Any]:
        if rule.is_bytes:
            return self._bytes_array(rule, value)
        if type(value) is not np.ndarray:
            if isinstance(value, np.ndarray):
                value = np.asarray(value)
            else:
                raise InvalidInputError(
                    f"input `{rule.name}` of {self._where()} expects a numpy array of {rule.datatype} "
                    f"({rule.dtype}), given {type(value).__name__}"
                )
        array: NDArray[Any] = value
        dtype = array.dtype
        if dtype == rule.dtype:
            return array
        if safe_cast and dtype.kind not in "OUS" and _lossless(dtype, rule.dtype):
            return array.astype(rule.dtype)
        hint = (
            ""
            if safe_cast or dtype.kind in "OUS" or not _lossless(dtype, rule.dtype)
            else "; pass safe_cast=True to cast losslessly"
        )
        raise InvalidInputError(
            f"input `{rule.name}` of {self._where()} expects {rule.datatype} ({rule.dtype}), "
            f"given {dtype}{hint}"
        )

    def _bytes_array(self, rule: _InputRule, value: Any) -> NDArray[Any]:
        if isinstance(value, np.ndarray):
            if value.dtype.kind == "O":
                array = value
            elif value.dtype.kind in "US":
                array = value.astype(object)
            else:
                raise InvalidInputError(
                    f"input `{rule.name}` of {self._where()} expects BYTES (str/bytes), given {value.dtype}"
                )
        elif isinstance(value, (list, tuple)):
            array = np.array(value, dtype=object)
            # A flat list for a model whose non-batch dims are all 1 (e.g. TEXT dims [1]) means one
            # element per batch row: shape it [N, 1, ...] rather than make every caller nest lists.
            if array.ndim == 1 and len(rule.shape) > 1 and all(d in (1, -1) for d in rule.shape[1:]):
                array = array.reshape((array.shape[0],) + (1,) * (len(rule.shape) - 1))
        elif isinstance(value, (str, bytes)):
            raise InvalidInputError(
                f"input `{rule.name}` of {self._where()} expects a list or array of str/bytes "
                f"(shape {_fmt(rule.shape)}), given a single {type(value).__name__}"
            )
        else:
            raise InvalidInputError(
                f"input `{rule.name}` of {self._where()} expects BYTES as list[str], list[bytes] or an "
                f"object array, given {type(value).__name__}"
            )
        # An index, not the element, marks a bad one: a None element must not read as "none found"
        # (it was sent as the text "None").
        bad = next(
            (i for i, v in enumerate(array.flat) if not isinstance(v, (str, bytes, np.bytes_, np.str_))), -1
        )
        if bad >= 0:
            raise InvalidInputError(
                f"input `{rule.name}` of {self._where()} expects str or bytes elements, "
                f"given an element of type {type(array.flat[bad]).__name__} at index {bad}"
            )
        for index, v in enumerate(array.flat):
            if isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:  # lone surrogates cannot be sent as UTF-8
                    raise InvalidInputError(
                        f"input `{rule.name}` of {self._where()}: element {index} is not valid "
                        f"UTF-8 text ({exc.reason} at character {exc.start})"
                    ) from None
        return array


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _q(name: object) -> str:
    """A caller-given name for a one-line message: as written when printable, else its repr."""
    return f"`{name}`" if isinstance(name, str) and name.isprintable() else f"`{name!r}`"


def _names(items: Mapping[str, Any]) -> str:
    return "{" + ", ".join(_q(n) for n in items) + "}"
