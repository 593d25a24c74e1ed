"""The gRPC transport (``wire``) against the real server: large bodies that need HTTP/2 flow
control, answers checked value by value, Triton's error text and status on failures, the
``grpc-timeout`` the server enforces.

The connection runs on gevent's hub without monkey-patching, so it is tested in-process; the
HTTP/2 corner cases Triton never produces on demand are in ``test_wire_conformance.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tritonkit.client.codec import grpc_answer
from tritonkit.loadtest.transports import wire as grpc_wire
from tritonkit.loadtest.transports.wire import WireGrpcConnection, WireGrpcError
from tritonkit.measure.payloads import fetch_model_spec, make_payloads, request_body
from tritonkit.measure.validation import check_outputs
from tritonkit.serve.embedded import EmbeddedServer, free_port


def test_large_bodies_right_answers_and_errors(server: EmbeddedServer) -> None:
    spec = fetch_model_spec(server.grpc_url, "probe_wide", protocol="grpc")
    payload = make_payloads(spec, {2: 1.0}, per_batch=1, seed=3).payloads[0]
    body = request_body(spec.name, spec.version, payload.inputs, [c.name for c in payload.checks])
    assert len(body) > 65_535  # larger than the initial stream window: flow control must kick in
    connection = WireGrpcConnection(server.grpc_url)
    try:
        for _ in range(3):  # several streams on one connection
            seconds, message, status, error = connection.infer(body, timeout=60)
            assert error is None and message is not None and seconds > 0 and status == 0
            got = grpc_answer(message, None)
            assert check_outputs(payload.checks, got) is None
            np.testing.assert_allclose(got["OUTPUT0"], payload.inputs["INPUT0"] + 1, rtol=1e-6)
        unknown = request_body("nosuch", "", payload.inputs)
        _, message, status, error = connection.infer(unknown, timeout=60)
        assert message is None and error is not None and "Request for unknown model: 'nosuch'" in error
        assert status != 0
    finally:
        connection.close()
    with pytest.raises(WireGrpcError, match="closed"):
        connection.infer(body)


def test_unreachable_endpoint_is_one_line() -> None:

    with pytest.raises(WireGrpcError, match=r"cannot connect to Triton's gRPC endpoint 127\.0\.0\.1:\d+"):
        WireGrpcConnection(f"127.0.0.1:{free_port()}")


def test_wire_many_streams_interleaved(server: EmbeddedServer) -> None:
    """Many requests in flight on one connection, answers matched to their own stream."""
    import gevent  # noqa: PLC0415 (gevent must be imported after Locust's monkey-patching, in the process that runs it)

    spec = fetch_model_spec(server.grpc_url, "probe_add", protocol="grpc")
    payloads = make_payloads(spec, {1: 1.0, 8: 1.0}, per_batch=8, seed=5).payloads
    bodies = [request_body(spec.name, spec.version, p.inputs, ["OUTPUT0"]) for p in payloads]
    connection = WireGrpcConnection(server.grpc_url)

    def one(index: int) -> None:
        for _ in range(20):
            _, message, _, error = connection.infer(bodies[index], timeout=60)
            assert error is None and message is not None
            values = grpc_answer(message, ("OUTPUT0",))["OUTPUT0"]
            np.testing.assert_allclose(values, payloads[index].inputs["INPUT0"] + 1, rtol=1e-6)

    try:
        greenlets = [gevent.spawn(one, i) for i in range(len(payloads))]
        gevent.joinall(greenlets, raise_error=True, timeout=120)
        assert all(g.successful() for g in greenlets)
    finally:
        connection.close()


def test_shared_connection_is_replaced_once_closed(server: EmbeddedServer) -> None:
    """``shared`` keeps one connection per URL; a closed connection is replaced."""
    spec = fetch_model_spec(server.grpc_url, "probe_wide", protocol="grpc")
    payload = make_payloads(spec, {2: 1.0}, per_batch=1, seed=9).payloads[0]
    body = request_body(spec.name, spec.version, payload.inputs, ["OUTPUT0"])
    connection = WireGrpcConnection.shared(server.grpc_url)
    try:
        assert WireGrpcConnection.shared(server.grpc_url) is connection
        assert connection.infer(body, timeout=60).error is None
    finally:
        connection.close()
    replacement = WireGrpcConnection.shared(server.grpc_url)
    try:
        assert replacement is not connection and replacement.closed is None
        assert replacement.infer(body, timeout=60).error is None
    finally:
        replacement.close()


def test_a_timeout_cancels_the_stream_only(throwaway_server: EmbeddedServer) -> None:
    """A request that times out is cancelled (RST_STREAM) and the connection goes on serving.

    On a server of its own: tritonserver 2.51 may crash soon after a cancelled call (see the fixture).
    """
    url = throwaway_server.grpc_url
    spec = fetch_model_spec(url, "probe_wide", protocol="grpc")
    payload = make_payloads(spec, {2: 1.0}, per_batch=1, seed=9).payloads[0]
    body = request_body(spec.name, spec.version, payload.inputs, ["OUTPUT0"])
    connection = WireGrpcConnection.shared(url)
    try:
        # 400 kB each way: an answer within 0.1 ms is all but impossible, but on a loaded machine the
        # caller can be descheduled while it sends and find the answer already there; what is checked is
        # what happens once a request does time out, so try until one does.
        timed_out = None
        for _ in range(20):
            try:
                connection.infer(body, timeout=1e-4)
            except WireGrpcError as exc:
                timed_out = exc
                break
        assert timed_out is not None and "no answer from Triton within 0.0001 s" in str(timed_out)
        assert connection._streams == {}
        _, message, _, error = connection.infer(body, timeout=60)
        assert error is None and message is not None
    finally:
        connection.close()


def test_a_worn_wire_connection_is_replaced_and_closed(server: EmbeddedServer) -> None:
    """A connection out of stream ids is not usable: ``shared`` opens a new one and retires the old."""

    spec = fetch_model_spec(server.grpc_url, "probe_add", protocol="grpc")
    payload = make_payloads(spec, {1: 1.0}, per_batch=1, seed=11).payloads[0]
    body = request_body(spec.name, spec.version, payload.inputs, ["OUTPUT0"])
    old = WireGrpcConnection.shared(server.grpc_url)
    try:
        assert old.infer(body, timeout=60).error is None
        old._next_id = grpc_wire._MAX_STREAM_ID  # as after about a billion requests
        assert not old.usable()
        new = WireGrpcConnection.shared(server.grpc_url)
        assert new is not old and old.closed is not None  # nothing in flight: closed at once
        assert new.infer(body, timeout=60).error is None
    finally:
        for connection in (old, WireGrpcConnection.shared(server.grpc_url)):
            connection.close()
