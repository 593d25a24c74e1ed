"""The YAML build spec (one file per model in ``model_repository/``) and its override precedence.

A spec is parsed into the dataclasses below; every key is checked against them, so an unknown key
or a wrong type is one :class:`SpecError` line naming the dotted key, what was expected and what was
given. Values then come from, highest first:

1. command-line flags (``--target``, ``--precision``, ``--gpu``, ``--max-batch-size``, ...),
2. environment variables ``TRITONKIT_*`` (see :data:`ENV_OVERRIDES`),
3. the spec file,
4. the defaults written here.

One exception: the GPU profile. ``--gpu`` / ``TRITONKIT_GPU`` choose it outright; otherwise the local
GPU is detected, and the spec's ``gpu`` (then T4) applies only where none is found.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from tritonkit.config import ModelConfig, QueuePolicy
from tritonkit.convert.spec.execution import ServingSpec
from tritonkit.convert.spec.gpu_profiles import get_profile
from tritonkit.convert.spec.options import BUILTIN, CALIBRATION_METHODS, Fp16Options, Int8Options
from tritonkit.convert.spec.spec_parse import MAX_DEPTH, MAX_NODES, YamlBoundError, load_yaml, parse_dataclass
from tritonkit.errors import SpecError
from tritonkit.repository.store import validate_model_name

__all__ = [
    "DEFAULT_INSTANCE_KIND",
    "DEFAULT_MAX_BATCH_SIZE",
    "ENV_OVERRIDES",
    "PATH_KEYS",
    "PRECISIONS",
    "TARGETS",
    "AccuracySpec",
    "BatchingSpec",
    "BuildSpec",
    "QueueSpec",
    "apply_overrides",
    "apply_queue_policy",
    "load_spec",
    "parse_spec",
    "with_overrides",
]

PRECISIONS = ("fp32", "fp16", "int8", "bf16")
#: Max batch of a graph whose first axis is dynamic when none is given (``batching.max_batch_size: null``).
DEFAULT_MAX_BATCH_SIZE = 64
TARGETS = ("portable", "onnxruntime", "tensorrt")


@dataclass
class SourceSpec:
    """Exactly one of ``flagship`` (a model written in this project), ``onnx`` (a file path) or
    ``torch`` (``"package.module:function"`` returning a :class:`tritonkit.convert.graph.export.TorchSource`)."""

    flagship: Literal["minilm", "resnet50"] | None = None
    onnx: str | None = None
    torch: str | None = None
    synthetic: bool = False  # labels seeded-weight models in reports
    #: torch sources: ``dynamo`` (torch.export), ``torchscript`` (tracing), ``auto``: dynamo, then torchscript.
    exporter: Literal["auto", "dynamo", "torchscript"] = "auto"
    #: ONNX sources with a fixed first axis: rewrite it to a dynamic batch axis (checked by running it).
    dynamic_batch: bool = False


@dataclass
class PreprocessingSpec:
    kind: Literal["text", "none"] = "none"
    max_seq_length: int = 256
    image_size: int = 224
    #: Text only. ``runner``: one python model tokenizes and runs the encoder (portable target);
    #: ``ensemble``: a tokenizer model + the tensor model + an ensemble taking TEXT (always used for
    #: the onnxruntime and tensorrt targets, whose backends cannot tokenize).
    tokenize: Literal["runner", "ensemble"] = "runner"


@dataclass
class Int8Spec:
    method: Literal["minmax", "entropy", "percentile"] = "minmax"
    percentile: float = 99.999
    per_channel: bool = True
    op_types: list[str] = field(default_factory=lambda: ["MatMul", "Gemm", "Conv"])
    exclude_nodes: list[str] = field(default_factory=list)
    exclude_op_types: list[str] = field(default_factory=list)
    #: TensorRT <= 10 only: the legacy implicit-INT8 calibrator instead of the Q/DQ model.
    legacy_calibrator: bool = False

    def options(self, min_samples: int) -> Int8Options:
        return Int8Options(
            method=self.method,
            percentile=self.percentile,
            per_channel=self.per_channel,
            op_types=list(self.op_types),
            exclude_nodes=list(self.exclude_nodes),
            exclude_op_types=list(self.exclude_op_types),
            min_samples=min_samples,
        )


@dataclass
class DataSpec:
    """``data``: ``auto`` (the built-in set that fits the model: :mod:`tritonkit.convert.inputs.seeded_data`),
    ``pydoc`` (bundled English text), ``synthetic`` (seeded images), ``random`` (seeded samples shaped
    like the inputs), or a ``.txt``/``.npz`` path."""

    data: str = "auto"
    samples: int = 256
    min_samples: int = 32
    batch_size: int = 16


@dataclass
class EvaluationSpec(DataSpec):
    """``evaluation``: as :class:`DataSpec`, with the evaluation defaults also when the section is given
    in part (a ``DataSpec`` would take the calibration defaults for the keys left out)."""

    samples: int = 500
    min_samples: int = 1
    batch_size: int = 32


@dataclass
class Threshold:
    """A precision's pass marks; None: the metric's default (:data:`tritonkit.convert.precisions.gates.DEFAULT_MARKS`:
    cosine fp16 mean 0.999 / min 0.99, top-1 fp16 agreement 0.99 and no ``min``)."""

    mean: float | None = None
    min: float | None = None


@dataclass
class AccuracySpec:
    metric: Literal["cosine", "top1"] = "cosine"
    output: str | None = None
    atol: float = 1e-2
    rtol: float = 1e-2
    fp16: Threshold = field(default_factory=Threshold)
    int8: Threshold = field(default_factory=Threshold)
    bf16: Threshold = field(default_factory=Threshold)


@dataclass
class QueueSpec:
    """``batching.queue``: the dynamic batcher's default queue policy (0 = unbounded / no timeout).

    A full queue answers UNAVAILABLE at once instead of growing latency and memory without bound.
    """

    max_size: int = 0
    timeout_us: int = 0
    allow_timeout_override: bool = False
    timeout_action: Literal["REJECT", "DELAY"] = "REJECT"


@dataclass
class BatchingSpec:
    #: ``auto``: planned from measured memory and the GPU profile; null: 64 when every input and
    #: output has a dynamic first axis, else 0 (the default of ``tritonkit build --onnx``).
    max_batch_size: int | Literal["auto"] | None = DEFAULT_MAX_BATCH_SIZE
    max_queue_delay_us: int = 500
    preferred_batch_sizes: list[int] = field(default_factory=list)
    memory_fraction: float = 0.8
    queue: QueueSpec = field(default_factory=QueueSpec)
    #: 0: one priority; else requests carry a priority 1..N (1 first), default ``default_priority_level``.
    priority_levels: int = 0
    default_priority_level: int = 0


#: Instance kind per target when ``instances.kind`` is not given: the portable target serves on the
#: embedded server's CPU; the onnxruntime and tensorrt targets run where a GPU serves them.
DEFAULT_INSTANCE_KIND = {"portable": "KIND_CPU", "onnxruntime": "KIND_GPU", "tensorrt": "KIND_GPU"}


@dataclass
class InstancesSpec:
    count: int = 1
    #: null: the target's default (:data:`DEFAULT_INSTANCE_KIND`).
    kind: Literal["KIND_CPU", "KIND_GPU", "KIND_AUTO"] | None = None


@dataclass
class ProfileSpec:
    """One TensorRT optimization profile: ``batch`` [min, opt, max] and per-input non-batch dims."""

    batch: list[int] = field(default_factory=list)
    shapes: dict[str, dict[str, list[int]]] = field(default_factory=dict)


@dataclass
class TensorRTSpec:
    profiles: list[ProfileSpec] = field(default_factory=list)
    workspace_gib: float | None = None  # default from the GPU profile (4 GiB on T4)
    optimization_level: int = 3
    #: Timing-cache file; null: a per-user cache keyed by GPU and TensorRT version
    #: (``$XDG_CACHE_HOME/tritonkit/tensorrt/<gpu>-trt<version>/timing.cache``). ``{gpu}`` and
    #: ``{tensorrt}`` in a given path are replaced by the GPU profile and the TensorRT version.
    timing_cache: str | None = None
    strongly_typed: Literal["auto", "on", "off"] = "auto"


@dataclass
class PortableSpec:
    """The portable target's ONNX runner: extra model parameters (``intra_op_threads``,
    ``tensor_exchange``, ``execution_provider``...) merged over its defaults."""

    parameters: dict[str, str] = field(default_factory=dict)


@dataclass
class OnnxRuntimeSpec:
    accelerator: Literal["tensorrt", "cuda", "none"] = "tensorrt"
    precision_mode: Literal["FP32", "FP16", "INT8"] | None = None  # default: from the precision
    max_workspace_size_bytes: int | None = None
    #: Where the TensorRT execution provider keeps the engines it builds (``trt_engine_cache_path``),
    #: inside the serving container; null turns the engine cache off.
    engine_cache_path: str | None = "/tmp/tritonkit/ort-trt-engines"


@dataclass
class BuildSpec:
    name: str
    source: SourceSpec
    description: str = ""
    preprocessing: PreprocessingSpec = field(default_factory=PreprocessingSpec)
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    fp16: Fp16Options = field(default_factory=Fp16Options)
    int8: Int8Spec = field(default_factory=Int8Spec)
    calibration: DataSpec = field(default_factory=DataSpec)
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    accuracy: AccuracySpec = field(default_factory=AccuracySpec)
    target: Literal["portable", "onnxruntime", "tensorrt"] = "portable"
    gpu: str | None = None
    batching: BatchingSpec = field(default_factory=BatchingSpec)
    instances: InstancesSpec = field(default_factory=InstancesSpec)
    portable: PortableSpec = field(default_factory=PortableSpec)
    tensorrt: TensorRTSpec = field(default_factory=TensorRTSpec)
    onnxruntime: OnnxRuntimeSpec = field(default_factory=OnnxRuntimeSpec)
    #: Where versions served by the embedded server execute (portable target; see gpu_serving).
    serving: ServingSpec = field(default_factory=ServingSpec)
    #: Directory the spec was read from; relative paths in it resolve against this.
    base_dir: str = "."
    #: GPU profile asked for by ``--gpu`` / ``TRITONKIT_GPU``: beats detection, which beats ``gpu``.
    requested_gpu: str | None = None
    #: The plain import preset (``tritonkit build --onnx FILE``, :func:`tritonkit.convert.onnx_import.import_onnx`):
    #: one portable FP32 version of an ONNX source served exactly as given (no clean-up pass, its
    #: external-data files alongside), named ``name`` itself, with no GPU profile to plan for.
    as_is: bool = False

    def resolve(self, path: str) -> Path:
        candidate = Path(path)
        return candidate if candidate.is_absolute() else Path(self.base_dir) / candidate

    @property
    def instance_kind(self) -> str:
        """``instances.kind``, or the target's default when not given."""
        return self.instances.kind or DEFAULT_INSTANCE_KIND[self.target]

    def model_name(self, precision: str) -> str:
        if self.as_is:
            return self.name
        suffix = "" if self.target == "portable" else {"onnxruntime": "_ort", "tensorrt": "_trt"}[self.target]
        return f"{self.name}_{precision}{suffix}"


