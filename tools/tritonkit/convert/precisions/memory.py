"""Per-sample memory of an ONNX model, measured for max-batch planning.

The model runs in ONNX Runtime (CPU) in a fresh child process, at batch ``probe_batch / 4`` and then
at batch ``probe_batch``, every dynamic non-batch dim at its largest value; the growth of the child's
peak resident memory between the two, divided by the extra samples, is the per-sample figure
(activations scale with the batch, weights do not). A child process because the peak of this one
already holds whatever the build did before (the torch export), which would hide the growth. CPU
memory stands in for GPU memory here: the activations are the same tensors.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tritonkit.errors import BuildError

__all__ = ["estimate_memory"]

_KIB = 1024
_NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def _feeds(session: Any, batch: int, max_dim: int) -> dict[str, Any]:
    feeds = {}
    for meta in session.get_inputs():
        shape = [
            batch if i == 0 else (d if isinstance(d, int) and d > 0 else max_dim)
            for i, d in enumerate(meta.shape)
        ]
        feeds[meta.name] = np.ones(shape, dtype=_NUMPY_TYPES.get(meta.type, np.float32))
    return feeds


def _peak_bytes() -> float:
    """This process's peak resident memory. ``VmHWM`` where Linux has it: ``ru_maxrss`` survives
    ``execve`` and would start the child at the (larger) peak of the process that spawned it."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * _KIB
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _KIB)


def _measure(onnx_path: str, max_dim: int, probe_batch: int) -> dict[str, float]:
    import onnxruntime as ort  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(onnx_path, sess_options=options, providers=["CPUExecutionProvider"])
    # The first point is a batch, not batch 1: loading the model has its own peak, which a small
    # batch stays under, and then the growth between the two points would read as zero.
    session.run(None, _feeds(session, probe_batch // 4, max_dim))
    before = _peak_bytes()
    session.run(None, _feeds(session, probe_batch, max_dim))
    return {"before": before, "after": _peak_bytes()}


def estimate_memory(
    onnx_path: str | Path, *, max_seq_length: int = 256, probe_batch: int = 32
) -> tuple[float, float]:
    """(measured activation bytes per sample, weight bytes on disk)."""
    command = [
        sys.executable,
        "-m",
        "tritonkit.convert.precisions.memory",
        str(onnx_path),
        str(max_seq_length),
        str(probe_batch),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"measuring per-sample memory of {Path(onnx_path).name} failed: {last}")
    peaks = json.loads(done.stdout.strip().splitlines()[-1])
    per_sample = max((peaks["after"] - peaks["before"]) / (probe_batch - probe_batch // 4), 1.0)
    return float(per_sample), float(Path(onnx_path).stat().st_size)


if __name__ == "__main__":  # the child process of estimate_memory
    print(json.dumps(_measure(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
