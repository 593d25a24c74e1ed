"""Bad input to the portable ONNX runner, against the real tritonserver: what the config lets through
but the ONNX graph refuses (a dimension the graph fixes, a shape a Reshape cannot take, an index out of
range) comes back as INVALID_ARGUMENT (HTTP 400) naming expected and given, one bad request in a
batch fails only itself, and the server keeps serving."""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from tritonkit import config
from tritonkit.backends.runners import runner_path
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)


def _runner_model(
    repo: Path,
    graph: onnx.GraphProto,
    inputs: list[TensorConfig],
    outputs: list[TensorConfig],
    batching: DynamicBatching | None = None,
) -> None:
    """``graph`` served by the portable ONNX runner, as ``tritonkit build`` lays a version out."""
    version = repo / graph.name / "1"
    version.mkdir(parents=True)
    shutil.copy(runner_path("onnx_runner"), version / "model.py")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, version / "model.onnx")
    cfg = ModelConfig(
        graph.name,
        backend="python",
        max_batch_size=8,
        inputs=inputs,
        outputs=outputs,
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        dynamic_batching=batching,
    )
    config.save(cfg, repo / graph.name / "config.pbtxt")


def _f32(name: str, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _build(repo: Path) -> None:
    # ``fixed``: the config allows any width, the graph declares 4.
    fixed = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        "fixed",
        [_f32("X", ["b", 4])],
        [_f32("Y", ["b", 4])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    _runner_model(repo, fixed, [TensorConfig("X", "FP32", [-1])], [TensorConfig("Y", "FP32", [-1])])
    # ``reshape``: any width passes the graph's declaration, but only 4 fits the Reshape to [b, 2, 2].
    reshape = helper.make_graph(
        [helper.make_node("Reshape", ["X", "shape"], ["Y"])],
        "reshape",
        [_f32("X", ["b", "n"])],
        [_f32("Y", ["b", 2, 2])],
        [numpy_helper.from_array(np.array([0, 2, 2], np.int64), "shape")],
    )
    _runner_model(repo, reshape, [TensorConfig("X", "FP32", [-1])], [TensorConfig("Y", "FP32", [2, 2])])
    # ``lookup``: rows of a 10-row table; an index past it is the caller's error, found only by value.
    # The batcher waits for three requests, so the test's three land in one ``execute`` call.
    lookup = helper.make_graph(
        [helper.make_node("Gather", ["table", "IDX"], ["Y"], axis=0)],
        "lookup",
        [helper.make_tensor_value_info("IDX", TensorProto.INT64, ["b", 1])],
        [_f32("Y", ["b", 1, 4])],
        [numpy_helper.from_array(TABLE, "table")],
    )
    _runner_model(
        repo,
        lookup,
        [TensorConfig("IDX", "INT64", [1])],
        [TensorConfig("Y", "FP32", [1, 4])],
        DynamicBatching(preferred_batch_size=[3], max_queue_delay_microseconds=5_000_000),
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo = tmp_path_factory.mktemp("repo")
    _build(repo)
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        yield server


def _post(server: EmbeddedServer, model: str, name: str, datatype: str, array: np.ndarray) -> tuple[int, Any]:
    body = {
        "inputs": [
            {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.ravel().tolist()}
        ]
    }
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", body=json.dumps(body))
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


CASES = [
    ("fixed", np.zeros((1, 5), np.float32), ["X [1, 5] float32", "index: 1 Got: 5 Expected: 4"]),
    (
        "reshape",
        np.zeros((1, 5), np.float32),
        ["X [1, 5] float32", "Input shape:{1,5}, requested shape:{1,2,2}"],
    ),
]


@pytest.mark.parametrize(("model", "x", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_shape_the_graph_refuses_is_400_over_http(
    served: EmbeddedServer, model: str, x: np.ndarray, expected: list[str]
) -> None:
    status, body = _post(served, model, "X", "FP32", x)
    assert status == 400, body
    assert body["error"].startswith(f"model `{model}` refused the inputs given (X [1, 5] float32): ")
    for text in expected:
        assert text in body["error"], body
    good = np.arange(4, dtype=np.float32).reshape(1, 4)
    assert _post(served, model, "X", "FP32", good)[0] == 200  # the server keeps serving
    assert served.is_running() and served.problems() == []


@pytest.mark.parametrize(("model", "x", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_shape_the_graph_refuses_is_invalid_argument_over_grpc(
    served: EmbeddedServer, model: str, x: np.ndarray, expected: list[str]
) -> None:
    client = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, [tensor])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert all(text in str(info.value.message()) for text in expected), info.value.message()
    finally:
        client.close()


def test_one_bad_request_in_a_batch_fails_only_itself(served: EmbeddedServer) -> None:
    before = _executions(served)
    answers: dict[int, tuple[int, Any]] = {}

    def send(index: int) -> None:
        answers[index] = _post(served, "lookup", "IDX", "INT64", np.array([[index]], np.int64))

    workers = [threading.Thread(target=send, args=(i,)) for i in (1, 42, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert _executions(served) == before + 1, "the three requests were one batch"
    for index in (1, 2):
        status, body = answers[index]
        assert status == 200, body
        assert body["outputs"][0]["data"] == TABLE[index].tolist()
    status, body = answers[42]
    assert status == 400, body
    assert (
        "IDX [1, 1] int64" in body["error"]
        and "idx=42 must be within the inclusive range [-10,9]" in body["error"]
    )


def _executions(server: EmbeddedServer) -> int:
    """How many ``execute`` calls ``lookup`` has had (the statistics API needs the admin key)."""
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    try:
        conn.request("GET", "/v2/models/lookup/stats", headers=server.admin_headers)
        stats = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return int(stats["model_stats"][0]["execution_count"])
