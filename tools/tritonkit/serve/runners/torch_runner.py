"""tritonkit GPU runner: a Triton python-backend model that executes a ``torch.export`` program.

Copied by the build into ``<model>/<version>/model.py`` next to ``model.pt2``. Self-contained on
purpose: it runs inside the python-backend stub and imports nothing from tritonkit.

Why this shape: at small batches a transformer on a GPU is bound by kernel launches, not arithmetic,
so every batch size the runner meets is padded up to a *bucket* and replayed from a CUDA graph
captured for that bucket (one launch instead of hundreds). Tensors cross the stub by DLPack only:
this release's stub rejects NumPy-2 arrays, and DLPack lets tensors that arrive in GPU memory stay
there. The program's precision is fixed at build time (an FP16 program is exported from a half
module), so the runner never casts weights; it casts float inputs to the program's input dtype and
outputs to the config's dtype inside the captured graph.

Config ``parameters`` it reads (string values; ``runner``, ``engine``, ``precision`` are recorded
for ``tritonkit check`` and not needed here):
  ``program_file``   artifact name in the version directory (default ``model.pt2``)
  ``device``         ``auto`` (default: CUDA when torch sees a GPU and the instance is not KIND_CPU),
                     ``cuda`` or ``cpu``
  ``batch_buckets``  comma-separated batch sizes to pad to, ascending (default: powers of two up
                     to ``max_batch_size``); batches over the largest run in chunks of it
  ``cuda_graphs``    ``true`` (default on CUDA) or ``false``
  ``capture_at_load`` ``true`` (default): capture every bucket at load time when the config's
                     dims are all fixed; other shapes are captured on first use
  ``max_graphs``     most graphs kept (default 64); shapes beyond it run without a graph
"""

from __future__ import annotations

import json
import os
from typing import Any

try:  # absent outside the stub: tests and the benchmark import the engine alone
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised only inside the stub
    pb_utils = None

_TORCH_DTYPES = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT8": "int8",
    "TYPE_INT16": "int16",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_BF16": "bfloat16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
}


def _param(params: dict[str, Any], key: str, default: str) -> str:
    value = params.get(key, {})
    text = value.get("string_value", "") if isinstance(value, dict) else ""
    return text or default


def parse_buckets(text: str, max_batch_size: int) -> list[int]:
    """Ascending batch buckets from ``"1,2,4"``; empty text means powers of two up to the max batch."""
    if not text.strip():
        top = max(max_batch_size, 1)
        buckets = []
        size = 1
        while size < top:
            buckets.append(size)
            size *= 2
        buckets.append(top)
        return buckets
    try:
        buckets = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(
            f"parameter `batch_buckets` must be comma-separated integers; got {text!r}"
        ) from None
    if not buckets or buckets[0] < 1:
        raise ValueError(f"parameter `batch_buckets` must hold integers >= 1; got {text!r}")
    if max_batch_size > 0 and buckets[-1] > max_batch_size:
        raise ValueError(f"batch bucket {buckets[-1]} exceeds max_batch_size {max_batch_size}")
    return buckets


