"""Memory a model takes per instance on a running server: host memory of its stubs, GPU memory where there is a GPU.

Owns :class:`Memory` and the readings: each python-backend instance is its own stub process
(:meth:`tritonkit.serve.EmbeddedServer.stubs`), so a model's host memory per instance is the mean
resident set (RSS; the unique set, USS, is kept beside it) of its stubs, read with psutil (or from
``/proc`` where psutil is not installed). GPU memory
per instance comes from ``nvidia-smi --query-compute-apps`` by stub pid; where the pids do not match
(a container's pid namespace) it is the growth of the GPU's used memory while the model was loaded,
divided by its instances. Without ``nvidia-smi`` GPU memory is not measured, and says so (None).
The server process's own memory (its CUDA pool on a GPU) is the pod's fixed part (:func:`server_memory`).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tritonkit.machine import query_gpus
from tritonkit.serve.embedded import EmbeddedServer

__all__ = ["Memory", "gpu_by_pid", "gpu_used_mb", "measure_model", "server_memory"]

MB = 1024.0 * 1024.0


@dataclasses.dataclass(frozen=True)
class Memory:
    """A model's memory per instance (MB) as measured; ``gpu_mb`` None: not measured (no GPU here)."""

    instances: int
    host_rss_mb: float
    host_uss_mb: float | None
    gpu_mb: float | None
    how_gpu: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "instances": self.instances,
            "host_rss_mb_per_instance": round(self.host_rss_mb, 1),
            "host_uss_mb_per_instance": None if self.host_uss_mb is None else round(self.host_uss_mb, 1),
            "gpu_mb_per_instance": None if self.gpu_mb is None else round(self.gpu_mb, 1),
            "gpu_measured_by": self.how_gpu,
        }


def _smi(*query: str) -> list[list[str]] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, *query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [
        [part.strip() for part in line.split(",")] for line in out.stdout.strip().splitlines() if line.strip()
    ]


def gpu_by_pid() -> dict[int, float] | None:
    """GPU memory (MiB) per process using a GPU, or None without ``nvidia-smi``."""
    rows = _smi("--query-compute-apps=pid,used_memory")
    if rows is None:
        return None
    out: dict[int, float] = {}
    for row in rows:
        if len(row) == 2 and row[0].isdigit():
            try:
                out[int(row[0])] = out.get(int(row[0]), 0.0) + float(row[1])
            except ValueError:
                continue
    return out


def gpu_used_mb() -> float | None:
    """Used memory (MiB) of the first GPU, or None without ``nvidia-smi``."""
    rows = query_gpus("memory.used")
    try:
        return float(rows[0].split()[0]) if rows else None
    except (ValueError, IndexError):
        return None


def _proc_memory(pid: int) -> tuple[float, float | None]:
    """(RSS, USS) in MB from ``/proc`` (where psutil is not installed)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        rss = next(float(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return 0.0, None
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8").splitlines()
        private = sum(
            float(line.split()[1]) for line in rollup if line.startswith(("Private_Clean:", "Private_Dirty:"))
        )
        return rss, private / 1024
    except (OSError, ValueError, IndexError):
        return rss, None


def _process_memory(pid: int) -> tuple[float, float | None]:
    try:
        import psutil  # noqa: PLC0415 (optional: /proc gives the same figures on Linux)
    except ImportError:
        return _proc_memory(pid)
    try:
        process = psutil.Process(pid)
        rss = process.memory_info().rss / MB
        try:
            uss: float | None = float(process.memory_full_info().uss) / MB
        except (psutil.AccessDenied, AttributeError):
            uss = None
        return rss, uss
    except psutil.Error:
        return 0.0, None


def server_memory(server: EmbeddedServer) -> tuple[float, float | None]:
    """(host RSS MB, GPU MB or None) of the ``tritonserver`` process itself: a pod's fixed part."""
    if server.pid is None:
        return 0.0, None
    rss, _ = _process_memory(server.pid)
    by_pid = gpu_by_pid()
    return rss, (None if by_pid is None else by_pid.get(server.pid, 0.0))


def measure_model(server: EmbeddedServer, model: str, gpu_before_mb: float | None = None) -> Memory:
    """Memory per instance of ``model`` on ``server`` now (measure after it has served its load)."""
    stubs = [s for s in server.stubs() if s.model == model]
    if not stubs:
        return Memory(0, 0.0, None, None, "no stub process found")
    readings = [_process_memory(s.pid) for s in stubs]
    rss = sum(r for r, _ in readings) / len(readings)
    uss_values = [u for _, u in readings if u is not None]
    uss = sum(uss_values) / len(uss_values) if uss_values else None
    by_pid = gpu_by_pid()
    if by_pid is None:
        return Memory(len(stubs), rss, uss, None, "not measured: no nvidia-smi (CPU machine)")
    own = [by_pid[s.pid] for s in stubs if s.pid in by_pid]
    if own:
        return Memory(len(stubs), rss, uss, sum(own) / len(stubs), "nvidia-smi per stub process")
    used = gpu_used_mb()
    if gpu_before_mb is not None and used is not None:
        return Memory(
            len(stubs),
            rss,
            uss,
            max(0.0, used - gpu_before_mb) / len(stubs),
            "nvidia-smi, GPU memory growth while loaded",
        )
    return Memory(len(stubs), rss, uss, 0.0, "nvidia-smi lists no GPU memory for its stubs")
