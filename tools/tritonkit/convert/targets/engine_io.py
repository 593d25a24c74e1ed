"""What a built TensorRT engine takes and gives (:class:`EngineDescription`), and the Triton config
written from it.

Triton's tensorrt backend refuses a config whose tensors differ from the engine's in name, data
type or shape, and the engine is not the ONNX it was parsed from: on TensorRT <= 10 an FP16 build
of the FP32 graph keeps FP32 I/O whatever the FP16 ONNX says, and TensorRT 8.6 turns INT64 inputs
into INT32. So the ``tensorrt_plan`` config is derived from the engine's own I/O:
:func:`describe_engine` reads a real ``ICudaEngine`` (the I/O tensor API of TensorRT >= 8.5) into a
plain description, and :func:`engine_config` turns a description into the config, so the derivation
is tested anywhere with hand-made descriptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig
from tritonkit.config.dtypes import lookup_dtype
from tritonkit.errors import SpecError

__all__ = [
    "NUMPY_DTYPES",
    "PLAN_FILE",
    "EngineDescription",
    "EngineTensor",
    "describe_engine",
    "engine_config",
    "triton_dtype",
]

PLAN_FILE = "model.plan"

#: ``trt.DataType`` member names → Triton data types.
#: Only the two float names differ; the rest are spelled alike.
_TRITON_DTYPES = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    **{same: same for same in ("BF16", "INT8", "UINT8", "INT32", "INT64", "BOOL")},
}


def triton_dtype(trt_name: str) -> str:
    """The Triton data type of a ``trt.DataType`` member name; SpecError when Triton has none."""
    return lookup_dtype(
        _TRITON_DTYPES, trt_name, SpecError, f"engine tensor data type {trt_name} has no Triton equivalent"
    )


#: Triton data types → numpy dtype names (for feeding an engine what it takes).
NUMPY_DTYPES = {
    "FP32": "float32",
    "FP16": "float16",
    "INT8": "int8",
    "UINT8": "uint8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
}


@dataclass(frozen=True)
class EngineTensor:
    """One I/O tensor: ``mode`` "input" or "output", a Triton ``datatype``, the engine's ``shape``
    (-1: dynamic) and, for inputs, ``(min, opt, max)`` full shapes per optimization profile."""

    name: str
    mode: str
    datatype: str
    shape: tuple[int, ...]
    profiles: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class EngineDescription:
    tensors: tuple[EngineTensor, ...]
    num_profiles: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> tuple[EngineTensor, ...]:
        return tuple(t for t in self.tensors if t.mode == "input")

    @property
    def outputs(self) -> tuple[EngineTensor, ...]:
        return tuple(t for t in self.tensors if t.mode == "output")

    def input_dtypes(self) -> dict[str, str]:
        """numpy dtype names of the inputs, by name (BF16 inputs, which numpy lacks, left out)."""
        return {t.name: NUMPY_DTYPES[t.datatype] for t in self.inputs if t.datatype in NUMPY_DTYPES}

    def as_json(self) -> dict[str, Any]:
        return {
            "num_profiles": self.num_profiles,
            "tensors": [
                {
                    "name": t.name,
                    "mode": t.mode,
                    "datatype": t.datatype,
                    "shape": list(t.shape),
                    **({"profiles": [[list(s) for s in p] for p in t.profiles]} if t.profiles else {}),
                }
                for t in self.tensors
            ],
        }


def describe_engine(engine: Any) -> EngineDescription:  # pragma: no cover - needs a real engine
    """The description of a deserialized ``trt.ICudaEngine`` (TensorRT >= 8.5 tensor API)."""
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        mode = engine.get_tensor_mode(name).name.lower()  # TensorIOMode.INPUT / OUTPUT
        profiles: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = []
        if mode == "input":
            for p in range(engine.num_optimization_profiles):
                lo, mid, hi = engine.get_tensor_profile_shape(name, p)
                profiles.append((tuple(lo), tuple(mid), tuple(hi)))
        tensors.append(
            EngineTensor(
                name,
                mode,
                triton_dtype(engine.get_tensor_dtype(name).name),
                tuple(engine.get_tensor_shape(name)),
                tuple(profiles),
            )
        )
    return EngineDescription(tuple(tensors), engine.num_optimization_profiles)


def _max_batch(description: EngineDescription) -> int:
    """The profiles' common max batch; every batch 1..max must fall in some profile's batch range."""
    ranges = sorted({(p[0][0], p[2][0]) for t in description.inputs for p in t.profiles})
    if not ranges:
        raise SpecError("the engine has no input with optimization-profile shapes; cannot derive max batch")
    maxima = sorted({hi for _, hi in ranges})
    if len(maxima) > 1:
        raise SpecError(
            f"the engine's profiles differ in max batch {maxima}; Triton needs one max_batch_size"
        )
    covered = 0
    for lo, hi in ranges:
        if lo > covered + 1:
            break
        covered = max(covered, hi)
    if covered < maxima[0]:
        raise SpecError(
            f"no optimization profile covers batch {covered + 1} (profile batch ranges {[list(r) for r in ranges]}); "
            f"Triton's batcher may send any batch from 1 to {maxima[0]}"
        )
    return maxima[0]


def engine_config(
    name: str,
    description: EngineDescription,
    *,
    compute_capability: str,
    instance_count: int = 1,
    max_queue_delay_us: int = 500,
    preferred_batch_sizes: tuple[int, ...] = (),
) -> ModelConfig:
    """``platform: tensorrt_plan`` config with exactly the engine's tensors.

    One KIND_GPU instance group with no ``profile`` list: Triton gives each instance every profile
    and picks, per request, one whose range holds its shapes. (An instance limited to one profile
    fails every request outside that profile's range: Triton does not route by shape.)
    """
    for tensor in description.tensors:
        if not tensor.shape or tensor.shape[0] != -1:
            raise SpecError(
                f"engine tensor `{tensor.name}` has a fixed leading dim {list(tensor.shape)}; "
                "TensorRT batching needs a dynamic batch axis"
            )
    max_batch = _max_batch(description)
    for size in preferred_batch_sizes:
        if not 1 <= size <= max_batch:
            raise SpecError(f"`batching.preferred_batch_sizes` {size} is outside 1..{max_batch}")
    return ModelConfig(
        name=name,
        platform="tensorrt_plan",
        max_batch_size=max_batch,
        inputs=[TensorConfig(t.name, t.datatype, list(t.shape[1:])) for t in description.inputs],
        outputs=[TensorConfig(t.name, t.datatype, list(t.shape[1:])) for t in description.outputs],
        dynamic_batching=DynamicBatching(
            max_queue_delay_microseconds=max_queue_delay_us, preferred_batch_size=list(preferred_batch_sizes)
        ),
        instance_groups=[InstanceGroup(kind="KIND_GPU", count=instance_count)],
        cc_model_filenames={compute_capability: PLAN_FILE},
        default_model_filename=PLAN_FILE,
    )
