"""The lone request's gRPC socket transport (tritonkit.measure.lone_grpc) against the real embedded tritonserver:
its answers are tritonclient's (several datatypes, a 602 KB request and answer), a refused request raises
tritonclient's exception in one line, a server restart (Triton's GOAWAY, a closed connection) reconnects,
and profile's one request in flight goes through it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from numpy.typing import NDArray
from onnx import TensorProto, helper
from tests.support.measure_server import python_model
from tests.support.python_models import model_source
from tritonclient.utils import InferenceServerException

from tritonkit.client.codec import grpc_request
from tritonkit.client.transport import GrpcTransport
from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig
from tritonkit.convert.onnx_import import import_onnx
from tritonkit.errors import TritonKitError
from tritonkit.measure.lone_grpc import LoneGrpcError, LoneGrpcTransport
from tritonkit.measure.sender import Session, Target
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

#: input name -> (ONNX element type, Triton datatype, NumPy dtype): echoed by ``types`` through Identity
TYPES = {
    "F32": (TensorProto.FLOAT, "FP32", np.float32),
    "F16": (TensorProto.FLOAT16, "FP16", np.float16),
    "F64": (TensorProto.DOUBLE, "FP64", np.float64),
    "I64": (TensorProto.INT64, "INT64", np.int64),
    "I8": (TensorProto.INT8, "INT8", np.int8),
    "U8": (TensorProto.UINT8, "UINT8", np.uint8),
    "B": (TensorProto.BOOL, "BOOL", np.bool_),
}
IMAGE = (3, 224, 224)  # FP32: 602 KB a row

ECHO_BYTES = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
            return out
    """
)


