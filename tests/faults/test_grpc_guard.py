"""Round four's gRPC cases against the real tritonserver behind the gRPC guard (``serve/grpc_guard.py``):
each refused with its status, Triton's RSS bounded, the model's stub alive and the next call served."""

from __future__ import annotations

import gzip
import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from tests.faults.conftest import Record
from tests.faults.grpc_raw import hold_call, raw_call
from tests.faults.support import grpc_ready_and_good, grpc_stub, wait_until, write_add_one
from tritonclient.grpc import service_pb2

from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

pytestmark = pytest.mark.faults

MIB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo = tmp_path_factory.mktemp("grpc-guard") / "repo"
    repo.mkdir()
    write_add_one(repo)  # X[FP32, 4], max batch 8
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1, guard=True, max_body_bytes=64 * MIB)) as running:
        yield running


def _rss(server: EmbeddedServer) -> int:
    assert server.pid is not None
    return int(psutil.Process(server.pid).memory_info().rss)


def _healthy(server: EmbeddedServer) -> bool:
    return server.problems() == [] and grpc_ready_and_good(server.grpc_url) == (True, True)


def _request(shape: list[int], raw: bytes | None) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_one")
    request.inputs.add(name="X", datatype="FP32", shape=shape)
    if raw is not None:
        request.raw_input_contents.append(raw)
    return request


@pytest.mark.parametrize(
    ("case", "declared"),
    [("prefix declares 2^32-1 bytes", 2**32 - 1), ("prefix declares 2^31 bytes", 2**31)],
)
def test_declared_message_size_refused_before_reading(
    server: EmbeddedServer, record: Record, case: str, declared: int
) -> None:
    before = _rss(server)
    status, message = raw_call(server.grpc_port, b"\0" * 4096, declared=declared, end=False)
    grown = (_rss(server) - before) / MIB
    passed = status == 8 and grown < 32 and _healthy(server)
    record("grpc guard", case, passed, status=status, triton_rss_growth_mb=round(grown, 1), got=message[:90])
    assert passed, (status, message, grown)


def test_gzip_bomb_bounded_while_inflating(server: EmbeddedServer, record: Record) -> None:
    # a ModelInferRequest whose `id` (field 3) is 1 GiB of zeros: ~1 MB of gzip
    payload = b"\x1a\x80\x80\x80\x80\x04" + b"\0" * (1 << 30)
    compressed = gzip.compress(payload, 6)
    before = _rss(server)
    status, message = raw_call(server.grpc_port, compressed, compressed=True, encoding="gzip")
    grown = (_rss(server) - before) / MIB
    assert server._grpc is not None
    budget_back = server._grpc.buffered == 0
    passed = status == 8 and grown < 32 and budget_back and _healthy(server)
    record(
        "grpc guard",
        f"{len(compressed) // 1024} KB of gzip inflating to 1 GiB",
        passed,
        status=status,
        triton_rss_growth_mb=round(grown, 1),
        got=message[:90],
    )
    assert passed, (status, message, grown, budget_back)


@pytest.mark.parametrize(
    ("shape", "raw"),
    [
        ([1, 2**32, 2**32], None),  # the byte count wraps to 0
        ([1, 2**62, 4], None),
        ([1, -4, -4], b"\0" * 64),
        ([2**32 + 1, 4], b"\0" * 16),  # round three's: served as its one row without the guard
        ([9, 4], b"\0" * 144),  # past max_batch_size 8
        ([1, 4], b"\0" * 15),
    ],
    ids=[
        "2^32x2^32-no-data",
        "2^62x4-no-data",
        "negative-dims",
        "batch-2^32+1-one-row",
        "batch-9",
        "short-data",
    ],
)
def test_hostile_shapes_refused_and_stub_survives(
    server: EmbeddedServer, record: Record, shape: list[int], raw: bytes | None
) -> None:
    channel, stub = grpc_stub(server.grpc_url)
    try:
        stub.ModelInfer(_request(shape, raw), timeout=10)
        got, code = "served", None
    except grpc.RpcError as exc:
        code, got = exc.code(), str(exc.details())
    finally:
        channel.close()
    passed = code == grpc.StatusCode.INVALID_ARGUMENT and "\n" not in got and _healthy(server)
    record("grpc guard", f"shape {shape} with {len(raw or b'')} bytes", passed, got=got[:100])
    assert passed, (code, got)


def test_budget_across_connections(tmp_path: Path, record: Record) -> None:
    """Messages held across connections stay within max_inflight_bytes; the budget comes back whole."""
    repo = tmp_path / "repo"
    repo.mkdir()
    write_add_one(repo)
    with EmbeddedServer(
        repo, ServerOptions(exit_timeout=1, guard=True, max_body_bytes=4 * MIB, max_inflight_bytes=6 * MIB)
    ) as server:
        guard = server._grpc
        assert guard is not None
        held = hold_call(server.grpc_port, b"\0" * MIB, declared=4 * MIB)
        assert wait_until(lambda: guard.buffered > 0, 5)
        second = raw_call(server.grpc_port, b"\0" * 16, declared=3 * MIB)
        held.close()
        back = wait_until(lambda: guard.buffered == 0, 5)
        over = raw_call(server.grpc_port, b"\0" * 16, declared=5 * MIB)
        passed = second[0] == 8 and "in flight" in second[1] and back and over[0] == 8 and _healthy(server)
        record("grpc guard", "budget across connections, given back on close", passed, got=second[1][:90])
        assert passed, (second, back, over)


def test_ordinary_calls_pass(server: EmbeddedServer, record: Record) -> None:
    """tritonclient's infer, streaming infer, metadata, statistics and the restricted repository API."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("X", [2, 4], "FP32")
    x.set_data_from_numpy(np.arange(8, dtype=np.float32).reshape(2, 4))
    answer = client.infer("add_one", [x]).as_numpy("Y")
    assert answer is not None and answer[1, 0] == 5.0
    big = grpcclient.InferInput("X", [8, 4], "FP32")
    big.set_data_from_numpy(np.ones((8, 4), np.float32))
    answers: queue.Queue[object] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    for _ in range(3):
        client.async_stream_infer("add_one", [big])
    streamed = [answers.get(timeout=20) for _ in range(3)]
    client.stop_stream()
    assert all(isinstance(r, grpcclient.InferResult) for r in streamed), streamed
    assert client.get_model_metadata("add_one").name == "add_one"
    assert client.get_inference_statistics("add_one").model_stats
    key = {f"triton-grpc-protocol-{k}": v for k, v in server.admin_headers.items()}
    with pytest.raises(Exception, match="restricted"):
        client.get_model_repository_index()
    assert client.get_model_repository_index(headers=key).models
    compressed = client.infer("add_one", [x], compression_algorithm="gzip").as_numpy("Y")
    assert compressed is not None and compressed[0, 0] == 1.0
    client.close()
    record("grpc guard", "infer, stream, metadata, statistics, repository API with its key", True)
