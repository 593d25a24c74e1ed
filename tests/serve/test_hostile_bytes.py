"""Hostile bytes against the HTTP guard in front of the real tritonserver, over raw sockets.

Each case is sent as it is, and the socket stays open (no half-close: an end of file would make the guard
answer a cut request at once and hide one it would otherwise leave waiting). Every case must be answered
with a status line within ``_BOUND`` seconds, which is not a speed check: the guard's first deadline (5 s
without a byte) answers 408, so a right status can only come from the guard having understood the bytes.
After each case the server must still be ready and serve a valid infer.
"""

from __future__ import annotations

import http.client
import json
import socket
import time

import pytest

from tritonkit.serve.embedded import EmbeddedServer

_BOUND = 5.0
_INFER = b"/v2/models/add_one/infer"
_GOOD = json.dumps(
    {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
).encode()


def _request(*headers: bytes, body: bytes = b"", line: bytes = b"POST " + _INFER + b" HTTP/1.1") -> bytes:
    return line + b"\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


def _sized(body: bytes, *headers: bytes) -> bytes:
    return _request(*headers, b"Content-Length: %d" % len(body), body=body)


def _infer(tensor: str, extra: str = "") -> bytes:
    return _sized(('{"inputs": [{"name": "X", ' + tensor + "}]" + extra + "}").encode())


def _shape(shape: str) -> bytes:
    return _infer(f'"shape": {shape}, "datatype": "FP32", "data": [1, 2, 3, 4]')


def _data(datatype: str, element: str) -> bytes:
    return _infer(f'"shape": [1, 4], "datatype": "{datatype}", "data": [{element}, 1, 1, 1]')


_CHUNKED = b"Transfer-Encoding: chunked"
#: case -> (bytes sent, the statuses answered in order; the last one closes the connection)
CASES: dict[str, tuple[bytes, list[int]]] = {
    # 1. chunked bodies: refused at the head, whatever the chunks hold
    "chunk size overflow": (_request(_CHUNKED, body=b"ffffffffffffffffffff\r\n"), [411]),
    "bad chunk extension": (_request(_CHUNKED, body=b"4;\x01\r\n{}{}\r\n0\r\n\r\n"), [411]),
    "bad chunk terminator": (_request(_CHUNKED, body=b"4\r\n{}{}XX0\r\n\r\n"), [411]),
    "chunked over HTTP/1.0": (_request(_CHUNKED, line=b"POST " + _INFER + b" HTTP/1.0"), [411]),
    "body longer than declared": (_sized(_GOOD) + b"\x00garbage\r\n\r\n", [200, 400]),
    # 2. Content-Length
    "Content-Length -1": (_request(b"Content-Length: -1", body=b"{}"), [400]),
    "Content-Length +5": (_request(b"Content-Length: +5", body=b"{}"), [400]),
    "Content-Length 5, 6": (_request(b"Content-Length: 5, 6", body=b"{}"), [400]),
    "two different Content-Length": (_request(b"Content-Length: 2", b"Content-Length: 3", body=b"{}"), [400]),
    "Content-Length 0x10": (_request(b"Content-Length: 0x10", body=b"{}"), [400]),
    "Content-Length 2^63": (_request(b"Content-Length: 9223372036854775808"), [413]),
    "Content-Length of 23 digits": (_request(b"Content-Length: 99999999999999999999999"), [413]),
    "Content-Length 1 GiB": (_request(b"Content-Length: 1073741824"), [413]),
    # 3. control characters in a header value (HTAB is allowed), obs-fold
    "NUL in a header value": (_sized(_GOOD, b"X-A: a\x00b"), [400]),
    "0x01 in a header value": (_sized(_GOOD, b"X-A: a\x01b"), [400]),
    "DEL in a header value": (_sized(_GOOD, b"X-A: a\x7fb"), [400]),
    "CR alone in a header value": (_sized(_GOOD, b"X-A: a\rb"), [400]),
    "LF alone in a header value": (_sized(_GOOD, b"X-A: a\nb"), [400]),
    "obs-fold": (_sized(_GOOD, b"X-A: a", b" b"), [400]),
    "HTAB in a header value is served": (_sized(_GOOD, b"X-A: a\tb") + b"\x00", [200, 400]),
    # 4. request lines without a version, versions other than 1.0 and 1.1
    "HTTP/0.9 GET": (b"GET /v2/health/ready\r\n", [505]),
    "HTTP/0.9 GET, bare LF": (b"GET /v2/health/ready\n", [505]),
    "HTTP/0.9 POST": (b"POST " + _INFER + b"\r\n", [505]),
    "HTTP/0.9 with headers": (b"GET /v2/health/ready\r\nHost: x\r\n\r\n", [505]),
    "HTTP/0.9 after a served request": (_sized(_GOOD) + b"GET /v2/health/ready\r\n", [200, 505]),
    "HTTP/2.0 in HTTP/1 framing": (_request(line=b"GET /v2/health/ready HTTP/2.0"), [505]),
    "HTTP/1.2": (_request(line=b"GET /v2/health/ready HTTP/1.2"), [505]),
    "HTTP/3.0": (_request(line=b"GET /v2/health/ready HTTP/3.0"), [505]),
    "HTTP/2 preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", [505]),
    "h2c upgrade served as HTTP/1.1, then closed": (
        _request(
            b"Connection: Upgrade, HTTP2-Settings",
            b"Upgrade: h2c",
            b"HTTP2-Settings: AAMAAABkAA",
            line=b"GET /v2/health/ready HTTP/1.1",
        ),
        [200],
    ),
    # 5. shapes: non-negative integers below 2^63, and bytes that fit
    "shape 1.5": (_shape("[1.5, 4]"), [400]),
    "shape 1.0": (_shape("[1.0, 4]"), [400]),
    "shape 1e0": (_shape("[1e0, 4]"), [400]),
    "shape -1": (_shape("[-1, 4]"), [400]),
    "shape true": (_shape("[true, 4]"), [400]),
    'shape "1"': (_shape('["1", 4]'), [400]),
    "shape nested": (_shape("[[1], 4]"), [400]),
    "shape null": (_shape("[null, 4]"), [400]),
    "shape 2^64": (_shape("[18446744073709551616, 4]"), [400]),
    "shape 2^63": (_shape("[9223372036854775808, 4]"), [400]),
    "shape product overflows int64": (_shape("[4294967296, 4294967296, 4]"), [413]),
    "shape a string": (_shape('"1x4"'), [400]),
    "shape missing": (_infer('"datatype": "FP32", "data": [1, 2, 3, 4]'), [400]),
    # 5. datatype and data elements Triton 2.51 answers 500 to
    "datatype a number": (_infer('"shape": [1, 4], "datatype": 5, "data": [1, 2, 3, 4]'), [400]),
    "datatype null": (_infer('"shape": [1, 4], "datatype": null, "data": [1, 2, 3, 4]'), [400]),
    "FP32 data true": (_data("FP32", "true"), [400]),
    'FP32 data "a"': (_data("FP32", '"a"'), [400]),
    "FP32 data null": (_data("FP32", "null"), [400]),
    "FP32 data 1e400": (_data("FP32", "1e400"), [400]),
    "FP32 data of 400 digits": (_data("FP32", "1" + "0" * 400), [400]),
    "INT32 data 1.5": (_data("INT32", "1.5"), [400]),
    "INT32 data 1e5": (_data("INT32", "1e5"), [400]),
    "INT64 data 2^63": (_data("INT64", "9223372036854775808"), [400]),
    "UINT8 data -1": (_data("UINT8", "-1"), [400]),
    "BOOL data 1": (_data("BOOL", "1"), [400]),
    "BYTES data 1": (_data("BYTES", "1"), [400]),
    "data an object": (_infer('"shape": [1, 4], "datatype": "FP32", "data": {}'), [400]),
    "lone high surrogate in id": (
        _infer('"shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]', ', "id": "\\ud800"'),
        [400],
    ),
    "1e400 in a custom parameter": (
        _infer('"shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]', ', "parameters": {"x": 1e400}'),
        [400],
    ),
}


