"""The TensorRT target's plan: optimization profiles, builder flags, memory pool, timing-cache
location, TensorRT version guard, and which profile serves each evaluation batch: everything
decided (and refused) before a builder exists, as pure functions tested everywhere. The loader
graph that builds the engine is :mod:`tritonkit.convert.targets.tensorrt_loaders`; the Triton config comes
from the built engine's own I/O (:mod:`tritonkit.convert.targets.engine_io`).

Precision handling by TensorRT major version:

- TensorRT >= 11 (strongly typed only): the precision's ONNX is built as a strongly typed network;
  builder precision flags do not exist. fp16 builds the FP16 ONNX. int8 builds the *FP16-base* Q/DQ
  ONNX (:func:`tritonkit.convert.precisions.precision.qdq_to_fp16`: the Q/DQ model on an FP16 graph with float16
  scales, gated against FP32 on ONNX Runtime before the build), so the layers that are not
  quantized run in FP16, as the INT8 + FP16 flags made them on TensorRT <= 10. The same holds for
  ``tensorrt.strongly_typed: on`` on TensorRT 10.
- TensorRT <= 10: fp16 builds the FP32 graph with the FP16 flag; int8 builds the Q/DQ graph with
  INT8 + FP16 flags (the hybrid's unquantized layers run in FP16; its biases are float, since
  TensorRT refuses INT32 DequantizeLinear: :mod:`tritonkit.convert.precisions.precision`), or, when the spec asks for
  ``int8.legacy_calibrator``, the FP32 graph with the deprecated implicit-INT8 calibrator and its cache.

``build.json`` records what the unquantized layers run in (``unquantized_layers``).

GPU support by TensorRT version (:data:`TENSORRT_DROPPED`): the last architecture TensorRT dropped
is Volta (7.0: deprecated in 10.0, removed in 10.5). For Turing (7.5, the T4) no NVIDIA statement of
a drop was found in what was checked in November 2026: the TensorRT 11.0.0 to 11.5.0 release-note
announcements, the 10.x-to-11.x migration guide and its removed-API list (weak typing, implicit
INT8, IPluginV2, tactic sources: no GPU architecture) and the support policies page. The 11.x
support matrix is an interactive explorer whose GPU table could not be read here. So the table is
empty; docs/build-spec.md lists the pages (URLs) checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.backends.runners.shape_buckets import Buckets
from tritonkit.convert.spec.buildspec import DEFAULT_MAX_BATCH_SIZE, BuildSpec
from tritonkit.convert.spec.gpu_profiles import GIB, GpuProfile, check_precision
from tritonkit.errors import GpuProfileError, SpecError, TensorRTUnavailableError

__all__ = [
    "TENSORRT_DROPPED",
    "BuilderFlags",
    "EnginePlan",
    "ShapeRange",
    "builder_flags",
    "calibration_shapes",
    "check_shapes",
    "check_tensorrt_version",
    "evaluation_profiles",
    "installed_tensorrt_major",
    "plan_for_spec",
    "profile_for",
    "require_tensorrt",
    "resolve_profiles",
    "tensorrt_major",
    "timing_cache_path",
]

#: The oldest TensorRT this builder drives: the engine's I/O is read through the tensor API
#: (``num_io_tensors``, ``get_tensor_profile_shape``) that TensorRT 8.5 introduced.
TENSORRT_MIN = (8, 5)
#: Compute capability → first TensorRT (major, minor) that no longer supports it. Empty: no NVIDIA
#: statement drops Turing (7.5, the T4) in what was checked (module docstring); add an entry, e.g.
#: ``{"7.5": (12, 0)}``, when one appears, and :func:`check_tensorrt_version` refuses the build.
TENSORRT_DROPPED: dict[str, tuple[int, int]] = {}
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
    #: ``tensorrt.timing_cache`` as resolved (flag, TRITONKIT_TIMING_CACHE, spec); None: the default.
    timing_cache: str | None
    compute_capability: str
    gpu: str
    strongly_typed: str  # "auto" | "on" | "off"; resolved per TensorRT version by builder_flags
    legacy_calibrator: bool
    #: The model's shape buckets once the source is known (:mod:`tritonkit.convert.targets.tensorrt_buckets`:
    #: one profile per bucket where the spec gives no ``tensorrt.profiles``); None: no dynamic axis.
    buckets: Buckets | None = None


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
    if spec.instance_kind == "KIND_CPU":
        raise SpecError(
            "`instances.kind` KIND_CPU: a TensorRT engine runs on GPU instances only; expected KIND_GPU"
        )
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
        timing_cache=str(spec.resolve(spec.tensorrt.timing_cache)) if spec.tensorrt.timing_cache else None,
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
    #: Which ONNX the network is parsed from: "fp32", the precision's own artifact ("fp16", "int8"),
    #: or "int8_fp16", the FP16-base Q/DQ ONNX of a strongly typed int8 build.
    network_source: str
    #: The precision the layers that are not quantized run in ("fp32", "fp16", "bf16"): FP16 for int8
    #: (INT8 + FP16 flags on TensorRT <= 10, the FP16-base Q/DQ ONNX when strongly typed).
    unquantized: str = "fp32"


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
        source = {"int8": "int8_fp16"}.get(precision, precision)
        return BuilderFlags(
            True, False, False, False, False, False, source, "fp32" if precision == "fp32" else "fp16"
        )
    return BuilderFlags(
        strongly_typed=False,
        fp16=precision in ("fp16", "int8"),
        int8=precision == "int8",
        bf16=precision == "bf16",
        tf32=gpu.tf32 and precision == "fp32",
        legacy_calibrator=legacy,
        network_source="fp32" if precision in ("fp16", "bf16") or legacy else precision,
        unquantized="fp16" if precision in ("fp16", "int8") else ("bf16" if precision == "bf16" else "fp32"),
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
                    f"input `{tensor.name}` has dynamic dims {list(rest)}; give its lengths as "
                    f"`serving.shape_buckets` (one profile per bucket) or "
                    f"`tensorrt.profiles[{index}].shapes.{tensor.name}` min/opt/max"
                )


# --- TensorRT version, caches, shapes per profile ---------------------------------------------
def check_tensorrt_version(
    gpu: GpuProfile, version: str, dropped: Mapping[str, tuple[int, int]] = TENSORRT_DROPPED
) -> None:
    """GpuProfileError (one line) when TensorRT ``version`` cannot build for ``gpu``."""
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    have = [*parts, 0, 0][:2]
    if tuple(have) < TENSORRT_MIN:
        raise GpuProfileError(
            f"TensorRT {version} is too old: expected >= {TENSORRT_MIN[0]}.{TENSORRT_MIN[1]} "
            "(the engine I/O tensor API this build reads)"
        )
    end = dropped.get(gpu.compute_capability)
    if end is not None and tuple(have) >= end:
        raise GpuProfileError(
            f"TensorRT {version} does not support {gpu.name} (compute capability {gpu.compute_capability}): "
            f"dropped in TensorRT {end[0]}.{end[1]}; build with an older TensorRT"
        )


def timing_cache_path(
    setting: str | None, gpu: str, tensorrt_version: str, env: Mapping[str, str] | None = None
) -> Path:
    """Where the timing cache lives: ``setting`` (``{gpu}``/``{tensorrt}`` filled in), else
    ``TRITONKIT_TIMING_CACHE``, else ``$XDG_CACHE_HOME/tritonkit/tensorrt/<gpu>-trt<version>/timing.cache``.

    A timing cache is only valid for one GPU model and one TensorRT version, hence the key; it is
    never kept beside the spec (read-only in a builder image, and gone with the pod).
    """
    environ = os.environ if env is None else env
    chosen = setting or environ.get("TRITONKIT_TIMING_CACHE") or None
    if chosen:
        return Path(chosen.replace("{gpu}", gpu).replace("{tensorrt}", tensorrt_version)).expanduser()
    root = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "tritonkit" / "tensorrt" / f"{gpu}-trt{tensorrt_version}" / "timing.cache"


def _full_ranges(
    profile: EngineProfile, io: Any
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(min, opt, max) full shapes (batch + dims) of every input in ``profile``."""
    ranges = {}
    for t in io.inputs:
        fixed = tuple(t.shape[1:])
        ranges[t.name] = (
            profile.full(t.name, "min", fixed),
            profile.full(t.name, "opt", fixed),
            profile.full(t.name, "max", fixed),
        )
    return ranges


