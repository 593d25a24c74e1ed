"""Conversion between :class:`ModelConfig` dataclasses, ``model_config_pb2.ModelConfig`` and ``config.pbtxt``.

The path is the one PyTriton takes: dataclass -> ``json_format`` dict -> ``json_format.ParseDict`` into
the official protobuf schema -> ``text_format.MessageToString``; back through ``text_format.Parse`` and
``json_format.MessageToDict(preserving_proto_field_name=True)``. The schema, not this module, decides
what is legal text; protobuf errors are wrapped into one-line :class:`ConfigError` messages.

Reading is lossless: each ``_x_from_dict`` pops the keys it models and leaves the rest in the
dataclass's ``extra``; each ``_x_to_dict`` starts from ``extra`` and lays the modelled keys over it.
One value is read as what it means rather than as written: an unset ``instance_group.count`` (0)
becomes 1, and is then written explicitly.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from tritonkit.config.dtypes import from_proto_dtype, to_proto_dtype
from tritonkit.config.model_config import (
    Accelerator,
    CudaOptimization,
    DynamicBatching,
    EnsembleStep,
    ExecutionAccelerators,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    Optimization,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from tritonkit.errors import ConfigError

__all__ = [
    "config_from_dict",
    "config_from_pbtxt",
    "config_from_proto",
    "config_to_dict",
    "config_to_pbtxt",
    "config_to_proto",
]

Dict = dict[str, Any]


def _merge(base: Dict, over: Dict) -> Dict:
    """Deep copy of ``base`` with ``over`` laid on top (dicts merge, anything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _ints(values: Any) -> list[int]:
    # MessageToDict writes 64-bit integers as strings (JSON mapping rules).
    return [int(v) for v in values or []]


# --- tensors -------------------------------------------------------------------------------------
def _tensor_to_dict(t: TensorConfig) -> Dict:
    d: Dict = {"name": t.name, "dims": list(t.dims)}
    if t.data_type:
        d["data_type"] = to_proto_dtype(t.data_type)
    if t.reshape is not None:
        d["reshape"] = {"shape": list(t.reshape)}
    # Input-only / output-only fields are emitted only when set, so the schema rejects a misuse
    # (e.g. `optional` on an output) instead of this module dropping it.
    if t.optional:
        d["optional"] = True
    if t.is_shape_tensor:
        d["is_shape_tensor"] = True
    if t.allow_ragged_batch:
        d["allow_ragged_batch"] = True
    if t.label_filename is not None:
        d["label_filename"] = t.label_filename
    return _merge(t.extra, d)


def _tensor_from_dict(d: Dict) -> TensorConfig:
    d = dict(d)
    reshape = d.pop("reshape", None)
    label = d.pop("label_filename", None)
    data_type = d.pop("data_type", None)
    return TensorConfig(
        name=d.pop("name", ""),
        data_type=from_proto_dtype(data_type) if data_type else "",
        dims=_ints(d.pop("dims", [])),
        reshape=None if reshape is None else _ints(reshape.get("shape", [])),
        optional=bool(d.pop("optional", False)),
        is_shape_tensor=bool(d.pop("is_shape_tensor", False)),
        allow_ragged_batch=bool(d.pop("allow_ragged_batch", False)),
        label_filename=label,
        extra=d,
    )


# --- dynamic batching ----------------------------------------------------------------------------
def _queue_to_dict(q: QueuePolicy) -> Dict:
    return _merge(
        q.extra,
        {
            "max_queue_size": q.max_queue_size,
            "default_timeout_microseconds": q.default_timeout_microseconds,
            "allow_timeout_override": q.allow_timeout_override,
            "timeout_action": q.timeout_action,
        },
    )


def _queue_from_dict(d: Dict) -> QueuePolicy:
    d = dict(d)
    return QueuePolicy(
        max_queue_size=int(d.pop("max_queue_size", 0)),
        default_timeout_microseconds=int(d.pop("default_timeout_microseconds", 0)),
        allow_timeout_override=bool(d.pop("allow_timeout_override", False)),
        timeout_action=str(d.pop("timeout_action", "REJECT")),
        extra=d,
    )


def _batching_to_dict(b: DynamicBatching) -> Dict:
    d: Dict = {
        "max_queue_delay_microseconds": b.max_queue_delay_microseconds,
        "preferred_batch_size": list(b.preferred_batch_size),
        "preserve_ordering": b.preserve_ordering,
        "priority_levels": b.priority_levels,
        "default_priority_level": b.default_priority_level,
    }
    if b.default_queue_policy is not None:
        d["default_queue_policy"] = _queue_to_dict(b.default_queue_policy)
    if b.priority_queue_policy:
        d["priority_queue_policy"] = {str(k): _queue_to_dict(v) for k, v in b.priority_queue_policy.items()}
    return _merge(b.extra, d)


def _batching_from_dict(d: Dict) -> DynamicBatching:
    d = dict(d)
    default_policy = d.pop("default_queue_policy", None)
    return DynamicBatching(
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


# --- instance groups -----------------------------------------------------------------------------
def _group_to_dict(g: InstanceGroup) -> Dict:
    d: Dict = {"kind": g.kind, "count": g.count, "gpus": list(g.gpus), "profile": list(g.profile)}
    if g.name is not None:
        d["name"] = g.name
    if g.passive:
        d["passive"] = True
    return _merge(g.extra, d)


def _group_from_dict(d: Dict) -> InstanceGroup:
    d = dict(d)
    return InstanceGroup(
        kind=str(d.pop("kind", "KIND_AUTO")),
        # count 0 (unset) means one instance to Triton; read it as what it means.
        count=int(d.pop("count", 0)) or 1,
        gpus=_ints(d.pop("gpus", [])),
        profile=[str(p) for p in d.pop("profile", [])],
        name=d.pop("name", None),
        passive=bool(d.pop("passive", False)),
        extra=d,
    )


# --- optimization --------------------------------------------------------------------------------
def _accel_to_dict(a: Accelerator) -> Dict:
    return _merge(a.extra, {"name": a.name, "parameters": dict(a.parameters)})


def _accel_from_dict(d: Dict) -> Accelerator:
    d = dict(d)
    return Accelerator(
        name=d.pop("name", ""),
        parameters={str(k): str(v) for k, v in d.pop("parameters", {}).items()},
        extra=d,
    )


def _optimization_to_dict(o: Optimization) -> Dict:
    d: Dict = {}
    if o.cuda is not None:
        c = o.cuda
        d["cuda"] = _merge(
            c.extra,
            {
                "graphs": c.graphs,
                "busy_wait_events": c.busy_wait_events,
                "output_copy_stream": c.output_copy_stream,
                "graph_spec": copy.deepcopy(c.graph_spec),
            },
        )
    if o.execution_accelerators is not None:
        e = o.execution_accelerators
        d["execution_accelerators"] = _merge(
            e.extra,
            {
                "gpu_execution_accelerator": [_accel_to_dict(a) for a in e.gpu_execution_accelerator],
                "cpu_execution_accelerator": [_accel_to_dict(a) for a in e.cpu_execution_accelerator],
            },
        )
    if o.input_pinned_memory is not None:
        d["input_pinned_memory"] = {"enable": o.input_pinned_memory}
    if o.output_pinned_memory is not None:
        d["output_pinned_memory"] = {"enable": o.output_pinned_memory}
    if o.graph_level is not None:
        d["graph"] = {"level": o.graph_level}
    return _merge(o.extra, d)


def _optimization_from_dict(d: Dict) -> Optimization:
    d = dict(d)
    cuda = execution = None
    if (c := d.pop("cuda", None)) is not None:
        c = dict(c)
        cuda = CudaOptimization(
            graphs=bool(c.pop("graphs", False)),
            busy_wait_events=bool(c.pop("busy_wait_events", False)),
            output_copy_stream=bool(c.pop("output_copy_stream", False)),
            graph_spec=list(c.pop("graph_spec", [])),
            extra=c,
        )
    if (e := d.pop("execution_accelerators", None)) is not None:
        e = dict(e)
        execution = ExecutionAccelerators(
            gpu_execution_accelerator=[_accel_from_dict(a) for a in e.pop("gpu_execution_accelerator", [])],
            cpu_execution_accelerator=[_accel_from_dict(a) for a in e.pop("cpu_execution_accelerator", [])],
            extra=e,
        )
    in_pinned = d.pop("input_pinned_memory", None)
    out_pinned = d.pop("output_pinned_memory", None)
    graph = d.pop("graph", None)
    return Optimization(
        cuda=cuda,
        execution_accelerators=execution,
        input_pinned_memory=None if in_pinned is None else bool(in_pinned.get("enable", False)),
        output_pinned_memory=None if out_pinned is None else bool(out_pinned.get("enable", False)),
        graph_level=None if graph is None else int(graph.get("level", 0)),
        extra=d,
    )


# --- warm-up, version policy, ensemble -----------------------------------------------------------
def _warmup_input_to_dict(w: WarmupInput) -> Dict:
    d: Dict = {"dims": list(w.dims)}
    if w.data_type:
        d["data_type"] = to_proto_dtype(w.data_type)
    # A oneof: emit only the chosen members (setting one to False would still select it).
    if w.zero_data:
        d["zero_data"] = True
    if w.random_data:
        d["random_data"] = True
    if w.input_data_file is not None:
        d["input_data_file"] = w.input_data_file
    return _merge(w.extra, d)


def _warmup_input_from_dict(d: Dict) -> WarmupInput:
    d = dict(d)
    data_type = d.pop("data_type", None)
    return WarmupInput(
        data_type=from_proto_dtype(data_type) if data_type else "",
        dims=_ints(d.pop("dims", [])),
        zero_data=bool(d.pop("zero_data", False)),
        random_data=bool(d.pop("random_data", False)),
        input_data_file=d.pop("input_data_file", None),
        extra=d,
    )


def _warmup_to_dict(w: ModelWarmup) -> Dict:
    return _merge(
        w.extra,
        {
            "name": w.name,
            "batch_size": w.batch_size,
            "inputs": {k: _warmup_input_to_dict(v) for k, v in w.inputs.items()},
            "count": w.count,
        },
    )


def _warmup_from_dict(d: Dict) -> ModelWarmup:
    d = dict(d)
    return ModelWarmup(
        name=d.pop("name", ""),
        batch_size=int(d.pop("batch_size", 0)),
        inputs={k: _warmup_input_from_dict(v) for k, v in d.pop("inputs", {}).items()},
        count=int(d.pop("count", 0)),
        extra=d,
    )


def _policy_to_dict(p: VersionPolicy) -> Dict:
    if p.kind == "latest":
        return {"latest": {"num_versions": p.num_versions}}
    if p.kind == "all":
        return {"all": {}}
    if p.kind == "specific":
        return {"specific": {"versions": list(p.versions)}}
    raise ConfigError(f"`version_policy.kind` is {p.kind!r}; expected one of latest, all, specific")


def _policy_from_dict(d: Dict) -> VersionPolicy:
    if "latest" in d:
        return VersionPolicy.latest(int(d["latest"].get("num_versions", 0)))
    if "specific" in d:
        return VersionPolicy.specific(_ints(d["specific"].get("versions", [])))
    if "all" in d:
        return VersionPolicy.all()
    # `version_policy {}` with no choice: Triton applies its default, latest 1.
    return VersionPolicy.latest(1)


def _step_to_dict(s: EnsembleStep) -> Dict:
    return _merge(
        s.extra,
        {
            "model_name": s.model_name,
            "model_version": s.model_version,
            "input_map": dict(s.input_map),
            "output_map": dict(s.output_map),
        },
    )


def _step_from_dict(d: Dict) -> EnsembleStep:
    d = dict(d)
    return EnsembleStep(
        model_name=d.pop("model_name", ""),
        model_version=int(d.pop("model_version", 0)),
        input_map=dict(d.pop("input_map", {})),
        output_map=dict(d.pop("output_map", {})),
        extra=d,
    )


# --- the whole config ----------------------------------------------------------------------------
def config_to_dict(cfg: ModelConfig) -> Dict:
    """``json_format`` dict (proto field names) of ``cfg``; unmodelled ``extra`` fields included."""
    d: Dict = {"name": cfg.name, "max_batch_size": cfg.max_batch_size}
    if cfg.platform is not None:
        d["platform"] = cfg.platform
    if cfg.backend is not None:
        d["backend"] = cfg.backend
    if cfg.runtime is not None:
        d["runtime"] = cfg.runtime
    if cfg.version_policy is not None:
        d["version_policy"] = _policy_to_dict(cfg.version_policy)
    d["input"] = [_tensor_to_dict(t) for t in cfg.inputs]
    d["output"] = [_tensor_to_dict(t) for t in cfg.outputs]
    if cfg.dynamic_batching is not None:
        d["dynamic_batching"] = _batching_to_dict(cfg.dynamic_batching)
    if cfg.ensemble_steps:
        d["ensemble_scheduling"] = {"step": [_step_to_dict(s) for s in cfg.ensemble_steps]}
    if cfg.instance_groups:
        d["instance_group"] = [_group_to_dict(g) for g in cfg.instance_groups]
    if cfg.optimization is not None:
        d["optimization"] = _optimization_to_dict(cfg.optimization)
    if cfg.default_model_filename is not None:
        d["default_model_filename"] = cfg.default_model_filename
    if cfg.cc_model_filenames:
        d["cc_model_filenames"] = dict(cfg.cc_model_filenames)
    if cfg.parameters:
        d["parameters"] = {k: {"string_value": v} for k, v in cfg.parameters.items()}
    if cfg.model_warmup:
        d["model_warmup"] = [_warmup_to_dict(w) for w in cfg.model_warmup]
    if cfg.response_cache:
        d["response_cache"] = {"enable": True}
    return _merge(cfg.extra, d)


def config_from_dict(data: Dict) -> ModelConfig:
    """Dataclasses from a ``json_format`` dict; the dict is checked against the schema first."""
    pb = model_config_pb2.ModelConfig()
    _parse_dict(data, pb)
    return config_from_proto(pb)


def _parse_dict(data: Dict, pb: Any) -> None:
    try:
        json_format.ParseDict(data, pb)
    except json_format.ParseError as exc:
        # First line only: protobuf appends the list of available fields on the next ones.
        first = str(exc).splitlines()[0].rstrip(".")
        raise ConfigError(f"model config does not fit model_config.proto: {first}") from None


def _from_message_dict(d: Dict) -> ModelConfig:
    d = dict(d)
    extra: Dict = {}
    ensemble = d.pop("ensemble_scheduling", None)
    steps: list[EnsembleStep] = []
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
    cfg = ModelConfig(
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
    cfg.extra = _merge(d, extra)
    return cfg


def config_to_proto(cfg: ModelConfig) -> Any:
    """``model_config_pb2.ModelConfig`` for ``cfg``; ConfigError when the schema rejects a value."""
    pb = model_config_pb2.ModelConfig()
    _parse_dict(config_to_dict(cfg), pb)
    return pb


def config_from_proto(pb: Any) -> ModelConfig:
    if not isinstance(pb, model_config_pb2.ModelConfig):
        raise ConfigError(
            f"expected a tritonclient.grpc.model_config_pb2.ModelConfig, given {type(pb).__name__}"
        )
    return _from_message_dict(json_format.MessageToDict(pb, preserving_proto_field_name=True))


def config_to_pbtxt(cfg: ModelConfig) -> str:
    """``config.pbtxt`` text: the schema's own printer, short ``dims: [1, 2]`` lists."""
    return str(text_format.MessageToString(config_to_proto(cfg), use_short_repeated_primitives=True))


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


def config_from_pbtxt(text: str) -> ModelConfig:
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
    return config_from_proto(pb)
