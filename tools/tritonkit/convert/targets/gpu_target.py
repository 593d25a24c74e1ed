"""The portable target on the GPU: where each version served by the embedded server executes
(:func:`plan_version`, from the spec's ``serving`` section and the machine), and the files of a
version the plan puts on a GPU (:func:`gpu_version`).

Owns why a version stays on the CPU (INT8, the text-embedding runner's server-side tokenization, a
graph without a dynamic batch axis or with a tensor that has no other axis, no engine that can run
it on a GPU here), the CPU plan recorded for the portable version, and the GPU version: a
``torch.export`` program of the ``source.torch`` module (with its comparison against the FP32
reference for the gate), or the precision's ONNX graph on ONNX Runtime's CUDA provider (the same
file the ONNX gate judges). Only builds the embedded server serves are planned
(:func:`tritonkit.convert.targets.plan.plans_execution`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tritonkit.backends import native
from tritonkit.config import InstanceGroup, ModelConfig
from tritonkit.convert.graph.source import Source
from tritonkit.convert.graph.text_models import text_ensemble
from tritonkit.convert.inputs.datasets import Datasets
from tritonkit.convert.precisions.gates import Comparison
from tritonkit.convert.spec.buildspec import BuildSpec
from tritonkit.convert.spec.execution import (
    DEFAULT_GPU_INSTANCES,
    ExecutionPlan,
    choose_device,
    method_buckets,
    plan_execution,
)
from tritonkit.convert.spec.gpu_profiles import GpuProfile
from tritonkit.convert.targets.buckets import resolve_buckets
from tritonkit.convert.targets.conversion import Converted
from tritonkit.convert.targets.torch_program import (
    PROGRAM_FILE,
    NativeExportError,
    onnx_gpu_version,
    program_outputs,
    torch_version,
)
from tritonkit.errors import SpecError

__all__ = [
    "GPU_PRECISIONS",
    "GpuVersion",
    "cpu_plan",
    "gpu_engines",
    "gpu_version",
    "plan_version",
    "program_check",
]

#: Precisions the GPU runners serve; other versions (INT8 Q/DQ graphs) stay on the portable runner.
GPU_PRECISIONS = ("fp32", "fp16")


def _cuda_provider() -> str | None:
    """None when ONNX Runtime here has its CUDA provider, else why not."""
    try:
        import onnxruntime  # noqa: PLC0415 (heavy; only a build that plans a GPU asks)
    except ImportError:
        return "onnxruntime is not installed here"
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        return None
    return f"onnxruntime {onnxruntime.__version__} here has no CUDAExecutionProvider"


def _torch_unusable(source: Source) -> str | None:
    """Why the torch engine cannot serve this model anywhere (None: it can)."""
    if source.torch is None:
        return "torch needs a `source.torch` module"
    return None


def gpu_engines(spec: BuildSpec, source: Source) -> tuple[tuple[str, ...], str | None]:
    """(engines that can serve this model on a GPU here, why none can when empty)."""
    why: list[str] = []
    engines: list[str] = []
    no_torch = _torch_unusable(source)
    if no_torch is None:
        engines.append("torch")
    else:
        why.append(no_torch)
    cuda = _cuda_provider()
    if cuda is None:
        engines.append("onnxruntime")
    else:
        why.append(cuda)
    wanted = spec.serving.engine
    if wanted != "auto" and wanted not in engines:
        reason = next((w for w in why if w.startswith(wanted) or wanted in w), "; ".join(why))
        return (), f"serving.engine {wanted} cannot serve it on a GPU here ({reason})"
    if wanted != "auto":
        return (wanted,), None
    return tuple(engines), None if engines else f"no GPU engine for it here ({'; '.join(why)})"


def _cpu_only(spec: BuildSpec, source: Source, precision: str, mbs: int) -> str | None:
    """Why this version cannot run on a GPU runner (None: it can)."""
    if precision not in GPU_PRECISIONS:
        return f"{precision} versions run on the CPU (the GPU runners serve fp32 and fp16)"
    if spec.preprocessing.kind == "text" and not text_ensemble(spec):
        return (
            "the text-embedding runner tokenizes in the server, on the CPU "
            "(preprocessing.tokenize: ensemble serves the encoder on the GPU)"
        )
    if mbs <= 0:
        return "the graph has no dynamic batch axis to batch on the GPU (max_batch_size 0)"
    flat = [t.name for t in (*source.graph.inputs, *source.graph.outputs) if len(t.shape) < 2]
    if flat:
        # Triton refuses empty dims; the portable runner's [1]-reshaped-to-[] form is its own.
        return f"tensor(s) {', '.join(flat)} have no axis besides the batch, which the GPU runners need"
    return gpu_engines(spec, source)[1]


def cpu_plan(groups: Sequence[InstanceGroup], precision: str, reason: str) -> ExecutionPlan:
    """The plan of a version served by the portable runner on the CPU instances ``groups``."""
    return ExecutionPlan("cpu", "onnxruntime", precision, (), False, tuple(groups), reason)


def plan_version(
    spec: BuildSpec,
    source: Source,
    precision: str,
    mbs: int,
    *,
    gpus: Sequence[int],
    profile: GpuProfile | None,
) -> ExecutionPlan:
    """Where the version of ``precision`` executes.

    Each version executes at its own precision (its ``precisions`` entry): ``serving.precision``
    other than ``auto`` must agree with it. SpecError when ``serving`` asks for what cannot be had.
    """
    serving = spec.serving
    no_torch = _torch_unusable(source)
    if serving.engine == "torch" and no_torch is not None:
        raise SpecError(f"serving.engine torch cannot serve `{spec.model_name(precision)}`: {no_torch}")
    if serving.precision != "auto" and precision in GPU_PRECISIONS and serving.precision != precision:
        raise SpecError(
            f"serving.precision {serving.precision} does not match version `{spec.model_name(precision)}` "
            f"({precision}): each version runs at its `precisions` entry; leave serving.precision auto"
        )
    why = _cpu_only(spec, source, precision, mbs)
    device, reason = choose_device(serving.device, gpus, why)
    if device == "cpu":
        if serving.gpu_only():  # the portable runner serves it; `device: cpu` with them is refused when read
            reason += f"; {' and '.join(serving.gpu_only())} apply on a GPU only"
        return cpu_plan(
            [InstanceGroup(kind=spec.instance_kind, count=spec.instances.count)], precision, reason
        )
    engines, _ = gpu_engines(spec, source)
    plan = plan_execution(
        dataclasses.replace(serving, device="gpu", precision=precision),
        max_batch_size=mbs,
        gpus=gpus,
        profile=profile,
        engines=engines,
        native_problem=native.unavailable(cuda=True)
        if serving.runner == "auto" and "torch" in engines
        else None,
    )
    return dataclasses.replace(plan, reason=reason)


@dataclasses.dataclass(frozen=True)
class GpuVersion:
    """A GPU version staged outside the repository: its config, files, build.json extras and what the
    gate judges (the served program; an ONNX graph's own check is the precision's)."""

    config: ModelConfig
    files: dict[str, Path | bytes]
    extra: dict[str, Any]
    checks: tuple[Comparison, ...] = ()
    #: the plan it was made under (``runner: auto`` falls back to python where the native export fails)
    plan: ExecutionPlan | None = None


def _examples(source: Source) -> dict[str, Any]:
    """The torch source's example inputs by name, with a batch of at least 2 (torch.export
    specialises size-1 axes, which would fix the program's batch to 1)."""
    assert source.torch is not None
    out = {}
    for name, tensor in zip(source.torch.input_names, source.torch.example_inputs, strict=True):
        out[name] = tensor if tensor.shape[0] >= 2 else tensor.repeat(2, *([1] * (tensor.dim() - 1)))
    return out


