"""The plan of a build, made once from the spec before any build work (:class:`BuildPlan`), and the
max batch size once the graph is known (:func:`max_batch`).

Planning refuses, before anything is exported or converted, what the spec asks for and cannot be
had: accuracy marks the gate cannot judge (:func:`tritonkit.convert.precisions.gates.thresholds`), a GPU
profile without a precision, a batch above the GPU's cap, impossible TensorRT settings
(profiles, workspace, preferred sizes: :func:`tritonkit.convert.targets.tensorrt.plan_for_spec`),
``serving.device: gpu`` with no GPU visible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tritonkit.convert.graph.source import Source
from tritonkit.convert.precisions import gates
from tritonkit.convert.precisions.memory import estimate_memory
from tritonkit.convert.spec import gpu_profiles
from tritonkit.convert.spec.buildspec import DEFAULT_MAX_BATCH_SIZE, BuildSpec
from tritonkit.convert.spec.execution import choose_device, visible_gpus
from tritonkit.convert.targets import tensorrt
from tritonkit.errors import GpuProfileError

__all__ = ["BuildPlan", "Log", "MaxBatch", "max_batch", "plan_build", "plans_execution", "quiet"]

Log = Callable[[str], None]


def quiet(_: str) -> None:
    """A :data:`Log` that says nothing."""


def _within_cap(size: int, profile: gpu_profiles.GpuProfile | None) -> int:
    if profile is not None and size > profile.max_batch_cap:
        raise GpuProfileError(
            f"`batching.max_batch_size` {size} is above the {profile.name} cap of {profile.max_batch_cap}"
        )
    return size


def plans_execution(spec: BuildSpec) -> bool:
    """True for builds whose versions the embedded server serves, which the ``serving`` section
    places (CPU or GPU): the portable target's, not the as-is import's."""
    return not spec.as_is and spec.target == "portable"


@dataclass(frozen=True)
class BuildPlan:
    """What a build will do, decided from the spec alone."""

    spec: BuildSpec
    #: One model per precision, in the spec's order.
    names: tuple[str, ...]
    detection: gpu_profiles.Detection | None
    #: The TensorRT target's engine plan (profiles, workspace, flags' inputs).
    engine: tensorrt.EnginePlan | None
    #: GPUs visible here, for the ``serving`` plan of each version (empty when not planned).
    gpus: tuple[int, ...]

    @property
    def profile(self) -> gpu_profiles.GpuProfile | None:
        return self.detection.profile if self.detection is not None else None

    @property
    def plans_execution(self) -> bool:
        return plans_execution(self.spec)


def plan_build(spec: BuildSpec, *, gpus: Sequence[int] | None = None, log: Log = quiet) -> BuildPlan:
    """Plan ``spec``: the GPU profile (detected, or asked for), precisions on it, the max batch given,
    the TensorRT engine and the GPUs visible (``gpus``; None: ``nvidia-smi -L``) for the serving plan."""
    for (
        prec
    ) in spec.precisions:  # marks that cannot be judged (a top-1 `min`, a share above 1): before any work
        gates.thresholds(spec.accuracy, prec)
    planned = plans_execution(spec)
    visible = tuple(visible_gpus() if gpus is None else gpus) if planned else ()
    if planned:
        choose_device(spec.serving.device, visible)  # `device: gpu` with no GPU: refused before any work
    detection = None
    if not spec.as_is or spec.batching.max_batch_size == "auto":
        detection = gpu_profiles.detect_gpu(spec.requested_gpu, spec.gpu)
        log(f"GPU profile {detection.profile.name} ({detection.how})")
        for prec in spec.precisions:
            gpu_profiles.check_precision(detection.profile, prec)
    profile = detection.profile if detection is not None else None
    if isinstance(spec.batching.max_batch_size, int):
        _within_cap(spec.batching.max_batch_size, profile)
    engine = None
    if spec.target == "tensorrt":
        assert profile is not None
        # `import tensorrt` is needed only by the builder itself: every shape check runs anywhere.
        engine = tensorrt.plan_for_spec(spec, profile)
    names = tuple(spec.model_name(p) for p in spec.precisions)
    return BuildPlan(spec, names, detection, engine, visible)


@dataclass(frozen=True)
class MaxBatch:
    """The max batch size of every model of the build, and how ``auto`` planned it (empty: given)."""

    size: int
    planning: dict[str, Any]


def max_batch(plan: BuildPlan, source: Source) -> MaxBatch:
    """The max batch size: given, the graph's (``null``: 64 when the graph can batch, else 0) or
    planned from the memory one sample takes (``auto``)."""
    spec, profile = plan.spec, plan.profile
    given = spec.batching.max_batch_size
    if given == "auto":
        assert profile is not None
        per_sample, weights = estimate_memory(source.onnx, max_seq_length=source.max_seq_length)
        fixed = weights + profile.workspace_gib * gpu_profiles.GIB
        size = gpu_profiles.plan_max_batch(profile, per_sample, fixed, spec.batching.memory_fraction)
        planning = {
            "gpu": profile.name,
            "measured_per_sample_bytes": int(per_sample),
            "fixed_bytes": int(fixed),
            "memory_fraction": spec.batching.memory_fraction,
            "cap": profile.max_batch_cap,
            "max_batch_size": size,
        }
        return MaxBatch(size, planning)
    if given is None:
        given = DEFAULT_MAX_BATCH_SIZE if source.graph.batch_dynamic else 0
    assert isinstance(given, int)
    return MaxBatch(_within_cap(given, profile), {})
