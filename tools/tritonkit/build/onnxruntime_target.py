"""The ONNX Runtime target: ``platform: "onnxruntime_onnx"`` configs for NVIDIA's Triton container,
with the TensorRT or CUDA execution accelerator set from the spec. (The embedded server has no
onnxruntime backend; it serves the portable target.)"""

from __future__ import annotations

from pathlib import Path

from tritonkit.build.spec import BuildSpec
from tritonkit.config import (
    Accelerator,
    DynamicBatching,
    ExecutionAccelerators,
    InstanceGroup,
    ModelConfig,
    Optimization,
    TensorConfig,
)
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

    accelerators = None
    if spec.onnxruntime.accelerator == "tensorrt":
        params = {"precision_mode": spec.onnxruntime.precision_mode or _PRECISION_MODE[precision]}
        if spec.onnxruntime.max_workspace_size_bytes is not None:
            params["max_workspace_size_bytes"] = str(spec.onnxruntime.max_workspace_size_bytes)
        accelerators = ExecutionAccelerators(gpu_execution_accelerator=[Accelerator("tensorrt", params)])
    elif spec.onnxruntime.accelerator == "cuda":
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
        instance_groups=[InstanceGroup(kind="KIND_GPU", count=spec.instances.count)],
        optimization=Optimization(execution_accelerators=accelerators) if accelerators else None,
        default_model_filename="model.onnx",
    )