def _onnx(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _repository(root: Path) -> Path:
    repo = root / "repo"
    types = helper.make_graph(
        [helper.make_node("Identity", [name], [f"{name}_OUT"]) for name in TYPES],
        "types",
        [helper.make_tensor_value_info(name, kind, ["batch", 5]) for name, (kind, _, _) in TYPES.items()],
        [
            helper.make_tensor_value_info(f"{name}_OUT", kind, ["batch", 5])
            for name, (kind, _, _) in TYPES.items()
        ],
    )
    import_onnx(_onnx(types, root / "types.onnx"), repo, "types", max_batch_size=4)
    f32 = TensorProto.FLOAT
    image = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        "image",
        [helper.make_tensor_value_info("X", f32, ["batch", *IMAGE])],
        [helper.make_tensor_value_info("Y", f32, ["batch", *IMAGE])],
        [helper.make_tensor("one", f32, [], [1.0])],
    )
    import_onnx(_onnx(image, root / "image.onnx"), repo, "image", max_batch_size=8)
    echo = ModelConfig(
        "echo",
        backend="python",
        max_batch_size=0,
        inputs=[TensorConfig("TEXT", "BYTES", [-1])],
        outputs=[TensorConfig("OUT", "BYTES", [-1])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    python_model(repo, echo, ECHO_BYTES)
    return repo


@pytest.fixture(scope="module")
def lone_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(_repository(tmp_path_factory.mktemp("lone")), ServerOptions(exit_timeout=1)) as srv:
        yield srv


@pytest.fixture
def transports(lone_server: EmbeddedServer) -> Iterator[tuple[LoneGrpcTransport, GrpcTransport]]:
    ours = LoneGrpcTransport(lone_server.grpc_url, lone_server.admin_headers, 10.0)
    theirs = GrpcTransport(lone_server.grpc_url, lone_server.admin_headers, 10.0)
    yield ours, theirs
    ours.close()
    theirs.close()


def _same(ours: dict[str, NDArray[Any]], theirs: dict[str, NDArray[Any]]) -> None:
    assert ours.keys() == theirs.keys()
    for name, expected in theirs.items():
        assert ours[name].dtype == expected.dtype and ours[name].shape == expected.shape, name
        assert np.array_equal(ours[name], expected), name


def test_answers_are_tritonclients_for_every_datatype(
    transports: tuple[LoneGrpcTransport, GrpcTransport],
) -> None:
    ours, theirs = transports
    rng = np.random.default_rng(0)
    inputs = []
    for name, (_, datatype, dtype) in TYPES.items():
        values = rng.standard_normal((3, 5)) * 100
        array = (values > 0) if dtype is np.bool_ else values.astype(dtype)
        inputs.append((name, datatype, array))
    request = grpc_request("types", "", inputs, None)
    names = tuple(f"{name}_OUT" for name in TYPES)
    for _ in range(3):  # the frames built once are sent again with a new stream id each time
        answer = ours.infer(request, names, 10.0)
        _same(answer, theirs.infer(request, names, 10.0))
    for name, _, array in inputs:
        assert np.array_equal(answer[f"{name}_OUT"], array)
    text = np.array([b"lone", b"request", b"\x00\xff" * 300], dtype=object)
    request = grpc_request("echo", "", [("TEXT", "BYTES", text)], None)
    _same(ours.infer(request, ("OUT",), 10.0), theirs.infer(request, ("OUT",), 10.0))


def test_a_602_kb_request_and_answer(transports: tuple[LoneGrpcTransport, GrpcTransport]) -> None:
    """Larger than HTTP/2's initial 64 KB window and 16 KB frame: split by the peer's frame size,
    sent as its windows allow, the answer's DATA frames joined (and given back by WINDOW_UPDATE)."""
    ours, theirs = transports
    x = np.random.default_rng(1).standard_normal((1, *IMAGE)).astype(np.float32)
    request = grpc_request("image", "", [("X", "FP32", x)], None)
    for _ in range(3):
        answer = ours.infer(request, ("Y",), 10.0)
        _same(answer, theirs.infer(request, ("Y",), 10.0))
    np.testing.assert_allclose(answer["Y"], x + 1)
    x2 = np.concatenate([x, x])  # a second pool entry, twice the size: its own frames
    answer = ours.infer(grpc_request("image", "", [("X", "FP32", x2)], None), ("Y",), 10.0)
    np.testing.assert_allclose(answer["Y"], x2 + 1)
    # 4.8 MB: past Triton's 4 MB windows, sent frame by frame as its WINDOW_UPDATEs come
    x8 = np.concatenate([x2] * 4)
    window = ours._connection.initial_window if ours._connection is not None else 0
    assert 0 < window < x8.nbytes
    for _ in range(2):
        answer = ours.infer(grpc_request("image", "", [("X", "FP32", x8)], None), ("Y",), 10.0)
        np.testing.assert_allclose(answer["Y"], x8 + 1)


def test_a_refused_request_raises_tritonclients_error_in_one_line(
    transports: tuple[LoneGrpcTransport, GrpcTransport],
) -> None:
    ours, theirs = transports
    bad = grpc_request("types", "", [("F32", "FP32", np.zeros((2, 6), np.float32))], None)
    unknown = grpc_request("nosuch", "", [("X", "FP32", np.zeros((1, 4), np.float32))], None)
    for request in (bad, unknown):
        with pytest.raises(InferenceServerException) as expected:
            theirs.infer(request, ("F32_OUT",), 10.0)
        with pytest.raises(LoneGrpcError) as raised:
            ours.infer(request, ("F32_OUT",), 10.0)
        assert isinstance(raised.value, InferenceServerException) and isinstance(raised.value, TritonKitError)
        assert str(raised.value) == str(expected.value) and "\n" not in str(raised.value)
        assert raised.value.status() == expected.value.status()
    assert str(raised.value).startswith("[StatusCode.")
    good = grpc_request("types", "", [(n, d, np.ones((1, 5), t)) for n, (_, d, t) in TYPES.items()], None)
    assert ours.infer(good, ("F32_OUT",), 10.0)["F32_OUT"].shape == (1, 5)  # the connection is still good


def test_no_server_is_one_line_unavailable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"127.0.0.1:{probe.getsockname()[1]}"
    transport = LoneGrpcTransport(url, None, 2.0)
    request = grpc_request("add", "", [("X", "FP32", np.zeros((1, 4), np.float32))], None)
    with pytest.raises(LoneGrpcError, match=r"^\[StatusCode.UNAVAILABLE\] cannot reach") as raised:
        transport.infer(request, ("Y",), 2.0)
    assert "\n" not in str(raised.value)


def test_a_server_restart_reconnects(tmp_path: Path) -> None:
    """Triton's graceful stop sends GOAWAY and closes: the next call goes on a fresh connection, and
    a call while nothing listens fails UNAVAILABLE in one line."""
    repo = _repository(tmp_path)
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as srv:
        transport = LoneGrpcTransport(srv.grpc_url, srv.admin_headers, 10.0)
        x = np.arange(15, dtype=np.float32).reshape(3, 5)
        inputs = [(n, d, x.astype(t)) for n, (_, d, t) in TYPES.items()]
        request = grpc_request("types", "", inputs, None)
        first = transport.infer(request, ("F32_OUT",), 10.0)
        connection = transport._connection
        srv.restart()
        again = transport.infer(request, ("F32_OUT",), 10.0)
        assert transport._connection is not connection and transport._connection is not None
        assert np.array_equal(first["F32_OUT"], again["F32_OUT"])
        srv.stop()
        with pytest.raises(LoneGrpcError, match=r"^\[StatusCode.UNAVAILABLE\]") as raised:
            transport.infer(request, ("F32_OUT",), 5.0)
        assert "\n" not in str(raised.value)
        transport.close()


def test_the_generators_lone_grpc_request_goes_on_the_socket(lone_server: EmbeddedServer) -> None:
    """profile/tune at concurrency 1 over gRPC: the session's blocking sender is the socket transport
    (grpcio's stub with ``lone_grpc_socket=False``), and its answers are checked as the codec checks them."""

    async def sender(target: Target) -> object:
        session = Session(target)
        try:
            await session.ready()
            blocking = session.blocking(session.requests.inputs)
            send = session.blocking_send()
            for index in range(len(session.requests.encoded)):
                send(index)
            return blocking
        finally:
            await session.close()

    target = Target(lone_server.grpc_url, "image", "grpc", headers=lone_server.admin_headers)
    assert isinstance(asyncio.run(sender(target)), LoneGrpcTransport)
    grpcio = Target(
        lone_server.grpc_url, "image", "grpc", headers=lone_server.admin_headers, lone_grpc_socket=False
    )
    assert isinstance(asyncio.run(sender(grpcio)), GrpcTransport)
