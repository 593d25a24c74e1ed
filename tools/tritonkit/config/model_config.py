"""Typed dataclasses for the parts of Triton's ``model_config.proto`` this project uses.

Field names follow the proto (``max_queue_delay_microseconds``, ``cc_model_filenames``...), except that
repeated messages are plural (``inputs``, ``instance_groups``) and a few wrappers are flattened where
the proto only nests for presence (``response_cache.enable`` -> ``response_cache``, ``parameters[k]
.string_value`` -> ``parameters[k]``, ``ensemble_scheduling.step`` -> ``ensemble_steps``). Data types
are short ("FP32"); see :mod:`tritonkit.config.dtypes`.

Every class has an ``extra`` dict: the proto fields at that level this package does not model, in
``json_format`` form (proto field names). They are filled by the parser and merged back on the way out,
so a config read and saved again never loses a field. Conversion lives in
:mod:`tritonkit.config.convert`, rules in :mod:`tritonkit.config.validate`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tritonkit.errors import ConfigError

__all__ = [
    "Accelerator",
    "CudaOptimization",
    "DynamicBatching",
    "EnsembleStep",
    "ExecutionAccelerators",
    "InstanceGroup",
    "ModelConfig",
    "ModelWarmup",
    "Optimization",
    "QueuePolicy",
    "TensorConfig",
    "VersionPolicy",
    "WarmupInput",
]

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

    # --- conversion (see tritonkit.config.convert) -------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """``json_format`` dict of the proto (proto field names, proto enum names)."""
        from tritonkit.config.convert import config_to_dict

        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        from tritonkit.config.convert import config_from_dict

        return config_from_dict(data)

    def to_proto(self) -> Any:
        """``tritonclient.grpc.model_config_pb2.ModelConfig``; ConfigError if the schema rejects a value."""
        from tritonkit.config.convert import config_to_proto

        return config_to_proto(self)

    @classmethod
    def from_proto(cls, pb: Any) -> ModelConfig:
        from tritonkit.config.convert import config_from_proto

        return config_from_proto(pb)

    def to_pbtxt(self) -> str:
        """The ``config.pbtxt`` text, printed by ``google.protobuf.text_format``."""
        from tritonkit.config.convert import config_to_pbtxt

        return config_to_pbtxt(self)

    @classmethod
    def from_pbtxt(cls, text: str) -> ModelConfig:
        """Parse ``config.pbtxt`` text; ConfigError with line/column on a syntax or schema error."""
        from tritonkit.config.convert import config_from_pbtxt

        return config_from_pbtxt(text)

    # --- files ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], *, check: bool = True) -> Path:
        """Write ``config.pbtxt`` atomically (temp file + rename in the same directory).

        With ``check`` (default) the config is validated first, so an invalid config writes nothing.
        """
        if check:
            self.validate()
        text = self.to_pbtxt()
        target = Path(path)
        if not target.parent.is_dir():
            raise ConfigError(f"cannot write `config.pbtxt`: directory {str(target.parent)!r} does not exist")
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            # mkstemp creates 0600; a config is no secret and the server may run as another user.
            os.chmod(tmp, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelConfig:
        """Read and parse a ``config.pbtxt`` file (or a model directory containing one)."""
        target = Path(path)
        if target.is_dir():
            target = target / "config.pbtxt"
        try:
            text = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(
                f"model config not found: {str(target)!r}; expected a config.pbtxt file"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read model config {str(target)!r}: {exc}") from None
        try:
            return cls.from_pbtxt(text)
        except ConfigError as exc:
            raise ConfigError(f"{target}: {exc}") from None

    # --- validation (see tritonkit.config.validate) -------------------------------------------
    def problems(self) -> list[str]:
        """Every rule this config breaks, one line each (empty when valid)."""
        from tritonkit.config.validate import config_problems

        return config_problems(self)

    def validate(self) -> ModelConfig:
        """Raise ConfigError listing every problem (joined by "; "); return self when valid."""
        found = self.problems()
        if found:
            subject = f"model `{self.name}`" if self.name else "model config"
            raise ConfigError(f"{subject}: " + "; ".join(found))
        return self

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
