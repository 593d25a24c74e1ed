"""tritonkit GPU runner: a Triton python-backend model that executes a ``torch.export`` program.

Copied by the build into ``<model>/<version>/model.py`` next to ``model.pt2`` (and its fast-loading
twin ``model.fx.pt``). Self-contained: it runs inside the python-backend stub and imports nothing from
tritonkit.

At small batches a model on a GPU is bound by kernel launches, so every batch is padded up to a
*bucket* and replayed from a CUDA graph captured for it; the build makes the buckets the batcher's
preferred sizes, so batches are mostly bucket-sized. One execute (measured: docs/benchmarks-gpu.md):
every request's input concatenated into one pinned staging buffer per input (NumPy views where the
stub's NumPy is 1.x, else DLPack), one copy up per chunk into the graph's static inputs, the replay,
one copy down into pinned output buffers, the responses built as views of them while the GPU runs,
one wait. Nothing is allocated on the device per execute; inputs in GPU memory take the general path.
Casts to the program's precision and to the config's output dtype are inside the captured graph.

Config ``parameters`` it reads (string values; ``runner``, ``engine``, ``precision`` are recorded
for ``tritonkit check`` and not needed here):
  ``program_file``   artifact name in the version directory (default ``model.pt2``)
  ``device``         ``auto`` (default: CUDA when torch sees a GPU and the instance is not KIND_CPU),
                     ``cuda`` or ``cpu``
  ``batch_buckets``  comma-separated batch sizes to pad to (default: powers of two up to
                     ``max_batch_size``); sizes above ``max_batch_size`` are dropped and
                     ``max_batch_size`` is the last bucket; batches over it run in chunks of it
  ``cuda_graphs``    ``true`` (default on CUDA) or ``false``; ``max_graphs`` most kept (64)
  ``shape_buckets``  a dynamic axis's buckets (``shape_buckets.py``, copied beside this file): each
                     request padded to its bucket, one execute's requests grouped by bucket, every
                     (batch bucket, shape bucket) graph captured and timed at load; ``graph_max_batch``
                     the graphs' largest batch when an execute gathers more rows (default max batch)
  ``capture_at_load`` ``true`` (default): capture every bucket at load when all dims are fixed
  ``host_threads``   torch's host threads (default 1 on the GPU)
  ``tensor_exchange`` ``auto`` (NumPy views where the stub's NumPy is 1.x, else DLPack), ``numpy``, ``dlpack``
  ``stats_interval_s`` log the host-time split of executes every so many seconds (default 0: off;
                     ``host_stats.py``, copied beside this file)
  ``profile_dir``    torch.profiler trace and table of executes ``profile_skip`` (100) to
                     ``profile_skip`` + ``profile_executes`` (200) written there (diagnosis)
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

try:  # absent outside the stub: tests and the benchmark import the engine alone
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised only inside the stub
    pb_utils = None

if TYPE_CHECKING:
    from tritonkit.backends.runners.gpu_requests import BUCKET_PHASES, BucketedPath, GeneralPath, Member
    from tritonkit.backends.runners.host_stats import SYNC_PHASES, HostStats, log, profile_step
else:  # the copies beside this file: the stub puts the version folder on sys.path
    from gpu_requests import BUCKET_PHASES, BucketedPath, GeneralPath
    from host_stats import SYNC_PHASES, HostStats, log, profile_step

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
    """Ascending batch buckets from ``"1,2,4"``; empty text means powers of two up to the max batch.

    Buckets above ``max_batch_size`` are dropped and ``max_batch_size`` becomes the last bucket, so a
    config whose max batch was lowered (by hand or by ``tritonkit tune``) still loads."""
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
        buckets = [b for b in buckets if b < max_batch_size] + [max_batch_size]
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


def padded_rows(batch: int, buckets: list[int]) -> int:
    """Rows of padding the engine computes for a batch of ``batch`` rows (0 when it is a bucket)."""
    return sum(bucket - rows for rows, bucket in plan_chunks(batch, buckets))


class GraphEngine:
    """Runs a module on padded batch buckets, from captured CUDA graphs where it can.

    ``run`` takes and returns tensors on ``device``; ``launch`` takes host tensors and fills
    host output buffers (valid after ``wait``). Rows past the real batch are padding whose results
    are dropped (rows of a batch are independent for every model this serves).
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
        self.pinned = self.device.type == "cuda"
        self.host_out: dict[tuple[Any, ...], list[Any]] = {}

    def _forward(self, inputs: list[Any]) -> list[Any]:
        cast = [
            t.to(d) if d is not None and t.dtype != d else t
            for t, d in zip(inputs, self.input_dtypes, strict=True)
        ]
        out = self.module(*cast)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(self.output_dtypes):
            raise ValueError(
                f"program returned {len(outs)} outputs; the config names {len(self.output_dtypes)}"
            )
        return [o.to(d) if d is not None else o for o, d in zip(outs, self.output_dtypes, strict=True)]

    @staticmethod
    def _shapes(inputs: list[Any]) -> tuple[Any, ...]:
        return tuple((tuple(t.shape[1:]), t.dtype) for t in inputs)

    def _capture(self, key: tuple[Any, ...], bucket: int, inputs: list[Any]) -> Any:
        """A graph for ``bucket`` rows shaped like ``inputs`` (the cast to the program's dtype is
        captured too)."""
        torch = self.torch
        static_in = [torch.zeros((bucket, *t.shape[1:]), dtype=t.dtype, device=self.device) for t in inputs]
        for buf, t in zip(static_in, inputs, strict=True):  # real rows, so warm-up sees real values
            rows = min(bucket, t.shape[0])
            buf[:rows].copy_(t[:rows])
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(1):  # warm-up on a side stream (lazy inits), as CUDA graph capture requires
                self._forward(static_in)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool), torch.inference_mode():
            static_out = self._forward(static_in)
        self.graphs[key] = (graph, static_in, static_out)
        return self.graphs[key]

    def _graph(self, bucket: int, shapes: tuple[Any, ...], inputs: list[Any]) -> Any:
        """The graph of ``bucket`` for inputs of ``shapes`` (captured on first use), or None."""
        key = (bucket, *shapes)
        entry = self.graphs.get(key)
        if entry is None and len(self.graphs) < self.max_graphs:
            entry = self._capture(key, bucket, inputs)
        return entry

    def _step(self, piece: int, bucket: int, shapes: tuple[Any, ...], feeds: list[Any]) -> list[Any]:
        """Outputs (on the device, valid until the next step) of ``piece`` rows run as ``bucket``."""
        entry = self._graph(bucket, shapes, feeds) if self.use_graphs else None
        if entry is None:  # eager: the exact batch, no padding needed
            with self.torch.inference_mode():
                return self._forward([t.to(self.device, non_blocking=True) for t in feeds])
        graph, static_in, static_out = entry
        for buf, t in zip(static_in, feeds, strict=True):
            (buf if piece == bucket else buf[:piece]).copy_(t, non_blocking=True)
        graph.replay()
        return static_out if piece == bucket else [o[:piece] for o in static_out]

    def _outputs(self, key: tuple[Any, ...], rows: int, like: list[Any], host: bool) -> list[Any]:
        """Output buffers of ``rows`` rows shaped like ``like``: reused host buffers of ``key`` (slot
        and shapes; pinned on a GPU), or new device tensors the caller keeps."""
        if not host:
            return [self.torch.empty((rows, *o.shape[1:]), dtype=o.dtype, device=self.device) for o in like]
        buffers = self.host_out.get(key)
        if buffers is None or int(buffers[0].shape[0]) < rows:
            capacity = max(rows, self.buckets[-1])
            buffers = [
                self.torch.empty((capacity, *o.shape[1:]), dtype=o.dtype, pin_memory=self.pinned)
                for o in like
            ]
            self.host_out[key] = buffers
        return [b[:rows] for b in buffers]

    def launch(self, inputs: list[Any], rows: int, host: bool = True, slot: int = 0) -> list[Any]:
        """Start the work for ``inputs`` of ``rows`` rows (host or device tensors); return output
        views that hold the answers once :meth:`wait` returns: host buffers reused per ``slot``
        (``host``; the inputs must stay untouched until then) or new device tensors. Launches of one
        thread are ordered on its current stream, so a slot's next launch may follow before a wait."""
        shapes = self._shapes(inputs)
        start = 0
        outs: list[Any] | None = None
        for piece, bucket in plan_chunks(rows, self.buckets):
            feeds = inputs if piece == rows else [t[start : start + piece] for t in inputs]
            results = self._step(piece, bucket, shapes, feeds)
            if outs is None:
                outs = self._outputs((slot, *shapes), rows, results, host)
            for dst, value in zip(outs, results, strict=True):
                (dst if piece == rows else dst[start : start + piece]).copy_(value, non_blocking=True)
            start += piece
        assert outs is not None
        return outs

    def run(self, inputs: list[Any]) -> list[Any]:
        """Outputs for ``inputs`` (tensors on the engine's device sharing their batch size)."""
        return self.launch(inputs, int(inputs[0].shape[0]), host=False)

    def wait(self) -> None:
        """Block until the work launched so far is done (host outputs filled, inputs free)."""
        if self.device.type == "cuda":
            self.torch.cuda.current_stream(self.device).synchronize()

    def warm(self, shapes: list[tuple[int, ...]], dtypes: list[Any]) -> None:
        """Capture every bucket for inputs of these non-batch shapes and dtypes (without graphs
        there is nothing to prepare: eager runs take the exact batch)."""
        torch = self.torch
        if not self.use_graphs:
            return
        for bucket in self.buckets:
            inputs = [
                torch.zeros((bucket, *shape), dtype=d, device=self.device)
                for shape, d in zip(shapes, dtypes, strict=True)
            ]
            self.run(inputs)
        self.wait()