def _answers(port: int, data: bytes) -> tuple[list[int], list[str]]:
    """Send ``data`` on a connection kept open; the statuses and error messages answered until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=_BOUND) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass  # judged below: what arrived within the bound
    statuses: list[int] = []
    errors: list[str] = []
    while received.startswith(b"HTTP/1.1 "):
        head, _, rest = received.partition(b"\r\n\r\n")
        statuses.append(int(head.split(b" ", 2)[1]))
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ),
            0,
        )
        body, received = rest[:length], rest[length:]
        if statuses[-1] >= 400:
            errors.append(json.loads(body)["error"])
    return statuses, errors


def _ready_and_serving(server: EmbeddedServer) -> bool:
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    try:
        conn.request("GET", "/v2/health/ready")
        ready = conn.getresponse()
        ready.read()
        conn.request("POST", _INFER.decode(), body=_GOOD)
        answer = conn.getresponse()
        served = json.loads(answer.read())
        return ready.status == 200 and answer.status == 200 and served["outputs"][0]["data"] == [2, 3, 4, 5]
    finally:
        conn.close()


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_bytes_get_a_prompt_status_and_triton_serves_on(guarded: EmbeddedServer, case: str) -> None:
    data, expected = CASES[case]
    statuses, errors = _answers(guarded.http_port, data)
    assert statuses == expected, (
        f"{case}: answered {statuses} {errors} (expected {expected} within {_BOUND} s)"
    )
    assert all(message.strip() and "\n" not in message for message in errors), errors
    assert guarded.is_running()
    assert _ready_and_serving(guarded), (
        f"{case}: the server is not ready, or a valid infer failed, afterwards"
    )


def test_a_head_cut_across_reads_is_not_taken_for_http_0_9(guarded: EmbeddedServer) -> None:
    """The HTTP/0.9 check reads the end of a head still arriving: a request line sent alone, then its
    headers, and a header whose value looks like a request line, are served."""
    parts = [
        b"GET /v2/health/ready HTTP/1.1\r\n",
        b"Host: x\r\n",
        b"X-Line: GET /v2/health/ready\r\n",
        b"\r\n",
    ]
    with socket.create_connection(("127.0.0.1", guarded.http_port), timeout=_BOUND) as sock:
        for part in parts:
            sock.sendall(part)
            time.sleep(0.1)  # each part arrives as its own read
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
