"""Typed dataclasses for the parts of Triton's ``model_config.proto`` this project uses.

Field names follow the proto (``max_queue_delay_microseconds``, ``cc_model_filenames``...), except that
repeated messages are plural (``inputs``, ``instance_groups``) and a few wrappers are flattened where
the proto only nests for presence (``response_cache.enable`` -> ``response_cache``, ``parameters[k]
.string_value`` -> ``parameters[k]``, ``ensemble_scheduling.step`` -> ``ensemble_steps``). Data types
are short ("FP32"); see :mod:`tritonkit.config.dtypes`.

Every class has an ``extra`` dict: the proto fields at that level this package does not model, in
``json_format`` form (proto field names). They are filled by the parser and merged back on the way out,
so a config read and saved again never loses a field.

These are plain data, as in PyTriton's ``model_config`` package: writing lives in
:mod:`tritonkit.config.generator`, reading in :mod:`tritonkit.config.parser`, the rules in
:mod:`tritonkit.config.validator`; each imports this module, never the other way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tritonkit.errors import ConfigError

#: Proto fields at one level that the dataclasses do not model, in ``json_format`` form.
Extra = dict[str, Any]


@dataclass
class TensorConfig:
    """One ``input`` or ``output`` entry. ``dims`` exclude the batch dimension when max_batch_size > 0.

    ``optional`` and ``allow_ragged_batch`` exist for inputs only, ``label_filename`` for outputs only.
    """

    name: str
    data_type: str
    dims: list[int]
    reshape: list[int] | None = None
    optional: bool = False
    is_shape_tensor: bool = False
    allow_ragged_batch: bool = False
    label_filename: str | None = None
    extra: Extra = field(default_factory=dict)


@dataclass
class QueuePolicy:
    """``ModelQueuePolicy``: bounds and timeouts of the dynamic batcher's queue (0 = unbounded/none)."""

    max_queue_size: int = 0
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    timeout_action: Literal["REJECT", "DELAY"] | str = "REJECT"
    extra: Extra = field(default_factory=dict)


@dataclass
class DynamicBatching:
    """``dynamic_batching``; presence (not None on ModelConfig) turns the dynamic batcher on."""

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: list[int] = field(default_factory=list)
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] = field(default_factory=dict)
    extra: Extra = field(default_factory=dict)


@dataclass
class InstanceGroup:
    """``instance_group``. ``gpus`` and ``profile`` (TensorRT optimization profile names): KIND_GPU only."""

    kind: Literal["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"] | str = "KIND_AUTO"
    count: int = 1
    gpus: list[int] = field(default_factory=list)
    profile: list[str] = field(default_factory=list)
    name: str | None = None
    passive: bool = False
    extra: Extra = field(default_factory=dict)


@dataclass
class Accelerator:
    """One execution accelerator (e.g. ``tensorrt`` with ``precision_mode: FP16``) for ORT/TF backends."""

    name: str
    parameters: dict[str, str] = field(default_factory=dict)
    extra: Extra = field(default_factory=dict)


@dataclass
class ExecutionAccelerators:
    gpu_execution_accelerator: list[Accelerator] = field(default_factory=list)
    cpu_execution_accelerator: list[Accelerator] = field(default_factory=list)
    extra: Extra = field(default_factory=dict)


@dataclass
class CudaOptimization:
    """``optimization.cuda`` (TensorRT backend only); ``graph_spec`` stays in proto-dict form."""

    graphs: bool = False
    busy_wait_events: bool = False
    output_copy_stream: bool = False
    graph_spec: list[dict[str, Any]] = field(default_factory=list)
    extra: Extra = field(default_factory=dict)


@dataclass
class Optimization:
    """``optimization``. Pinned-memory flags: None leaves Triton's default (enabled)."""

    cuda: CudaOptimization | None = None
    execution_accelerators: ExecutionAccelerators | None = None
    input_pinned_memory: bool | None = None
    output_pinned_memory: bool | None = None
    graph_level: int | None = None
    extra: Extra = field(default_factory=dict)


@dataclass
class WarmupInput:
    """One warm-up input: exactly one of ``zero_data``, ``random_data`` or ``input_data_file``."""

    data_type: str
    dims: list[int]
    zero_data: bool = False
    random_data: bool = False
    input_data_file: str | None = None
    extra: Extra = field(default_factory=dict)


@dataclass
class ModelWarmup:
    """``model_warmup`` entry; the server is not ready until every warm-up request has run."""

    name: str
    batch_size: int = 1
    inputs: dict[str, WarmupInput] = field(default_factory=dict)
    count: int = 0
    extra: Extra = field(default_factory=dict)


@dataclass
class VersionPolicy:
    """``version_policy``: ``latest`` (num_versions), ``all``, or ``specific`` (versions)."""

    kind: Literal["latest", "all", "specific"] | str = "latest"
    num_versions: int = 1
    versions: list[int] = field(default_factory=list)

    @classmethod
    def latest(cls, num_versions: int = 1) -> VersionPolicy:
        return cls("latest", num_versions=num_versions)

    @classmethod
    def all(cls) -> VersionPolicy:
        return cls("all")

    @classmethod
    def specific(cls, versions: list[int]) -> VersionPolicy:
        return cls("specific", versions=list(versions))


@dataclass
class EnsembleStep:
    """One ``ensemble_scheduling.step``. ``input_map``: step model input -> ensemble tensor;
    ``output_map``: step model output -> ensemble tensor. ``model_version`` -1 means latest."""

    model_name: str
    model_version: int = -1
    input_map: dict[str, str] = field(default_factory=dict)
    output_map: dict[str, str] = field(default_factory=dict)
    extra: Extra = field(default_factory=dict)


@dataclass
class ModelConfig:
    """A Triton model configuration (the contents of ``<model>/config.pbtxt``)."""

    name: str
    backend: str | None = None
    platform: str | None = None
    max_batch_size: int = 0
    inputs: list[TensorConfig] = field(default_factory=list)
    outputs: list[TensorConfig] = field(default_factory=list)
    dynamic_batching: DynamicBatching | None = None
    instance_groups: list[InstanceGroup] = field(default_factory=list)
    optimization: Optimization | None = None
    model_warmup: list[ModelWarmup] = field(default_factory=list)
    version_policy: VersionPolicy | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    ensemble_steps: list[EnsembleStep] = field(default_factory=list)
    cc_model_filenames: dict[str, str] = field(default_factory=dict)
    default_model_filename: str | None = None
    response_cache: bool = False
    runtime: str | None = None
    extra: Extra = field(default_factory=dict)

    # --- small conveniences for callers ---------------------------------------------------------
    def full_shape(self, tensor: TensorConfig) -> list[int]:
        """The shape a request carries: ``[-1] + dims`` when batching (max_batch_size > 0), else ``dims``."""
        return [-1, *tensor.dims] if self.max_batch_size > 0 else list(tensor.dims)

    def input(self, name: str) -> TensorConfig:
        return _find(self.inputs, name, "input")

    def output(self, name: str) -> TensorConfig:
        return _find(self.outputs, name, "output")


def _find(tensors: list[TensorConfig], name: str, what: str) -> TensorConfig:
    for tensor in tensors:
        if tensor.name == name:
            return tensor
    names = ", ".join(t.name for t in tensors) or "none"
    raise ConfigError(f"no {what} named {name!r}; expected one of: {names}")
