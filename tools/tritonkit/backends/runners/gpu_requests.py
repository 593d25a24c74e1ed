"""The general request path of the GPU runners (``torch_runner.py``, ``onnx_cuda_runner.py``).

Copied by the build beside their ``model.py`` as ``gpu_requests.py``; each runner loads it from its own
folder by path (the version folder inside the stub, ``backends/runners/`` where tests load a runner by
path), so, like the runners, it imports nothing from tritonkit. It owns what both runners do with
requests in any memory and of any shapes: inputs read by DLPack (a view of the request's buffer,
host or GPU), requests grouped by shape and dtype, each group run as one batch by the runner's
``_run_members``, a failing group retried request by request so one bad request fails only itself,
answers split back per request and sent where the inputs came from (host for host, GPU for CUDA
memory), every failure one error response.
"""

from __future__ import annotations

import time
from typing import Any

try:  # absent outside the stub: tests and the benchmark import the runners' engines alone
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised only inside the stub
    pb_utils = None


def _log(text: str) -> None:
    """A line in the server log through the stub's logger (outside the stub: printed)."""
    logger = getattr(pb_utils, "Logger", None)
    logger.log_info(text) if logger is not None else print(text, flush=True)


#: the bucketed execute's phases, between its time marks (``BucketedPath.bucket_marks``)
BUCKET_PHASES = ("read", "stage+launch", "wait", "respond")
#: One request of a group: its index in the execute, its input tensors, whether it answers on the host.
Member = tuple[int, list[Any], bool]


class GeneralPath:
    """Mixin of a runner's ``TritonPythonModel``: it sets ``inputs``, ``outputs``, ``max_batch_size``
    and ``dlpack`` (``torch.utils.dlpack``) and defines ``_run_members``."""

    inputs: list[str]
    outputs: list[str]
    max_batch_size: int
    dlpack: Any

    def _run_members(self, members: list[Member]) -> list[tuple[int, Any]]:
        raise NotImplementedError

    def _input(self, request: Any, name: str) -> Any:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            raise ValueError(f"request lacks input `{name}`")
        # A view of the request's buffer (host or GPU), lent for this call only: the batch copies it.
        value = self.dlpack.from_dlpack(tensor.to_dlpack())
        return value.unsqueeze(0) if self.max_batch_size == 0 else value

    def _respond(self, outputs: list[Any]) -> Any:
        tensors = []
        for name, value in zip(self.outputs, outputs, strict=True):
            out = value.squeeze(0) if self.max_batch_size == 0 else value
            tensors.append(pb_utils.Tensor.from_dlpack(name, self.dlpack.to_dlpack(out.contiguous())))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    @staticmethod
    def error_response(exc: BaseException) -> Any:
        """The failure as a request's error response (one line)."""
        message = " ".join(str(exc).split()) or type(exc).__name__
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))

    def _answers(
        self, members: list[Member], outputs: list[Any], host: list[Any] | None
    ) -> list[tuple[int, Any]]:
        """(request index, response) pairs from a group's batched outputs (``host``: their host copies)."""
        sizes = [int(feeds[0].shape[0]) for _, feeds, _ in members]
        on_device = [o.split(sizes, dim=0) for o in outputs]
        on_host = [h.split(sizes, dim=0) for h in host] if host is not None else None
        pairs = []
        for position, (index, _, to_host) in enumerate(members):
            # Answers go back where the inputs came from: host for host, GPU for CUDA memory.
            source = on_host if to_host and on_host is not None else on_device
            pairs.append((index, self._respond([parts[position] for parts in source])))
        return pairs

    def execute_general(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[Member]] = {}
        for index, request in enumerate(requests):
            try:
                feeds = [self._input(request, name) for name in self.inputs]
            except Exception as exc:  # every failure becomes that request's error response
                responses[index] = self.error_response(exc)
                continue
            key = tuple((tuple(t.shape[1:]), t.dtype) for t in feeds) if self.max_batch_size else (index,)
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
                        responses[member[0]] = self.error_response(inner)
        return responses


