"""GPU profiles: the table (T4, L4, A10, A100, H100) and, for any other GPU found here, a profile
derived from what its driver says; local GPU detection, precision checks and max-batch planning.

The table's facts come from NVIDIA's published specifications. A GPU the table lacks (an H200, an
L40S, a B200) gets its profile from ``nvidia-smi``: its name, its compute capability (precisions:
:data:`PRECISION_FROM`; TF32 from 8.0) and its memory (batch and workspace caps). The T4 is the
default: it is what the fleet runs, and a build on a machine without a GPU still has to target
something; ``--gpu NAME`` plans for a table GPU that is not here.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

from tritonkit.errors import GpuProfileError
from tritonkit.machine import query_gpus

__all__ = [
    "DEFAULT_GPU",
    "PRECISION_FROM",
    "PROFILES",
    "Detection",
    "GpuProfile",
    "LocalGpu",
    "check_precision",
    "derive_profile",
    "derived_precisions",
    "detect_gpu",
    "get_profile",
    "local_gpus",
    "parse_nvidia_smi",
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
#: The compute capability from which a GPU computes each precision natively (FP32: always). FP16 from
#: Volta (7.0: the V100's tensor cores, and TensorRT's FP16 kernels), INT8 tensor cores from Turing (7.5).
PRECISION_FROM: dict[str, tuple[int, int]] = {
    "fp16": (7, 0),
    "int8": (7, 5),
    "bf16": (8, 0),
    "fp8": (8, 9),
    "fp4": (10, 0),
}
#: The order precisions are named in.
ORDER = ("fp32", "fp16", "bf16", "int8", "fp8", "fp4")


def _match(product: str, memory_mib: float | None) -> GpuProfile | None:
    upper = product.upper()
    for profile in PROFILES.values():
        if any(token.upper() in upper for token in profile.match):
            if profile.name == "A100" and memory_mib is not None and memory_mib < 60 * 1024:
                return PROFILES["A100-40GB"]
            return profile
    return None


def _fields(line: str) -> list[str]:
    return [p.strip() for p in line.split(",")]


def _mib(text: str) -> float | None:
    """``143771 MiB`` -> 143771.0; None for ``[N/A]`` and the like."""
    try:
        return float(text.split(maxsplit=1)[0]) if text.strip().upper().endswith("MIB") else None
    except (ValueError, IndexError):
        return None


def parse_nvidia_smi(text: str) -> list[tuple[str, str, float]]:
    """(product, compute capability, memory MiB) of each row of ``nvidia-smi --query-gpu=name,
    memory.total,compute_cap --format=csv,noheader``; the two fields after the name in either order
    (memory is the one in MiB). Rows without both are skipped."""
    rows = []
    for line in text.strip().splitlines():
        parts = _fields(line)
        if len(parts) != 3 or not parts[0]:
            continue
        memory = next((m for m in map(_mib, parts[1:]) if m is not None), None)
        cc = next((c for c in parts[1:] if _capability(c) is not None), None)
        if memory is not None and cc is not None:
            rows.append((parts[0], cc, memory))
    return rows


def _short_name(product: str) -> str:
    """``NVIDIA H200`` -> ``H200``, ``Tesla V100-SXM2-16GB`` -> ``V100-SXM2-16GB``: the product without
    the vendor's words, as a profile name."""
    words = product.split()
    while len(words) > 1 and words[0].upper() in ("NVIDIA", "TESLA"):
        words = words[1:]
    return " ".join(words) or product


def _capability(text: str | None) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)", (text or "").strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def derived_precisions(compute_capability: str) -> frozenset[str]:
    """What a GPU of ``compute_capability`` computes natively: FP32 always, FP16 from 7.0, INT8 from 7.5,
    BF16 from 8.0, FP8 from 8.9, FP4 from 10.0 (:data:`PRECISION_FROM`)."""
    cc = _capability(compute_capability) or (0, 0)
    return frozenset({"fp32", *(p for p, since in PRECISION_FROM.items() if cc >= since)})


def _batch_cap(memory_gib: float) -> int:
    """Max-batch cap from memory, on the table's steps: 64 below 20 GiB (T4), 256 below 40 (L4, A10),
    512 below 96 (A100, H100), 1024 above (H200, B200)."""
    for below, cap in ((20, 64), (40, 256), (96, 512)):
        if memory_gib < below:
            return cap
    return 1024


