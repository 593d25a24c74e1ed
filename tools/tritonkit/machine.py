"""What machine this is, for the pages that publish measurements (benchmarks, accuracy reports, provenance).

Owns the raw facts: the CPU's name and core count, the GPUs NVIDIA's driver lists (``nvidia-smi``; none
where it is absent or lists none), the host name, and the one-line description benchmark pages print.
What a measurement was taken on as a whole (these facts plus the server and the model versions) is
:mod:`tritonkit.measure.provenance`'s.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from pathlib import Path

__all__ = ["cpu_model", "description", "gpu_names", "host_name", "query_gpus"]


@functools.cache
def cpu_model() -> str | None:
    """The CPU's marketing name from ``/proc/cpuinfo`` ("AMD EPYC ..."), or None where it is not there."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def query_gpus(*fields: str) -> list[str]:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader``'s lines, one per GPU in index order; empty
    where the driver's tool is absent, fails or lists none (read each call: cheap, and a test may put
    another ``nvidia-smi`` on PATH)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        result = subprocess.run(
            [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if result.returncode != 0:
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def gpu_names() -> list[str]:
    """The name of every GPU ``nvidia-smi`` lists ("NVIDIA H100 80GB HBM3", "Tesla T4"), in index order."""
    return query_gpus("name")


def host_name() -> str:
    """This machine's network name (``platform.node()``), or ``unknown`` where it has none."""
    return platform.node() or "unknown"


def description() -> str:
    """CPU model, core count, memory, OS and Python of this machine, as benchmark pages and reports name it."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    memory = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release().split('-')[0]}, "
        f"Python {platform.python_version()}"
    )
