"""Triton model configuration: typed dataclasses, ``config.pbtxt`` conversion through the protobuf
schema, validation, and the data-type table.

Typical use::

    from tritonkit.config import ModelConfig, TensorConfig, DynamicBatching, InstanceGroup

    cfg = ModelConfig("embed", backend="python", max_batch_size=16,
                      inputs=[TensorConfig("INPUT_IDS", "INT64", [-1])],
                      outputs=[TensorConfig("EMBEDDING", "FP32", [384])],
                      dynamic_batching=DynamicBatching(max_queue_delay_microseconds=2000),
                      instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)])
    cfg.validate().save(model_dir / "config.pbtxt")
"""

from tritonkit.config import dtypes
from tritonkit.config.convert import (
    config_from_dict,
    config_from_pbtxt,
    config_from_proto,
    config_to_dict,
    config_to_pbtxt,
    config_to_proto,
)
from tritonkit.config.dtypes import (
    TRITON_DTYPES,
    normalize_dtype,
    numpy_to_triton,
    onnx_to_triton,
    triton_to_numpy,
    triton_to_onnx,
)
from tritonkit.config.model_config import (
    Accelerator,
    CudaOptimization,
    DynamicBatching,
    EnsembleStep,
    ExecutionAccelerators,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    Optimization,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from tritonkit.config.validate import config_problems

__all__ = [
    "TRITON_DTYPES",
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
    "config_from_dict",
    "config_from_pbtxt",
    "config_from_proto",
    "config_problems",
    "config_to_dict",
    "config_to_pbtxt",
    "config_to_proto",
    "dtypes",
    "normalize_dtype",
    "numpy_to_triton",
    "onnx_to_triton",
    "triton_to_numpy",
    "triton_to_onnx",
]
