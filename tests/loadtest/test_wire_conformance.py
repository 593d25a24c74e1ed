"""The ``wire`` gRPC transport against a scripted HTTP/2 server: the RFC 9113 paths Triton does not
produce on demand (stream limits, GOAWAY, RST_STREAM, CONTINUATION, padding, flow control, frame
sizes) and gRPC's ``grpc-timeout`` and status names.

The server is real HTTP/2 on a loopback socket, built from ``hyperframe`` (frames) and ``hpack``
(header blocks) in a thread per connection (``test_wire_peer.py``); each test scripts what it
sends and records what the client sent. The client runs on gevent's hub in the test's own thread
(no monkey-patching). Answers echo the request's message, so every call checks it got its own.
"""

from __future__ import annotations

import threading
from typing import Any

import gevent
import grpc
import pytest
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from tritonkit.loadtest.transports import hub
from tritonkit.loadtest.transports.hub import HubConnection
from tritonkit.loadtest.transports.wire import WireGrpcConnection, WireGrpcError, grpc_timeout

from .test_wire_peer import Conn, Peer


@pytest.fixture(autouse=True)
def _fresh_shared() -> Any:
    HubConnection._shared.clear()
    yield
    for connection in list(HubConnection._shared.values()):
        connection.close()
    HubConnection._shared.clear()


def calls(connection: WireGrpcConnection, messages: list[bytes], timeout: float = 10) -> list[Any]:
    """Each message in its own greenlet, in order; their results (or exceptions)."""
    greenlets = [gevent.spawn(connection.infer, m, timeout) for m in messages]
    gevent.joinall(greenlets, timeout=20)
    assert all(g.ready() for g in greenlets)
    return [g.value if g.successful() else g.exception for g in greenlets]


def answered(results: list[Any], messages: list[bytes]) -> None:
    for result, message in zip(results, messages, strict=True):
        assert not isinstance(result, BaseException), result
        assert (result.status, result.error, result.message) == (0, None, message)


MESSAGES = [f"call-{i}".encode() for i in range(8)]


def test_max_concurrent_streams_queues_calls_beyond_the_limit() -> None:
    def script(conn: Conn) -> None:
        conn.start(max_concurrent_streams=2)
        for _ in range(6):
            sid = conn.request()
            conn.quiet(0.05)  # a client ignoring the limit has sent more HEADERS by now
            conn.answer(sid)
        assert conn.max_open == 2

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    answered(calls(connection, MESSAGES[:6]), MESSAGES[:6])
    peer.join()


def test_settings_change_the_stream_limit_mid_run() -> None:
    def script(conn: Conn) -> None:
        conn.start(max_concurrent_streams=1)
        for _ in range(2):
            sid = conn.request()
            conn.quiet(0.05)
            conn.answer(sid)
        assert conn.max_open == 1
        conn.start(max_concurrent_streams=3)  # raised: three open at once
        raised = conn.requests(3)
        conn.quiet(0.05)
        assert len(conn.open) == 3
        conn.start(max_concurrent_streams=1)  # lowered before the three close: one at a time again
        conn.max_open = 0
        for sid in raised:
            conn.answer(sid)
        for _ in range(3):
            sid = conn.request()
            conn.quiet(0.05)
            conn.answer(sid)
        assert conn.max_open == 1

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    answered(calls(connection, MESSAGES), MESSAGES)
    peer.join()


