"""Python-backend ``model.py`` files that versions carry, kept as plain copyable source files.

Each module here is a self-contained Triton python-backend model (it imports only what the stub's
interpreter has: ``triton_python_backend_utils``, NumPy, ONNX Runtime, ...). Builders copy one into
``<model>/<version>/model.py``; nothing in tritonkit imports them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ONNX_RUNNER", "RUNNER_DIR", "runner_path"]

RUNNER_DIR = Path(__file__).resolve().parent
#: Runs an ONNX artifact with ONNX Runtime (see ``onnx_runner.py``).
ONNX_RUNNER = "onnx_runner"


def runner_path(name: str = ONNX_RUNNER) -> Path:
    """Path of the runner source ``<name>.py`` in this package; FileNotFoundError if there is none."""
    path = RUNNER_DIR / f"{name}.py"
    if name.startswith("_") or not path.is_file():
        raise FileNotFoundError(f"no runner named {name!r} in {RUNNER_DIR}")
    return path
