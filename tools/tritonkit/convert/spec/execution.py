"""Where and how a version served by the embedded server executes: device, engine, runner, precision,
batch buckets and instance placement.

Owns the spec's ``serving`` section (:class:`ServingSpec`: device, engine, runner, precision, buckets,
instances, ``jit_optimize``, ``shape_buckets``; the removed ``pipeline`` refused in one line), the
decision that turns it plus the machine into an :class:`ExecutionPlan` (GPU by default when one is visible and the model allows it; the runner,
native or python, by :data:`RUNNERS`' rule; :func:`choose_device`, :func:`plan_execution`), the batch
bucket ladders (``pow2`` and ``fine``: :func:`bucket_ladder`, :func:`default_buckets`, every bucket a
tuned config may name for the native program, :func:`method_buckets`, and the batcher's preferred sizes,
:func:`preferred_sizes`), the config parameters the GPU runners read
(:meth:`ExecutionPlan.runner_parameters`), the ``KIND_GPU`` instance groups (count and per-GPU ``gpus``
lists, :func:`instance_groups`) and the refusal of ``KIND_GPU`` where no GPU is visible (re-exported
from ``repository.check``). The plan is what build.json records (:meth:`ExecutionPlan.manifest_extra`)
and what ``tritonkit check`` shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonkit.config import InstanceGroup
from tritonkit.convert.spec.gpu_profiles import GpuProfile
from tritonkit.convert.spec.spec_parse import shown
from tritonkit.errors import SpecError

# Re-exported: the repository check needs them below the build layer.
from tritonkit.repository.check import gpu_placement_problems, visible_gpus

__all__ = [
    "DEFAULT_GPU_INSTANCES",
    "DEVICES",
    "ENGINES",
    "NATIVE_GPU_INSTANCES",
    "NATIVE_UNCHECKED",
    "PIPELINE_REMOVED",
    "RUNNERS",
    "ExecutionPlan",
    "Placement",
    "ServingSpec",
    "bucket_ladder",
    "bucket_style",
    "choose_device",
    "default_buckets",
    "gpu_placement_problems",
    "instance_groups",
    "method_buckets",
    "plan_execution",
    "preferred_sizes",
    "visible_gpus",
]

DEVICES: tuple[str, ...] = ("auto", "gpu", "cpu")
#: ``torch``: a torch.export program with CUDA graphs (the GPU default, measured faster on the H100:
#: docs/benchmarks-gpu.md); ``onnxruntime``: the ONNX graph on ONNX Runtime's CUDA provider.
ENGINES: tuple[str, ...] = ("auto", "torch", "onnxruntime")
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "fp16")
#: How a torch-engine version is served: ``python`` (the torch runner in Triton's python backend),
#: ``native`` (tritonkit's C++ backend ``tritonkit_torch`` in Triton's own process: no per-request trip
#: through the python backend's stub; ``tritonkit.backends.native``) or ``auto``: native for a GPU version
#: where it can be compiled (a C++ compiler and CUDA's headers here), else python. On an H200 host, same call, the native backend served one-row requests of BERT-base at 0.97
#: of the engine alone where the python runner served 0.86 (MiniLM 48,255 against 32,478 samples/s).
RUNNERS: tuple[str, ...] = ("auto", "python", "native")


#: Instances per GPU when the spec names no count: two, so one instance's host work (reading
#: requests, copies, answers) overlaps the other's GPU work. Measured on the H100 (MiniLM, FP16):
#: requests of 1 at 64 in flight 5,926 -> 10,684 samples/s, of 16 at 16 in flight 26,403 -> 40,358.
DEFAULT_GPU_INSTANCES = 2
#: The native runner's instances per GPU when the spec names no count: two, each pipelined (config
#: parameter ``answer_thread``, written for its GPU versions: a batch's GPU work is enqueued, and waited
#: for and answered on the instance's second thread while its first gathers the next batch). Unpipelined
#: instances copy and compute in turn and fall into step (all copying, the GPU idle, then all computing);
#: four of them were the earlier default. Measured on an H100 host, requests of one row through HTTP,
#: same call (docs/gpu-raw/h100/ab-*-pipelined.md): ResNet-50 with FP16 images 8,856 samples/s with 2
#: pipelined against 8,495 with 4 unpipelined (3 pipelined 8,709, 4 pipelined 8,380), MiniLM 63,049 against
#: 61,655.
NATIVE_GPU_INSTANCES = 2
#: :func:`plan_execution`'s ``native_problem`` when its caller did not check (``plan_version`` does)
NATIVE_UNCHECKED = "its toolchain (a C++ compiler, CUDA's headers and runtime) was not looked for"


@dataclass(frozen=True)
class Placement:
    """``count`` instances on each GPU of ``gpus`` (empty: on every visible GPU). ``count`` None:
    :data:`DEFAULT_GPU_INSTANCES` per GPU, one on the CPU."""

    count: int | None = None
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class ServingSpec:
    """The spec's ``serving`` section. Every field has a default; the section may be absent."""

    device: str = "auto"
    engine: str = "auto"
    precision: str = "auto"
    batch_buckets: tuple[int, ...] = ()
    cuda_graphs: bool = True
    placement: Placement = field(default_factory=Placement)
    #: :data:`RUNNERS`: the python-backend torch runner, the native backend (torch engine only) or auto.
    runner: str = "auto"
    #: native backend on a GPU: the graphs capture TorchScript's optimised plan, elementwise ops fused
    #: (config parameter ``jit_optimize``), instead of the plain one. Measured on an H100, HTTP, same
    #: call, 2 pipelined instances: ResNet-50 one request 1.67 against 1.81 ms p50 (Triton's infer 963
    #: against 1,114 us), 512 in flight 6,475 against 5,530 samples/s; BERT-base even (0.92 / 0.94 ms,
    #: 15,176 / 15,335). The cost is at load: compiling the fused kernels per bucket and instance took
    #: BERT-base's loads from 3-6 s to 7-16 s and a quick tune past 5 minutes; so it is opt-in.
    jit_optimize: bool = False
    #: edges per dynamic non-batch axis (by its ``dynamic_axes`` name), ascending; the last is the
    #: longest length the model takes (see ``convert.targets.buckets``, ``backends/runners/shape_buckets.py``)
    shape_buckets: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: the value each input is padded with up to its bucket (0 where absent)
    pad_values: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> ServingSpec:
        """Parse ``serving:``; a wrong key or value is a one-line :class:`SpecError`."""
        data = dict(data or {})
        known = {
            "device",
            "engine",
            "precision",
            "batch_buckets",
            "cuda_graphs",
            "instances",
            "jit_optimize",
            "pipeline",  # removed: true is refused with what to use (_runner_flags), false is the default
            "runner",
            "shape_buckets",
            "pad_values",
        }
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(
                f"serving: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}"
            )
        for key, allowed in (
            ("device", DEVICES),
            ("engine", ENGINES),
            ("precision", PRECISIONS),
            ("runner", RUNNERS),
        ):
            if key in data and data[key] not in allowed:
                raise SpecError(f"serving.{key} must be one of {', '.join(allowed)}; got {shown(data[key])}")
        buckets = data.get("batch_buckets", [])
        if not isinstance(buckets, list) or not all(_positive(b) for b in buckets):
            raise SpecError(f"serving.batch_buckets must be a list of integers >= 1; got {shown(buckets)}")
        graphs = data.get("cuda_graphs", True)
        if not isinstance(graphs, bool):
            raise SpecError(f"serving.cuda_graphs must be true or false; got {shown(graphs)}")
        runner, jit_optimize = _runner_flags(data)
        placement = _placement(data.get("instances", {}) or {})
        shape_buckets = _shape_buckets(data.get("shape_buckets", {}))
        pad_values = _pad_values(data.get("pad_values", {}) or {})
        spec = cls(
            device=str(data.get("device", "auto")),
            engine=str(data.get("engine", "auto")),
            precision=str(data.get("precision", "auto")),
            batch_buckets=tuple(sorted(set(buckets))),
            cuda_graphs=graphs,
            placement=placement,
            runner=runner,
            jit_optimize=jit_optimize,
            shape_buckets=shape_buckets,
            pad_values=dict(pad_values),
        )
        if spec.device == "cpu" and spec.gpu_only():  # the portable runner serves every CPU version
            raise SpecError(
                f"{' and '.join(spec.gpu_only())} serve on a GPU; with serving.device cpu the portable runner "
                "serves every version: set serving.device gpu (or auto), or leave them auto"
            )
        return spec

    def gpu_only(self) -> list[str]:
        """The settings named here that apply on a GPU only (``serving.engine torch``, ``serving.runner
        native``, ...): a CPU version is served by the portable runner whatever they say."""
        return [
            f"serving.{key} {value}"
            for key, value in (("engine", self.engine), ("runner", self.runner))
            if value != "auto"
        ]

    def to_mapping(self) -> dict[str, Any]:
        """The ``serving:`` section that :meth:`from_mapping` reads back as this spec."""
        instances: dict[str, Any] = {"gpus": list(self.placement.gpus)}
        if self.placement.count is not None:
            instances["count"] = self.placement.count
        return {
            "device": self.device,
            "engine": self.engine,
            "precision": self.precision,
            "batch_buckets": list(self.batch_buckets),
            "cuda_graphs": self.cuda_graphs,
            "instances": instances,
            "runner": self.runner,
            "jit_optimize": self.jit_optimize,
            "shape_buckets": {k: list(v) for k, v in self.shape_buckets.items()},
            "pad_values": dict(self.pad_values),
        }


