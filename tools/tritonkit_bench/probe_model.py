"""A tiny python-backend model for benchmarking load generators and testing the users.

``OUTPUT0 = INPUT0 + 1`` (FP32, ``[-1, dims]``, dynamic batching): cheap on the server, so a
benchmark on it measures the load generators, not the model. ``mode="nan"`` answers NaNs (a wrong
answer the users must count as a failure) and ``mode="error"`` answers Triton errors whose text
the failures must carry. The config goes through :mod:`tritonkit.config` (protobuf schema).
"""

from __future__ import annotations

from pathlib import Path

from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig, save

__all__ = ["ERROR_TEXT", "write_probe_model"]

ERROR_TEXT = "probe model refuses this request on purpose"

_MODEL_PY = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


# NumPy 2 breaks the 2.51 stub's NumPy tensor path (it rejects NumPy-2 outputs): move tensors by DLPack
# through torch there, as the portable runner does.
USE_DLPACK = int(np.__version__.split(".")[0]) >= 2


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.mode = params.get("mode", {}).get("string_value", "add")

    def _answer(self, tensor):
        if USE_DLPACK:
            from torch.utils.dlpack import from_dlpack, to_dlpack

            x = from_dlpack(tensor.to_dlpack())
            y = x + 1 if self.mode == "add" else x * float("nan")
            return pb_utils.Tensor.from_dlpack("OUTPUT0", to_dlpack(y.contiguous()))
        x = tensor.as_numpy()
        y = x + np.float32(1) if self.mode == "add" else np.full_like(x, np.nan)
        return pb_utils.Tensor("OUTPUT0", y)

    def execute(self, requests):
        responses = []
        for request in requests:
            if self.mode == "error":
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("%s")))
                continue
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            responses.append(pb_utils.InferenceResponse([self._answer(tensor)]))
        return responses
"""


def write_probe_model(
    repo: Path | str, name: str = "probe", *, mode: str = "add", dims: int = 16, max_batch_size: int = 8
) -> Path:
    """Write ``<repo>/<name>/config.pbtxt`` and version 1's ``model.py``; returns the model folder."""
    folder = Path(repo) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    config = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[TensorConfig("INPUT0", "FP32", [dims])],
        outputs=[TensorConfig("OUTPUT0", "FP32", [dims])],
        dynamic_batching=DynamicBatching(),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        parameters={"mode": mode},
    )
    save(config, folder / "config.pbtxt")
    (folder / "1" / "model.py").write_text(_MODEL_PY % ERROR_TEXT)
    return folder
