"""Python-backend stand-ins for the models NVIDIA's tritonclient example programs call.

The programs in ``tests/serve/nvidia_examples`` name models of NVIDIA's example and QA repositories
(ONNX, TensorFlow and custom C++ backends the embedded server does not have). Each stand-in here has
the name, tensors, controls and answers the programs read and check:

* ``simple`` / ``simple_int8``: INT32 / INT8 ``[16]`` in pairs, sum and difference out;
  ``simple_string``: the same on numbers written as strings; ``simple_identity`` (BYTES) and
  ``custom_identity_int32`` (INT32) echo ``INPUT0``;
* ``simple_sequence``: a sequence model with NVIDIA's START and READY controls, ``OUTPUT = INPUT +
  START`` (its correlation IDs may be numbers or strings); ``simple_dyna_sequence`` adds the
  correlation ID (UINT64 CORRID control) on the request that ends the sequence;
  ``simple_string_dyna_sequence`` keeps a running sum per sequence and adds its string correlation
  ID, read as an integer, at the end (as NVIDIA's dyna-sequence backends answer). It reads the ID from
  the request, not from a string CORRID control: Triton 2.51 pads that tensor to 128 bytes and the
  python backend then refuses it ("unexpected number of string elements", core#339);
* ``repeat_int32``: decoupled, one response per element of ``IN`` (``DELAY`` and ``WAIT`` are read and
  not slept);
* ``densenet_onnx``: the I/O of NVIDIA's DenseNet example (``data_0`` FP32 ``[3, 224, 224]`` NCHW,
  ``fc6_1`` ``[1000]`` with a label file): scores picked from the image's mean, so Triton's
  classification extension answers ``score:index:label``; not a DenseNet;
* ``preprocess_inception_ensemble``: a real ensemble of ``image_preprocess`` (image file bytes ->
  FP32 ``[3, 224, 224]``, Pillow in the stub's environment) and ``image_classifier`` (the scoring of
  ``densenet_onnx``, batched).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.python_models import model_source

from tritonkit.config import EnsembleStep, InstanceGroup, ModelConfig, TensorConfig, save

SIMPLE = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                a, b = _numpy_in(request, "INPUT0"), _numpy_in(request, "INPUT1")
                sums, diffs = (a + b).astype(a.dtype), (a - b).astype(a.dtype)
                out.append(pb_utils.InferenceResponse([_tensor_out("OUTPUT0", sums), _tensor_out("OUTPUT1", diffs)]))
            return out
    """
)
SIMPLE_STRING = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        number = np.vectorize(lambda v: int(v))
        text = np.vectorize(lambda v: str(v).encode(), otypes=[object])
        out = []
        for request in requests:
            a = number(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            b = number(pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy())
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", text(a + b)), pb_utils.Tensor("OUTPUT1", text(a - b))]
            ))
        return out