#: the one line a spec asking for the python torch runner's removed pipelined execute gets
PIPELINE_REMOVED = (
    "serving.pipeline was removed (the python torch runner's pipelined execute, measured slower); "
    "for batches in flight while the next is gathered use serving.runner: native (two pipelined "
    "instances per GPU), or drop the key"
)


def _runner_flags(data: Mapping[str, Any]) -> tuple[str, bool]:
    """``serving.runner`` and ``jit_optimize``, checked against each other and the engine; the removed
    ``serving.pipeline`` refused unless false (what specs written before its removal say)."""
    if data.get("pipeline", False) is not False:
        raise SpecError(PIPELINE_REMOVED)
    runner = str(data.get("runner", "auto"))
    jit_optimize = data.get("jit_optimize", False)
    if not isinstance(jit_optimize, bool):
        raise SpecError(f"serving.jit_optimize must be true or false; got {shown(jit_optimize)}")
    if jit_optimize and runner != "native":
        raise SpecError(
            f"serving.jit_optimize is the native backend's; set serving.runner: native (got {runner})"
        )
    if runner == "native" and data.get("engine") == "onnxruntime":
        raise SpecError("serving.runner native serves the torch engine; got serving.engine onnxruntime")
    return runner, jit_optimize


def _placement(instances: Any) -> Placement:
    """``serving.instances``: ``count`` (>= 1) and ``gpus`` (indices >= 0)."""
    if not isinstance(instances, Mapping) or sorted(set(instances) - {"count", "gpus"}):
        raise SpecError(f"serving.instances takes `count` and `gpus`; got {shown(instances)}")
    count = instances.get("count")
    if count is not None and not _positive(count):
        raise SpecError(f"serving.instances.count must be an integer >= 1; got {shown(count)}")
    gpus = instances.get("gpus", [])
    if not isinstance(gpus, list) or not all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus
    ):
        raise SpecError(f"serving.instances.gpus must be a list of GPU indices >= 0; got {shown(gpus)}")
    return Placement(None if count is None else int(count), tuple(sorted(set(gpus))))


