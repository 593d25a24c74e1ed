"""Triton model configuration: plain dataclasses mirroring ``model_config.proto``, a generator (to
``config.pbtxt``/proto), a parser (from them), a validator, and the data-type table.

Typical use::

    from tritonkit import config
    from tritonkit.config import ModelConfig, TensorConfig, DynamicBatching, InstanceGroup

    cfg = ModelConfig("embed", backend="python", max_batch_size=16,
                      inputs=[TensorConfig("INPUT_IDS", "INT64", [-1])],
                      outputs=[TensorConfig("EMBEDDING", "FP32", [384])],
                      dynamic_batching=DynamicBatching(max_queue_delay_microseconds=2000),
                      instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)])
    config.problems(cfg)                         # every rule it breaks, one line each
    config.save(cfg, model_dir / "config.pbtxt")  # validates, then writes atomically
    same = config.load(model_dir)
"""

from tritonkit.config import dtypes
from tritonkit.config.dtypes import (
    TRITON_DTYPES,
    normalize_dtype,
    numpy_to_triton,
    onnx_to_triton,
    triton_to_numpy,
    triton_to_onnx,
)
from tritonkit.config.generator import save, to_dict, to_pbtxt, to_proto
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
from tritonkit.config.parser import from_dict, from_pbtxt, from_proto, load
from tritonkit.config.tensors import TensorSpec
from tritonkit.config.validator import problems, validate

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
    "TensorSpec",
    "VersionPolicy",
    "WarmupInput",
    "dtypes",
    "from_dict",
    "from_pbtxt",
    "from_proto",
    "load",
    "normalize_dtype",
    "numpy_to_triton",
    "onnx_to_triton",
    "problems",
    "save",
    "to_dict",
    "to_pbtxt",
    "to_proto",
    "triton_to_numpy",
    "triton_to_onnx",
    "validate",
]
