"""What a spec hands later stages as it is: the options of the FP16 and INT8 conversions
(:mod:`tritonkit.convert.precisions.precision` applies them) and the names of the built-in data sets
(:mod:`tritonkit.convert.inputs.seeded_data` makes them).

They live with the spec, not with the stages that use them, so the spec imports no stage above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AUTO", "BUILTIN", "CALIBRATION_METHODS", "RANDOM", "Fp16Options", "Int8Options"]

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")

AUTO = "auto"
RANDOM = "random"
#: every ``data`` value that names a built-in set, not a file
BUILTIN = (AUTO, "pydoc", "synthetic", RANDOM)


@dataclass
class Fp16Options:
    """How a graph goes to float16 (the spec's ``fp16`` section, as it is): FP32 inputs/outputs kept
    when ``keep_io_types``; ops and nodes named in the block lists stay in float32."""

    keep_io_types: bool = True
    op_block_list: list[str] = field(default_factory=list)
    node_block_list: list[str] = field(default_factory=list)


@dataclass
class Int8Options:
    """How a Q/DQ model is made (the spec's ``int8`` section)."""

    method: str = "minmax"
    percentile: float = 99.999
    per_channel: bool = True
    op_types: list[str] = field(default_factory=lambda: ["MatMul", "Gemm", "Conv"])
    exclude_nodes: list[str] = field(default_factory=list)
    exclude_op_types: list[str] = field(default_factory=list)
    min_samples: int = 16
