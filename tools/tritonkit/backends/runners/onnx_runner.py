"""tritonkit portable runner: a Triton python-backend model that executes an ONNX file with ONNX Runtime.

Copied by ``tritonkit build`` into ``<model>/<version>/model.py`` next to the ONNX artifact, so the
embedded server (python backend only) can serve any imported model. Self-contained on purpose: it
runs inside the python-backend stub and imports nothing from tritonkit.

Config ``parameters`` it reads (all optional, string values; ``runner: onnx_runner`` is written
by the importer for ``tritonkit check`` and ignored here):
  ``onnx_file``          artifact name in the version directory (default ``model.onnx``)
  ``intra_op_threads``   ORT intra-op threads per instance (default 1: instances, not threads, scale)
  ``inter_op_threads``   ORT inter-op threads per instance (default 1)
  ``execution_provider`` ``auto`` (default: CUDA when ORT has it and the instance is not KIND_CPU),
                         ``cuda`` or ``cpu``
  ``tensor_exchange``    ``auto`` (default: DLPack when NumPy >= 2, whose arrays this release's stub
                         rejects as outputs, else NumPy), ``dlpack`` or ``numpy``

Batching: all requests Triton hands to one ``execute`` call whose inputs share non-batch shapes are
concatenated along axis 0 and run once; the outputs are split back by each request's batch size.
Requests with other shapes form their own group. A failing group is retried request by request so
one bad request cannot fail its neighbours. Errors go back as error responses; the stub never dies.

A request the caller got wrong is answered INVALID_ARGUMENT (HTTP 400), not INTERNAL (500): a missing
input, BYTES that are not UTF-8, and what ONNX Runtime refuses in the request itself: a dtype, rank
or dimension the graph does not declare, an index out of range, a shape a node cannot take (a Reshape
whose element count does not fit). Its message names the inputs' shapes as given. A failure of the
runtime itself (memory, device) stays INTERNAL.
"""

import importlib
import json
import os
import re
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from numpy.typing import NDArray

#: input name -> array, for one request or a concatenated group
Feeds = dict[str, NDArray[Any]]

_NUMPY_MAJOR = int(np.__version__.split(".")[0])


def _param(params: dict[str, Any], key: str, default: str) -> str:
    value = params.get(key, {})
    text = value.get("string_value", "") if isinstance(value, dict) else ""
    return str(text or default)


class BadInputError(ValueError):
    """A request the caller got wrong: answered INVALID_ARGUMENT, not INTERNAL."""


# ONNX Runtime's exception classes for what a node refuses at run time; matched by name so this file
# imports no onnxruntime internals (``onnxruntime.capi.onnxruntime_pybind11_state``) on load.
_ORT_BAD_INPUT = "InvalidArgument"  # dtype, rank, dimension or index the graph refuses
_ORT_NODE_FAILURES = ("Fail", "RuntimeException")  # a node that cannot take these shapes (Reshape...)
# ...unless the runtime itself failed: that is the server's problem, not the caller's.
_RUNTIME_TROUBLE = ("memory", "alloc", "cuda", "cublas", "cudnn", "device")


def _is_bad_input(exc: BaseException) -> bool:
    if isinstance(exc, BadInputError):
        return True
    kind = type(exc).__name__
    if not type(exc).__module__.startswith("onnxruntime"):
        return False
    if kind == _ORT_BAD_INPUT:
        return True
    text = str(exc)
    return (
        kind in _ORT_NODE_FAILURES
        and "while running" in text
        and not any(word in text.lower() for word in _RUNTIME_TROUBLE)
    )


def _shapes(feeds: Feeds) -> str:
    return ", ".join(f"{name} {list(value.shape)} {value.dtype}" for name, value in feeds.items())


