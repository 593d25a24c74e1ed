"""The ONNX Runtime target: ``platform: "onnxruntime_onnx"`` configs for NVIDIA's Triton container,
with the TensorRT or CUDA execution accelerator set from the spec. (The embedded server has no
onnxruntime backend; it serves the portable target.)

The instance kind is the resolved one (``--instance-kind`` > ``TRITONKIT_INSTANCE_KIND`` >
``instances.kind``), defaulting to KIND_GPU for this target; KIND_CPU (a dev server without a GPU)
drops the GPU execution accelerators, which Triton only applies to GPU instances. With the TensorRT
accelerator the execution provider keeps the engines it builds in ``onnxruntime.engine_cache_path``
(``trt_engine_cache_enable``/``trt_engine_cache_path``), so a restarted server does not rebuild them.
"""

from __future__ import annotations

from pathlib import Path

from tritonkit.config import (
    Accelerator,
    DynamicBatching,
    ExecutionAccelerators,
    InstanceGroup,
    ModelConfig,
    Optimization,
    TensorConfig,
)
from tritonkit.convert.spec.buildspec import BuildSpec
from tritonkit.repository.onnx_io import read_io

__all__ = ["onnxruntime_config"]

_PRECISION_MODE = {"fp32": "FP32", "fp16": "FP16", "int8": "INT8", "bf16": "FP16"}


def onnxruntime_config(
    spec: BuildSpec, onnx_path: Path, name: str, max_batch_size: int, precision: str
) -> ModelConfig:
    io = read_io(onnx_path)
    batching = max_batch_size > 0 and io.batch_dynamic

    def dims(d: tuple[int, ...]) -> list[int]:
        return list(d[1:] if batching else d) or [1]

    kind = spec.instance_kind
    accelerators = None
    gpu = kind != "KIND_CPU"  # Triton applies GPU execution accelerators to GPU instances only
    if gpu and spec.onnxruntime.accelerator == "tensorrt":
        params = {"precision_mode": spec.onnxruntime.precision_mode or _PRECISION_MODE[precision]}
        if spec.onnxruntime.max_workspace_size_bytes is not None:
            params["max_workspace_size_bytes"] = str(spec.onnxruntime.max_workspace_size_bytes)
        if spec.onnxruntime.engine_cache_path:
            params["trt_engine_cache_enable"] = "true"
            params["trt_engine_cache_path"] = spec.onnxruntime.engine_cache_path
        accelerators = ExecutionAccelerators(gpu_execution_accelerator=[Accelerator("tensorrt", params)])
    elif gpu and spec.onnxruntime.accelerator == "cuda":
        accelerators = ExecutionAccelerators(gpu_execution_accelerator=[Accelerator("cuda", {})])
    return ModelConfig(
        name=name,
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size if batching else 0,
        inputs=[TensorConfig(t.name, t.datatype, dims(t.shape)) for t in io.inputs],
        outputs=[TensorConfig(t.name, t.datatype, dims(t.shape)) for t in io.outputs],
        dynamic_batching=DynamicBatching(
            max_queue_delay_microseconds=spec.batching.max_queue_delay_us,
            preferred_batch_size=list(spec.batching.preferred_batch_sizes),
        )
        if batching
        else None,
        instance_groups=[InstanceGroup(kind=kind, count=spec.instances.count)],
        optimization=Optimization(execution_accelerators=accelerators) if accelerators else None,
        default_model_filename="model.onnx",
    )