def _pad_values(pad_values: Any) -> Mapping[str, float]:
    if not isinstance(pad_values, Mapping) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
        for k, v in pad_values.items()
    ):
        raise SpecError(f"serving.pad_values must map input names to numbers; got {shown(pad_values)}")
    return pad_values


def _shape_buckets(value: object) -> dict[str, tuple[int, ...]]:
    """``serving.shape_buckets``: axis name -> ascending edges >= 1 (a one-line SpecError otherwise)."""
    if not isinstance(value, Mapping):
        raise SpecError(
            f"serving.shape_buckets must map axis names to lists of lengths, e.g. {{seq: [32, 64, 128]}}; "
            f"got {shown(value)}"
        )
    out: dict[str, tuple[int, ...]] = {}
    for axis, edges in value.items():
        if (
            not isinstance(axis, str)
            or not isinstance(edges, list)
            or not edges
            or not all(_positive(e) for e in edges)
        ):
            raise SpecError(
                f"serving.shape_buckets.{axis} must be a non-empty list of lengths >= 1; got {shown(edges)}"
            )
        out[axis] = tuple(sorted(set(edges)))
    return out


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def default_buckets(max_batch_size: int) -> tuple[int, ...]:
    """Powers of two up to ``max_batch_size`` (which is itself the last bucket)."""
    return bucket_ladder(max_batch_size, "pow2")


#: Bucket ladders: ``pow2`` (1, 2, 4, ... up to the max batch) and ``fine`` (1, 2, 4, 8, then steps of
#: a quarter of the power of two below, never under 8: 16, 24, ... 64, 80, 96, ... 128, 160, ...). With
#: the ladder as the batcher's preferred sizes most batches are a bucket; a batch that is not wastes at
#: most the step (a quarter of the batch at worst, far less near the top) instead of up to half.
BUCKET_STYLES: tuple[str, ...] = ("pow2", "fine")