def test_graceful_goaway_finishes_streams_up_to_last_id_and_resends_the_rest() -> None:
    drained = threading.Event()

    def script(conn: Conn) -> None:
        conn.start()
        if conn.index == 0:
            assert conn.requests(4) == [1, 3, 5, 7]
            conn.send(GoAwayFrame(0, last_stream_id=3, error_code=0))  # 5 and 7: never processed
            assert drained.wait(10)
            conn.answer(1)
            conn.answer(3)
            after = conn.until_eof()  # the client closes once 1 and 3 are done
            assert not [f for f in after if isinstance(f, HeadersFrame)]  # nothing new on this one
            assert isinstance(after[-1], GoAwayFrame) and after[-1].error_code == 0
        else:
            for sid in conn.requests(3):  # 5 and 7 sent again, and the call made while draining
                conn.answer(sid)

    peer = Peer(script, connections=2)
    first = WireGrpcConnection.shared(peer.url)
    peer.wait_settled()
    greenlets = [gevent.spawn(first.infer, m, 10) for m in MESSAGES[:4]]
    while first.usable():  # until the GOAWAY is read
        gevent.sleep(0.005)
    second = WireGrpcConnection.shared(peer.url)  # new work goes to a fresh connection
    assert second is not first
    late = gevent.spawn(first.infer, MESSAGES[4], 10)  # a user still holding the old one
    gevent.sleep(0.05)
    drained.set()
    gevent.joinall([*greenlets, late], timeout=20)
    answered([g.get() for g in [*greenlets, late]], MESSAGES[:5])
    peer.join()
    old, new = sorted(peer.conns, key=lambda c: c.index)
    assert {old.message(1), old.message(3)} == set(MESSAGES[:2])
    assert sorted(new.message(sid) for sid in new.headers) == sorted(MESSAGES[2:5])
    assert first.closed == "the connection was closed"  # by the client, once 1 and 3 were done


def test_goaway_with_an_error_code_fails_open_streams_and_resends_unprocessed() -> None:
    def script(conn: Conn) -> None:
        conn.start()
        if conn.index == 0:
            assert conn.requests(2) == [1, 3]
            conn.send(GoAwayFrame(0, last_stream_id=1, error_code=0xB, additional_data=b"too many pings"))
        else:
            conn.answer(conn.request())

    peer = Peer(script, connections=2)
    connection = WireGrpcConnection.shared(peer.url)
    peer.wait_settled()
    failed, resent = calls(connection, MESSAGES[:2])
    assert isinstance(failed, WireGrpcError)
    assert "GOAWAY ENHANCE_YOUR_CALM: too many pings" in str(failed)
    answered([resent], MESSAGES[1:2])
    peer.join()


