"""The general request path of the GPU runners (``torch_runner.py``, ``onnx_cuda_runner.py``).

Copied by the build beside their ``model.py`` as ``gpu_requests.py``; each runner loads it from its own
folder by path (the version folder inside the stub, ``serve/runners/`` where tests load a runner by
path), so, like the runners, it imports nothing from tritonkit. It owns what both runners do with
requests in any memory and of any shapes: inputs read by DLPack (a view of the request's buffer,
host or GPU), requests grouped by shape and dtype, each group run as one batch by the runner's
``_run_members``, a failing group retried request by request so one bad request fails only itself,
answers split back per request and sent where the inputs came from (host for host, GPU for CUDA
memory), every failure one error response.
"""

from __future__ import annotations

from typing import Any

try:  # absent outside the stub: tests and the benchmark import the runners' engines alone
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised only inside the stub
    pb_utils = None

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