def gpu_version(
    spec: BuildSpec,
    source: Source,
    name: str,
    converted: Converted,
    plan: ExecutionPlan,
    mbs: int,
    workdir: Path,
    sets: Datasets,
) -> GpuVersion:
    """The files and config of the GPU version of ``converted`` under ``plan``."""
    delay = spec.batching.max_queue_delay_us
    if plan.engine == "onnxruntime":
        # The same graph the ONNX gate judges (on ONNX Runtime's CPU provider): its result stands.
        config, files = onnx_gpu_version(
            converted.artifact, name, plan, max_batch_size=mbs, max_queue_delay_us=delay
        )
        return GpuVersion(config, files, {"runner": "onnx_cuda_runner"})
    assert source.torch is not None  # gpu_engines offers torch only for a torch source
    precision = converted.precision
    program = workdir / f"{precision}-program" / PROGRAM_FILE
    shapes = resolve_buckets(spec, source)

    def made(under: ExecutionPlan) -> tuple[ModelConfig, dict[str, Path | bytes]]:
        assert source.torch is not None
        return torch_version(
            name,
            source.torch.module,
            _examples(source),
            list(source.torch.output_names),
            under,
            program,
            max_batch_size=mbs,
            half_io=precision == "fp16" and not spec.fp16.keep_io_types,
            buckets=shapes,
            max_queue_delay_us=delay,
        )

    try:
        config, files = made(plan)
    except NativeExportError as exc:
        if spec.serving.runner != "auto":
            raise
        plan = python_fallback(plan, spec.serving.placement.count, str(exc))
        config, files = made(plan)
    extra: dict[str, Any] = {"runner": "torch_runner"}
    if plan.runner == "native":  # model.ts: one method per batch bucket (and shape bucket)
        extra["native_methods"] = len(native.method_names(method_buckets(mbs), shapes))
    if precision == "fp32":
        return GpuVersion(config, files, extra, plan=plan)  # the FP32 module is the reference itself
    if not sets.evaluation:
        raise SpecError(f"the {precision} program of `{name}` needs held-out data for its accuracy gate")
    return GpuVersion(
        config, files, extra, (program_check(spec, source, name, precision, program, sets, mbs),), plan
    )