def plan_chunks(batch: int, buckets: list[int]) -> list[tuple[int, int]]:
    """(rows, bucket) pieces covering ``batch`` rows: full chunks of the largest bucket, then the
    remainder padded up to the smallest bucket that holds it."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1; got {batch}")
    top = buckets[-1]
    pieces = [(top, top)] * (batch // top)
    rest = batch % top
    if rest:
        pieces.append((rest, next(b for b in buckets if b >= rest)))
    return pieces


class GraphEngine:
    """Runs a module on padded batch buckets, from captured CUDA graphs where it can.

    ``run`` takes and returns tensors on ``device``; rows past the real batch are padding whose
    results are dropped (rows of a batch are independent for every model this serves).
    """

    def __init__(
        self,
        module: Any,
        device: str,
        input_dtypes: list[Any],
        output_dtypes: list[Any],
        buckets: list[int],
        *,
        cuda_graphs: bool = True,
        max_graphs: int = 64,
    ) -> None:
        import torch  # noqa: PLC0415 (torch loads only in the stub that serves this model)

        self.torch = torch
        self.module = module
        self.device = torch.device(device)
        self.input_dtypes = input_dtypes
        self.output_dtypes = output_dtypes
        self.buckets = buckets
        self.use_graphs = cuda_graphs and self.device.type == "cuda"
        self.max_graphs = max_graphs
        self.graphs: dict[tuple[Any, ...], tuple[Any, list[Any], list[Any]]] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.use_graphs else None

    def _forward(self, inputs: list[Any]) -> list[Any]:
        out = self.module(*inputs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(self.output_dtypes):
            raise ValueError(
                f"program returned {len(outs)} outputs; the config names {len(self.output_dtypes)}"
            )
        return [o.to(d) if d is not None else o for o, d in zip(outs, self.output_dtypes, strict=True)]

    def _key(self, bucket: int, inputs: list[Any]) -> tuple[Any, ...]:
        return (bucket, *((tuple(t.shape[1:]), t.dtype) for t in inputs))

    def _capture(self, key: tuple[Any, ...], bucket: int, inputs: list[Any]) -> Any:
        torch = self.torch
        static_in = [
            torch.zeros((bucket, *t.shape[1:]), dtype=d or t.dtype, device=self.device)
            for t, d in zip(inputs, self.input_dtypes, strict=True)
        ]
        for buf, t in zip(static_in, inputs, strict=True):  # real rows, so warm-up sees real values
            rows = min(bucket, t.shape[0])
            buf[:rows].copy_(t[:rows])
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(2):  # warm-up on a side stream, as CUDA graph capture requires
                self._forward(static_in)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool), torch.inference_mode():
            static_out = self._forward(static_in)
        self.graphs[key] = (graph, static_in, static_out)
        return self.graphs[key]

    def _run_bucket(self, rows: int, bucket: int, inputs: list[Any]) -> list[Any]:
        torch = self.torch
        if self.use_graphs:
            key = self._key(bucket, inputs)
            entry = self.graphs.get(key)
            if entry is None and len(self.graphs) < self.max_graphs:
                entry = self._capture(key, bucket, inputs)
            if entry is not None:
                graph, static_in, static_out = entry
                for buf, t in zip(static_in, inputs, strict=True):
                    buf[:rows].copy_(t, non_blocking=True)
                graph.replay()
                # Cloned: the next replay overwrites the static outputs.
                return [o[:rows].clone() for o in static_out]
        padded = []
        for given, d in zip(inputs, self.input_dtypes, strict=True):
            t = given.to(d) if d is not None else given
            if bucket > rows:  # pad with copies of the last row: valid values, dropped afterwards
                t = torch.cat([t, t[-1:].expand(bucket - rows, *t.shape[1:])], dim=0)
            padded.append(t)
        with torch.inference_mode():
            return [o[:rows] for o in self._forward(padded)]

    def run(self, inputs: list[Any]) -> list[Any]:
        """Outputs for ``inputs`` (tensors on the engine's device sharing their batch size)."""
        batch = int(inputs[0].shape[0])
        start = 0
        parts: list[list[Any]] = []
        for rows, bucket in plan_chunks(batch, self.buckets):
            parts.append(self._run_bucket(rows, bucket, [t[start : start + rows] for t in inputs]))
            start += rows
        if len(parts) == 1:
            return parts[0]
        return [self.torch.cat(list(pieces), dim=0) for pieces in zip(*parts, strict=True)]

    def warm(self, shapes: list[tuple[int, ...]]) -> None:
        """Capture (or warm) every bucket for inputs of these non-batch shapes."""
        torch = self.torch
        for bucket in self.buckets:
            inputs = [
                torch.zeros((bucket, *shape), dtype=d or torch.float32, device=self.device)
                for shape, d in zip(shapes, self.input_dtypes, strict=True)
            ]
            self.run(inputs)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def load_program(path: str, device: str) -> tuple[Any, list[Any]]:
    """The exported program's module on ``device`` and its user inputs' dtypes (None when unknown)."""
    import torch  # noqa: PLC0415 (torch loads only in the stub that serves this model)

    program = torch.export.load(path)
    if device != "cpu":
        # Moves weights and the devices written into the graph (torch.arange(device=...)).
        from torch.export.passes import move_to_device_pass  # noqa: PLC0415 (torch loads only in the stub that serves this model)

        program = move_to_device_pass(program, device)
    user_inputs = list(program.graph_signature.user_inputs)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    dtypes = []
    for name in user_inputs:
        value = placeholders[name].meta.get("val") if name in placeholders else None
        dtypes.append(getattr(value, "dtype", None))
    return program.module(), dtypes


class TritonPythonModel:
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
        out_dtypes = [getattr(torch, _TORCH_DTYPES.get(t["data_type"], "float32")) for t in config["output"]]

        wanted = _param(params, "device", "auto")
        if wanted not in ("auto", "cuda", "cpu"):
            raise ValueError(f"parameter `device` must be auto, cuda or cpu; got {wanted!r}")
        has_cuda = torch.cuda.is_available()
        if wanted == "cuda" and not has_cuda:
            raise ValueError("parameter `device` is cuda but torch sees no GPU here")
        on_gpu = has_cuda and (
            wanted == "cuda" or (wanted == "auto" and args.get("model_instance_kind") != "CPU")
        )
        device = f"cuda:{int(args.get('model_instance_device_id') or 0)}" if on_gpu else "cpu"
        if on_gpu:
            torch.cuda.set_device(device)
        # On the GPU the host side only gathers, pads and copies: torch's default of one thread per core
        # in every stub oversubscribes the machine (measured on the H100: see docs/benchmarks-gpu.md).
        threads = _param(params, "host_threads", "1" if on_gpu else "")
        if threads:
            torch.set_num_threads(int(threads))

        version_dir = os.path.join(args["model_repository"], args["model_version"])
        module, in_dtypes = load_program(
            os.path.join(version_dir, _param(params, "program_file", "model.pt2")), device
        )
        if len(in_dtypes) != len(self.inputs):
            raise ValueError(f"program takes {len(in_dtypes)} inputs; the config names {len(self.inputs)}")
        buckets = parse_buckets(_param(params, "batch_buckets", ""), self.max_batch_size)
        graphs = _param(params, "cuda_graphs", "true") == "true"
        self.engine = GraphEngine(
            module,
            device,
            in_dtypes,
            out_dtypes,
            buckets if self.max_batch_size > 0 else [1],
            cuda_graphs=graphs,
            max_graphs=int(_param(params, "max_graphs", "64")),
        )
        self.device = self.engine.device
        self.staging: dict[int, Any] = {}
        shapes = [tuple(int(d) for d in t["dims"]) for t in config.get("input", [])]
        fixed = all(d >= 0 for shape in shapes for d in shape)
        if self.max_batch_size > 0 and fixed and _param(params, "capture_at_load", "true") == "true":
            self.engine.warm(shapes)

    def _input(self, request: Any, name: str) -> Any:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            raise ValueError(f"request lacks input `{name}`")
        # A view of the request's buffer (host or GPU), lent for this call only: _gather copies it.
        value = self.dlpack.from_dlpack(tensor.to_dlpack())
        return value.unsqueeze(0) if self.max_batch_size == 0 else value

    def _gather(self, position: int, parts: list[Any]) -> Any:
        """One device tensor holding ``parts`` in order. Host parts are concatenated straight into
        a pinned staging buffer and go up in one copy: per-request copies (and their syncs) cost
        more than the model itself at small batches."""
        torch = self.torch
        if any(p.is_cuda for p in parts) or self.device.type != "cuda":
            return torch.cat([p.to(self.device) for p in parts], dim=0)
        rows = sum(int(p.shape[0]) for p in parts)
        shape = (rows, *parts[0].shape[1:])
        count = rows * (parts[0][0].numel() if rows else 0)
        buffer = self.staging.get(position)
        if buffer is None or buffer.dtype != parts[0].dtype or buffer.numel() < count:
            buffer = torch.empty(max(count, 1), dtype=parts[0].dtype, pin_memory=True)
            self.staging[position] = buffer
        host = buffer[:count].view(shape)
        torch.cat(parts, dim=0, out=host)
        return host.to(self.device, non_blocking=True)

    def _respond(self, outputs: list[Any], to_host: bool) -> Any:
        tensors = []
        for name, value in zip(self.outputs, outputs, strict=True):
            out = value.squeeze(0) if self.max_batch_size == 0 else value
            tensors.append(pb_utils.Tensor.from_dlpack(name, self.dlpack.to_dlpack(out.contiguous())))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    @staticmethod
    def _error(exc: BaseException) -> Any:
        message = " ".join(str(exc).split()) or type(exc).__name__
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))

    def _run_members(self, members: list[tuple[int, list[Any], bool]]) -> list[tuple[int, Any]]:
        """Run requests sharing shapes as one batch; (request index, response) pairs."""
        sizes = [int(feeds[0].shape[0]) for _, feeds, _ in members]
        columns = list(zip(*(feeds for _, feeds, _ in members), strict=True))
        outputs = self.engine.run([self._gather(i, list(parts)) for i, parts in enumerate(columns)])
        # Answers to host inputs leave the GPU in one copy per output (this also waits for the
        # staging copies above, so the pinned buffers are free for the next call).
        if any(to_host for _, _, to_host in members):
            host = [o.cpu() for o in outputs]
        else:
            host = None
            if self.device.type == "cuda":
                self.torch.cuda.current_stream(self.device).synchronize()
        on_device = [o.split(sizes, dim=0) for o in outputs]
        on_host = [h.split(sizes, dim=0) for h in host] if host is not None else None
        pairs = []
        for position, (index, _, to_host) in enumerate(members):
            source = on_host if to_host and on_host is not None else on_device
            pairs.append((index, self._respond([parts[position] for parts in source], to_host)))
        return pairs

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[tuple[int, list[Any], bool]]] = {}
        for index, request in enumerate(requests):
            try:
                feeds = [self._input(request, name) for name in self.inputs]
            except Exception as exc:  # every failure becomes that request's error response
                responses[index] = self._error(exc)
                continue
            key = tuple((tuple(t.shape[1:]), t.dtype) for t in feeds) if self.max_batch_size else (index,)
            # Answers go back where the inputs came from: host for host, GPU for CUDA memory.
            groups.setdefault(key, []).append((index, feeds, not all(t.is_cuda for t in feeds)))
        for members in groups.values():
            try:
                for index, response in self._run_members(members):
                    responses[index] = response
            except Exception:  # retried alone: one bad request fails only itself
                for member in members:
                    try:
                        for index, response in self._run_members([member]):
                            responses[index] = response
                    except Exception as inner:
                        responses[member[0]] = self._error(inner)
        return responses

    def finalize(self) -> None:
        del self.engine