def _to_str_array(array: NDArray[Any], name: str) -> NDArray[Any]:
    # Triton hands BYTES over as bytes objects; ORT string tensors want str.
    try:
        flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.ravel()]
    except UnicodeDecodeError as exc:
        raise BadInputError(f"input `{name}` is not UTF-8: {exc.reason} at byte {exc.start}") from None
    return np.array(flat, dtype=object).reshape(array.shape)


def _to_bytes_array(array: NDArray[Any]) -> NDArray[Any]:
    flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in array.ravel()]
    return np.array(flat, dtype=object).reshape(array.shape)


class TritonPythonModel:
    """Python-backend entry points: ``initialize``, ``execute``, ``finalize``."""

    def initialize(self, args: dict[str, str]) -> None:
        import onnxruntime as ort  # noqa: PLC0415  # the heavy runtime loads in the stub only, not on import

        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.model_name = config.get("name", "?")
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.inputs = [(t["name"], t["data_type"]) for t in config.get("input", [])]
        self.outputs = [(t["name"], t["data_type"]) for t in config.get("output", [])]

        exchange = _param(params, "tensor_exchange", "auto")
        if exchange not in ("auto", "dlpack", "numpy"):
            raise ValueError(f"parameter `tensor_exchange` must be auto, dlpack or numpy; got {exchange!r}")
        self.use_dlpack = exchange == "dlpack" or (exchange == "auto" and _NUMPY_MAJOR >= 2)
        if self.use_dlpack:
            # Through torch, not NumPy: NumPy's DLPack capsules expect the standard "used_dltensor"
            # rename, the stub writes "used_dlpack", and the stub dies (seen with NumPy 1.26).
            # torch <-> stub DLPack is the path verified on a NumPy-2 GPU host (H100/H200, NumPy 2.5).
            try:
                import torch  # noqa: PLC0415  # optional in the stub: only the DLPack exchange needs it
                import torch.utils.dlpack as torch_dlpack  # noqa: PLC0415
            except ImportError as exc:
                raise ValueError(
                    f"tensor exchange `dlpack` needs torch in the stub's environment ({exc})"
                ) from None
            self.torch: Any = torch
            self.torch_dlpack: Any = torch_dlpack

        version_dir = os.path.join(args["model_repository"], args["model_version"])
        onnx_path = os.path.join(version_dir, _param(params, "onnx_file", "model.onnx"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_param(params, "intra_op_threads", "1"))
        options.inter_op_num_threads = int(_param(params, "inter_op_threads", "1"))
        self.session = ort.InferenceSession(
            onnx_path, sess_options=options, providers=self._providers(ort, args, params)
        )

        graph_inputs = {i.name for i in self.session.get_inputs()}
        graph_outputs = {o.name for o in self.session.get_outputs()}
        missing = [n for n, _ in self.inputs if n not in graph_inputs] + [
            n for n, _ in self.outputs if n not in graph_outputs
        ]
        if missing:
            raise ValueError(
                f"config names tensors the ONNX graph lacks: {', '.join(missing)}; "
                f"graph inputs: {sorted(graph_inputs)}, outputs: {sorted(graph_outputs)}"
            )
        self.output_names = [n for n, _ in self.outputs]
        self.bytes_outputs = {n for n, dt in self.outputs if dt == "TYPE_STRING"}
        self.bytes_inputs = {n for n, dt in self.inputs if dt == "TYPE_STRING"}
        # Shape buckets (``shape_buckets.py``, copied beside this file when the config names them):
        # each request padded to its bucket, so requests of different lengths batch together.
        self.buckets: Any = None
        buckets = _param(params, "shape_buckets", "")
        if buckets and self.max_batch_size > 0:
            # the copy beside model.py (the stub puts the version folder on sys.path)
            shape_buckets = importlib.import_module("shape_buckets")
            self.shape_buckets: Any = shape_buckets
            self.buckets = shape_buckets.Buckets.parse(buckets)
            # On the CPU a run costs about its tokens; a run of its own costs a few rows more.
            first = min(edges[0] for edges in self.buckets.axes.values())
            self.bucket_cost = shape_buckets.token_cost(4.0 * first)

    @staticmethod
    def _providers(ort: Any, args: dict[str, str], params: dict[str, Any]) -> list[Any]:
        wanted = _param(params, "execution_provider", "auto")
        available = ort.get_available_providers()
        has_cuda = "CUDAExecutionProvider" in available
        if wanted == "cpu":
            return ["CPUExecutionProvider"]
        if wanted == "cuda" and not has_cuda:
            raise ValueError(
                f"parameter `execution_provider` is cuda but ONNX Runtime offers only {available}"
            )
        if wanted not in ("auto", "cuda"):
            raise ValueError(f"parameter `execution_provider` must be auto, cuda or cpu; got {wanted!r}")
        if has_cuda and (wanted == "cuda" or args.get("model_instance_kind", "") != "CPU"):
            device = int(args.get("model_instance_device_id", "0") or 0)
            return [("CUDAExecutionProvider", {"device_id": device}), "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]

    # --- tensors in and out -------------------------------------------------------------------------
    def _read_inputs(self, request: Any) -> Feeds:
        feeds: Feeds = {}
        for name, _ in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise BadInputError(f"request lacks input `{name}`")
            if name in self.bytes_inputs:
                feeds[name] = _to_str_array(tensor.as_numpy(), name)
            elif self.use_dlpack:
                # Copy: the request's buffer is only lent for the duration of this call.
                feeds[name] = self.torch_dlpack.from_dlpack(tensor.to_dlpack()).cpu().numpy().copy()
            else:
                feeds[name] = tensor.as_numpy()
        return feeds

    def _make_response(self, outputs: list[NDArray[Any]]) -> Any:
        tensors = []
        for name, value in zip(self.output_names, outputs, strict=True):
            if name in self.bytes_outputs:
                tensors.append(pb_utils.Tensor(name, _to_bytes_array(value)))
                continue
            array = np.ascontiguousarray(value)
            if self.use_dlpack:
                capsule = self.torch_dlpack.to_dlpack(self.torch.from_numpy(array))
                tensors.append(pb_utils.Tensor.from_dlpack(name, capsule))
            else:
                tensors.append(pb_utils.Tensor(name, array))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _error(self, exc: BaseException, feeds: Feeds | None = None) -> Any:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if not _is_bad_input(exc):
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))
        # ORT's "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : " prefix says nothing the code does not.
        message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", message)
        if feeds is not None:
            message = f"model `{self.model_name}` refused the inputs given ({_shapes(feeds)}): {message}"
        # The caller's mistake is INVALID_ARGUMENT (HTTP 400), not an internal error (500); a stub
        # without error codes still gets the message.
        code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
        error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
        return pb_utils.InferenceResponse(output_tensors=[], error=error)

    # --- execution -------------------------------------------------------------------------------
    def _run(self, feeds: Feeds) -> list[NDArray[Any]]:
        return list(self.session.run(self.output_names, feeds))

    def _run_group(self, members: list[tuple[int, Feeds]]) -> list[list[NDArray[Any]]]:
        """Run requests that share non-batch shapes as one batch; return one output list per request."""
        if len(members) == 1:
            return [self._run(members[0][1])]
        first = self.inputs[0][0]
        sizes = [feeds[first].shape[0] for _, feeds in members]
        batch = {
            name: np.concatenate([feeds[name] for _, feeds in members], axis=0) for name, _ in self.inputs
        }
        outputs = self._run(batch)
        total = sum(sizes)
        for name, value in zip(self.output_names, outputs, strict=True):
            if value.ndim == 0 or value.shape[0] != total:
                raise ValueError(
                    f"output `{name}` has shape {list(value.shape)}; expected batch {total} first"
                )
        cuts = np.cumsum(sizes)[:-1]
        per_output = [np.split(value, cuts, axis=0) for value in outputs]
        return [[parts[i] for parts in per_output] for i in range(len(members))]

    def _execute_bucketed(self, requests: list[Any]) -> list[Any]:
        """Every request padded to its shape bucket, runs grouped by bucket (``plan_groups``), each
        output carrying a bucketed axis cut back to the request's own length."""
        sb, buckets = self.shape_buckets, self.buckets
        responses: list[Any] = [None] * len(requests)
        members: list[tuple[int, Feeds, dict[str, int], tuple[int, ...]]] = []
        for index, request in enumerate(requests):
            try:
                feeds = self._read_inputs(request)
                lengths = buckets.lengths({name: value.shape for name, value in feeds.items()})
            except Exception as exc:  # a missing input, a length above the last bucket: that request only
                responses[index] = self._error(
                    BadInputError(str(exc)) if isinstance(exc, ValueError) else exc
                )
                continue
            members.append((index, feeds, lengths, buckets.edges_for(lengths)))
        plan = sb.plan_groups(
            [(int(next(iter(m[1].values())).shape[0]), m[3]) for m in members], self.bucket_cost
        )
        for edges, positions in plan:
            group = [members[p] for p in positions]
            padded = [(index, self._padded(feeds, edges)) for index, feeds, _, _ in group]
            try:
                results = self._run_group(padded)
            except Exception as exc:
                if len(padded) == 1:
                    responses[padded[0][0]] = self._error(exc, group[0][1])
                    continue
                results = []
                for (index, feeds), member in zip(padded, group, strict=True):
                    try:
                        results.append(self._run(feeds))
                    except Exception as inner:
                        responses[index] = self._error(inner, member[1])
                        results.append([])
            for (index, _, lengths, _), outputs in zip(group, results, strict=True):
                if responses[index] is None:
                    responses[index] = self._make_response(self._cut(outputs, lengths))
        return responses

    def _padded(self, feeds: Feeds, edges: tuple[int, ...]) -> Feeds:
        out: Feeds = {}
        for name, value in feeds.items():
            shape = self.buckets.padded_shape(name, value.shape, edges)
            if tuple(shape) == tuple(value.shape):
                out[name] = value
                continue
            padded = np.full(shape, self.buckets.pad_value(name), dtype=value.dtype)
            padded[tuple(slice(0, n) for n in value.shape)] = value
            out[name] = padded
        return out

    def _cut(self, outputs: list[NDArray[Any]], lengths: dict[str, int]) -> list[NDArray[Any]]:
        cut = []
        for name, value in zip(self.output_names, outputs, strict=True):
            index: list[slice] = [slice(None)] * value.ndim
            for axis, length in self.buckets.cut(name, lengths):
                index[axis] = slice(0, length)
            cut.append(value[tuple(index)])
        return cut

    def execute(self, requests: list[Any]) -> list[Any]:
        if self.buckets is not None:
            return self._execute_bucketed(requests)
        responses: list[Any] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[tuple[int, Feeds]]] = {}
        for index, request in enumerate(requests):
            try:
                feeds = self._read_inputs(request)
            except Exception as exc:  # every failure becomes that request's error response
                responses[index] = self._error(exc)
                continue
            key: tuple[Any, ...]
            if self.max_batch_size > 0:
                key = tuple((name, feeds[name].shape[1:], feeds[name].dtype.str) for name, _ in self.inputs)
            else:
                key = ("request", index)
            groups.setdefault(key, []).append((index, feeds))

        for members in groups.values():
            results: list[list[NDArray[Any]] | None]
            try:
                results = list(self._run_group(members))
            except Exception as exc:  # retried alone below: one bad request fails only itself
                if len(members) == 1:
                    responses[members[0][0]] = self._error(exc, members[0][1])
                    continue
                results = [None] * len(members)
            for (index, feeds), outputs in zip(members, results, strict=True):
                try:
                    responses[index] = self._make_response(self._run(feeds) if outputs is None else outputs)
                except Exception as exc:
                    responses[index] = self._error(exc, feeds)
        return responses

    def finalize(self) -> None:
        self.session = None