def load_program(path: str, device: str) -> tuple[Any, list[Any]]:
    """The program's module on ``device`` and its user inputs' dtypes (None when unknown): from the
    fast plain-FX copy beside it (``model.fx.pt``, written by the build) when there is one, else from
    the ``torch.export`` program itself."""
    import torch  # noqa: PLC0415 (torch loads only in the stub that serves this model)

    fast = os.path.join(os.path.dirname(path), "model.fx.pt")
    if os.path.isfile(fast):
        saved = torch.load(fast, map_location="cpu", weights_only=False)  # the version's own artifact
        module = saved["module"]
        if device != "cpu":  # devices written into the graph (torch.arange(device=...), .to(device), checks)

            def moved(value: Any) -> Any:
                if isinstance(value, (list, tuple)):
                    return type(value)(moved(v) for v in value)
                return torch.device(device) if getattr(value, "type", None) == "cpu" else value

            for node in module.graph.nodes:
                node.args, node.kwargs = moved(node.args), {k: moved(v) for k, v in node.kwargs.items()}
            module.recompile()
        return module.to(device), [getattr(torch, name) for name in saved["input_dtypes"]]
    program = torch.export.load(path)
    if device != "cpu":
        # Moves weights and the devices written into the graph (torch.arange(device=...)).
        from torch.export.passes import move_to_device_pass  # noqa: PLC0415 (torch loads only in the stub that serves this model)

        program = move_to_device_pass(program, device)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    vals = [
        placeholders[n].meta.get("val") if n in placeholders else None
        for n in program.graph_signature.user_inputs
    ]
    return program.module(), [getattr(v, "dtype", None) for v in vals]