def python_fallback(plan: ExecutionPlan, count: int | None, why: str) -> ExecutionPlan:
    """``plan`` served by the python runner instead of the native one (``runner: auto``), its instances
    per GPU the python runner's default unless the spec counted them, and why."""
    groups = tuple(dataclasses.replace(g, count=count or DEFAULT_GPU_INSTANCES) for g in plan.instance_groups)
    return dataclasses.replace(plan, runner="python", instance_groups=groups, runner_reason=why)


def program_check(
    spec: BuildSpec, source: Source, name: str, precision: str, program: Path, sets: Datasets, mbs: int
) -> Comparison:
    """The served program's outputs and the FP32 ONNX reference's on the held-out set."""
    import onnxruntime  # noqa: PLC0415 (heavy; only a build that gates a program asks)

    assert source.torch is not None
    outputs = list(source.torch.output_names)
    gated = spec.accuracy.output or outputs[0]
    if gated not in outputs:
        raise SpecError(f"accuracy `output` {gated!r} is not an output of the model; got {outputs}")
    session = onnxruntime.InferenceSession(str(source.onnx), providers=["CPUExecutionProvider"])
    names = list(source.torch.input_names)
    reference = np.concatenate(
        [np.asarray(session.run([gated], {n: feed[n] for n in names})[0]) for feed in sets.evaluation]
    )
    candidate, device = program_outputs(
        program, [[feed[n] for n in names] for feed in sets.evaluation], mbs, outputs.index(gated)
    )
    runtime = f"torch.export-{device.split(':')[0]}"
    return Comparison("program", name, precision, candidate, reference, gated, runtime)
