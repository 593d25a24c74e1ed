"""Fixtures for the client tests: one session-wide model repository and one real embedded server.

Models (tiny, so the server loads them in well under a second):
- ``add``   ONNX via the importer: X FP32 [-1, 4] -> Y = X + 1, max_batch_size 8
- ``pair``  ONNX via the importer: A, B FP32 [-1, 3] -> SUM = A + B, DIFF = A - B, max_batch_size 4
- ``fixed`` ONNX via the importer, no batching: A INT64 [2, 3] -> Z = A + A
- ``echo``  hand-written python-backend model: TEXT BYTES [-1, 1] -> OUT = upper-cased TEXT, max_batch_size 4
- ``slow``  hand-written python-backend model: sleeps SECONDS (FP32 [1]) and echoes it, for timeouts
- ``queued`` the same code behind a dynamic batcher whose queue holds one request, for queue-full answers
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from tests.support.python_models import model_source

from tritonkit.client import Client
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, QueuePolicy, TensorConfig, save
from tritonkit.convert.onnx_import import import_onnx
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

PROTOCOLS = ("http", "grpc")

ECHO_MODEL_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            out = np.array([bytes(v).upper() for v in text.reshape(-1)], dtype=object).reshape(text.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""


SLOW_MODEL_PY = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                seconds = _numpy_in(request, "SECONDS")
                time.sleep(float(seconds.reshape(-1)[0]))
                responses.append(pb_utils.InferenceResponse([_tensor_out("SECONDS_OUT", seconds)]))
            return responses
    """,
    "import time",
)


def _python_model(repo: Path, config: ModelConfig, source: str) -> None:
    (repo / config.name / "1").mkdir(parents=True)
    (repo / config.name / "1" / "model.py").write_text(source)
    save(config, repo / config.name / "config.pbtxt")


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def build_repository(root: Path) -> Path:
    """Write the test models into ``root/repo`` and return it."""
    src = root / "onnx"
    src.mkdir(parents=True, exist_ok=True)
    repo = root / "repo"
    f32 = TensorProto.FLOAT
    one = helper.make_tensor("one", f32, [], [1.0])
    add = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        "add",
        [helper.make_tensor_value_info("X", f32, ["batch", 4])],
        [helper.make_tensor_value_info("Y", f32, ["batch", 4])],
        [one],
    )
    import_onnx(_save(add, src / "add.onnx"), repo, "add", max_batch_size=8)
    pair = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("Sub", ["A", "B"], ["DIFF"])],
        "pair",
        [helper.make_tensor_value_info(n, f32, ["batch", 3]) for n in ("A", "B")],
        [helper.make_tensor_value_info(n, f32, ["batch", 3]) for n in ("SUM", "DIFF")],
    )
    import_onnx(_save(pair, src / "pair.onnx"), repo, "pair", max_batch_size=4)
    fixed = helper.make_graph(
        [helper.make_node("Add", ["A", "A"], ["Z"])],
        "fixed",
        [helper.make_tensor_value_info("A", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("Z", TensorProto.INT64, [2, 3])],
    )
    import_onnx(_save(fixed, src / "fixed.onnx"), repo, "fixed", max_batch_size=0)
    cpu = [InstanceGroup(kind="KIND_CPU", count=1)]
    echo = ModelConfig(
        "echo",
        backend="python",
        max_batch_size=4,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("OUT", "BYTES", [1])],
        instance_groups=cpu,
    )
    _python_model(repo, echo, ECHO_MODEL_PY)
    slow = ModelConfig(
        "slow",
        backend="python",
        max_batch_size=0,
        inputs=[TensorConfig("SECONDS", "FP32", [1])],
        outputs=[TensorConfig("SECONDS_OUT", "FP32", [1])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=2)],
    )
    _python_model(repo, slow, SLOW_MODEL_PY)
    queued = ModelConfig(
        "queued",
        backend="python",
        max_batch_size=1,
        inputs=[TensorConfig("SECONDS", "FP32", [1])],
        outputs=[TensorConfig("SECONDS_OUT", "FP32", [1])],
        instance_groups=cpu,
        dynamic_batching=DynamicBatching(default_queue_policy=QueuePolicy(max_queue_size=1)),
    )
    _python_model(repo, queued, SLOW_MODEL_PY)
    return repo


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("client"))


@pytest.fixture(scope="session")
def server(repo: Path) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as srv:
        yield srv


def url_of(server: EmbeddedServer, protocol: str) -> str:
    return server.http_url if protocol == "http" else server.grpc_url


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(server: EmbeddedServer, protocol: str) -> str:
    """The server's address for ``protocol``."""
    return url_of(server, protocol)


@pytest.fixture
def client(server: EmbeddedServer, protocol: str, url: str) -> Iterator[Client]:
    with Client(url, protocol, timeout=30, headers=server.admin_headers) as c:
        yield c
