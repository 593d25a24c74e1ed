"""tritonkit text-embedding runner: a Triton python-backend model that turns sentences into embeddings.

Copied by the MiniLM builds (:mod:`tritonkit.convert.graph.flagship.minilm`) into
``<model>/<version>/model.py``, next to ``model.onnx`` (a sentence-transformers encoder exported with
mean pooling and L2 normalisation inside the graph) and ``tokenizer.json``. Self-contained on
purpose: it runs inside the python-backend stub and imports nothing from tritonkit.

Input ``TEXT`` (BYTES, one UTF-8 string per batch row, dims [1]); output ``EMBEDDING`` (FP32,
dims [D]). Every request Triton hands to one ``execute`` call is tokenized together, padded to the
longest sentence of that batch (not to a fixed length: short sentences stay cheap) and run through
ONNX Runtime once.

With parameter ``mode: tokenize`` the same file is the first step of an ensemble instead: it only
tokenizes, and answers ``input_ids`` and ``attention_mask`` (INT64, padded to the request's longest
sentence rounded up to ``pad_to_multiple_of``, so the next model's dynamic batcher sees few distinct
shapes). That is how text reaches a TensorRT or ONNX Runtime model in NVIDIA's Triton container.

Config ``parameters`` it reads (all optional, string values):
  ``mode``              ``embed`` (default) or ``tokenize``
  ``pad_to_multiple_of`` tokenize mode: sequence length rounding (default 16)
  ``onnx_file``         artifact in the version directory (default ``model.onnx``)
  ``tokenizer_file``    ``tokenizers`` JSON in the version directory (default ``tokenizer.json``)
  ``max_seq_length``    truncation length in tokens (default 256, sentence-transformers' value)
  ``intra_op_threads``  ORT intra-op threads per instance (default 1)
  ``execution_provider`` ``auto`` (CUDA when ORT has it and the instance is not KIND_CPU) or ``cpu``
"""

import json
import os
import re
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from numpy.typing import NDArray

_NUMPY_MAJOR = int(np.__version__.split(".")[0])
_PIECE = re.compile(r"(\s*)(\S+)")
#: Characters kept per token of ``max_seq_length`` at most: English averages about 4-5 characters
#: a token, so text within this bound is tokenized untouched.
_CHARS_PER_TOKEN = 64
#: Whitespace between words only separates them; a run longer than this is shortened.
_MAX_SPACE = 8


def clip(text: str, max_tokens: int) -> str:
    """A short text that yields the same first ``max_tokens`` tokens as ``text``.

    The tokenizer holds about 200 bytes per input character while it works and truncates only
    afterwards: a 16 MB string took 20 s and 5 GB. Text up to ``max_tokens * 64`` characters is
    returned as it is. Longer text keeps its first ``max_tokens`` whitespace-separated words (each
    gives at least one token), whitespace runs shortened to 8 characters, and at most
    ``max_tokens * 64`` characters in all (a longer "word" is cut there).
    """
    limit = max_tokens * _CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    parts: list[str] = []
    size = 0
    for count, match in enumerate(_PIECE.finditer(text), start=1):
        piece = (match[1][:_MAX_SPACE] + match[2])[: limit - size]
        parts.append(piece)
        size += len(piece)
        if count == max_tokens or size >= limit:
            break
    return "".join(parts)


def _check_output_dims(config: dict[str, Any], graph_shape: list[Any]) -> None:
    """Fail the load when config.pbtxt promises other output dims than the graph gives (e.g. 512 vs
    384): served, the wrong shape would reach every client instead."""
    output = config["output"][0]
    dims = [int(d) for d in output.get("dims", [])]
    shape = list(graph_shape[1:] if int(config.get("max_batch_size", 0)) > 0 else graph_shape)
    fixed = [g if isinstance(g, int) and g > 0 else -1 for g in shape]
    if len(dims) == len(fixed) and all(g == -1 or d in (-1, g) for d, g in zip(dims, fixed, strict=True)):
        return
    raise ValueError(
        f"output `{output['name']}`: config.pbtxt dims {dims}, the graph gives {fixed} (-1: any)"
    )


class BadInputError(ValueError):
    """A request the caller got wrong: answered INVALID_ARGUMENT, not INTERNAL."""


def _param(params: dict[str, Any], key: str, default: str) -> str:
    value = params.get(key, {})
    text = value.get("string_value", "") if isinstance(value, dict) else ""
    return str(text or default)


