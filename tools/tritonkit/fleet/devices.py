"""The device types a fleet can run on: the GPU profiles' published memory, ``cpu``, and this machine's type.

Owns :data:`CPU` (a pod of this machine's shape, serving on its CPU: the embedded server's default),
the memory of each type (:func:`memory_gib`: a GPU's from :data:`tritonkit.convert.spec.gpu_profiles.PROFILES`,
NVIDIA's published figures, T4 16 GB, L4 24 GB, A10 24 GB, A100 40/80 GB, H100 80 GB; ``cpu``: this
machine's RAM; a type of the user's own only with its ``memory_gb``), :func:`local_type` (the GPU
``nvidia-smi`` names, else ``cpu``) and :func:`device_matches` (does a tune report's recorded device
name the type it is filed under).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tritonkit.convert.spec.gpu_profiles import PROFILES, parse_nvidia_smi
from tritonkit.machine import query_gpus

__all__ = [
    "CPU",
    "TYPES",
    "canonical",
    "device_matches",
    "local_type",
    "memory_gib",
    "replicas_word",
    "smi_rows",
]

#: the type of a pod serving on this machine's CPU
CPU = "cpu"
#: every type known without a ``memory_gb`` of the user's: the GPU profiles and ``cpu``
TYPES: tuple[str, ...] = (CPU, *PROFILES)


def canonical(name: str) -> str | None:
    """The known type spelled ``name`` in any case (``t4`` -> ``T4``), or None."""
    for known in TYPES:
        if known.lower() == name.strip().lower():
            return known
    return None


def _host_memory_gib() -> float:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError):
        return 0.0


def memory_gib(gpu_type: str) -> float | None:
    """Published memory of a GPU type (GiB), this machine's RAM for ``cpu``, None for an unknown type."""
    if gpu_type == CPU:
        return round(_host_memory_gib(), 1)
    profile = PROFILES.get(gpu_type)
    return float(profile.memory_gib) if profile is not None else None


def smi_rows() -> list[tuple[str, str, float]]:
    """(product, compute capability, memory MiB) of each GPU ``nvidia-smi`` lists; empty without one."""
    return parse_nvidia_smi("\n".join(query_gpus("name", "compute_cap", "memory.total")))


def _profile_of(product: str, memory_mib: float | None) -> str | None:
    upper = product.upper()
    for profile in PROFILES.values():
        if any(token.upper() in upper for token in profile.match):
            if profile.name == "A100" and memory_mib is not None and memory_mib < 60 * 1024:
                return "A100-40GB"
            return str(profile.name)
    return None


def local_type() -> str:
    """This machine's device type: its first GPU's profile, else ``cpu``."""
    for product, _cc, memory in smi_rows():
        found = _profile_of(product, memory)
        if found is not None:
            return found
    return CPU


def device_matches(gpu_type: str, device: str) -> bool:
    """Whether a recorded device name (``"NVIDIA H100 80GB HBM3"``, ``"cpu"``, a CPU's model name) is of
    ``gpu_type``. A type of the user's own matches when its name appears in the device's."""
    found = _profile_of(device, None)
    if gpu_type == CPU:
        return found is None
    if gpu_type in PROFILES:
        if gpu_type == "A100-40GB":
            return found in ("A100", "A100-40GB") and "80GB" not in device.upper().replace(" ", "")
        return found == gpu_type or (found == "A100" and gpu_type == "A100")
    return gpu_type.lower() in device.lower()


def replicas_word(types: Iterable[object], count: int | None = None) -> str:
    """What the replicas of these device types are called: ``GPUs``, ``CPU pods`` (type ``cpu``: a pod
    serving on its CPU is no GPU), or ``pods (GPUs and CPU pods)`` for a mix; with ``count`` in front."""
    kinds = {str(t) == CPU for t in types}
    word = "CPU pods" if kinds == {True} else "pods (GPUs and CPU pods)" if kinds == {True, False} else "GPUs"
    return word if count is None else f"{count} {word}"