def _check(spec: BuildSpec) -> BuildSpec:
    validate_model_name(spec.name)
    given = [k for k in ("flagship", "onnx", "torch") if getattr(spec.source, k) is not None]
    if len(given) != 1:
        raise SpecError(
            f"spec key `source`: expected exactly one of `flagship`, `onnx` or `torch`; got {given or 'none'}"
        )
    bad = [p for p in spec.precisions if p not in PRECISIONS]
    if bad or not spec.precisions:
        raise SpecError(
            f"spec key `precisions`: expected a non-empty list of {', '.join(PRECISIONS)}; got {spec.precisions}"
        )
    if spec.int8.method not in CALIBRATION_METHODS:  # pragma: no cover - Literal already checks
        raise SpecError(f"spec key `int8.method`: expected one of {CALIBRATION_METHODS}")
    for key, value in (
        ("calibration.samples", spec.calibration.samples),
        ("calibration.batch_size", spec.calibration.batch_size),
        ("evaluation.samples", spec.evaluation.samples),
        ("evaluation.batch_size", spec.evaluation.batch_size),
        ("instances.count", spec.instances.count),
        ("preprocessing.max_seq_length", spec.preprocessing.max_seq_length),
    ):
        if value < 1:
            raise SpecError(f"spec key `{key}`: expected an integer >= 1, got {value}")
    if spec.as_is and (spec.target != "portable" or spec.precisions != ["fp32"] or spec.source.onnx is None):
        raise SpecError(
            "the as-is import serves an `onnx` source as one portable fp32 version; got target "
            f"{spec.target}, precisions {spec.precisions}"
        )
    mbs = spec.batching.max_batch_size
    if isinstance(mbs, int) and mbs < 0:
        raise SpecError(f"spec key `batching.max_batch_size`: expected an integer >= 0 or 'auto', got {mbs}")
    for key, value in (
        ("batching.queue.max_size", spec.batching.queue.max_size),
        ("batching.queue.timeout_us", spec.batching.queue.timeout_us),
        ("batching.priority_levels", spec.batching.priority_levels),
    ):
        if value < 0:
            raise SpecError(f"spec key `{key}`: expected an integer >= 0, got {value}")
    levels, default_level = spec.batching.priority_levels, spec.batching.default_priority_level
    if levels > 0 and not 1 <= default_level <= levels:
        raise SpecError(
            f"spec key `batching.default_priority_level`: expected 1..{levels} (`batching.priority_levels`), "
            f"got {default_level}"
        )
    if levels == 0 and default_level != 0:
        raise SpecError(
            f"spec key `batching.default_priority_level`: expected 0 without `batching.priority_levels`, "
            f"got {default_level}"
        )
    if not 0 < spec.batching.memory_fraction <= 1:
        raise SpecError(
            f"spec key `batching.memory_fraction`: expected a value in (0, 1], got {spec.batching.memory_fraction}"
        )
    return spec