def _workspace(memory_gib: float) -> float:
    """TensorRT workspace from memory: a quarter of a small GPU's (at most 4 GiB below 20 GiB, at
    least 1), 8 GiB below 40, 16 above (the table's T4 / L4 / A100 figures)."""
    if memory_gib < 20:
        return max(1.0, min(4.0, float(int(memory_gib // 4))))
    return 8.0 if memory_gib < 40 else 16.0


def derive_profile(product: str, compute_capability: str, memory_mib: float) -> GpuProfile:
    """The profile of a GPU the table lacks, from what its driver says: precisions and TF32 from the
    compute capability, batch and workspace caps from the memory. No peak figures: none are known."""
    memory_gib = int(memory_mib // 1024)
    cc = _capability(compute_capability) or (0, 0)
    return GpuProfile(
        _short_name(product),
        compute_capability.strip(),
        memory_gib,
        derived_precisions(compute_capability),
        cc >= (8, 0),
        _batch_cap(memory_gib),
        _workspace(memory_gib),
        (),
    )


@dataclass(frozen=True)
class LocalGpu:
    """One GPU as ``nvidia-smi`` lists it (compute capability None where the driver does not say)."""

    product: str
    compute_capability: str | None
    memory_mib: float | None


def local_gpus() -> tuple[tuple[LocalGpu, ...], str]:
    """The GPUs ``nvidia-smi`` lists here, in index order, and how they were found (or why none were:
    ``nvidia-smi not found``, ``nvidia-smi lists no GPU``). Read each call: a test may put another
    ``nvidia-smi`` on PATH."""
    if shutil.which("nvidia-smi") is None:
        return (), "nvidia-smi not found"
    rows = [
        LocalGpu(name, cc, memory)
        for name, cc, memory in parse_nvidia_smi("\n".join(query_gpus("name", "memory.total", "compute_cap")))
    ]
    if rows:
        return tuple(rows), "nvidia-smi"
    # A driver too old for `compute_cap` fails the whole query: the names and memory still say a GPU is here.
    old = [
        LocalGpu(parts[0], None, _mib(parts[1]))
        for parts in (_fields(line) for line in query_gpus("name", "memory.total"))
        if len(parts) == 2 and parts[0]
    ]
    if old:
        return tuple(old), "nvidia-smi (no compute_cap field: an old driver?)"
    return (), "nvidia-smi lists no GPU"


def _profile_of(gpu: LocalGpu) -> tuple[GpuProfile | None, bool]:
    """(profile, from the table) of a local GPU: the table's where its name is there, else derived
    from its compute capability and memory, else None (no compute capability)."""
    known = _match(gpu.product, gpu.memory_mib)
    if known is not None:
        return known, True
    if gpu.compute_capability is None or _capability(gpu.compute_capability) is None or not gpu.memory_mib:
        return None, False
    return derive_profile(gpu.product, gpu.compute_capability, gpu.memory_mib), False


def get_profile(name: str) -> GpuProfile:
    """The table's profile called ``name``, or that of a GPU here whose name is ``name`` (``H200`` on a
    machine with an ``NVIDIA H200``, the profile derived from it); GpuProfileError naming both lists."""
    wanted = name.strip().lower()
    for key, profile in PROFILES.items():
        if key.lower() == wanted:
            return profile
    gpus, _how = local_gpus()
    for gpu in gpus:
        if wanted in (gpu.product.lower(), _short_name(gpu.product).lower()):
            found, _ = _profile_of(gpu)
            if found is not None:
                return found
    here = ", ".join(dict.fromkeys(_short_name(g.product) for g in gpus)) or "none"
    raise GpuProfileError(
        f"unknown GPU profile {name!r}; expected one of {', '.join(PROFILES)} or a GPU nvidia-smi lists here "
        f"({here})"
    )


@dataclass(frozen=True)
class Detection:
    profile: GpuProfile
    how: str  # what chose the profile and, where a GPU was detected, what the driver said


def _describe(profile: GpuProfile) -> str:
    return (
        f"{', '.join(p for p in ORDER if p in profile.precisions)}; max batch cap {profile.max_batch_cap}, "
        f"workspace {profile.workspace_gib:g} GiB"
    )


def _detected(gpu: LocalGpu, how: str, count: int) -> Detection | None:
    profile, known = _profile_of(gpu)
    if profile is None:
        return None
    which = f"GPU 0 of {count}: " if count > 1 else ""
    memory = f"{gpu.memory_mib / 1024:.1f} GiB" if gpu.memory_mib else "memory unknown"
    said = f"detected by {how}: {which}{gpu.product}, compute capability {gpu.compute_capability or '?'}, {memory}"
    if known:
        return Detection(profile, f"{said}; the table's {profile.name} profile")
    return Detection(profile, f"{said}; not in the profile table, derived from it: {_describe(profile)}")


def detect_gpu(requested: str | None = None, spec_gpu: str | None = None) -> Detection:
    """The profile to build for: ``requested`` (flag or env), else the local GPU (the table's profile
    where its name is there, else one derived from its compute capability and memory), else
    ``spec_gpu``, else T4 (a T4-first fleet: a CPU-only build machine still targets the T4). The
    detection's ``how`` names what was detected and how, or why nothing was."""
    if requested:
        return Detection(get_profile(requested), "chosen by --gpu or TRITONKIT_GPU")
    gpus, how = local_gpus()
    if gpus:
        found = _detected(gpus[0], how, len(gpus))
        if found is not None:
            return found
        why = f"{how} lists {gpus[0].product} without a compute capability, so no profile could be derived"
    else:
        why = f"no local GPU: {how}"
    if spec_gpu:
        return Detection(get_profile(spec_gpu), f"the spec's `gpu`; {why}")
    return Detection(PROFILES[DEFAULT_GPU], f"default {DEFAULT_GPU}; {why}")


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