class BucketedPath:
    """Mixin of a GPU runner whose config names shape buckets (``shape_buckets.py``, copied beside
    it): each request's inputs are copied into a staging buffer padded to its bucket, requests are
    grouped by bucket (a group padded up into a longer one where the cost table says that is
    cheaper), each group launched once, and every output that carries a bucketed axis cut back to
    its request's own length. The runner sets ``bucketing`` (a ``Buckets``), ``bucket_module`` (the
    module), ``bucket_cost``, ``torch``, ``device``, ``inputs``, ``outputs``, ``max_batch_size`` and
    ``dlpack``, and defines ``_bucket_launch(staged, rows, slot)`` (output views valid after
    ``_bucket_wait()``), ``_respond`` and ``error_response`` (:class:`GeneralPath`'s)."""

    bucketing: Any
    bucket_module: Any
    bucket_cost: Any
    torch: Any
    device: Any
    inputs: list[str]
    outputs: list[str]
    max_batch_size: int
    dlpack: Any
    np: Any
    engine: Any
    buckets: list[int]
    #: requests read and answers written as NumPy views (the stub's NumPy 1.x), else through DLPack
    bucket_numpy: bool = False
    #: the last execute's (groups run, rows, time marks: start, read, staged and launched, waited, answered)
    bucket_marks: tuple[int, int, list[float]] = (0, 0, [])

    def load_buckets(
        self, text: str, dims: list[tuple[int, ...]], dtypes: list[Any], capture: bool, chunks: Any
    ) -> None:
        """Parse the ``shape_buckets`` parameter; capture every (batch bucket, shape bucket) graph of the
        runner's ``engine`` (``capture``), time each replay, and make the grouping's cost from them
        (``chunks(rows, batch buckets)``: the engine's (rows, bucket) pieces)."""
        import importlib  # noqa: PLC0415 (only a model with shape buckets needs its helper)

        self.bucket_module = importlib.import_module("shape_buckets")  # the copy beside model.py
        self.bucketing = self.bucket_module.Buckets.parse(text)
        combos: list[tuple[int, ...]] = [()]
        for edges in self.bucketing.axes.values():
            combos = [(*c, e) for c in combos for e in edges]
        times: dict[tuple[Any, ...], float] = {}
        if capture and self.engine.use_graphs:
            torch, before = self.torch, self.torch.cuda.memory_reserved(self.device)
            self.engine.max_graphs = max(self.engine.max_graphs, len(combos) * len(self.buckets))
            for combo in combos:
                padded = [
                    self.bucketing.padded_shape(n, (1, *d), combo)[1:]
                    for n, d in zip(self.inputs, dims, strict=True)
                ]
                self.engine.warm(padded, dtypes)
            for key, (graph, _, _) in self.engine.graphs.items():  # each graph's replay, timed
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(3):
                    graph.replay()
                end.record()
                end.synchronize()
                times[key] = start.elapsed_time(end) / 3
            _log(
                f"tritonkit torch_runner: {len(self.engine.graphs)} graphs for {len(self.buckets)} batch x "
                f"{len(combos)} shape buckets, {(torch.cuda.memory_reserved(self.device) - before) / 2**20:.0f} "
                "MiB reserved by their capture; replay ms by (batch, edges): "
                + ", ".join(
                    f"{key[0]}x{[s for s, _ in key[1:]]} {ms:.2f}" for key, ms in sorted(times.items())
                )
            )
        proxy = self.bucket_module.token_cost(float(min(e[0] for e in self.bucketing.axes.values())) * 4)

        def cost(rows: int, edges: tuple[int, ...]) -> float:
            total = 0.0
            for _, bucket in chunks(rows, self.buckets):
                shapes = tuple(
                    (self.bucketing.padded_shape(n, (1, *d), edges)[1:], t)
                    for n, d, t in zip(self.inputs, dims, dtypes, strict=True)
                )
                took = times.get((bucket, *shapes))
                if took is None:
                    return float(proxy(rows, edges))
                total += took + 0.02  # ms: a launch's host work beside its replay
            return total

        self.bucket_cost = cost

    def _bucket_launch(self, staged: list[Any], rows: int, slot: int) -> list[Any]:
        raise NotImplementedError

    def _bucket_wait(self) -> None:
        raise NotImplementedError

    def _respond(self, outputs: list[Any]) -> Any:
        raise NotImplementedError

    def error_response(self, exc: BaseException) -> Any:
        raise NotImplementedError

    def _bucket_buffer(self, slot: int, position: int, shape: tuple[int, ...], dtype: Any) -> Any:
        held: dict[tuple[Any, ...], Any] = self.__dict__.setdefault("_bucket_buffers", {})
        key = (slot, position, shape[1:], dtype)
        buffer = held.get(key)
        if buffer is None or int(buffer.shape[0]) < shape[0]:
            capacity = max(shape[0], self.max_batch_size)
            pinned = getattr(self.device, "type", "cpu") == "cuda"
            buffer = self.torch.empty((capacity, *shape[1:]), dtype=dtype, pin_memory=pinned)
            held[key] = buffer
        return buffer[: shape[0]]

    def _stage(
        self, group: list[tuple[int, list[Any], dict[str, int]]], edges: tuple[int, ...], slot: int
    ) -> tuple[list[Any], list[int], int]:
        sizes = [int(feeds[0].shape[0]) for _, feeds, _ in group]
        rows = sum(sizes)
        staged = []
        for position, name in enumerate(self.inputs):
            like = group[0][1][position]
            shape = self.bucketing.padded_shape(name, (rows, *like.shape[1:]), edges)
            dtype = self.torch.from_numpy(like[:0]).dtype if isinstance(like, self.np.ndarray) else like.dtype
            buffer = self._bucket_buffer(slot, position, tuple(shape), dtype)
            if any(tuple(feeds[position].shape[1:]) != tuple(shape[1:]) for _, feeds, _ in group):
                buffer.fill_(self.bucketing.pad_value(name))
            host = buffer.numpy() if buffer.device.type == "cpu" else None
            start = 0
            for (_, feeds, _), size in zip(group, sizes, strict=True):
                value = feeds[position]
                where = (slice(start, start + size), *(slice(0, n) for n in value.shape[1:]))
                if isinstance(value, self.np.ndarray) and host is not None:
                    host[where] = value  # NumPy views of the request and the pinned buffer: one memcpy
                else:
                    target = buffer[where]
                    target.copy_(
                        self.torch.from_numpy(value) if isinstance(value, self.np.ndarray) else value
                    )
                start += size
            staged.append(buffer)
        return staged, sizes, rows

    def execute_bucketed(self, requests: list[Any]) -> list[Any]:
        """One response per request (errors included): padded, grouped, launched, waited once, cut."""
        marks = [time.perf_counter()]  # read, stage and launch, wait, respond: bucket_marks
        responses: list[Any] = [None] * len(requests)
        members: list[tuple[int, list[Any], dict[str, int]]] = []
        edges_of: list[tuple[int, ...]] = []
        for index, request in enumerate(requests):
            try:
                feeds, lengths = self._read_request(request)
            except Exception as exc:  # a missing input, a length above the last bucket: that request only
                responses[index] = self.error_response(exc)
                continue
            members.append((index, feeds, lengths))
            edges_of.append(self.bucketing.edges_for(lengths))
        plan = self.bucket_module.plan_groups(
            [(int(m[1][0].shape[0]), e) for m, e in zip(members, edges_of, strict=True)], self.bucket_cost
        )
        marks.append(time.perf_counter())
        launched = []
        rows_run = 0
        for slot, (edges, positions) in enumerate(plan):
            group = [members[p] for p in positions]
            try:
                staged, sizes, rows = self._stage(group, edges, slot)
                launched.append((group, sizes, self._bucket_launch(staged, rows, slot)))
                rows_run += rows
            except Exception as exc:  # the group's requests fail together, each with the one line
                for index, _, _ in group:
                    responses[index] = self.error_response(exc)
        marks.append(time.perf_counter())
        self._bucket_wait()
        marks.append(time.perf_counter())
        for group, sizes, outs in launched:
            self._answer_group(group, sizes, outs, responses)
        marks.append(time.perf_counter())
        self.bucket_marks = (len(plan), rows_run, marks)
        return responses

    def _read_request(self, request: Any) -> tuple[list[Any], dict[str, int]]:
        """A request's inputs (NumPy views or DLPack tensors) and its length on each bucketed axis;
        raises for a missing input or a length above the last bucket."""
        feeds = []
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise ValueError(f"request lacks input `{name}`")
            if self.bucket_numpy and tensor.is_cpu():  # the stub's NumPy 1.x: views, no capsule
                feeds.append(tensor.as_numpy())
            else:
                feeds.append(self.dlpack.from_dlpack(tensor.to_dlpack()))
        lengths = self.bucketing.lengths({n: tuple(t.shape) for n, t in zip(self.inputs, feeds, strict=True)})
        return feeds, lengths

    def _answer_group(
        self,
        group: list[tuple[int, list[Any], dict[str, int]]],
        sizes: list[int],
        outs: Any,
        responses: list[Any],
    ) -> None:
        """Each request of a launched group answered with its rows, every bucketed axis cut back to its length."""
        start = 0
        for (index, _, lengths), size in zip(group, sizes, strict=True):
            parts = []
            for name, out in zip(self.outputs, outs, strict=True):
                cut = [slice(start, start + size)] + [slice(None)] * (out.dim() - 1)
                for axis, length in self.bucketing.cut(name, lengths):
                    cut[axis] = slice(0, length)
                parts.append(out[tuple(cut)])
            if self.bucket_numpy and all(part.device.type == "cpu" for part in parts):
                tensors = [
                    pb_utils.Tensor(n, self.np.ascontiguousarray(part.numpy()))
                    for n, part in zip(self.outputs, parts, strict=True)
                ]
                responses[index] = pb_utils.InferenceResponse(output_tensors=tensors)
            else:
                responses[index] = self._respond(parts)
            start += size
