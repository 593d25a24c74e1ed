"""tritonkit GPU runner on ONNX Runtime: a Triton python-backend model that executes an ONNX file
with the CUDA execution provider and I/O binding, tensors kept on the GPU.

Copied by the build into ``<model>/<version>/model.py`` next to ``model.onnx``. Self-contained on
purpose: it runs inside the python-backend stub and imports nothing from tritonkit. Needs an
``onnxruntime`` with the CUDA provider (``onnxruntime-gpu``) first on the stub's path, and torch,
whose CUDA tensors hold the bound inputs and outputs and cross the stub by DLPack (this release's
stub rejects NumPy-2 arrays). ONNX Runtime runs on torch's current stream
(``user_compute_stream``), so no extra synchronisation sits between the copies and the run.

Config ``parameters`` it reads (string values): ``onnx_file`` (default ``model.onnx``); ``device``
(``auto``/``cuda``/``cpu``, as torch_runner.py); others (``runner``, ``engine``, ``precision``,
``batch_buckets``) are recorded for ``tritonkit check`` only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonkit.backends.runners.gpu_requests import BucketedPath, GeneralPath, Member
else:  # the copy beside this file: the stub puts the version folder on sys.path
    from gpu_requests import BucketedPath, GeneralPath


def _param(params: dict[str, Any], key: str, default: str) -> str:
    value = params.get(key, {})
    text = value.get("string_value", "") if isinstance(value, dict) else ""
    return text or default


def _pythonpath_first() -> None:
    """Put PYTHONPATH's entries ahead of the stub's site-packages, so an ``onnxruntime-gpu`` named
    there wins over a CPU-only ``onnxruntime`` in the venv (the stub appends them after it)."""
    if "onnxruntime" in sys.modules:
        return
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for entry in reversed(entries):
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)


class OrtCudaEngine:
    """One ONNX Runtime session on one GPU; ``run`` takes and returns torch CUDA tensors."""

    def __init__(self, onnx_path: str, device: str, threads: int = 1) -> None:
        _pythonpath_first()
        import numpy as np  # noqa: PLC0415 (after _pythonpath_first(): the GPU build of onnxruntime must win)
        import onnxruntime as ort  # noqa: PLC0415 (after _pythonpath_first(): the GPU build of onnxruntime must win)
        import torch  # noqa: PLC0415 (after _pythonpath_first(): the GPU build of onnxruntime must win)

        self.torch = torch
        self.device = torch.device(device)
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise ValueError(
                f"ONNX Runtime {ort.__version__} here offers {ort.get_available_providers()}; "
                "expected CUDAExecutionProvider (onnxruntime-gpu first on the path)"
            )
        index = self.device.index or 0
        stream = torch.cuda.current_stream(self.device).cuda_stream
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        provider = {
            "device_id": str(index),
            "user_compute_stream": str(stream),
            "has_user_compute_stream": "1",
        }
        self.session = ort.InferenceSession(
            onnx_path, sess_options=options, providers=[("CUDAExecutionProvider", provider)]
        )
        self.index = index
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.np_types = {
            torch.float32: np.float32,
            torch.float16: np.float16,
            torch.int64: np.int64,
            torch.int32: np.int32,
            torch.bool: np.bool_,
        }
        self.out_meta: dict[tuple[Any, ...], list[tuple[tuple[int, ...], Any]]] = {}

    def run(self, inputs: list[Any]) -> list[Any]:
        torch = self.torch
        binding = self.session.io_binding()
        tensors = [t.to(self.device).contiguous() for t in inputs]
        for name, t in zip(self.input_names, tensors, strict=True):
            binding.bind_input(name, "cuda", self.index, self.np_types[t.dtype], list(t.shape), t.data_ptr())
        key = tuple((tuple(t.shape[1:]), t.dtype) for t in tensors)
        batch = int(tensors[0].shape[0])
        meta = self.out_meta.get(key)
        if meta is None:  # first time for these shapes: let ORT allocate and learn the outputs
            for name in self.output_names:
                binding.bind_output(name, "cuda", self.index)
            self.session.run_with_iobinding(binding)
            values = binding.get_outputs()
            arrays = [torch.from_numpy(v.numpy()).to(self.device) for v in values]
            self.out_meta[key] = [(tuple(a.shape[1:]), a.dtype) for a in arrays]
            return arrays
        outputs = [torch.empty((batch, *shape), dtype=dtype, device=self.device) for shape, dtype in meta]
        for name, out in zip(self.output_names, outputs, strict=True):
            binding.bind_output(
                name, "cuda", self.index, self.np_types[out.dtype], list(out.shape), out.data_ptr()
            )
        self.session.run_with_iobinding(binding)
        return outputs


class TritonPythonModel(GeneralPath, BucketedPath):
    """Python-backend entry points: ``initialize``, ``execute``, ``finalize``."""

    def initialize(self, args: dict[str, str]) -> None:
        import torch  # noqa: PLC0415 (torch loads only in the stub that serves this model)
        import torch.utils.dlpack as torch_dlpack  # noqa: PLC0415 (torch loads only in the stub that serves this model)

        self.torch = torch
        self.dlpack: Any = torch_dlpack
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.inputs = [t["name"] for t in config.get("input", [])]
        self.outputs = [t["name"] for t in config.get("output", [])]
        if _param(params, "device", "auto") == "cpu" or not torch.cuda.is_available():
            raise ValueError("onnx_cuda_runner runs on a GPU; none is visible or `device` is cpu")
        device = f"cuda:{int(args.get('model_instance_device_id') or 0)}"
        torch.cuda.set_device(device)
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.engine = OrtCudaEngine(
            os.path.join(version_dir, _param(params, "onnx_file", "model.onnx")), device
        )
        missing = [n for n in self.inputs if n not in self.engine.input_names]
        missing += [n for n in self.outputs if n not in self.engine.output_names]
        if missing:
            raise ValueError(f"config names tensors the ONNX graph lacks: {', '.join(missing)}")
        self.engine.input_names = list(self.inputs)
        self.engine.output_names = list(self.outputs)
        # Shape buckets (``shape_buckets.py`` beside this file): requests padded to their bucket and
        # grouped (gpu_requests.BucketedPath); ONNX Runtime takes any batch, so no graph table: the
        # grouping's cost is the tokens a run computes plus a few rows per run.
        self.bucketing: Any = None
        text = _param(params, "shape_buckets", "")
        if text and self.max_batch_size > 0:
            import importlib  # noqa: PLC0415 (only a model with shape buckets needs its helper)

            import numpy  # noqa: PLC0415 (only the bucketed path stages through NumPy-typed buffers)

            self.np = numpy
            self.device = torch.device(device)
            self.bucket_module = importlib.import_module("shape_buckets")  # the copy beside model.py
            self.bucketing = self.bucket_module.Buckets.parse(text)
            first = min(edges[0] for edges in self.bucketing.axes.values())
            self.bucket_cost = self.bucket_module.token_cost(8.0 * first)

    def _run_members(self, members: list[Member]) -> list[tuple[int, Any]]:
        columns = zip(*(feeds for _, feeds, _ in members), strict=True)
        # Host parts are joined on the host and go up in one copy (engine.run moves them).
        batch = [self.torch.cat(list(parts), dim=0) for parts in columns]
        outputs = self.engine.run(batch)
        # One copy down per output for all host answers, not one per request.
        host = [o.cpu() for o in outputs] if any(h for _, _, h in members) else None
        return self._answers(members, outputs, host)

    def _bucket_launch(self, staged: list[Any], rows: int, slot: int) -> list[Any]:
        outputs = self.engine.run([t.to(self.device, non_blocking=True) for t in staged])
        return [o.to("cpu", non_blocking=True) for o in outputs]

    def _bucket_wait(self) -> None:
        self.torch.cuda.current_stream(self.device).synchronize()

    def execute(self, requests: list[Any]) -> list[Any]:
        if self.bucketing is not None:
            return self.execute_bucketed(requests)
        return self.execute_general(requests)

    def finalize(self) -> None:
        del self.engine
