"""Parser: ``config.pbtxt`` / ``model_config_pb2.ModelConfig`` / ``json_format`` dict -> dataclasses.

Text goes through ``text_format.Parse`` into the official protobuf schema, then
``json_format.MessageToDict(preserving_proto_field_name=True)`` into the dataclasses of
:mod:`tritonkit.config.model_config`. Reading is lossless: each ``_x_from_dict`` pops the keys it
models and leaves the rest in the dataclass's ``extra``. One value is read as what it means rather
than as written: an unset ``instance_group.count`` (0) becomes 1. Protobuf errors become one-line
:class:`ConfigError` messages (with line and column for text).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from tritonkit.config import model_config as mc
from tritonkit.config.dtypes import from_proto_dtype
from tritonkit.errors import ConfigError, read_text

__all__ = ["from_dict", "from_pbtxt", "from_proto", "load", "proto_from_dict"]

Dict = dict[str, Any]


def _ints(values: Any) -> list[int]:
    # MessageToDict writes 64-bit integers as strings (JSON mapping rules).
    return [int(v) for v in values or []]


def _pop_dtype(d: Dict) -> str:
    data_type = d.pop("data_type", None)
    return from_proto_dtype(data_type) if data_type else ""


def _tensor_from_dict(d: Dict) -> mc.TensorConfig:
    d = dict(d)
    reshape = d.pop("reshape", None)
    label = d.pop("label_filename", None)
    return mc.TensorConfig(
        name=d.pop("name", ""),
        data_type=_pop_dtype(d),
        dims=_ints(d.pop("dims", [])),
        reshape=None if reshape is None else _ints(reshape.get("shape", [])),
        optional=bool(d.pop("optional", False)),
        is_shape_tensor=bool(d.pop("is_shape_tensor", False)),
        allow_ragged_batch=bool(d.pop("allow_ragged_batch", False)),
        label_filename=label,
        extra=d,
    )


def _queue_from_dict(d: Dict) -> mc.QueuePolicy:
    d = dict(d)
    return mc.QueuePolicy(
        max_queue_size=int(d.pop("max_queue_size", 0)),
        default_timeout_microseconds=int(d.pop("default_timeout_microseconds", 0)),
        allow_timeout_override=bool(d.pop("allow_timeout_override", False)),
        timeout_action=str(d.pop("timeout_action", "REJECT")),
        extra=d,
    )


def _batching_from_dict(d: Dict) -> mc.DynamicBatching:
    d = dict(d)
    default_policy = d.pop("default_queue_policy", None)
    return mc.DynamicBatching(
        max_queue_delay_microseconds=int(d.pop("max_queue_delay_microseconds", 0)),
        preferred_batch_size=_ints(d.pop("preferred_batch_size", [])),
        preserve_ordering=bool(d.pop("preserve_ordering", False)),
        priority_levels=int(d.pop("priority_levels", 0)),
        default_priority_level=int(d.pop("default_priority_level", 0)),
        default_queue_policy=None if default_policy is None else _queue_from_dict(default_policy),
        priority_queue_policy={
            int(k): _queue_from_dict(v) for k, v in d.pop("priority_queue_policy", {}).items()
        },
        extra=d,
    )


def _group_from_dict(d: Dict) -> mc.InstanceGroup:
    d = dict(d)
    return mc.InstanceGroup(
        kind=str(d.pop("kind", "KIND_AUTO")),
        # count 0 (unset) means one instance to Triton; read it as what it means.
        count=int(d.pop("count", 0)) or 1,
        gpus=_ints(d.pop("gpus", [])),
        profile=[str(p) for p in d.pop("profile", [])],
        name=d.pop("name", None),
        passive=bool(d.pop("passive", False)),
        extra=d,
    )


def _accel_from_dict(d: Dict) -> mc.Accelerator:
    d = dict(d)
    return mc.Accelerator(
        name=d.pop("name", ""),
        parameters={str(k): str(v) for k, v in d.pop("parameters", {}).items()},
        extra=d,
    )


def _optimization_from_dict(d: Dict) -> mc.Optimization:
    d = dict(d)
    cuda = execution = None
    if (c := d.pop("cuda", None)) is not None:
        c = dict(c)
        cuda = mc.CudaOptimization(
            graphs=bool(c.pop("graphs", False)),
            busy_wait_events=bool(c.pop("busy_wait_events", False)),
            output_copy_stream=bool(c.pop("output_copy_stream", False)),
            graph_spec=list(c.pop("graph_spec", [])),
            extra=c,
        )
    if (e := d.pop("execution_accelerators", None)) is not None:
        e = dict(e)
        execution = mc.ExecutionAccelerators(
            gpu_execution_accelerator=[_accel_from_dict(a) for a in e.pop("gpu_execution_accelerator", [])],
            cpu_execution_accelerator=[_accel_from_dict(a) for a in e.pop("cpu_execution_accelerator", [])],
            extra=e,
        )
    in_pinned = d.pop("input_pinned_memory", None)
    out_pinned = d.pop("output_pinned_memory", None)
    graph = d.pop("graph", None)
    return mc.Optimization(
        cuda=cuda,
        execution_accelerators=execution,
        input_pinned_memory=None if in_pinned is None else bool(in_pinned.get("enable", False)),
        output_pinned_memory=None if out_pinned is None else bool(out_pinned.get("enable", False)),
        graph_level=None if graph is None else int(graph.get("level", 0)),
        extra=d,
    )


def _warmup_input_from_dict(d: Dict) -> mc.WarmupInput:
    d = dict(d)
    return mc.WarmupInput(
        data_type=_pop_dtype(d),
        dims=_ints(d.pop("dims", [])),
        zero_data=bool(d.pop("zero_data", False)),
        random_data=bool(d.pop("random_data", False)),
        input_data_file=d.pop("input_data_file", None),
        extra=d,
    )


def _warmup_from_dict(d: Dict) -> mc.ModelWarmup:
    d = dict(d)
    return mc.ModelWarmup(
        name=d.pop("name", ""),
        batch_size=int(d.pop("batch_size", 0)),
        inputs={k: _warmup_input_from_dict(v) for k, v in d.pop("inputs", {}).items()},
        count=int(d.pop("count", 0)),
        extra=d,
    )


def _policy_from_dict(d: Dict) -> mc.VersionPolicy:
    if "latest" in d:
        return mc.VersionPolicy.latest(int(d["latest"].get("num_versions", 0)))
    if "specific" in d:
        return mc.VersionPolicy.specific(_ints(d["specific"].get("versions", [])))
    if "all" in d:
        return mc.VersionPolicy.all()
    # `version_policy {}` with no choice: Triton applies its default, latest 1.
    return mc.VersionPolicy.latest(1)


def _step_from_dict(d: Dict) -> mc.EnsembleStep:
    d = dict(d)
    return mc.EnsembleStep(
        model_name=d.pop("model_name", ""),
        model_version=int(d.pop("model_version", 0)),
        input_map=dict(d.pop("input_map", {})),
        output_map=dict(d.pop("output_map", {})),
        extra=d,
    )


def proto_from_dict(data: Dict) -> model_config_pb2.ModelConfig:
    """``json_format`` dict -> ``model_config_pb2.ModelConfig``; ConfigError when the schema rejects it."""
    pb = model_config_pb2.ModelConfig()
    try:
        json_format.ParseDict(data, pb)
    except json_format.ParseError as exc:
        # First line only: protobuf appends the list of available fields on the next ones.
        first = str(exc).splitlines()[0].rstrip(".")
        raise ConfigError(f"model config does not fit model_config.proto: {first}") from None
    return pb


def from_dict(data: Dict) -> mc.ModelConfig:
    """Dataclasses from a ``json_format`` dict; the dict is checked against the schema first."""
    return from_proto(proto_from_dict(data))


def _from_message_dict(d: Dict) -> mc.ModelConfig:
    d = dict(d)
    extra: Dict = {}
    ensemble = d.pop("ensemble_scheduling", None)
    steps: list[mc.EnsembleStep] = []
    if ensemble is not None:
        ensemble = dict(ensemble)
        steps = [_step_from_dict(s) for s in ensemble.pop("step", [])]
        if ensemble or not steps:  # keep unmodelled keys, or the bare presence of the block
            extra["ensemble_scheduling"] = ensemble
    cache = d.pop("response_cache", None)
    response_cache = bool(cache.get("enable", False)) if cache is not None else False
    if cache is not None and not response_cache:
        extra["response_cache"] = {k: v for k, v in cache.items() if k != "enable"}
    policy = d.pop("version_policy", None)
    batching = d.pop("dynamic_batching", None)
    optimization = d.pop("optimization", None)
    cfg = mc.ModelConfig(
        name=d.pop("name", ""),
        backend=d.pop("backend", None),
        platform=d.pop("platform", None),
        max_batch_size=int(d.pop("max_batch_size", 0)),
        inputs=[_tensor_from_dict(t) for t in d.pop("input", [])],
        outputs=[_tensor_from_dict(t) for t in d.pop("output", [])],
        dynamic_batching=None if batching is None else _batching_from_dict(batching),
        instance_groups=[_group_from_dict(g) for g in d.pop("instance_group", [])],
        optimization=None if optimization is None else _optimization_from_dict(optimization),
        model_warmup=[_warmup_from_dict(w) for w in d.pop("model_warmup", [])],
        version_policy=None if policy is None else _policy_from_dict(policy),
        parameters={k: str(v.get("string_value", "")) for k, v in d.pop("parameters", {}).items()},
        ensemble_steps=steps,
        cc_model_filenames=dict(d.pop("cc_model_filenames", {})),
        default_model_filename=d.pop("default_model_filename", None),
        response_cache=response_cache,
        runtime=d.pop("runtime", None),
    )
    cfg.extra = {**d, **extra}  # disjoint: `extra` holds only keys popped from `d`
    return cfg


def from_proto(pb: Any) -> mc.ModelConfig:
    if not isinstance(pb, model_config_pb2.ModelConfig):
        raise ConfigError(
            f"expected a tritonclient.grpc.model_config_pb2.ModelConfig, given {type(pb).__name__}"
        )
    return _from_message_dict(json_format.MessageToDict(pb, preserving_proto_field_name=True))


def _enum_hint(message: str) -> str:
    """For a bad enum value, the allowed names (protobuf's message names only the enum type)."""
    match = re.search(r'Enum type "([\w.]+)" has no value', message)
    if match is None:
        return ""
    try:
        enum = model_config_pb2.DESCRIPTOR.pool.FindEnumTypeByName(match.group(1))
    except KeyError:
        return ""
    return "; expected one of " + ", ".join(v.name for v in enum.values)


def from_pbtxt(text: str) -> mc.ModelConfig:
    pb = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, pb)
    except text_format.ParseError as exc:
        message = str(exc)
        line, column = exc.GetLine(), exc.GetColumn()
        prefix = f"{line}:{column} : "
        if message.startswith(prefix):
            message = message[len(prefix) :]
        where = f" at line {line}, column {column}" if line is not None else ""
        raise ConfigError(
            f"invalid config.pbtxt{where}: {message.rstrip('.')}{_enum_hint(message)}"
        ) from None
    return from_proto(pb)


def load(path: str | os.PathLike[str]) -> mc.ModelConfig:
    """Read and parse a ``config.pbtxt`` file (or a model directory containing one)."""
    target = Path(path)
    if target.is_dir():
        target = target / "config.pbtxt"
    text = read_text(
        target,
        ConfigError,
        missing=f"model config not found: {str(target)!r}; expected a config.pbtxt file",
        unreadable=f"cannot read model config {str(target)!r}",
    )
    try:
        return from_pbtxt(text)
    except ConfigError as exc:
        raise ConfigError(f"{target}: {exc}") from None