def bucket_ladder(max_batch_size: int, style: str = "fine") -> tuple[int, ...]:
    """The batch buckets of ``style`` up to ``max_batch_size`` (which is itself the last bucket)."""
    if style not in BUCKET_STYLES:
        raise SpecError(f"bucket style {shown(style)}: expected one of {', '.join(BUCKET_STYLES)}")
    if max_batch_size <= 0:
        return (1,)
    buckets, size = [], 1
    while size < max_batch_size:
        buckets.append(size)
        if style == "pow2" or size < 8:
            size *= 2
        else:
            size += max(8, (1 << (size.bit_length() - 1)) // 4)
    return (*buckets, max_batch_size)


def method_buckets(max_batch_size: int) -> list[int]:
    """Every bucket a config of a version may name: the ``fine`` and ``pow2`` ladders up to its max
    batch (tune's bucket styles); the native runner's program is traced for each."""
    return sorted(set(bucket_ladder(max_batch_size, "fine")) | set(bucket_ladder(max_batch_size, "pow2")))


def bucket_style(buckets: Sequence[int], max_batch_size: int) -> str | None:
    """The ladder ``buckets`` are (``pow2`` or ``fine``), or None for a list of one's own."""
    return next((s for s in BUCKET_STYLES if tuple(buckets) == bucket_ladder(max_batch_size, s)), None)


def preferred_sizes(buckets: Sequence[int], max_batch_size: int) -> list[int]:
    """The dynamic batcher's preferred sizes for a bucketed runner: every bucket up to the max batch,
    one included. Triton sends the largest preferred batch the queue holds at once, so batches are
    bucket-sized (nothing padded) and a lone request leaves at once instead of waiting the batching
    delay for company: on an H200, a BERT-base encoder's one-request p50 fell from 1.90 to 1.38 ms and
    its peak held (15,494 against 15,698 requests/s); the delay still applies to a queue whose rows
    make no bucket."""
    return [b for b in buckets if b <= max_batch_size]


@dataclass(frozen=True)
class ExecutionPlan:
    """What one version executes on; recorded in build.json under ``execution``."""

    device: str  # "gpu" or "cpu"
    engine: str  # "torch" or "onnxruntime"
    precision: str  # "fp32" or "fp16"
    batch_buckets: tuple[int, ...]
    cuda_graphs: bool
    instance_groups: tuple[InstanceGroup, ...]
    reason: str
    runner: str = "python"
    #: why ``serving.runner: auto`` chose the python runner ("" when it did not choose, or chose native)
    runner_reason: str = ""
    jit_optimize: bool = False

    def manifest_extra(self) -> dict[str, Any]:
        return {
            "execution": {
                "device": self.device,
                "engine": self.engine,
                "precision": self.precision,
                "batch_buckets": list(self.batch_buckets),
                "cuda_graphs": self.cuda_graphs,
                "instances": [
                    {"kind": g.kind, "count": g.count, "gpus": list(g.gpus)} for g in self.instance_groups
                ],
                "reason": self.reason,
                **({"runner": self.runner} if self.engine == "torch" else {}),
                **({"runner_reason": self.runner_reason} if self.runner_reason else {}),
                **({"jit_optimize": True} if self.jit_optimize else {}),
            }
        }

    def runner_parameters(self) -> dict[str, str]:
        """Config parameters the runners read (see backends/runners/torch_runner.py, onnx_cuda_runner.py)."""
        return {
            "engine": self.engine,
            "precision": self.precision,
            "device": "cuda" if self.device == "gpu" else "cpu",
            "batch_buckets": ",".join(str(b) for b in self.batch_buckets),
            "cuda_graphs": "true" if self.cuda_graphs and self.device == "gpu" else "false",
            # Inputs that arrive in GPU memory (CUDA shared memory) reach the runner there.
            "FORCE_CPU_ONLY_INPUT_TENSORS": "no" if self.device == "gpu" else "yes",
            # the native backend's pipelined instances (NATIVE_GPU_INSTANCES says why)
            **({"answer_thread": "true"} if self.runner == "native" and self.device == "gpu" else {}),
            **({"jit_optimize": "true"} if self.jit_optimize and self.device == "gpu" else {}),
        }


def instance_groups(
    placement: Placement, device: str, visible: Sequence[int], default_count: int = DEFAULT_GPU_INSTANCES
) -> tuple[InstanceGroup, ...]:
    """``KIND_GPU`` groups (``count`` per listed GPU, ``default_count`` when the placement names none) on
    a GPU, one ``KIND_CPU`` group otherwise."""
    if device == "cpu":
        return (InstanceGroup(kind="KIND_CPU", count=placement.count or 1),)
    if not visible:
        raise SpecError("serving: KIND_GPU instances need a GPU; none is visible here (nvidia-smi -L)")
    missing = [g for g in placement.gpus if g not in visible]
    if missing:
        raise SpecError(f"serving.instances.gpus names GPU(s) {missing}; visible here: {list(visible)}")
    gpus = list(placement.gpus) or list(visible)
    return (InstanceGroup(kind="KIND_GPU", count=placement.count or default_count, gpus=gpus),)


def choose_device(wanted: str, visible: Sequence[int], cpu_only: str | None = None) -> tuple[str, str]:
    """(device, reason) for ``serving.device`` ``wanted``: the GPU by default where one is visible and
    the model can use it. ``cpu_only``: why this model cannot run on a GPU (None: it can). SpecError
    when ``gpu`` is asked for and cannot be had."""
    if wanted == "gpu" and not visible:
        raise SpecError("serving.device is gpu but no GPU is visible here (nvidia-smi -L found none)")
    if wanted == "gpu" and cpu_only is not None:
        raise SpecError(f"serving.device is gpu but {cpu_only}")
    if wanted == "cpu":
        return "cpu", "serving.device is cpu"
    if not visible:
        return "cpu", "no GPU visible here"
    if cpu_only is not None:
        return "cpu", cpu_only
    return "gpu", "serving.device is gpu" if wanted == "gpu" else f"{len(visible)} GPU(s) visible"


def plan_execution(
    spec: ServingSpec,
    *,
    max_batch_size: int,
    gpus: Sequence[int] | None = None,
    profile: GpuProfile | None = None,
    gpu_capable: bool = True,
    engines: Sequence[str] = ("torch", "onnxruntime"),
    native_problem: str | None = NATIVE_UNCHECKED,
) -> ExecutionPlan:
    """Decide device, engine, precision, buckets and instances for one version.

    ``gpus``: the visible GPU indices (None: ask ``nvidia-smi``). ``gpu_capable``: the model can run
    on a GPU at all (a graph with host-only ops cannot). ``engines``: the artifacts this model has
    (``torch`` needs a torch module, ``onnxruntime`` an ONNX graph). ``profile``: the GPU profile,
    whose precisions decide ``auto`` precision (FP16 wherever the profile has it). ``native_problem``:
    why the native backend cannot be compiled here (None: it can), which ``runner: auto`` heeds; a
    caller that did not look (the default) gets the python runner from ``auto``.
    """
    visible = list(visible_gpus() if gpus is None else gpus)
    device, reason = choose_device(
        spec.device, visible, None if gpu_capable else "this model cannot run on a GPU"
    )
    if spec.engine == "auto":
        engine = "torch" if "torch" in engines and device == "gpu" else "onnxruntime"
    else:
        engine = spec.engine
    if engine not in engines:
        raise SpecError(
            f"serving.engine {engine} needs an artifact this model lacks; it has {', '.join(engines)}"
        )
    if spec.precision != "auto":
        precision = spec.precision
    elif device == "gpu" and (profile is None or "fp16" in profile.precisions):
        precision = "fp16"
    else:
        precision = "fp32"
    if device == "cpu" and precision == "fp16":
        raise SpecError("serving.precision fp16 needs the GPU; this version runs on the CPU")
    buckets = spec.batch_buckets or bucket_ladder(max_batch_size, "fine")
    if max_batch_size > 0 and buckets[-1] > max_batch_size:
        raise SpecError(f"serving.batch_buckets {list(buckets)} exceed max_batch_size {max_batch_size}")
    runner, runner_reason = _runner(spec, device, engine, native_problem)
    per_gpu = NATIVE_GPU_INSTANCES if runner == "native" else DEFAULT_GPU_INSTANCES
    groups = instance_groups(spec.placement, device, visible, per_gpu)
    if runner == "native" and engine != "torch":
        raise SpecError(
            f"serving.runner native serves the torch engine; this version's engine is {engine} ({reason})"
        )
    return ExecutionPlan(
        device,
        engine,
        precision,
        tuple(buckets),
        spec.cuda_graphs,
        groups,
        reason,
        runner,
        runner_reason,
        spec.jit_optimize,
    )


def _runner(spec: ServingSpec, device: str, engine: str, native_problem: str | None) -> tuple[str, str]:
    """(runner, why auto chose python) for ``serving.runner``: auto is native for a torch-engine GPU
    version where the backend can be compiled."""
    if spec.runner != "auto":
        return spec.runner, ""
    if device != "gpu" or engine != "torch":
        return "python", ""
    if native_problem is not None:
        return "python", f"the native backend: {native_problem}"
    return "native", ""
