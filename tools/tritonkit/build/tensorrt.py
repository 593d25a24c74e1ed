"""The TensorRT target: derive optimization profiles, builder flags, memory pools and the Triton
config from a spec and a GPU profile (pure functions, tested everywhere), then build the engine
with Polygraphy's loaders (``NetworkFromOnnxPath`` → ``CreateConfig`` → ``EngineFromNetwork`` →
``SaveEngine``) wherever ``import tensorrt`` works.

Precision handling by TensorRT major version:

- TensorRT >= 11 (strongly typed only): the precision's ONNX is built as a strongly typed network
  (FP16 ONNX for fp16, the Q/DQ ONNX for int8); builder precision flags do not exist.
- TensorRT <= 10: fp16 builds the FP32 graph with the FP16 flag; int8 builds the Q/DQ graph with
  INT8 + FP16 flags (the hybrid's unquantized layers run in FP16), or, when the spec asks for
  ``int8.legacy_calibrator``, the FP32 graph with the deprecated implicit-INT8 calibrator and its cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.build.gpu import GIB, GpuProfile, check_precision
from tritonkit.build.spec import DEFAULT_MAX_BATCH_SIZE, BuildSpec
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig
from tritonkit.errors import GpuProfileError, SpecError, TensorRTUnavailableError

__all__ = [
    "PLAN_FILE",
    "BuilderFlags",
    "EnginePlan",
    "ShapeRange",
    "build_engine",
    "builder_flags",
    "create_config",
    "plan_for_spec",
    "polygraphy_profiles",
    "require_tensorrt",
    "resolve_profiles",
    "tensorrt_config",
    "tensorrt_major",
]

PLAN_FILE = "model.plan"
INSTALL_HINT = (
    "the TensorRT builder is not importable here (`import tensorrt` failed); run the build on a "
    "machine with TensorRT (a T4 node, or NVIDIA's TensorRT/Triton container: `pip install tensorrt` "
    "from NVIDIA's index), or use --target onnxruntime / portable"
)


@dataclass(frozen=True)
class ShapeRange:
    """Non-batch dims of one input in one profile (the batch range is the profile's)."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


@dataclass(frozen=True)
class EngineProfile:
    batch: tuple[int, int, int]
    shapes: dict[str, ShapeRange] = field(default_factory=dict)

    def full(self, name: str, which: str, fixed: tuple[int, ...] = ()) -> tuple[int, ...]:
        index = {"min": 0, "opt": 1, "max": 2}[which]
        dims = getattr(self.shapes[name], which) if name in self.shapes else fixed
        return (self.batch[index], *dims)


@dataclass(frozen=True)
class EnginePlan:
    profiles: tuple[EngineProfile, ...]
    max_batch: int
    preferred_batch_sizes: tuple[int, ...]
    workspace_bytes: int
    optimization_level: int
    timing_cache: Path
    compute_capability: str
    gpu: str
    strongly_typed: str  # "auto" | "on" | "off"; resolved per TensorRT version by builder_flags
    legacy_calibrator: bool


def resolve_profiles(spec: BuildSpec, max_batch: int) -> tuple[EngineProfile, ...]:
    """Profiles from ``tensorrt.profiles`` (one per shape range), checked; one default when empty."""
    if not spec.tensorrt.profiles:
        return (EngineProfile((1, max(1, max_batch // 2), max_batch)),)
    profiles = []
    for index, item in enumerate(spec.tensorrt.profiles):
        key = f"tensorrt.profiles[{index}]"
        batch = item.batch or [1, max(1, max_batch // 2), max_batch]
        if len(batch) != 3 or not 1 <= batch[0] <= batch[1] <= batch[2]:
            raise SpecError(
                f"spec key `{key}.batch`: expected [min, opt, max] with 1 <= min <= opt <= max, got {batch}"
            )
        shapes = {}
        for name, ranges in item.shapes.items():
            unknown = set(ranges) - {"min", "opt", "max"}
            if unknown or len(ranges) != 3:
                raise SpecError(
                    f"spec key `{key}.shapes.{name}`: expected keys min, opt, max; got {sorted(ranges)}"
                )
            lo, mid, hi = (tuple(ranges[k]) for k in ("min", "opt", "max"))
            if not len(lo) == len(mid) == len(hi):
                raise SpecError(f"spec key `{key}.shapes.{name}`: min, opt and max must have the same rank")
            if any(not 1 <= a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True)):
                raise SpecError(
                    f"spec key `{key}.shapes.{name}`: expected 1 <= min <= opt <= max per dim, got "
                    f"min {list(lo)}, opt {list(mid)}, max {list(hi)}"
                )
            shapes[name] = ShapeRange(lo, mid, hi)
        profiles.append(EngineProfile((batch[0], batch[1], batch[2]), shapes))
    maxima = sorted({p.batch[2] for p in profiles})
    if len(maxima) > 1:
        raise SpecError(f"all TensorRT profiles must share one max batch (Triton requires it); got {maxima}")
    return tuple(profiles)


def plan_for_spec(spec: BuildSpec, gpu: GpuProfile) -> EnginePlan:
    """Everything about the engine that can be decided (and refused) before building anything."""
    for precision in spec.precisions:
        check_precision(gpu, precision)
    requested = spec.batching.max_batch_size
    if requested == "auto":
        requested = gpu.max_batch_cap
    elif requested is None:  # the graph's choice; an engine needs profiles before the graph is read
        requested = min(DEFAULT_MAX_BATCH_SIZE, gpu.max_batch_cap)
    assert isinstance(requested, int)
    profiles = resolve_profiles(spec, requested)
    profile_max = profiles[0].batch[2]
    if requested > profile_max:
        raise SpecError(
            f"`batching.max_batch_size` {requested} is above the TensorRT profiles' max batch {profile_max}"
        )
    if profile_max > gpu.max_batch_cap:
        raise GpuProfileError(
            f"TensorRT profile max batch {profile_max} is above the {gpu.name} cap of {gpu.max_batch_cap}"
        )
    for size in spec.batching.preferred_batch_sizes:
        if not any(p.batch[0] <= size <= p.batch[2] for p in profiles):
            ranges = ", ".join(f"[{p.batch[0]}, {p.batch[2]}]" for p in profiles)
            raise SpecError(
                f"`batching.preferred_batch_sizes` {size} is outside every TensorRT profile's batch range ({ranges})"
            )
    if spec.tensorrt.optimization_level not in range(6):
        raise SpecError(
            f"spec key `tensorrt.optimization_level`: expected 0..5, got {spec.tensorrt.optimization_level}"
        )
    workspace = spec.tensorrt.workspace_gib if spec.tensorrt.workspace_gib is not None else gpu.workspace_gib
    if not 0 < workspace <= gpu.memory_gib:
        raise GpuProfileError(
            f"TensorRT workspace {workspace} GiB does not fit {gpu.name} ({gpu.memory_gib} GiB)"
        )
    return EnginePlan(
        profiles=profiles,
        max_batch=profile_max,
        preferred_batch_sizes=tuple(spec.batching.preferred_batch_sizes),
        workspace_bytes=int(workspace * GIB),
        optimization_level=spec.tensorrt.optimization_level,
        timing_cache=spec.resolve(spec.tensorrt.timing_cache),
        compute_capability=gpu.compute_capability,
        gpu=gpu.name,
        strongly_typed=spec.tensorrt.strongly_typed,
        legacy_calibrator=spec.int8.legacy_calibrator,
    )


@dataclass(frozen=True)
class BuilderFlags:
    strongly_typed: bool
    fp16: bool
    int8: bool
    bf16: bool
    tf32: bool
    legacy_calibrator: bool
    #: Which ONNX the network is parsed from: "fp32" or the precision's own artifact.
    network_source: str


def builder_flags(plan: EnginePlan, precision: str, trt_major: int, gpu: GpuProfile) -> BuilderFlags:
    """Builder flags for ``precision`` on TensorRT ``trt_major`` (see the module docstring)."""
    check_precision(gpu, precision)
    strongly = plan.strongly_typed == "on" or (plan.strongly_typed == "auto" and trt_major >= 11)
    if trt_major >= 11 and plan.strongly_typed == "off":
        raise SpecError(
            "`tensorrt.strongly_typed: off` is impossible on TensorRT >= 11 (strongly typed networks only)"
        )
    legacy = precision == "int8" and plan.legacy_calibrator
    if legacy and trt_major >= 11:
        raise SpecError(
            "`int8.legacy_calibrator` needs TensorRT <= 10; TensorRT 11 removed implicit INT8 calibration"
        )
    if legacy and strongly:
        raise SpecError("`int8.legacy_calibrator` cannot be combined with a strongly typed network")
    if strongly:
        if precision == "bf16":
            raise SpecError(
                "bf16 with a strongly typed network needs a BF16 ONNX model, which this builder does not make"
            )
        return BuilderFlags(True, False, False, False, False, False, precision)
    return BuilderFlags(
        strongly_typed=False,
        fp16=precision in ("fp16", "int8"),
        int8=precision == "int8",
        bf16=precision == "bf16",
        tf32=gpu.tf32 and precision == "fp32",
        legacy_calibrator=legacy,
        network_source="fp32" if precision in ("fp16", "bf16") or legacy else precision,
    )


def tensorrt_config(name: str, plan: EnginePlan, io: Any, spec: BuildSpec) -> ModelConfig:
    """``platform: tensorrt_plan`` config: max batch = the profiles' max, one instance group per profile."""
    for tensor in (*io.inputs, *io.outputs):
        if not tensor.shape or tensor.shape[0] != -1:
            raise SpecError(
                f"tensor `{tensor.name}` has a fixed leading dim {list(tensor.shape)}; TensorRT batching needs a dynamic batch axis"
            )
    several = len(plan.profiles) > 1
    groups = [
        InstanceGroup(kind="KIND_GPU", count=spec.instances.count, profile=[str(i)] if several else [])
        for i in range(len(plan.profiles) if several else 1)
    ]
    return ModelConfig(
        name=name,
        platform="tensorrt_plan",
        max_batch_size=plan.max_batch,
        inputs=[TensorConfig(t.name, t.datatype, list(t.shape[1:])) for t in io.inputs],
        outputs=[TensorConfig(t.name, t.datatype, list(t.shape[1:])) for t in io.outputs],
        dynamic_batching=DynamicBatching(
            max_queue_delay_microseconds=spec.batching.max_queue_delay_us,
            preferred_batch_size=list(plan.preferred_batch_sizes),
        ),
        instance_groups=groups,
        cc_model_filenames={plan.compute_capability: PLAN_FILE},
        default_model_filename=PLAN_FILE,
    )


def check_shapes(plan: EnginePlan, io: Any) -> None:
    """Every dynamic non-batch dim needs a range in every profile; fixed dims must match."""
    for index, profile in enumerate(plan.profiles):
        for tensor in io.inputs:
            rest = tuple(tensor.shape[1:])
            if tensor.name in profile.shapes:
                rng = profile.shapes[tensor.name]
                if len(rng.min) != len(rest):
                    raise SpecError(
                        f"profile {index} gives `{tensor.name}` rank {len(rng.min)}; the model expects {len(rest) + 1} "
                        f"(batch + {list(rest)})"
                    )
                for d, lo, hi in zip(rest, rng.min, rng.max, strict=True):
                    if d > 0 and not lo == hi == d:
                        raise SpecError(
                            f"profile {index} shape range for `{tensor.name}` {list(rng.min)}..{list(rng.max)} "
                            f"does not fit the model's fixed dims {list(rest)}"
                        )
            elif any(d < 0 for d in rest):
                raise SpecError(
                    f"input `{tensor.name}` has dynamic dims {list(rest)}; give "
                    f"`tensorrt.profiles[{index}].shapes.{tensor.name}` min/opt/max"
                )


# --- the builder (needs TensorRT) --------------------------------------------------------------
def tensorrt_major() -> int:
    trt = require_tensorrt()
    return int(str(trt.__version__).split(".")[0])


def require_tensorrt() -> Any:
    """``tensorrt`` if it imports; TensorRTUnavailableError with an install hint otherwise."""
    try:
        import tensorrt
    except Exception as exc:  # ImportError, or a broken install raising OSError
        raise TensorRTUnavailableError(f"{INSTALL_HINT} ({type(exc).__name__})") from None
    return tensorrt


def polygraphy_profiles(plan: EnginePlan, io: Any) -> list[Any]:
    """One Polygraphy ``Profile`` per plan profile, with full (batch + dims) min/opt/max shapes."""
    from polygraphy.backend.trt import Profile

    check_shapes(plan, io)
    fixed = {t.name: tuple(t.shape[1:]) for t in io.inputs}
    profiles = []
    for profile in plan.profiles:
        tp = Profile()
        for name, dims in fixed.items():
            tp.add(
                name,
                min=profile.full(name, "min", dims),
                opt=profile.full(name, "opt", dims),
                max=profile.full(name, "max", dims),
            )
        profiles.append(tp)
    return profiles


def create_config(
    plan: EnginePlan, flags: BuilderFlags, profiles: list[Any], workspace_key: Any, calibrator: Any = None
) -> Any:
    """Polygraphy ``CreateConfig`` for the plan and flags (``workspace_key``: ``trt.MemoryPoolType.WORKSPACE``)."""
    from polygraphy.backend.trt import CreateConfig

    kwargs: dict[str, Any] = {
        "profiles": profiles,
        "memory_pool_limits": {workspace_key: plan.workspace_bytes},
        "builder_optimization_level": plan.optimization_level,
        "load_timing_cache": str(plan.timing_cache) if plan.timing_cache.is_file() else None,
    }
    if not flags.strongly_typed:  # TensorRT 11 has no precision flags; strongly typed networks carry types
        kwargs.update(
            fp16=flags.fp16, int8=flags.int8, bf16=flags.bf16, tf32=flags.tf32, calibrator=calibrator
        )
    return CreateConfig(**kwargs)


def build_engine(
    fp32_onnx: Path,
    precision_onnx: Path,
    plan_file: Path,
    plan: EnginePlan,
    precision: str,
    gpu: GpuProfile,
    io: Any,
    calibration: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:  # pragma: no cover - runs only where TensorRT imports (tests marked `tensorrt`)
    """Build and save the engine; return what goes into ``build.json``."""
    trt = require_tensorrt()
    from polygraphy.backend.trt import Calibrator, EngineFromNetwork, NetworkFromOnnxPath, SaveEngine

    flags = builder_flags(plan, precision, int(str(trt.__version__).split(".")[0]), gpu)
    profiles = polygraphy_profiles(plan, io)
    source = fp32_onnx if flags.network_source == "fp32" else precision_onnx
    network = NetworkFromOnnxPath(str(source), strongly_typed=flags.strongly_typed or None)
    calibrator = None
    if flags.legacy_calibrator:
        cache = plan.timing_cache.with_name(f"{plan_file.stem}.int8-calibration.cache")
        calibrator = Calibrator(iter(calibration or []), cache=str(cache))
    plan.timing_cache.parent.mkdir(parents=True, exist_ok=True)
    config = create_config(plan, flags, profiles, trt.MemoryPoolType.WORKSPACE, calibrator)
    engine = EngineFromNetwork(network, config=config, save_timing_cache=str(plan.timing_cache))
    SaveEngine(engine, path=str(plan_file))()
    return {
        "tensorrt": str(trt.__version__),
        "strongly_typed": flags.strongly_typed,
        "flags": {k: getattr(flags, k) for k in ("fp16", "int8", "bf16", "tf32", "legacy_calibrator")},
        "network_source": flags.network_source,
        "profiles": [
            {
                "batch": list(p.batch),
                "shapes": {n: [list(r.min), list(r.opt), list(r.max)] for n, r in p.shapes.items()},
            }
            for p in plan.profiles
        ],
        "workspace_bytes": plan.workspace_bytes,
        "optimization_level": plan.optimization_level,
        "timing_cache": str(plan.timing_cache),
        "compute_capability": plan.compute_capability,
    }
