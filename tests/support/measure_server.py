"""Fixtures for the measure and tune tests: tiny models written into a temporary repository, and real embedded
servers. A plugin of the suite (``pytest_plugins`` in ``tests/conftest.py``), so ``tests/measure`` and
``tests/tune`` share one session's server; a folder whose conftest defines ``repo`` or ``server`` uses its own.

Models:
- ``work``  python backend, FP32 [-1, 4] -> OUT = X + 1 after ~1 ms of sleep per execution (not per
  request), max_batch_size 8, one CPU instance: batching and instances change its throughput.
- ``flaky`` python backend, every second request fails (an error response), max_batch_size 0.
- ``add``   ONNX (onnxruntime backend) X FP32 [-1, 4] -> Y = X + 1, max_batch_size 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from tests.support.python_models import model_source
from tests.support.slow_model import sleeping_add_source

from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig, to_pbtxt
from tritonkit.convert.onnx_import import import_onnx
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

WORK_MODEL_PY = sleeping_add_source(0.001)

FLAKY_MODEL_PY = model_source(
    """
    class TritonPythonModel:
        def initialize(self, args):
            self.count = 0

        def execute(self, requests):
            out = []
            for request in requests:
                self.count += 1
                x = _numpy_in(request, "X")
                if self.count % 2:
                    out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("odd request refused")))
                else:
                    out.append(pb_utils.InferenceResponse([_tensor_out("OUT", x)]))
            return out
    """
)


def python_model(repo: Path, config: ModelConfig, source: str) -> None:
    (repo / config.name / "1").mkdir(parents=True)
    (repo / config.name / "1" / "model.py").write_text(source)
    (repo / config.name / "config.pbtxt").write_text(to_pbtxt(config))


def work_config(name: str = "work", batch: int = 8) -> ModelConfig:
    return ModelConfig(
        name,
        backend="python",
        max_batch_size=batch,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("OUT", "FP32", [4])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )


def build_repository(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    python_model(repo, work_config(), WORK_MODEL_PY)
    flaky = ModelConfig(
        "flaky",
        backend="python",
        max_batch_size=0,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("OUT", "FP32", [4])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    python_model(repo, flaky, FLAKY_MODEL_PY)
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        "add",
        [helper.make_tensor_value_info("X", f32, ["batch", 4])],
        [helper.make_tensor_value_info("Y", f32, ["batch", 4])],
        [helper.make_tensor("one", f32, [], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, root / "add.onnx")
    import_onnx(root / "add.onnx", repo, "add", max_batch_size=8)
    return repo


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("tune"))


@pytest.fixture(scope="session")
def server(repo: Path) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as srv:
        yield srv


@pytest.fixture
def explicit_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of its own on a fresh copy of the repository, models loaded through the repository API."""
    repo = build_repository(tmp_path)
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1, model_control_mode="explicit")) as srv:
        yield srv