def parse_spec(data: Any, base_dir: str | Path = ".", *, as_is: bool = False) -> BuildSpec:
    """A BuildSpec from parsed YAML (a mapping); SpecError on unknown keys or wrong types."""
    spec: BuildSpec = parse_dataclass(BuildSpec, data, "")
    spec.base_dir = str(base_dir)
    spec.as_is = as_is
    return _check(spec)


def load_spec(path: str | Path) -> BuildSpec:
    """Read and check a YAML build spec."""

    file = Path(path)
    if not file.is_file():
        raise SpecError(f"build spec not found: {str(file)!r}; expected a YAML file")
    try:
        data = load_yaml(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        bound = (
            f": {exc}; expected at most {MAX_NODES} nodes, {MAX_DEPTH} levels deep"
            if isinstance(exc, YamlBoundError)
            else ""
        )
        raise SpecError(f"build spec {str(file)!r} is not valid YAML{where}{bound}") from None
    except UnicodeDecodeError:
        raise SpecError(f"build spec {str(file)!r} is not UTF-8 text") from None
    return parse_spec(data, base_dir=file.resolve().parent)


# --- overrides -----------------------------------------------------------------------------------
def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _flag(text: str) -> bool:
    if text.strip().lower() not in ("1", "true", "yes", "0", "false", "no"):
        raise ValueError(text)
    return text.strip().lower() in ("1", "true", "yes")


def _int_or_auto(text: str) -> int | str:
    return "auto" if text.strip() == "auto" else int(text)


#: (argparse dest, environment variable, dotted spec key, parser of the environment string)
ENV_OVERRIDES: tuple[tuple[str, str, str, Any], ...] = (
    ("target", "TRITONKIT_TARGET", "target", str),
    ("precision", "TRITONKIT_PRECISION", "precisions", _csv),
    ("gpu", "TRITONKIT_GPU", "requested_gpu", str),
    ("max_batch_size", "TRITONKIT_MAX_BATCH_SIZE", "batching.max_batch_size", _int_or_auto),
    ("max_queue_delay_us", "TRITONKIT_MAX_QUEUE_DELAY_US", "batching.max_queue_delay_us", int),
    ("max_queue_size", "TRITONKIT_MAX_QUEUE_SIZE", "batching.queue.max_size", int),
    ("queue_timeout_us", "TRITONKIT_QUEUE_TIMEOUT_US", "batching.queue.timeout_us", int),
    ("priority_levels", "TRITONKIT_PRIORITY_LEVELS", "batching.priority_levels", int),
    ("default_priority_level", "TRITONKIT_DEFAULT_PRIORITY_LEVEL", "batching.default_priority_level", int),
    ("instances", "TRITONKIT_INSTANCES", "instances.count", int),
    ("instance_kind", "TRITONKIT_INSTANCE_KIND", "instances.kind", str),
    ("calibration_method", "TRITONKIT_CALIBRATION_METHOD", "int8.method", str),
    ("calibration_data", "TRITONKIT_CALIBRATION_DATA", "calibration.data", str),
    ("calibration_samples", "TRITONKIT_CALIBRATION_SAMPLES", "calibration.samples", int),
    ("eval_data", "TRITONKIT_EVAL_DATA", "evaluation.data", str),
    ("eval_samples", "TRITONKIT_EVAL_SAMPLES", "evaluation.samples", int),
    ("timing_cache", "TRITONKIT_TIMING_CACHE", "tensorrt.timing_cache", str),
    ("exporter", "TRITONKIT_EXPORTER", "source.exporter", str),
    ("dynamic_batch", "TRITONKIT_DYNAMIC_BATCH", "source.dynamic_batch", _flag),
)

#: Spec keys holding a file path. Given in the spec they resolve against the spec's folder; given
#: as a flag or a variable, against the working directory (like any path typed on a command line).
PATH_KEYS = ("calibration.data", "evaluation.data", "tensorrt.timing_cache")
#: Values of the data keys that name a built-in set, not a file.
_NOT_PATHS = BUILTIN


def _as_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj)