def _place(torch: Any, params: dict[str, Any], args: dict[str, str]) -> str:
    """The instance's device from parameter ``device`` (auto: the instance's GPU where torch sees one),
    made current, and torch's host threads (``host_threads``: 1 on a GPU)."""
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
    return device


class TritonPythonModel(GeneralPath, BucketedPath):
    """Python-backend entry points: ``initialize``, ``execute``, ``finalize``."""

    def initialize(self, args: dict[str, str]) -> None:
        started = time.perf_counter()
        import numpy  # noqa: PLC0415 (numpy and torch load only in the stub that serves this model)
        import torch  # noqa: PLC0415 (torch loads only in the stub that serves this model)
        import torch.utils.dlpack as torch_dlpack  # noqa: PLC0415 (torch loads only in the stub that serves this model)

        imported = time.perf_counter()
        self.torch, self.np = torch, numpy
        self.dlpack: Any = torch_dlpack
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.name = str(config.get("name", "model"))
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.inputs = [t["name"] for t in config.get("input", [])]
        self.outputs = [t["name"] for t in config.get("output", [])]
        out_dtypes = [getattr(torch, _TORCH_DTYPES.get(t["data_type"], "float32")) for t in config["output"]]
        in_dtypes_config = [
            getattr(torch, _TORCH_DTYPES.get(t["data_type"], "float32")) for t in config["input"]
        ]
        exchange = _param(params, "tensor_exchange", "auto")
        if exchange not in ("auto", "numpy", "dlpack"):
            raise ValueError(f"parameter `tensor_exchange` must be auto, numpy or dlpack; got {exchange!r}")
        # The stub of server 2.51 mishandles NumPy-2 arrays; with NumPy 1.x its views are the cheapest way in.
        self.use_numpy = exchange == "numpy" or (
            exchange == "auto" and int(numpy.__version__.split(".")[0]) < 2
        )

        device = _place(torch, params, args)

        version_dir = os.path.join(args["model_repository"], args["model_version"])
        module, in_dtypes = load_program(
            os.path.join(version_dir, _param(params, "program_file", "model.pt2")), device
        )
        loaded = time.perf_counter()
        if len(in_dtypes) != len(self.inputs):
            raise ValueError(f"program takes {len(in_dtypes)} inputs; the config names {len(self.inputs)}")
        # A shape-bucketed version gathers more rows per execute than its graphs take (graph_max_batch).
        graph_batch = int(_param(params, "graph_max_batch", str(self.max_batch_size)))
        self.buckets = parse_buckets(_param(params, "batch_buckets", ""), graph_batch)
        if self.max_batch_size <= 0:
            self.buckets = [1]
        self.engine = GraphEngine(
            module,
            device,
            in_dtypes,
            out_dtypes,
            self.buckets,
            cuda_graphs=_param(params, "cuda_graphs", "true") == "true",
            max_graphs=int(_param(params, "max_graphs", "64")),
        )
        self.device = self.engine.device
        self.staging: dict[tuple[int, int], tuple[Any, Any, Any, dict[int, Any]]] = {}
        shapes = [tuple(int(d) for d in t["dims"]) for t in config.get("input", [])]
        fixed = all(d >= 0 for shape in shapes for d in shape)
        capture = self.max_batch_size > 0 and _param(params, "capture_at_load", "true") == "true"
        if capture and fixed:
            self.engine.warm(shapes, in_dtypes_config)
        self.bucketing: Any = None
        if _param(params, "shape_buckets", "") and self.max_batch_size > 0:
            self.load_buckets(
                _param(params, "shape_buckets", ""), shapes, in_dtypes_config, capture, plan_chunks
            )
        self.padded_to = self.buckets if self.engine.use_graphs else [1]  # eager runs take the exact batch
        self.stats = HostStats(self.name, float(_param(params, "stats_interval_s", "0")), SYNC_PHASES)
        # shape buckets: `padded` counts the groups an execute ran (its launches), beside requests and rows
        self.bucket_stats = HostStats(f"{self.name} (groups as padded)", self.stats.interval, BUCKET_PHASES)
        self.profile_dir = _param(params, "profile_dir", "")
        self.profile_skip = int(_param(params, "profile_skip", "100"))
        self.profile_count = int(_param(params, "profile_executes", "200"))
        self.profiler: Any = None
        self.executes = 0
        done = time.perf_counter()
        log(
            f"tritonkit torch_runner ready: {self.name} on {device} in {done - started:.2f} s (import "
            f"{imported - started:.2f}, program {loaded - imported:.2f}, graphs {done - loaded:.2f} for "
            f"{len(self.engine.graphs)} buckets {self.buckets}, {'numpy' if self.use_numpy else 'dlpack'} exchange)"
        )

    # --- shape buckets (BucketedPath): the engine's launch and wait --------------------------------

    def _bucket_launch(self, staged: list[Any], rows: int, slot: int) -> list[Any]:
        outs: list[Any] = self.engine.launch(staged, rows, host=True, slot=slot)
        return outs

    def _bucket_wait(self) -> None:
        self.engine.wait()

    # --- the fast path: host inputs of every request into one pinned buffer per input -------------

    def _staged(self, slot: int, position: int, rows: int, like: Any) -> tuple[Any, Any]:
        """(torch view, numpy view or None) of ``rows`` rows of input ``position``'s staging buffer in
        ``slot``, shaped like ``like`` (pinned on a GPU; grown when too small; views cached per row count)."""
        held = self.staging.get((slot, position))
        if held is None or held[0] != (like.dtype, like.shape[1:]) or held[1].shape[0] < rows:
            torch = self.torch
            dtype = (
                torch.from_numpy(self.np.empty(0, dtype=like.dtype)).dtype if self.use_numpy else like.dtype
            )
            capacity = max(rows, self.buckets[-1])
            buffer = torch.empty(
                (capacity, *like.shape[1:]), dtype=dtype, pin_memory=self.device.type == "cuda"
            )
            held = ((like.dtype, like.shape[1:]), buffer, buffer.numpy() if self.use_numpy else None, {})
            self.staging[(slot, position)] = held
        views = held[3].get(rows)
        if views is None:
            views = held[3][rows] = (held[1][:rows], held[2][:rows] if held[2] is not None else None)
        return views

    def gather(self, requests: list[Any], slot: int = 0) -> tuple[list[Any], list[int], int] | None:
        """(staged inputs, rows per request, rows): every request's host inputs copied into ``slot``'s
        staging buffers; None for the general path (an input in GPU memory or missing)."""
        get = pb_utils.get_input_tensor_by_name
        staged, sizes, rows = [], [0], 0
        for position, name in enumerate(self.inputs):
            tensors = [get(request, name) for request in requests]
            if any(t is None or not t.is_cpu() for t in tensors):
                return None
            if self.use_numpy:
                arrays = [t.as_numpy() for t in tensors]
            else:
                arrays = [self.dlpack.from_dlpack(t.to_dlpack()) for t in tensors]
            if position == 0:
                sizes = [int(a.shape[0]) for a in arrays]
                rows = sum(sizes)
            view, np_view = self._staged(slot, position, rows, arrays[0])
            if np_view is not None:
                self.np.concatenate(arrays, axis=0, out=np_view)
            else:
                self.torch.cat(arrays, dim=0, out=view)
            staged.append(view)
        return staged, sizes, rows

    def answers(self, outs: list[Any], sizes: list[int]) -> list[Any]:
        """One response per request of ``sizes`` rows, each a view of the output buffers ``outs``
        (valid once the work that fills them is done and until the buffers are reused)."""
        arrays = [o.numpy() for o in outs] if self.use_numpy else outs
        responses, start = [], 0
        make = pb_utils.Tensor if self.use_numpy else None
        for size in sizes:
            end = start + size
            if make is not None:
                tensors = [make(n, a[start:end]) for n, a in zip(self.outputs, arrays, strict=True)]
            else:
                tensors = [
                    pb_utils.Tensor.from_dlpack(n, self.dlpack.to_dlpack(a[start:end]))
                    for n, a in zip(self.outputs, arrays, strict=True)
                ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start = end
        return responses

    def _execute_fast(self, requests: list[Any], marks: list[float]) -> tuple[list[Any], int] | None:
        """(responses, rows) for host-input requests, or None to take the general path (an input in
        GPU memory or missing, shapes that differ between requests)."""
        gathered = self.gather(requests)
        if gathered is None:
            return None
        staged, sizes, rows = gathered
        marks.append(time.perf_counter())
        outs = self.engine.launch(staged, rows)
        marks.append(time.perf_counter())
        try:  # answers are views of the output buffers: built while the GPU works, filled by wait()
            responses = self.answers(outs, sizes)
            marks.append(time.perf_counter())
        finally:
            self.engine.wait()
        marks.append(time.perf_counter())
        return responses, rows

    def padded(self, rows: int) -> int:
        return padded_rows(rows, self.padded_to)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        self.executes += 1
        if self.profile_dir:
            profile_step(self)
        if self.bucketing is not None:  # padded to shape buckets
            responses = self.execute_bucketed(requests)
            groups, rows, marks = self.bucket_marks
            self.bucket_stats.add(len(requests), rows, groups, marks)
            return responses
        marks = [time.perf_counter()]
        done = None
        if self.max_batch_size > 0:
            try:
                done = self._execute_fast(requests, marks)
            except Exception:  # the general path answers each request, errors included
                done = None
        if done is None:
            return self.execute_general(requests)
        responses, rows = done
        self.stats.add(len(requests), rows, self.padded(rows), marks)
        return responses

    # --- the general path: any input memory, any shapes, one error per bad request ---------------

    def _run_members(self, members: list[Member]) -> list[tuple[int, Any]]:
        """Run requests sharing shapes as one batch; (request index, response) pairs."""
        torch = self.torch
        columns = list(zip(*(feeds for _, feeds, _ in members), strict=True))
        batch = [torch.cat([p.to(self.device) for p in parts], dim=0) for parts in columns]
        outputs = self.engine.run(batch)
        host = [o.cpu() for o in outputs] if any(to_host for _, _, to_host in members) else None
        self.engine.wait()
        return self._answers(members, outputs, host)

    def finalize(self) -> None:
        self.stats.report(time.perf_counter())
        del self.engine