def test_concurrent_users_share_one_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Users starting together (a connect yields to the others under Locust's monkey-patching, as
    gevent's ``create_connection`` does here) get one connection, not one each."""
    import gevent.socket  # noqa: PLC0415 (gevent must be imported after Locust's monkey-patching, in the process that runs it)

    def script(conn: Conn) -> None:
        conn.start()
        conn.until_eof()

    peer = Peer(script)
    monkeypatch.setattr(hub.socket, "create_connection", gevent.socket.create_connection)
    greenlets = [gevent.spawn(WireGrpcConnection.shared, peer.url) for _ in range(8)]
    gevent.joinall(greenlets, timeout=10, raise_error=True)
    assert len({id(g.value) for g in greenlets}) == 1
    greenlets[0].value.close()
    peer.join()


def test_close_sends_goaway_after_the_frames_already_queued() -> None:
    frames: list[Frame] = []

    def script(conn: Conn) -> None:
        conn.start()
        frames.extend(conn.until_eof())

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    call = gevent.spawn(connection.infer, MESSAGES[0], 10)  # queues HEADERS and DATA, then waits
    gevent.spawn(connection.close)  # runs before the queued frames' flush
    gevent.joinall([call], timeout=10)
    assert isinstance(call.exception, WireGrpcError) and "closed" in str(call.exception)
    peer.join()
    kinds = [type(f).__name__ for f in frames if not isinstance(f, SettingsFrame | WindowUpdateFrame)]
    assert kinds == ["HeadersFrame", "DataFrame", "GoAwayFrame"]
    assert (frames[-1].last_stream_id, frames[-1].error_code) == (0, 0)


def test_rst_stream_fails_that_call_with_the_mapped_status_others_go_on() -> None:
    codes = {1: 0x8, 3: 0x2, 5: 0xB}  # CANCEL, INTERNAL_ERROR, ENHANCE_YOUR_CALM

    def script(conn: Conn) -> None:
        conn.start()
        for sid in conn.requests(4):
            if sid in codes:
                conn.send(RstStreamFrame(sid, error_code=codes[sid]))
                conn.open.discard(sid)
            else:
                conn.answer(sid)

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    results = calls(connection, MESSAGES[:4])
    statuses = [(r.status, r.message) for r in results[:3]]
    assert statuses == [(grpc.StatusCode.CANCELLED.value[0], None), (13, None), (8, None)]
    assert [r.error for r in results[:3]] == [
        f"Triton reset the stream (HTTP/2 {name})"
        for name in ("CANCEL", "INTERNAL_ERROR", "ENHANCE_YOUR_CALM")
    ]
    answered(results[3:], MESSAGES[3:4])
    peer.join()


def test_refused_stream_is_sent_again_not_failed() -> None:
    """REFUSED_STREAM: the server did not process the stream (RFC 9113 §8.7), so the call is sent again."""

    def script(conn: Conn) -> None:
        conn.start()
        refused = conn.request()
        conn.send(RstStreamFrame(refused, error_code=0x7))
        conn.open.discard(refused)
        again = conn.request()
        assert (refused, again) == (1, 3) and conn.message(again) == conn.message(refused)
        conn.answer(again)

    peer = Peer(script)
    connection = WireGrpcConnection.shared(peer.url)
    peer.wait_settled()
    answered(calls(connection, MESSAGES[:1]), MESSAGES[:1])
    peer.join()


def test_continuation_frames_carry_header_blocks() -> None:
    long_text = "x" * 20_000  # a header block larger than one 16 kB frame

    def split(conn: Conn, sid: int, fields: dict[str, str], end_stream: bool, pieces: int) -> list[Frame]:
        block = conn.encoder.encode(list(fields.items()))
        size = -(-len(block) // pieces)
        chunks = [block[at : at + size] for at in range(0, len(block), size)]
        frames: list[Frame] = [HeadersFrame(sid, chunks[0], flags=["END_STREAM"] if end_stream else [])]
        frames += [ContinuationFrame(sid, c) for c in chunks[1:-1]]
        frames.append(ContinuationFrame(sid, chunks[-1], flags=["END_HEADERS"]))
        return frames

    def script(conn: Conn) -> None:
        conn.start()
        ok, error = conn.requests(2)
        message = conn.message(ok)
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        conn.send(
            *split(conn, ok, {":status": "200", "content-type": "application/grpc"}, False, 3),
            DataFrame(ok, body),
            *split(conn, ok, {"grpc-status": "0", "x-note": "trailers in pieces"}, True, 2),
            *split(conn, error, {":status": "200", "grpc-status": "3", "grpc-message": long_text}, True, 3),
        )

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    ok, error = calls(connection, MESSAGES[:2])
    answered([ok], MESSAGES[:1])
    assert (error.status, error.error) == (3, long_text)
    peer.join()


def test_padded_data_and_headers_are_unpadded() -> None:
    def script(conn: Conn) -> None:
        conn.start()
        sid = conn.request()
        message = conn.message(sid)
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        head = conn.encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
        tail = conn.encoder.encode([("grpc-status", "0")])
        headers = HeadersFrame(sid, head, flags=["END_HEADERS", "PADDED", "PRIORITY"], pad_length=7)
        headers.depends_on, headers.stream_weight = 0, 15
        conn.send(
            headers,
            DataFrame(sid, body[:3], flags=["PADDED"], pad_length=100),
            DataFrame(sid, body[3:], flags=["PADDED"], pad_length=0),
            HeadersFrame(sid, tail, flags=["END_HEADERS", "END_STREAM", "PADDED"], pad_length=255),
        )

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    answered(calls(connection, MESSAGES[:1]), MESSAGES[:1])
    peer.join()


@pytest.mark.parametrize("refill", ["window_update", "settings"])
def test_window_refill_sends_a_body_beyond_the_initial_window(refill: str) -> None:
    """A 200 kB body against the 65,535-byte initial windows: the client sends exactly what the
    windows allow, in frames of at most 16 kB, and goes on when WINDOW_UPDATE (or a SETTINGS that
    grows INITIAL_WINDOW_SIZE, plus connection credit) gives it room."""
    big = bytes(range(256)) * 800
    rounds: list[int] = []

    def script(conn: Conn) -> None:
        conn.start()
        granted, received = 65_535, 0
        while True:
            frame = conn.read()
            assert frame is not None
            if isinstance(frame, DataFrame):
                assert len(frame.data) <= 16_384
                received += len(frame.data)
                assert received <= granted, "the client sent beyond its window"
                if "END_STREAM" in frame.flags:
                    break
                if received == granted:
                    conn.quiet(0.05)  # blocked: nothing more may come
                    assert received == granted
                    rounds.append(received)
                    if refill == "settings":
                        conn.start(initial_window_size=1 << 20)
                        conn.send(WindowUpdateFrame(0, window_increment=1 << 20))
                        granted += 1 << 20
                    else:
                        step = 50_000
                        conn.send(
                            WindowUpdateFrame(1, window_increment=step),
                            WindowUpdateFrame(0, window_increment=step),
                        )
                        granted += step
        conn.answer(1)

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    answered(calls(connection, [big]), [big])
    peer.join()
    assert rounds[0] == 65_535 and len(rounds) == (1 if refill == "settings" else 3)


@pytest.mark.parametrize(
    ("bad_frame", "expected"),
    [
        (DataFrame(1, b"\x00" * 16_385).serialize(), "a frame of 16385 bytes, over the 16384 allowed"),
        (b"\x00\x00\x07\x06\x00\x00\x00\x00\x00" + b"\x00" * 7, "frame type 6 of 7 bytes"),
    ],
    ids=["over-max-frame-size", "ping-of-7-bytes"],
)
def test_a_wrongly_sized_frame_is_a_frame_size_connection_error(bad_frame: bytes, expected: str) -> None:
    goaway: list[Frame] = []

    def script(conn: Conn) -> None:
        conn.start()
        conn.request()
        conn.send(bad_frame)
        goaway.extend(f for f in conn.until_eof() if isinstance(f, GoAwayFrame))

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    (result,) = calls(connection, MESSAGES[:1])
    assert isinstance(result, WireGrpcError)
    assert f"FRAME_SIZE_ERROR: {expected}" in str(result)
    peer.join()
    assert [g.error_code for g in goaway] == [0x6]  # FRAME_SIZE_ERROR, told to the server
    assert connection.closed is not None


def test_grpc_timeout_header_carries_the_request_timeout() -> None:
    seen: list[bytes | None] = []

    def script(conn: Conn) -> None:
        conn.start()
        for _ in range(3):  # the client waits for each answer before the next call
            sid = conn.request()
            seen.append(conn.headers[sid].get(b"grpc-timeout"))
            conn.answer(sid)

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    for timeout in (2.5, 60.0, None):
        answered([connection.infer(MESSAGES[0], timeout)], MESSAGES[:1])
    peer.join()
    assert seen == [b"2500000u", b"60000000u", None]
    # at most 8 digits, rounded up, the finest unit that fits (gRPC's PROTOCOL-HTTP2.md)
    assert [grpc_timeout(s) for s in (1e-9, 0.0999, 99.9999999, 1e6, 1e9, 1e12)] == [
        "1n",
        "99900000n",
        "100000m",
        "1000000S",
        "16666667M",
        "99999999H",
    ]


def test_every_grpc_status_code_has_its_name() -> None:
    codes = [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK]

    def script(conn: Conn) -> None:
        conn.start()
        for code in [*codes, None]:  # the client waits for each answer before the next call
            sid = conn.request()
            if code is None:  # a message given: the server's own text, percent-decoded
                fields = {":status": "200", "grpc-status": "3", "grpc-message": "bad%20input%25"}
            else:  # trailers-only, no message: the status name
                fields = {":status": "200", "grpc-status": str(code.value[0])}
            conn.send(conn.headers_frame(sid, fields, end_stream=True))

    peer = Peer(script)
    connection = WireGrpcConnection(peer.url)
    peer.wait_settled()
    results = [connection.infer(MESSAGES[0], 10) for _ in range(len(codes) + 1)]
    assert [(r.status, r.error, r.message) for r in results] == [
        *[(c.value[0], c.name, None) for c in codes],
        (3, "bad input%", None),
    ]
    assert len(codes) == 16
    peer.join()