def profile_for(plan: EnginePlan, io: Any, shapes: Mapping[str, Sequence[int]]) -> int | None:
    """Index of the first profile whose min..max holds every input shape in ``shapes``; None if none."""
    for index, profile in enumerate(plan.profiles):
        ranges = _full_ranges(profile, io)
        if all(
            name in ranges
            and len(shape) == len(ranges[name][0])
            and all(lo <= d <= hi for d, lo, hi in zip(shape, ranges[name][0], ranges[name][2], strict=True))
            for name, shape in shapes.items()
        ):
            return index
    return None


def evaluation_profiles(plan: EnginePlan, io: Any, feeds: Sequence[Mapping[str, Any]]) -> list[int]:
    """The profile each evaluation batch runs on; SpecError naming the first batch no profile covers."""
    chosen = []
    for number, feed in enumerate(feeds):
        shapes = {name: tuple(int(d) for d in value.shape) for name, value in feed.items()}
        index = profile_for(plan, io, shapes)
        if index is None:
            ranges = "; ".join(
                f"profile {i}: "
                + ", ".join(f"{n} {list(r[0])}..{list(r[2])}" for n, r in _full_ranges(p, io).items())
                for i, p in enumerate(plan.profiles)
            )
            given = ", ".join(f"{n} {list(s)}" for n, s in shapes.items())
            raise SpecError(
                f"evaluation batch {number} has shapes {given}, which no TensorRT profile covers ({ranges}); "
                "lower `evaluation.batch_size` or widen `tensorrt.profiles` (or `serving.shape_buckets`)"
            )
        chosen.append(index)
    return chosen


def calibration_shapes(plan: EnginePlan, io: Any) -> dict[str, tuple[int, ...]]:
    """Full input shapes every legacy-calibrator batch must have: the last profile's OPT shapes
    (TensorRT calibrates at the calibration profile's OPT shape, and Polygraphy's ``CreateConfig``
    makes the last profile the calibration profile)."""
    last = plan.profiles[-1]
    return {t.name: last.full(t.name, "opt", tuple(t.shape[1:])) for t in io.inputs}


def tensorrt_major() -> int:
    trt = require_tensorrt()
    return int(str(trt.__version__).split(".")[0])


def installed_tensorrt_major() -> int | None:
    """The TensorRT major version if ``tensorrt`` imports here, else None (the builder will say why)."""
    try:
        return tensorrt_major()
    except TensorRTUnavailableError:
        return None


def require_tensorrt() -> Any:
    """``tensorrt`` if it imports; TensorRTUnavailableError with an install hint otherwise."""
    try:
        import tensorrt  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)
    except Exception as exc:  # ImportError, or a broken install raising OSError
        raise TensorRTUnavailableError(f"{INSTALL_HINT} ({type(exc).__name__})") from None
    return tensorrt
