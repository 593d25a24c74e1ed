"""GPU profiles (T4, L4, A10, A100, H100), local GPU detection, precision checks and max-batch planning.

Profile facts come from NVIDIA's published specifications. The T4 is the default: it is what the
fleet runs, and a build on a machine without a GPU still has to target something.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonkit.errors import GpuProfileError
from tritonkit.machine import query_gpus

__all__ = [
    "DEFAULT_GPU",
    "PROFILES",
    "Detection",
    "GpuProfile",
    "check_precision",
    "detect_gpu",
    "get_profile",
    "plan_max_batch",
]

GIB = 1024**3


@dataclass(frozen=True)
class GpuProfile:
    name: str
    compute_capability: str
    memory_gib: int
    precisions: frozenset[str]
    tf32: bool
    max_batch_cap: int
    #: TensorRT builder workspace (memory-pool) limit in GiB.
    workspace_gib: float
    #: Substrings of ``nvidia-smi``'s product name that identify this GPU.
    match: tuple[str, ...]


PROFILES: dict[str, GpuProfile] = {
    p.name: p
    for p in (
        GpuProfile("T4", "7.5", 16, frozenset({"fp32", "fp16", "int8"}), False, 64, 4.0, ("T4",)),
        GpuProfile(
            "L4", "8.9", 24, frozenset({"fp32", "fp16", "bf16", "int8", "fp8"}), True, 256, 8.0, ("L4",)
        ),
        GpuProfile("A10", "8.6", 24, frozenset({"fp32", "fp16", "bf16", "int8"}), True, 256, 8.0, ("A10",)),
        GpuProfile(
            "A100", "8.0", 80, frozenset({"fp32", "fp16", "bf16", "int8"}), True, 512, 16.0, ("A100",)
        ),
        GpuProfile("A100-40GB", "8.0", 40, frozenset({"fp32", "fp16", "bf16", "int8"}), True, 512, 16.0, ()),
        GpuProfile(
            "H100", "9.0", 80, frozenset({"fp32", "fp16", "bf16", "int8", "fp8"}), True, 512, 16.0, ("H100",)
        ),
    )
}
DEFAULT_GPU = "T4"


def get_profile(name: str) -> GpuProfile:
    for key, profile in PROFILES.items():
        if key.lower() == name.strip().lower():
            return profile
    raise GpuProfileError(f"unknown GPU profile {name!r}; expected one of {', '.join(PROFILES)}")


@dataclass(frozen=True)
class Detection:
    profile: GpuProfile
    how: str  # "flag", "spec", "nvidia-smi: <product>", "default (no GPU found)"


def _match(product: str, memory_mib: float | None) -> GpuProfile | None:
    upper = product.upper()
    for profile in PROFILES.values():
        if any(token.upper() in upper for token in profile.match):
            if profile.name == "A100" and memory_mib is not None and memory_mib < 60 * 1024:
                return PROFILES["A100-40GB"]
            return profile
    return None


def parse_nvidia_smi(text: str) -> list[tuple[str, str, float]]:
    """Rows of ``nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader``."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        memory = parts[2].split()[0]
        try:
            rows.append((parts[0], parts[1], float(memory)))
        except ValueError:
            continue
    return rows


def detect_gpu(requested: str | None = None, spec_gpu: str | None = None) -> Detection:
    """The profile to build for: ``requested`` (flag, env or spec), else the local GPU, else
    ``spec_gpu``, else T4 (a T4-first fleet: a CPU-only build machine still targets the T4)."""
    if requested:
        return Detection(get_profile(requested), "chosen by --gpu, TRITONKIT_GPU or the spec")
    for product, _cc, memory in parse_nvidia_smi(
        "\n".join(query_gpus("name", "compute_cap", "memory.total"))
    ):
        found = _match(product, memory)
        if found is not None:
            return Detection(found, f"nvidia-smi: {product}")
    if spec_gpu:
        return Detection(get_profile(spec_gpu), "the spec's `gpu`; no local GPU detected")
    return Detection(PROFILES[DEFAULT_GPU], f"default {DEFAULT_GPU} (no local GPU detected)")


def check_precision(profile: GpuProfile, precision: str) -> None:
    if precision not in profile.precisions:
        raise GpuProfileError(
            f"precision {precision} is not supported on {profile.name} (compute capability "
            f"{profile.compute_capability}); expected one of {', '.join(sorted(profile.precisions))}"
        )


def plan_max_batch(
    profile: GpuProfile,
    per_sample_bytes: float,
    fixed_bytes: float = 0.0,
    memory_fraction: float = 0.8,
) -> int:
    """Largest power-of-two batch whose memory fits ``memory_fraction`` of the GPU, capped per profile.

    ``per_sample_bytes`` is the measured activation memory per sample, ``fixed_bytes`` what does not
    scale with the batch (weights, workspace).
    """
    if per_sample_bytes <= 0:
        raise GpuProfileError(f"per-sample memory must be > 0 bytes; got {per_sample_bytes}")
    budget = profile.memory_gib * GIB * memory_fraction - fixed_bytes
    if budget < per_sample_bytes:
        raise GpuProfileError(
            f"model needs {(fixed_bytes + per_sample_bytes) / GIB:.1f} GiB for one sample; "
            f"{profile.name} offers {profile.memory_gib * memory_fraction:.1f} GiB at memory fraction {memory_fraction}"
        )
    fits = int(budget // per_sample_bytes)
    batch = 1
    while batch * 2 <= min(fits, profile.max_batch_cap):
        batch *= 2
    return batch
