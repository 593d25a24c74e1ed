"""Generator: :class:`ModelConfig` dataclasses -> ``json_format`` dict -> ``model_config_pb2`` -> ``config.pbtxt``.

The path is the one PyTriton takes: dataclass -> ``json_format`` dict -> ``json_format.ParseDict`` into
the official protobuf schema -> ``text_format.MessageToString``. The schema, not this module, decides
what is legal text; protobuf errors are wrapped into one-line :class:`ConfigError` messages. Each
``_x_to_dict`` starts from the dataclass's ``extra`` (fields read but not modelled) and lays the
modelled keys over it, so a config read by :mod:`tritonkit.config.parser` and written again loses
nothing. :func:`save` writes a file atomically, after :func:`tritonkit.config.validator.validate`.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonkit.atomic import write_text
from tritonkit.config import model_config as mc
from tritonkit.config.dtypes import to_proto_dtype
from tritonkit.config.parser import proto_from_dict
from tritonkit.config.validator import validate
from tritonkit.errors import ConfigError

__all__ = ["save", "to_dict", "to_pbtxt", "to_proto"]

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


def _when_set(**fields: Any) -> Dict:
    """Only the fields that are set (True, or any value but None): unset ones are left out of the dict."""
    return {key: value for key, value in fields.items() if value is not None and value is not False}


def _fields(obj: Any, *names: str, **computed: Any) -> Dict:
    """``obj``'s ``extra`` with the plain fields ``names`` (proto and dataclass names agree) and the
    ``computed`` ones laid on top."""
    return _merge(obj.extra, {name: getattr(obj, name) for name in names} | computed)


def _tensor_to_dict(t: mc.TensorConfig) -> Dict:
    d: Dict = {"name": t.name, "dims": list(t.dims)}
    if t.data_type:
        d["data_type"] = to_proto_dtype(t.data_type)
    if t.reshape is not None:
        d["reshape"] = {"shape": list(t.reshape)}
    # Input-only / output-only fields are emitted only when set, so the schema rejects a misuse
    # (e.g. `optional` on an output) instead of this module dropping it.
    d |= _when_set(
        optional=t.optional,
        is_shape_tensor=t.is_shape_tensor,
        allow_ragged_batch=t.allow_ragged_batch,
        label_filename=t.label_filename,
    )
    return _merge(t.extra, d)


def _queue_to_dict(q: mc.QueuePolicy) -> Dict:
    return _fields(
        q, "max_queue_size", "default_timeout_microseconds", "allow_timeout_override", "timeout_action"
    )


def _batching_to_dict(b: mc.DynamicBatching) -> Dict:
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


def _group_to_dict(g: mc.InstanceGroup) -> Dict:
    d: Dict = {"kind": g.kind, "count": g.count, "gpus": list(g.gpus), "profile": list(g.profile)}
    if g.name is not None:
        d["name"] = g.name
    if g.passive:
        d["passive"] = True
    return _merge(g.extra, d)


def _accel_to_dict(a: mc.Accelerator) -> Dict:
    return _merge(a.extra, {"name": a.name, "parameters": dict(a.parameters)})


def _optimization_to_dict(o: mc.Optimization) -> Dict:
    d: Dict = {}
    if o.cuda is not None:
        c = o.cuda
        d["cuda"] = _fields(c, "graphs", "busy_wait_events", "output_copy_stream", "graph_spec")
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


def _warmup_input_to_dict(w: mc.WarmupInput) -> Dict:
    d: Dict = {"dims": list(w.dims)}
    if w.data_type:
        d["data_type"] = to_proto_dtype(w.data_type)
    # A oneof: emit only the chosen members (setting one to False would still select it).
    d |= _when_set(zero_data=w.zero_data, random_data=w.random_data, input_data_file=w.input_data_file)
    return _merge(w.extra, d)


def _warmup_to_dict(w: mc.ModelWarmup) -> Dict:
    inputs = {k: _warmup_input_to_dict(v) for k, v in w.inputs.items()}
    return _fields(w, "name", "batch_size", "count", inputs=inputs)


def _policy_to_dict(p: mc.VersionPolicy) -> Dict:
    if p.kind == "latest":
        return {"latest": {"num_versions": p.num_versions}}
    if p.kind == "all":
        return {"all": {}}
    if p.kind == "specific":
        return {"specific": {"versions": list(p.versions)}}
    raise ConfigError(f"`version_policy.kind` is {p.kind!r}; expected one of latest, all, specific")


def _step_to_dict(s: mc.EnsembleStep) -> Dict:
    return _fields(
        s, "model_name", "model_version", input_map=dict(s.input_map), output_map=dict(s.output_map)
    )


def to_dict(cfg: mc.ModelConfig) -> Dict:
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
    return _merge(cfg.extra, {**d, **_execution_to_dict(cfg)})


def _execution_to_dict(cfg: mc.ModelConfig) -> Dict:
    """The fields of ``cfg`` about how it executes: optimization, files, parameters, warmup, cache."""
    d: Dict = {}
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
    return d


def to_proto(cfg: mc.ModelConfig) -> model_config_pb2.ModelConfig:
    """``model_config_pb2.ModelConfig`` for ``cfg``; ConfigError when the schema rejects a value."""
    return proto_from_dict(to_dict(cfg))


def to_pbtxt(cfg: mc.ModelConfig) -> str:
    """``config.pbtxt`` text: the schema's own printer, short ``dims: [1, 2]`` lists."""
    return str(text_format.MessageToString(to_proto(cfg), use_short_repeated_primitives=True))


def save(cfg: mc.ModelConfig, path: str | os.PathLike[str], *, check: bool = True) -> Path:
    """Write ``cfg`` as ``config.pbtxt`` atomically (:mod:`tritonkit.atomic`: temp file, fsync, rename).

    With ``check`` (default) the config is validated first, so an invalid config writes nothing; on
    any failure the old file (if any) is left as it was and no temp file remains. Inside a model
    repository, :class:`tritonkit.repository.ModelRepository` is the one caller.
    """
    if check:
        validate(cfg)
    return write_text(path, to_pbtxt(cfg), error=ConfigError)
