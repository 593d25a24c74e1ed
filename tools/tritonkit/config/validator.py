"""Validator: the rules a :class:`ModelConfig` must keep, checked before a config is written or served.

Each rule adds one line to the list :func:`problems` returns (:func:`validate` raises them as one
:class:`ConfigError`); the line names the field in
backticks (proto field names, e.g. ```input[0].dims```) and says what was expected and what was given.
The rules mirror what Triton itself refuses at load time (or silently mis-serves), so a config that
passes here is worth starting a server for.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from tritonkit.config.dtypes import TRITON_DTYPES, is_dtype, normalize_dtype
from tritonkit.config.model_config import (
    Accelerator,
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
)
from tritonkit.errors import ConfigError

__all__ = ["INSTANCE_KINDS", "PLATFORM_BACKENDS", "TIMEOUT_ACTIONS", "problems", "validate"]

#: Triton's platforms and the backend each one implies (ensemble has no backend).
PLATFORM_BACKENDS: dict[str, str | None] = {
    "tensorrt_plan": "tensorrt",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
    "ensemble": None,
}
INSTANCE_KINDS: tuple[str, ...] = ("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")
TIMEOUT_ACTIONS: tuple[str, ...] = ("REJECT", "DELAY")
_CC_KEY = re.compile(r"^\d+\.\d+$")
_SCHEDULERS = ("sequence_batching",)  # scheduling choices kept in `extra`
# Top-level proto fields ModelConfig models ("ensemble_scheduling" and "response_cache" may carry
# unmodelled leftovers in `extra`, so they are not listed).
_MODELLED = frozenset(
    {
        "name",
        "platform",
        "backend",
        "runtime",
        "version_policy",
        "max_batch_size",
        "input",
        "output",
        "optimization",
        "dynamic_batching",
        "instance_group",
        "default_model_filename",
        "cc_model_filenames",
        "parameters",
        "model_warmup",
    }
)


def _dups(values: Iterable[object]) -> list[object]:
    return [v for v, n in Counter(values).items() if n > 1]


def _fmt(values: Iterable[object]) -> str:
    return ", ".join(str(v) for v in values) or "none"


def problems(cfg: ModelConfig) -> list[str]:
    """Every rule ``cfg`` breaks, one line each; an empty list means valid."""
    out: list[str] = []
    if not cfg.name or not cfg.name.strip():
        out.append("`name` is empty; expected a model name")
    if cfg.max_batch_size < 0:
        out.append(f"`max_batch_size` is {cfg.max_batch_size}; expected 0 (no batching) or >= 1")
    is_ensemble = _check_platform(cfg, out)
    _check_tensors(cfg, out)
    if cfg.dynamic_batching is not None:
        _check_batching(cfg, cfg.dynamic_batching, is_ensemble, out)
    for i, group in enumerate(cfg.instance_groups):
        _check_group(cfg, i, group, out)
    for i, warmup in enumerate(cfg.model_warmup):
        _check_warmup(cfg, i, warmup, out)
    if cfg.version_policy is not None:
        _check_version_policy(cfg.version_policy, out)
    if is_ensemble:
        _check_ensemble(cfg, out)
    elif cfg.ensemble_steps:
        out.append(
            f"`ensemble_scheduling` has {len(cfg.ensemble_steps)} step(s) but `platform` is "
            f"{cfg.platform!r}; expected platform 'ensemble' for a model with ensemble steps"
        )
    if cfg.optimization is not None and cfg.optimization.execution_accelerators is not None:
        accel = cfg.optimization.execution_accelerators
        _check_accelerators("gpu_execution_accelerator", accel.gpu_execution_accelerator, out)
        _check_accelerators("cpu_execution_accelerator", accel.cpu_execution_accelerator, out)
    _check_files_and_keys(cfg, out)
    return out


def _check_files_and_keys(cfg: ModelConfig, out: list[str]) -> None:
    """Model file names, parameter keys, and ``extra`` keys that a modelled field would override."""
    for key, filename in cfg.cc_model_filenames.items():
        if not _CC_KEY.match(key):
            out.append(f"`cc_model_filenames` key {key!r} is not a compute capability; expected e.g. '7.5'")
        if not filename:
            out.append(f"`cc_model_filenames[{key}]` is empty; expected a model file name")
    if cfg.default_model_filename is not None and not cfg.default_model_filename:
        out.append("`default_model_filename` is empty; expected a file name or None")
    if any(not key for key in cfg.parameters):
        out.append("`parameters` has an empty key; expected non-empty parameter names")
    for key in sorted(set(cfg.extra) & _MODELLED):
        # The modelled value would silently win over (or merge into) the extra one.
        out.append(f"`extra` has {key!r}, a field ModelConfig models; expected it set through its attribute")


def validate(cfg: ModelConfig) -> ModelConfig:
    """Raise ConfigError listing every problem (joined by "; "); return ``cfg`` when valid."""
    found = problems(cfg)
    if found:
        subject = f"model `{cfg.name}`" if cfg.name else "model config"
        raise ConfigError(f"{subject}: " + "; ".join(found))
    return cfg


def _check_platform(cfg: ModelConfig, out: list[str]) -> bool:
    platform, backend = cfg.platform or None, cfg.backend or None
    if platform is None and backend is None:
        out.append(
            "neither `platform` nor `backend` is set; expected a backend (e.g. 'python', 'onnxruntime', "
            "'tensorrt') or a platform (e.g. 'tensorrt_plan', 'onnxruntime_onnx', 'ensemble')"
        )
        return False
    if platform is None:
        return False
    if platform not in PLATFORM_BACKENDS:
        out.append(f"`platform` is {platform!r}; expected one of {_fmt(PLATFORM_BACKENDS)}")
        return False
    implied = PLATFORM_BACKENDS[platform]
    if backend is not None and backend != implied:
        expected = "no `backend`" if implied is None else f"`backend` {implied!r}"
        out.append(f"`platform` {platform!r} does not match `backend` {backend!r}; expected {expected}")
    return platform == "ensemble"


def _check_tensors(cfg: ModelConfig, out: list[str]) -> None:
    # Every model needs both; an ensemble declares its own inputs/outputs too.
    if not cfg.inputs:
        out.append("`input` is empty; expected at least one input tensor")
    if not cfg.outputs:
        out.append("`output` is empty; expected at least one output tensor")
    for kind, tensors in (("input", cfg.inputs), ("output", cfg.outputs)):
        for name in _dups(t.name for t in tensors):
            out.append(f"`{kind}` name {name!r} appears more than once; expected unique {kind} names")
        for i, tensor in enumerate(tensors):
            _check_tensor(cfg, f"{kind}[{i}]", kind, tensor, out)


def _check_dims(path: str, dims: list[int], out: list[str], *, allow_variable: bool = True) -> None:
    allowed = "-1 or >= 1" if allow_variable else ">= 1"
    bad = [d for d in dims if not (d >= 1 or (allow_variable and d == -1))]
    if bad:
        out.append(f"`{path}` {dims} has {_fmt(bad)}; expected every dim {allowed}")


def _check_tensor(cfg: ModelConfig, path: str, kind: str, t: TensorConfig, out: list[str]) -> None:
    label = f"{kind} {t.name!r}"
    if not t.name:
        out.append(f"`{path}.name` is empty; expected a tensor name")
    if not t.data_type:
        out.append(f"`{path}.data_type` is not set ({label}); expected one of {_fmt(TRITON_DTYPES)}")
    elif not is_dtype(t.data_type):
        out.append(
            f"`{path}.data_type` {t.data_type!r} is unknown ({label}); expected one of {_fmt(TRITON_DTYPES)}"
        )
    if not t.dims:
        # Triton refuses a tensor without dims. With batching the batch dim is implicit, so a scalar
        # per batch element is dims [1]; without batching dims carry the full shape.
        hint = "[1] for one value per batch element" if cfg.max_batch_size > 0 else "the full shape"
        out.append(f"`{path}.dims` is empty ({label}); expected {hint}")
    _check_dims(f"{path}.dims", t.dims, out)
    if t.reshape is not None:
        _check_dims(f"{path}.reshape.shape", t.reshape, out)
        fixed = all(d >= 1 for d in [*t.dims, *t.reshape])  # counts only compare when all known
        if fixed and _prod(t.dims) != _prod(t.reshape):
            out.append(
                f"`{path}.reshape.shape` {t.reshape} holds {_prod(t.reshape)} elements but `{path}.dims` "
                f"{t.dims} holds {_prod(t.dims)} ({label}); expected the same element count"
            )
    if kind == "output":
        for field, value in (("optional", t.optional), ("allow_ragged_batch", t.allow_ragged_batch)):
            if value:
                out.append(f"`{path}.{field}` is set ({label}); expected it on inputs only")
    elif t.label_filename is not None:
        out.append(f"`{path}.label_filename` is set ({label}); expected it on outputs only")


def _prod(dims: list[int]) -> int:
    result = 1
    for d in dims:
        result *= d
    return result


def _check_batching(cfg: ModelConfig, b: DynamicBatching, is_ensemble: bool, out: list[str]) -> None:
    mbs = cfg.max_batch_size
    if is_ensemble:
        out.append("`dynamic_batching` is set on an ensemble; expected the composing models to batch")
    if mbs <= 0:
        out.append(
            f"`dynamic_batching` is set but `max_batch_size` is {mbs}; expected `max_batch_size` >= 1 "
            "(dims then exclude the batch dimension)"
        )
    _check_preferred(b, mbs, out)
    _check_priorities(b, out)
    for name in _SCHEDULERS:
        if name in cfg.extra:
            out.append(f"`dynamic_batching` and `{name}` are both set; expected one scheduler")


def _check_preferred(b: DynamicBatching, mbs: int, out: list[str]) -> None:
    for size in _dups(b.preferred_batch_size):
        out.append(
            f"`dynamic_batching.preferred_batch_size` {size} appears more than once; expected unique sizes"
        )
    for size in b.preferred_batch_size:
        if size < 1:
            out.append(f"`dynamic_batching.preferred_batch_size` {size} is below 1; expected sizes >= 1")
        elif mbs > 0 and size > mbs:
            out.append(
                f"`dynamic_batching.preferred_batch_size` {size} exceeds `max_batch_size` {mbs}; "
                f"expected every preferred size <= {mbs}"
            )


def _check_priorities(b: DynamicBatching, out: list[str]) -> None:
    """The queue delay, priority levels and the queue policies."""
    if b.max_queue_delay_microseconds < 0:
        out.append(
            f"`dynamic_batching.max_queue_delay_microseconds` is {b.max_queue_delay_microseconds}; "
            "expected >= 0"
        )
    if b.priority_levels < 0:
        out.append(f"`dynamic_batching.priority_levels` is {b.priority_levels}; expected >= 0")
    if b.priority_levels > 0 and not 1 <= b.default_priority_level <= b.priority_levels:
        out.append(
            f"`dynamic_batching.default_priority_level` is {b.default_priority_level}; expected "
            f"1..{b.priority_levels} (`priority_levels`)"
        )
    if b.default_queue_policy is not None:
        _check_queue("dynamic_batching.default_queue_policy", b.default_queue_policy, out)
    for level, policy in b.priority_queue_policy.items():
        if not 1 <= level <= b.priority_levels:
            out.append(
                f"`dynamic_batching.priority_queue_policy` has level {level}; "
                f"expected 1..{b.priority_levels} (`priority_levels`)"
            )
        _check_queue(f"dynamic_batching.priority_queue_policy[{level}]", policy, out)


def _check_queue(path: str, q: QueuePolicy, out: list[str]) -> None:
    if q.max_queue_size < 0:
        out.append(f"`{path}.max_queue_size` is {q.max_queue_size}; expected >= 0 (0 = unbounded)")
    if q.default_timeout_microseconds < 0:
        out.append(
            f"`{path}.default_timeout_microseconds` is {q.default_timeout_microseconds}; "
            "expected >= 0 (0 = no timeout)"
        )
    if q.timeout_action not in TIMEOUT_ACTIONS:
        out.append(
            f"`{path}.timeout_action` is {q.timeout_action!r}; expected one of {_fmt(TIMEOUT_ACTIONS)}"
        )


def _check_group(cfg: ModelConfig, i: int, g: InstanceGroup, out: list[str]) -> None:
    path = f"instance_group[{i}]"
    if g.kind not in INSTANCE_KINDS:
        out.append(f"`{path}.kind` is {g.kind!r}; expected one of {_fmt(INSTANCE_KINDS)}")
    if g.count < 1:
        out.append(f"`{path}.count` is {g.count}; expected >= 1")
    if g.kind != "KIND_GPU" and g.gpus:
        out.append(f"`{path}.gpus` is {g.gpus} with kind {g.kind}; expected `gpus` only with KIND_GPU")
    if any(gpu < 0 for gpu in g.gpus):
        out.append(f"`{path}.gpus` is {g.gpus}; expected GPU indices >= 0")
    if _dups(g.gpus):
        out.append(f"`{path}.gpus` is {g.gpus}; expected each GPU once")
    if not g.profile:
        return
    tensorrt = cfg.platform == "tensorrt_plan" or cfg.backend == "tensorrt"
    if g.kind != "KIND_GPU":
        out.append(
            f"`{path}.profile` is {g.profile} with kind {g.kind}; expected `profile` only with KIND_GPU"
        )
    elif not tensorrt:
        # Triton refuses this too: "specifies profile field which is only supported for TensorRT models".
        out.append(
            f"`{path}.profile` is {g.profile} on a {cfg.platform or cfg.backend!r} model; expected `profile` "
            "only for TensorRT models (platform 'tensorrt_plan')"
        )
    if _dups(g.profile) or not all(p.isdigit() for p in g.profile):
        # The TensorRT backend reads profile names as optimization-profile indices.
        out.append(f"`{path}.profile` is {g.profile}; expected unique profile indices such as '0', '1'")


def _check_warmup(cfg: ModelConfig, i: int, w: ModelWarmup, out: list[str]) -> None:
    path = f"model_warmup[{i}]"
    if not w.name:
        out.append(f"`{path}.name` is empty; expected a warm-up name")
    limit = max(cfg.max_batch_size, 1)
    if not 1 <= w.batch_size <= limit:
        out.append(
            f"`{path}.batch_size` is {w.batch_size}; expected 1..{limit} "
            f"(`max_batch_size` is {cfg.max_batch_size})"
        )
    if not w.inputs:
        out.append(f"`{path}.inputs` is empty; expected data for every model input")
    by_name = {t.name: t for t in cfg.inputs}
    for name, data in w.inputs.items():
        ipath = f"{path}.inputs[{name}]"
        tensor = by_name.get(name)
        if tensor is None:
            out.append(
                f"`{ipath}` names input {name!r}, which does not exist; expected one of {_fmt(by_name)}"
            )
        sources = [data.zero_data, data.random_data, data.input_data_file is not None]
        if sum(sources) != 1:
            out.append(
                f"`{ipath}` sets {sum(sources)} data sources; expected exactly one of "
                "`zero_data`, `random_data`, `input_data_file`"
            )
        if data.data_type and not is_dtype(data.data_type):
            out.append(
                f"`{ipath}.data_type` {data.data_type!r} is unknown; expected one of {_fmt(TRITON_DTYPES)}"
            )
        elif (
            tensor is not None
            and is_dtype(tensor.data_type)
            and (not data.data_type or normalize_dtype(data.data_type) != normalize_dtype(tensor.data_type))
        ):
            out.append(
                f"`{ipath}.data_type` is {data.data_type or 'unset'!r}; expected {tensor.data_type!r} "
                "like the input"
            )
        _check_dims(f"{ipath}.dims", data.dims, out, allow_variable=False)
        if tensor is not None:
            _check_warmup_dims(ipath, data.dims, tensor, cfg.max_batch_size, out)


def _check_warmup_dims(path: str, dims: list[int], t: TensorConfig, mbs: int, out: list[str]) -> None:
    shape = t.dims
    note = "batch dim excluded" if mbs > 0 else "full shape"
    fits = len(dims) == len(shape) and all(s in (-1, d) for s, d in zip(shape, dims, strict=True))
    if not fits:
        out.append(f"`{path}.dims` is {dims}; expected a concrete shape matching input dims {shape} ({note})")


def _check_version_policy(p: VersionPolicy, out: list[str]) -> None:
    if p.kind == "latest":
        if p.num_versions < 1:
            out.append(f"`version_policy.latest.num_versions` is {p.num_versions}; expected >= 1")
    elif p.kind == "specific":
        if not p.versions:
            out.append("`version_policy.specific.versions` is empty; expected at least one version")
        if any(v < 1 for v in p.versions) or _dups(p.versions):
            out.append(
                f"`version_policy.specific.versions` is {p.versions}; expected unique version numbers >= 1"
            )
    elif p.kind != "all":
        out.append(f"`version_policy` kind is {p.kind!r}; expected one of latest, all, specific")


def _check_ensemble(cfg: ModelConfig, out: list[str]) -> None:
    if not cfg.ensemble_steps:
        out.append("`ensemble_scheduling.step` is empty; expected at least one step for platform 'ensemble'")
        return
    inputs = {t.name for t in cfg.inputs}
    outputs = {t.name for t in cfg.outputs}
    produced = [tensor for step in cfg.ensemble_steps for tensor in step.output_map.values()]
    for name in _dups(produced):
        out.append(f"ensemble tensor {name!r} is produced by more than one step; expected one producer")
    available = inputs | set(produced)
    for i, step in enumerate(cfg.ensemble_steps):
        _check_step(f"ensemble_scheduling.step[{i}]", step, inputs, available, out)
    for name in sorted(outputs - set(produced)):
        out.append(
            f"ensemble `output` {name!r} is not produced by any step; expected it among the "
            "`output_map` values"
        )
    if cfg.instance_groups:
        out.append("`instance_group` is set on an ensemble; expected instance groups on the composing models")


def _check_step(path: str, step: EnsembleStep, inputs: set[str], available: set[str], out: list[str]) -> None:
    if not step.model_name:
        out.append(f"`{path}.model_name` is empty; expected the name of a composing model")
    if step.model_version < -1:
        out.append(f"`{path}.model_version` is {step.model_version}; expected -1 (latest) or >= 1")
    if not step.input_map:
        out.append(f"`{path}.input_map` is empty; expected at least one model input mapped")
    if not step.output_map:
        out.append(f"`{path}.output_map` is empty; expected at least one model output mapped")
    for model_input, tensor in step.input_map.items():
        if tensor not in available:
            out.append(
                f"`{path}.input_map` maps {model_input!r} to {tensor!r}, which is neither an ensemble "
                f"input nor a step output; expected one of {_fmt(sorted(available))}"
            )
    for tensor in step.output_map.values():
        if tensor in inputs:
            out.append(f"`{path}.output_map` writes ensemble input {tensor!r}; expected a new tensor name")


def _check_accelerators(kind: str, accelerators: list[Accelerator], out: list[str]) -> None:
    for i, accelerator in enumerate(accelerators):
        if not accelerator.name:
            out.append(
                f"`optimization.execution_accelerators.{kind}[{i}].name` is empty; expected e.g. 'tensorrt'"
            )
