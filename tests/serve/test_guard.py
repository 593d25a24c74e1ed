"""The HTTP guard in front of the real tritonserver: hostile bodies refused before Triton's parsers
see them, a drain that serves nothing new, and readiness that tells the truth about dead stubs."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from tests.support.processes import assert_adds_one, http_infer, serve_cli, stop
from tests.support.python_models import ADD_ONE, SLOW_ADD_ONE, write_python_model

from tritonkit.serve.embedded import EmbeddedServer, ServerOptions, free_port
from tritonkit.serve.process import stubs_of


def _post(
    server: EmbeddedServer, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def _json_infer(shape: list[int], data: list[float]) -> bytes:
    return json.dumps({"inputs": [{"name": "X", "shape": shape, "datatype": "FP32", "data": data}]}).encode()


def test_infer_goes_through_the_guard(guarded: EmbeddedServer) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(http_infer(guarded.http_url, "add_one", x), x + 1)
    status, body = _post(guarded, "/v2/models/add_one/infer", _json_infer([1, 4], [1, 2, 3, 4]))
    assert status == 200 and json.loads(body)["outputs"][0]["data"] == [2, 3, 4, 5]


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        (_json_infer([1_000_000_000_000, 3, 224, 224], [1.0]), {}, 413, "the inputs declare"),
        (b"[" * 130_000 + b"]" * 130_000, {}, 400, "nested too deeply"),
        (b"{" + b'"a":{' * 130_000, {}, 400, "nested too deeply"),
        (b"x" * ((1 << 20) + 1), {}, 413, "over the limit of 1048576"),
        (b"{not json", {}, 400, "does not parse"),
        (
            _json_infer([1, 4], [1, 2, 3, 4]),
            {"Inference-Header-Content-Length": "99999"},
            400,
            "outside the body",
        ),
    ],
    ids=["shape-bomb", "deep-array", "deep-object", "too-big", "bad-json", "bad-header-length"],
)
def test_hostile_bodies_are_refused_and_triton_lives(
    guarded: EmbeddedServer, body: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    before = guarded.refused
    got, text = _post(guarded, "/v2/models/add_one/infer", body, headers)
    assert (got, message in text) == (status, True), text
    assert guarded.refused == before + 1
    assert guarded.is_running()
    assert _post(guarded, "/v2/models/add_one/infer", _json_infer([1, 4], [0, 0, 0, 0]))[0] == 200


def test_chunked_body_is_refused(guarded: EmbeddedServer) -> None:
    conn = http.client.HTTPConnection(guarded.http_url, timeout=30)
    try:
        conn.request("POST", "/v2/models/add_one/infer", body=iter([b"{}"]), encode_chunked=True)
        assert conn.getresponse().status == 411
    finally:
        conn.close()


def test_drain_finishes_accepted_requests_and_serves_nothing_new(tmp_path: Path) -> None:
    write_python_model(tmp_path, "slow", SLOW_ADD_ONE.replace("SECONDS", "0.5"), max_batch_size=0)
    server = EmbeddedServer(tmp_path, ServerOptions(exit_timeout=10, guard=True)).start()
    body = json.dumps({"inputs": [{"name": "X", "shape": [4], "datatype": "FP32", "data": [0, 0, 0, 0]}]})
    idle = http.client.HTTPConnection(server.http_url, timeout=30)
    idle.request("POST", "/v2/models/slow/infer", body=body)
    assert idle.getresponse().read() and True  # a keep-alive connection, now idle
    statuses: list[int] = []

    def accepted() -> None:
        conn = http.client.HTTPConnection(server.http_url, timeout=30)
        conn.request("POST", "/v2/models/slow/infer", body=body)
        statuses.append(conn.getresponse().status)
        conn.close()

    workers = [threading.Thread(target=accepted) for _ in range(3)]
    for worker in workers:
        worker.start()
    time.sleep(0.2)  # all three forwarded: the model takes 0.5 s each, one at a time
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    time.sleep(0.2)
    try:  # the idle keep-alive connection is closed, or answered 503: never served
        idle.request("POST", "/v2/models/slow/infer", body=body)
        late = idle.getresponse().status
    except (ConnectionError, http.client.HTTPException):
        late = 0
    finally:
        idle.close()
    assert late in (0, 503), f"a request sent after the stop began was answered {late}"
    for worker in workers:
        worker.join(timeout=30)
    stopper.join(timeout=30)
    assert statuses == [200, 200, 200], "every accepted request completes during the drain"


def test_readiness_is_false_after_a_stub_died(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    with EmbeddedServer(tmp_path, ServerOptions(exit_timeout=1, guard=True)) as server:
        conn = http.client.HTTPConnection(server.http_url, timeout=30)
        for path in ("/v2/health/ready", "/v2/models/add_one/ready"):
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            assert response.status == 200, path
        conn.close()
        assert server.pid is not None
        (stub,) = stubs_of(server.pid, server._stub_path())
        os.kill(stub.pid, signal.SIGKILL)
        time.sleep(0.3)
        for path in ("/v2/health/ready", "/v2/models/add_one/ready"):
            conn = http.client.HTTPConnection(server.http_url, timeout=30)
            conn.request("GET", path)
            assert conn.getresponse().status == 503, path
            conn.close()


def test_methods_triton_does_not_serve_are_refused(guarded: EmbeddedServer) -> None:
    conn = http.client.HTTPConnection(guarded.http_url, timeout=30)
    try:
        conn.request("HEAD", "/v2/health/ready")
        assert conn.getresponse().status == 405
    finally:
        conn.close()


def test_expect_100_continue_is_answered_by_the_guard(guarded: EmbeddedServer) -> None:
    body = _json_infer([1, 4], [1, 2, 3, 4])
    host, port = guarded.http_url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v2/models/add_one/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        sock.settimeout(0.5)  # curl waits 1 s for it before sending the body anyway
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.settimeout(10)
        sock.sendall(body)
        answer = b""
        while b'"data":[2.0,3.0,4.0,5.0]' not in answer and b"HTTP/1.1 4" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer


def test_cli_serve_guards_by_default(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    port = free_port()
    process = serve_cli(tmp_path, "--http-port", str(port))
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("tritonkit serve: ready")
        bomb = _json_infer([1_000_000_000_000, 3, 224, 224], [1.0])
        conn = http.client.HTTPConnection(f"127.0.0.1:{port}", timeout=30)
        conn.request("POST", "/v2/models/add_one/infer", body=bomb)
        assert conn.getresponse().status == 413
        conn.close()
        assert_adds_one(f"127.0.0.1:{port}")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        stop(process)