def apply_overrides(
    spec: BuildSpec, flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> BuildSpec:
    """A new spec with environment (``TRITONKIT_*``) values over the spec and flags over both.

    ``flags`` maps argparse dests to values; None means "not given". Every override is re-checked
    like a spec value, so a bad flag or variable is the same one-line SpecError.
    """
    environ = os.environ if env is None else env
    given: dict[str, str] = {}  # spec key -> where its override came from, for error messages
    data = _as_dict(spec)
    data["serving"] = spec.serving.to_mapping()  # read back by ServingSpec.from_mapping
    base_dir = data.pop("base_dir")
    requested_gpu = data.pop("requested_gpu")
    as_is = data.pop("as_is")
    for dest, variable, key, parse in ENV_OVERRIDES:
        value: Any = None
        if variable in environ and environ[variable] != "":
            try:
                value = parse(environ[variable])
            except ValueError:
                raise SpecError(
                    f"environment variable {variable}={environ[variable]!r} is not a valid `{key}`"
                ) from None
            given[key] = f"environment variable {variable}"
        flag = (flags or {}).get(dest)
        if flag is not None:
            value = _csv(flag) if dest == "precision" and isinstance(flag, str) else flag
            given[key] = f"--{dest.replace('_', '-')}"
        if value is None:
            continue
        if key in PATH_KEYS and isinstance(value, str) and value not in _NOT_PATHS:
            value = str(Path(value).expanduser().absolute())
        if key == "requested_gpu":
            requested_gpu = str(value)
            continue
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    try:
        spec = parse_spec(data, base_dir=base_dir, as_is=as_is)
    except SpecError as exc:
        message = str(exc)
        for key, where in given.items():
            # A bad override is named as the user gave it, not as the spec key it overrides.
            message = message.replace(f"spec key `{key}`", where)
        raise SpecError(message) from None
    if requested_gpu is not None:
        spec.requested_gpu = get_profile(requested_gpu).name  # an unknown name fails here, in one line
    return spec


def apply_queue_policy(config: ModelConfig, batching: BatchingSpec) -> None:
    """Write ``batching.queue`` and the priority levels into ``config.dynamic_batching``.

    SpecError when they are set but the model has no dynamic batcher (``max_batch_size`` 0), where
    Triton has no queue to bound.
    """
    queue = batching.queue
    wanted = queue != QueueSpec() or batching.priority_levels > 0
    if not wanted:
        return
    dyn = config.dynamic_batching
    if dyn is None:
        raise SpecError(
            f"spec keys `batching.queue`/`batching.priority_levels` need dynamic batching; model "
            f"`{config.name}` has max_batch_size {config.max_batch_size} (no batcher, no queue)"
        )
    if queue != QueueSpec():
        dyn.default_queue_policy = QueuePolicy(
            max_queue_size=queue.max_size,
            default_timeout_microseconds=queue.timeout_us,
            allow_timeout_override=queue.allow_timeout_override,
            timeout_action=queue.timeout_action,
        )
    dyn.priority_levels = batching.priority_levels
    dyn.default_priority_level = batching.default_priority_level


def with_overrides(spec: BuildSpec, **changes: Any) -> BuildSpec:
    """A copy of ``spec`` with nested dataclass fields replaced (``calibration={'samples': 64}``)."""
    updates = {}
    for key, value in changes.items():
        current = getattr(spec, key)
        updates[key] = dataclasses.replace(current, **value) if isinstance(value, dict) else value
    return dataclasses.replace(spec, **updates)