class TritonPythonModel:
    """Python-backend entry points: ``initialize``, ``execute``, ``finalize``."""

    def initialize(self, args: dict[str, str]) -> None:
        import onnxruntime as ort  # noqa: PLC0415  # heavy runtimes load in the stub only, not on import
        from tokenizers import Tokenizer  # noqa: PLC0415

        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.mode = _param(params, "mode", "embed")
        if self.mode not in ("embed", "tokenize"):
            raise ValueError(f"parameter `mode` must be embed or tokenize; got {self.mode!r}")

        self.tokenizer = Tokenizer.from_file(
            os.path.join(version_dir, _param(params, "tokenizer_file", "tokenizer.json"))
        )
        # The shipped tokenizer.json pads and truncates to a fixed 128; sentence-transformers
        # truncates at max_seq_length (256) and pads to the longest sentence of the batch.
        padding = self.tokenizer.padding or {}
        self.max_tokens = int(_param(params, "max_seq_length", "256"))
        self.tokenizer.enable_truncation(self.max_tokens)
        multiple = int(_param(params, "pad_to_multiple_of", "16")) if self.mode == "tokenize" else None
        self.tokenizer.enable_padding(
            pad_id=int(padding.get("pad_id", 0)),
            pad_token=padding.get("pad_token", "[PAD]"),
            pad_to_multiple_of=multiple,
        )
        self.session: Any = None
        if self.mode == "tokenize":
            return

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_param(params, "intra_op_threads", "1"))
        options.inter_op_num_threads = 1
        providers: list[Any] = ["CPUExecutionProvider"]
        wanted = _param(params, "execution_provider", "auto")
        if (
            wanted == "auto"
            and "CUDAExecutionProvider" in ort.get_available_providers()
            and args.get("model_instance_kind", "") != "CPU"
        ):
            device = int(args.get("model_instance_device_id", "0") or 0)
            providers = [("CUDAExecutionProvider", {"device_id": device}), "CPUExecutionProvider"]
        self.session = ort.InferenceSession(
            os.path.join(version_dir, _param(params, "onnx_file", "model.onnx")),
            sess_options=options,
            providers=providers,
        )
        self.graph_inputs = {i.name for i in self.session.get_inputs()}
        self.graph_output = self.session.get_outputs()[0].name
        _check_output_dims(config, self.session.get_outputs()[0].shape)

    def _sentences(self, request: Any) -> list[str]:
        tensor = pb_utils.get_input_tensor_by_name(request, self.input_name)
        if tensor is None:
            raise BadInputError(f"request lacks input `{self.input_name}`")
        values = tensor.as_numpy().reshape(-1)
        texts: list[str] = []
        for index, value in enumerate(values):
            try:
                text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
            except UnicodeDecodeError as exc:
                raise BadInputError(
                    f"{self.input_name} element {index} is not UTF-8 text ({exc.reason})"
                ) from None
            # An empty element (an empty body, garbage under a Content-Encoding Triton ignores) would
            # be answered with the embedding of nothing: refused instead, so the caller sees the mistake.
            if not text.strip():
                raise BadInputError(f"{self.input_name} element {index} is empty")
            texts.append(clip(text, self.max_tokens))
        return texts

    def _embed(self, sentences: list[str]) -> NDArray[np.float32]:
        encodings = self.tokenizer.encode_batch(sentences)
        feeds = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }
        if "token_type_ids" in self.graph_inputs:
            feeds["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        embeddings: NDArray[Any] = self.session.run([self.graph_output], feeds)[0]
        return embeddings.astype(np.float32, copy=False)

    @staticmethod
    def _tensor(name: str, array: NDArray[Any]) -> Any:
        array = np.ascontiguousarray(array)
        if _NUMPY_MAJOR >= 2:
            # This stub release rejects NumPy-2 arrays as outputs; DLPack through torch works.
            import torch  # noqa: PLC0415  # only NumPy-2 stubs need it, and it is heavy
            import torch.utils.dlpack as torch_dlpack  # noqa: PLC0415

            # torch.utils.dlpack leaves to_dlpack out of its __all__, so mypy sees it as private.
            capsule = torch_dlpack.to_dlpack(torch.from_numpy(array))  # type: ignore[attr-defined]
            return pb_utils.Tensor.from_dlpack(name, capsule)
        return pb_utils.Tensor(name, array)

    def _response(self, array: NDArray[Any]) -> Any:
        return pb_utils.InferenceResponse(output_tensors=[self._tensor(self.output_name, array)])

    def _tokenize(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = []
        for request in requests:
            try:
                encodings = self.tokenizer.encode_batch(self._sentences(request))
                ids = np.array([e.ids for e in encodings], dtype=np.int64)
                mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[self._tensor("input_ids", ids), self._tensor("attention_mask", mask)]
                    )
                )
            except Exception as exc:  # a malformed request fails alone
                responses.append(self._error(exc))
        return responses

    @staticmethod
    def _error(exc: BaseException) -> Any:
        message = " ".join(str(exc).split()) or type(exc).__name__
        # The caller's mistake is INVALID_ARGUMENT (HTTP 400), not an internal error (500).
        code = getattr(pb_utils.TritonError, "INVALID_ARG", None) if isinstance(exc, BadInputError) else None
        if code is None:
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, code))

    def execute(self, requests: list[Any]) -> list[Any]:
        if self.mode == "tokenize":
            # Per request: each keeps its own padded length (one response per request anyway).
            return self._tokenize(requests)
        responses: list[Any] = [None] * len(requests)
        batch: list[str] = []
        owners: list[tuple[int, int, int]] = []
        for index, request in enumerate(requests):
            try:
                sentences = self._sentences(request)
            except Exception as exc:  # a malformed request fails alone
                responses[index] = self._error(exc)
                continue
            owners.append((index, len(batch), len(sentences)))
            batch.extend(sentences)
        if batch:
            try:
                embeddings = self._embed(batch)
            except Exception as exc:
                for index, _, _ in owners:
                    responses[index] = self._error(exc)
                return responses
            for index, start, count in owners:
                responses[index] = self._response(embeddings[start : start + count])
        return responses

    def finalize(self) -> None:
        self.session = None
