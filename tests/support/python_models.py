"""Source text of the hand-written python-backend models the tests serve, built from one block: the
tensor I/O helpers that stay correct whichever NumPy the python-backend stub imports.

``DLPACK_IO`` defines ``_numpy_in(request, name)`` and ``_tensor_out(name, array)``; a model's
``TritonPythonModel`` uses them instead of ``as_numpy()`` / ``pb_utils.Tensor(...)``. ``model_source``
puts a model together: extra imports, the block, then the class.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, QueuePolicy, TensorConfig, save

DLPACK_IO = """\
import numpy as np
import triton_python_backend_utils as pb_utils

# This stub release rejects NumPy-2 arrays (outputs fail with a shape/size mismatch): with NumPy 2,
# numeric tensors cross it by DLPack through torch, as the tritonkit runners do.
_DLPACK = int(np.__version__.split(".")[0]) >= 2


def _numpy_in(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if _DLPACK:
        from torch.utils.dlpack import from_dlpack

        return from_dlpack(tensor.to_dlpack()).numpy().copy()
    return tensor.as_numpy()


def _tensor_out(name, array):
    if _DLPACK:
        import torch
        from torch.utils.dlpack import to_dlpack

        return pb_utils.Tensor.from_dlpack(name, to_dlpack(torch.from_numpy(np.ascontiguousarray(array))))
    return pb_utils.Tensor(name, array)
"""


def model_source(model_class: str, *imports: str) -> str:
    """A model.py: ``imports`` (whole lines, e.g. ``"import time"``), ``DLPACK_IO``, then ``model_class``
    (the ``TritonPythonModel`` source, dedented here)."""
    head = "".join(f"{line}\n" for line in imports)
    return f"{head}{DLPACK_IO}\n\n{textwrap.dedent(model_class).strip()}\n"


#: X -> Y = X + 1 (FP32); ``SLOW_ADD_ONE`` sleeps SECONDS (replace the word) per execution first.
ADD_ONE = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                x = _numpy_in(request, "X")
                out.append(pb_utils.InferenceResponse([_tensor_out("Y", (x + 1).astype(np.float32))]))
            return out
    """
)

SLOW_ADD_ONE = ADD_ONE.replace("out = []", "import time; time.sleep(SECONDS); out = []")


def write_python_model(
    repo: Path, name: str, source: str, *, max_batch_size: int = 8, queue: QueuePolicy | None = None
) -> Path:
    """A python-backend model X[FP32, 4] -> Y[FP32, 4], config written through tritonkit.config (a
    dynamic batcher with ``queue`` as its default queue policy when the model batches)."""
    config = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("Y", "FP32", [4])],
        dynamic_batching=DynamicBatching(default_queue_policy=queue) if max_batch_size > 0 else None,
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    version = repo / name / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(textwrap.dedent(source))
    save(config, repo / name / "config.pbtxt")
    return repo / name