"""
IDENTITY_BYTES = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""
IDENTITY = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([_tensor_out("OUTPUT0", _numpy_in(r, "INPUT0"))]) for r in requests]
    """
)
#: One source for the three sequence models; the config's ``mode`` parameter picks the answer.
SEQUENCE = model_source(
    """
    class TritonPythonModel:
        def initialize(self, args):
            self.mode = json.loads(args["model_config"])["parameters"]["mode"]["string_value"]
            self.totals = {}

        def _control(self, request, name):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return 0 if tensor is None else int(tensor.as_numpy().reshape(-1)[0])

        def execute(self, requests):
            out = []
            for request in requests:
                value = int(_numpy_in(request, "INPUT").reshape(-1)[0])
                start, end = self._control(request, "START"), self._control(request, "END")
                corrid = self._control(request, "CORRID") if self.mode == "add_start" else int(request.correlation_id())
                if self.mode == "accumulate":
                    total = value if start else self.totals.get(corrid, 0) + value
                    self.totals[corrid] = total
                    if end:
                        del self.totals[corrid]
                else:
                    total = value + start
                answer = total + (corrid if end else 0)
                out.append(pb_utils.InferenceResponse([_tensor_out("OUTPUT", np.array([[answer]], np.int32))]))
            return out
    """,
    "import json",
)
REPEAT = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                sender = request.get_response_sender()
                for value in _numpy_in(request, "IN").reshape(-1):
                    sender.send(pb_utils.InferenceResponse([_tensor_out("OUT", np.array([value], np.int32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
    """
)
#: Scores for 1000 classes peaking at the class the image's mean brightness names (any batch shape).
CLASSIFIER = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                images = _numpy_in(request, "data_0")
                flat = np.nan_to_num(images.reshape(-1, 3 * 224 * 224).astype(np.float64), posinf=0, neginf=0)
                means = np.abs(flat.mean(axis=1)) % 1000
                scores = -np.abs(np.arange(1000)[None, :] - means[:, None]).astype(np.float32)
                out.append(pb_utils.InferenceResponse([_tensor_out("fc6_1", scores.reshape(*images.shape[:-3], 1000))]))
            return out
    """
)
PREPROCESS = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            from PIL import Image  # here, not at load: without Pillow only this model's requests fail

            out = []
            for request in requests:
                files = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)
                images = []
                for data in files:
                    image = Image.open(io.BytesIO(data)).convert("RGB").resize((224, 224), Image.BILINEAR)
                    images.append(np.transpose(np.asarray(image, np.float32) / 127.5 - 1, (2, 0, 1)))
                out.append(pb_utils.InferenceResponse([_tensor_out("OUTPUT", np.stack(images))]))
            return out
    """,
    "import io",
)

LABELS = "".join(f"class_{index:04d}\n" for index in range(1000))
_SIXTEEN = [16]


def _write(
    repo: Path,
    config: ModelConfig,
    source: str | None = None,
    files: dict[str, str] | None = None,
) -> None:
    folder = repo / config.name
    (folder / "1").mkdir(parents=True)
    if source is not None:
        (folder / "1" / "model.py").write_text(source)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    if config.backend is not None:
        config.instance_groups = [InstanceGroup(kind="KIND_CPU", count=1)]
    save(config, folder / "config.pbtxt")


def _pairs(name: str, datatype: str, source: str, dims: list[int], count: int = 2) -> tuple[ModelConfig, str]:
    config = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig(f"INPUT{i}", datatype, dims) for i in range(count)],
        outputs=[TensorConfig(f"OUTPUT{i}", datatype, dims) for i in range(count)],
    )
    return config, source


def _control(name: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "control": [{"kind": kind, **fields}]}


def _sequence(name: str, mode: str, *, end: bool, corrid: bool) -> ModelConfig:
    controls = [_control("START", "CONTROL_SEQUENCE_START", int32_false_true=[0, 1])]
    if end:
        controls.append(_control("END", "CONTROL_SEQUENCE_END", int32_false_true=[0, 1]))
    controls.append(_control("READY", "CONTROL_SEQUENCE_READY", int32_false_true=[0, 1]))
    if corrid:
        controls.append(_control("CORRID", "CONTROL_SEQUENCE_CORRID", data_type="TYPE_UINT64"))
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("INPUT", "INT32", [1])],
        outputs=[TensorConfig("OUTPUT", "INT32", [1])],
        parameters={"mode": mode},
        extra={"sequence_batching": {"control_input": controls}},
    )


def _classifier(name: str, max_batch_size: int, labels: str | None) -> ModelConfig:
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[TensorConfig("data_0", "FP32", [3, 224, 224], extra={"format": "FORMAT_NCHW"})],
        outputs=[TensorConfig("fc6_1", "FP32", [1000], label_filename=labels)],
    )


def write_core_models(repo: Path) -> list[str]:
    """The seven models of NVIDIA's HTTP model-control example's repository; their names."""
    models = [
        _pairs("simple", "INT32", SIMPLE, _SIXTEEN),
        _pairs("simple_int8", "INT8", SIMPLE, _SIXTEEN),
        _pairs("simple_string", "BYTES", SIMPLE_STRING, _SIXTEEN),
        _pairs("simple_identity", "BYTES", IDENTITY_BYTES, [-1], count=1),
        (_sequence("simple_sequence", "add_start", end=False, corrid=False), SEQUENCE),
        (_sequence("simple_dyna_sequence", "add_start", end=True, corrid=True), SEQUENCE),
        (_sequence("simple_string_dyna_sequence", "accumulate", end=True, corrid=False), SEQUENCE),
    ]
    for config, source in models:
        _write(repo, config, source)
    return [config.name for config, _ in models]


def write_repeat(repo: Path) -> None:
    config = ModelConfig(
        name="repeat_int32",
        backend="python",
        inputs=[
            TensorConfig("IN", "INT32", [-1]),
            TensorConfig("DELAY", "UINT32", [-1]),
            TensorConfig("WAIT", "UINT32", [1]),
        ],
        outputs=[TensorConfig("OUT", "INT32", [1])],
        extra={"model_transaction_policy": {"decoupled": True}},
    )
    _write(repo, config, REPEAT)


def write_all(repo: Path) -> None:
    """Every stand-in: the core seven, ``repeat_int32``, ``custom_identity_int32``, the image models."""
    write_core_models(repo)
    write_repeat(repo)
    identity, _ = _pairs("custom_identity_int32", "INT32", IDENTITY, [-1], count=1)
    _write(repo, identity, IDENTITY)
    _write(repo, _classifier("densenet_onnx", 0, "labels.txt"), CLASSIFIER, {"labels.txt": LABELS})
    _write(repo, _classifier("image_classifier", 8, None), CLASSIFIER)
    preprocess = ModelConfig(
        name="image_preprocess",
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("INPUT", "BYTES", [1])],
        outputs=[TensorConfig("OUTPUT", "FP32", [3, 224, 224])],
    )
    _write(repo, preprocess, PREPROCESS)
    ensemble = ModelConfig(
        name="preprocess_inception_ensemble",
        platform="ensemble",
        max_batch_size=8,
        inputs=[TensorConfig("INPUT", "BYTES", [1])],
        outputs=[TensorConfig("OUTPUT", "FP32", [1000], label_filename="labels.txt")],
        ensemble_steps=[
            EnsembleStep("image_preprocess", input_map={"INPUT": "INPUT"}, output_map={"OUTPUT": "image"}),
            EnsembleStep("image_classifier", input_map={"data_0": "image"}, output_map={"fc6_1": "OUTPUT"}),
        ],
    )
    _write(repo, ensemble, files={"labels.txt": LABELS})
