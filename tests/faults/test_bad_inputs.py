"""A catalogue of bad inputs over HTTP (through the guard) and gRPC: each must get a clear error
(4xx, or a gRPC status other than INTERNAL/UNKNOWN, with a one-line message), the server must stay
ready, and the next good request must be served. Every case is recorded with what it got."""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2

from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

from .conftest import Record
from .support import (
    GOOD_JSON,
    grpc_ready_and_good,
    grpc_stub,
    http_good,
    http_ready,
    http_request,
    raw_http,
    write_add_one,
    write_text_len,
)

pytestmark = pytest.mark.faults

INFER = "/v2/models/add_one/infer"


def _infer_json(**tensor: object) -> bytes:
    base: dict[str, object] = {"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    base.update(tensor)
    return json.dumps({"inputs": [base]}).encode()


def _binary(
    header: dict[str, object], payload: bytes, *, declared: int | None = None
) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(header).encode()
    length = len(head) if declared is None else declared
    return head + payload, {
        "Inference-Header-Content-Length": str(length),
        "Content-Type": "application/octet-stream",
    }


def _text_binary(values: list[bytes], *, lie: int = 0) -> tuple[bytes, dict[str, str]]:
    payload = b"".join(struct.pack("<I", len(v) + lie) + v for v in values)
    header = {
        "inputs": [
            {
                "name": "TEXT",
                "shape": [len(values), 1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(payload)},
            }
        ]
    }
    return _binary(header, payload)


def _http_cases() -> dict[str, Callable[[], bytes]]:
    text_infer = "/v2/models/text_len/infer"
    bad_utf8, bad_utf8_headers = _text_binary([b"\xff\xfe\xfa"])
    framing, framing_headers = _text_binary([b"hello"], lie=100)
    lie_body, lie_headers = _binary({"inputs": []}, b"", declared=10_000)
    size_body, size_headers = _binary(
        {
            "inputs": [
                {"name": "X", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}
            ]
        },
        b"\0" * 8,
    )
    deep = b'{"inputs": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    return {
        "wrong dtype": lambda: http_request("POST", INFER, _infer_json(datatype="INT32")),
        "unknown dtype": lambda: http_request("POST", INFER, _infer_json(datatype="FP33")),
        "wrong shape": lambda: http_request("POST", INFER, _infer_json(shape=[1, 5], data=[1, 2, 3, 4, 5])),
        "wrong rank": lambda: http_request("POST", INFER, _infer_json(shape=[4])),
        "batch too big": lambda: http_request("POST", INFER, _infer_json(shape=[9, 4], data=[0.0] * 36)),
        "data count mismatch": lambda: http_request("POST", INFER, _infer_json(data=[1, 2, 3])),
        "strings for FP32": lambda: http_request("POST", INFER, _infer_json(data=["a", "b", "c", "d"])),
        "NaN literal in FP32": lambda: http_request(
            "POST", INFER, _infer_json().replace(b"[1, 2, 3, 4]", b"[NaN, 1, 2, 3]")
        ),
        "number overflow 1e400": lambda: http_request(
            "POST", INFER, _infer_json().replace(b"[1, 2, 3, 4]", b"[1e400, 1, 2, 3]")
        ),
        "negative dims": lambda: http_request("POST", INFER, _infer_json(shape=[-1, 4])),
        "shape not a list": lambda: http_request("POST", INFER, _infer_json(shape="1x4")),
        "missing input": lambda: http_request("POST", INFER, b'{"inputs": []}'),
        "no inputs key": lambda: http_request("POST", INFER, b"{}"),
        "inputs not a list": lambda: http_request("POST", INFER, b'{"inputs": {"name": "X"}}'),
        "extra input": lambda: http_request(
            "POST",
            INFER,
            json.dumps(
                {
                    "inputs": [
                        json.loads(_infer_json())["inputs"][0],
                        {**json.loads(_infer_json())["inputs"][0], "name": "Z"},
                    ]
                }
            ).encode(),
        ),
        "wrong input name": lambda: http_request("POST", INFER, _infer_json(name="x")),
        "unknown output requested": lambda: http_request(
            "POST", INFER, json.dumps({**json.loads(_infer_json()), "outputs": [{"name": "NOPE"}]}).encode()
        ),
        "10,000 inputs": lambda: http_request(
            "POST",
            INFER,
            json.dumps(
                {
                    "inputs": [
                        {**json.loads(_infer_json())["inputs"][0], "name": f"I{i}"} for i in range(10_000)
                    ]
                }
            ).encode(),
        ),
        "bad JSON": lambda: http_request("POST", INFER, b'{"inputs": [{'),
        "JSON not an object": lambda: http_request("POST", INFER, b"[1, 2, 3]"),
        "invalid UTF-8 in JSON": lambda: http_request(
            "POST", INFER, _infer_json(name="X\udcff").replace(b"\\udcff", b"\xff")
        ),
        "deep JSON (200,000 levels)": lambda: http_request("POST", INFER, deep),
        "shape bomb": lambda: http_request(
            "POST", INFER, _infer_json(shape=[1_000_000_000_000, 3, 224, 224])
        ),
        "body too big (declared 1 GiB)": lambda: http_request("POST", INFER, b"{}", length=2**30),
        "empty body": lambda: http_request("POST", INFER, b""),
        "garbage gzip": lambda: http_request("POST", INFER, b"\x13\x37garbage", {"Content-Encoding": "gzip"}),
        "garbage deflate": lambda: http_request(
            "POST", INFER, b"\x13\x37garbage", {"Content-Encoding": "deflate"}
        ),
        "gzip of bad JSON": lambda: http_request(
            "POST", INFER, gzip.compress(b"{nope"), {"Content-Encoding": "gzip"}
        ),
        "deflate bomb (8 MiB of zeros)": lambda: http_request(
            "POST", INFER, zlib.compress(b"0" * (8 << 20)), {"Content-Encoding": "deflate"}
        ),
        "Content-Length shorter than body": lambda: http_request("POST", INFER, GOOD_JSON, length=10),
        "chunked (no Content-Length)": lambda: (
            f"POST {INFER} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"{len(GOOD_JSON):x}\r\n".encode()
            + GOOD_JSON
            + b"\r\n0\r\n\r\n"
        ),
        "huge header (100 KiB)": lambda: http_request("POST", INFER, GOOD_JSON, {"X-Pad": "a" * 100_000}),
        "Content-Length not a number": lambda: http_request(
            "POST", INFER, GOOD_JSON, {"Content-Length": "12abc"}
        ),
        "binary header length > body": lambda: http_request("POST", INFER, lie_body, lie_headers),
        "binary_data_size > payload": lambda: http_request("POST", INFER, size_body, size_headers),
        "non-UTF-8 TEXT": lambda: http_request("POST", text_infer, bad_utf8, bad_utf8_headers),
        "wrong BYTES framing": lambda: http_request("POST", text_infer, framing, framing_headers),
        "unknown model": lambda: http_request("POST", "/v2/models/nope/infer", GOOD_JSON),
        "unknown version": lambda: http_request("POST", "/v2/models/add_one/versions/7/infer", GOOD_JSON),
        "model name path escape": lambda: http_request(
            "POST", "/v2/models/..%2F..%2Fetc%2Fpasswd/infer", GOOD_JSON
        ),
        "NUL in model name": lambda: http_request("POST", "/v2/models/add%00one/infer", GOOD_JSON),
        "GET on infer": lambda: http_request("GET", INFER),
        "not HTTP at all": lambda: b"\x16\x03\x01\x02\x00garbage-tls-hello\r\n\r\n",
        **_round_three_cases(),
    }


def _binary_size(value: object) -> tuple[bytes, dict[str, str]]:
    header = {
        "inputs": [
            {"name": "X", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": value}}
        ]
    }
    return _binary(header, b"\0" * 16)


def _round_three_cases() -> dict[str, Callable[[], bytes]]:
    """Issue 23: ways around the guard, and numbers Triton reads otherwise than Python."""
    bomb = _infer_json(shape=[1_000_000_000_000, 4])
    deep = b'{"text_input": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    smuggled = http_request("POST", INFER, bomb)
    cases: dict[str, Callable[[], bytes]] = {
        "absolute-form shape bomb": lambda: http_request("POST", f"http://127.0.0.1:1{INFER}", bomb),
        "absolute-form deep JSON": lambda: http_request(
            "POST", f"http://127.0.0.1:1{INFER}", b'{"inputs": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
        ),
        "generate deep JSON (200,000 levels)": lambda: http_request(
            "POST", "/v2/models/add_one/generate", deep
        ),
        "generate_stream deep JSON": lambda: http_request("POST", "/v2/models/add_one/generate_stream", deep),
        "smuggled bomb (Content-Length : N)": lambda: (
            f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length : {len(smuggled)}\r\n\r\n".encode()
            + smuggled
        ),
        "two different Content-Length": lambda: (
            f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(GOOD_JSON)}\r\n"
            f"Content-Length: {len(GOOD_JSON) + len(smuggled)}\r\n\r\n".encode()
            + GOOD_JSON
            + smuggled
        ),
        "Transfer-Encoding and Content-Length": lambda: (
            f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(GOOD_JSON) + 5}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode()
            + smuggled
        ),
        "obs-fold header": lambda: (
            f"POST {INFER} HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\nContent-Length: {len(GOOD_JSON)}\r\n\r\n".encode()
            + GOOD_JSON
        ),
        "two Host headers": lambda: http_request("POST", INFER, GOOD_JSON, {"Host": "a", "host": "b"}),
        '"shape" twice (bomb first)': lambda: http_request(
            "POST",
            INFER,
            b'{"inputs": [{"name": "X", "shape": [1000000000000, 4], "shape": [1, 4], '
            b'"datatype": "FP32", "data": [1, 2, 3, 4]}]}',
        ),
        "binary_data_size -1": lambda: http_request("POST", INFER, *_binary_size(-1)),
        "binary_data_size 2^64": lambda: http_request("POST", INFER, *_binary_size(2**64)),
        'binary_data_size "64"': lambda: http_request("POST", INFER, *_binary_size("64")),
        "Inference-Header-Content-Length 1_05": lambda: http_request(
            "POST", INFER, GOOD_JSON, {"Inference-Header-Content-Length": "1_05"}
        ),
        "priority -1": lambda: http_request(
            "POST", INFER, json.dumps({**json.loads(_infer_json()), "parameters": {"priority": -1}}).encode()
        ),
        "request id not a string": lambda: http_request(
            "POST", INFER, json.dumps({**json.loads(_infer_json()), "id": 5}).encode()
        ),
        "output name not a string": lambda: http_request(
            "POST", INFER, json.dumps({**json.loads(_infer_json()), "outputs": [{"name": 5}]}).encode()
        ),
        "model name of 12 KB": lambda: http_request("POST", f"/v2/models/{'a' * 12_000}/infer", GOOD_JSON),
        "model name of 40 KB": lambda: http_request("POST", f"/v2/models/{'a' * 40_000}/infer", GOOD_JSON),
        "unknown route": lambda: http_request("GET", "/v2/anything/else"),
        **_hostile_bytes_cases(),
    }
    return cases


#: Cases sent on a connection kept open (an end of file gets any cut request a prompt 400, which would hide
#: one the guard leaves waiting); a 408 (a deadline answered, not the request) is not a clean refusal.
KEPT_OPEN = {"HTTP/0.9 request line", "HTTP/0.9 POST", "HTTP/2.0 request line", "HTTP/1.2 request line"}


def _hostile_bytes_cases() -> dict[str, Callable[[], bytes]]:
    """The hostile-byte probe after issue 23: HTTP versions, lengths past 64 bits, JSON RapidJSON refuses."""
    numbers = '{"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [%s, 1, 1, 1]}]%s}'
    return {
        "HTTP/0.9 request line": lambda: b"GET /v2/health/ready\r\n",
        "HTTP/0.9 POST": lambda: b"POST " + INFER.encode() + b"\r\n",
        "HTTP/2.0 request line": lambda: b"GET /v2/health/ready HTTP/2.0\r\nHost: x\r\n\r\n",
        "HTTP/1.2 request line": lambda: b"GET /v2/health/ready HTTP/1.2\r\nHost: x\r\n\r\n",
        "Content-Length of 23 digits": lambda: http_request("POST", INFER, b"{}", length=10**22),
        "FP32 element of 400 digits": lambda: http_request(
            "POST", INFER, (numbers % ("1" + "0" * 400, "")).encode()
        ),
        "1e400 in a custom parameter": lambda: http_request(
            "POST", INFER, (numbers % ("1", ', "parameters": {"x": 1e400}')).encode()
        ),
        "lone high surrogate in the id": lambda: http_request(
            "POST", INFER, (numbers % ("1", ', "id": "\\ud800"')).encode()
        ),
    }


def _grpc_cases() -> dict[str, Callable[[], service_pb2.ModelInferRequest]]:
    def request(model: str = "add_one", version: str = "", **fields: object) -> service_pb2.ModelInferRequest:
        req = service_pb2.ModelInferRequest(model_name=model, model_version=version)
        spec = {"name": "X", "datatype": "FP32", "shape": [1, 4], **fields}
        raw = spec.pop("raw", b"\0" * 16)
        if spec.pop("skip", False):
            return req
        req.inputs.add(**spec)
        req.raw_input_contents.append(raw)  # type: ignore[arg-type]
        return req

    def text(values: list[bytes], lie: int = 0) -> service_pb2.ModelInferRequest:
        req = service_pb2.ModelInferRequest(model_name="text_len")
        req.inputs.add(name="TEXT", datatype="BYTES", shape=[len(values), 1])
        req.raw_input_contents.append(b"".join(struct.pack("<I", len(v) + lie) + v for v in values))
        return req

    def extra() -> service_pb2.ModelInferRequest:
        req = request()
        req.inputs.add(name="Z", datatype="FP32", shape=[1, 4])
        req.raw_input_contents.append(b"\0" * 16)
        return req

    return {
        "wrong dtype": lambda: request(datatype="INT32"),
        "unknown dtype": lambda: request(datatype="FP33"),
        "wrong shape": lambda: request(shape=[1, 5], raw=b"\0" * 20),
        "batch too big": lambda: request(shape=[9, 4], raw=b"\0" * 144),
        "raw size mismatch": lambda: request(raw=b"\0" * 7),
        "negative dims": lambda: request(shape=[-1, 4]),
        "shape bomb": lambda: request(shape=[1_000_000_000_000, 3, 224, 224]),
        "missing input": lambda: request(skip=True),
        "extra input": extra,
        "wrong input name": lambda: request(name="x"),
        "unknown model": lambda: request(model="nope"),
        "unknown version": lambda: request(version="7"),
        "non-UTF-8 TEXT": lambda: text([b"\xff\xfe\xfa"]),
        "wrong BYTES framing": lambda: text([b"hello"], lie=100),
    }


HTTP_CASES = _http_cases()
GRPC_CASES = _grpc_cases()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo: Path = tmp_path_factory.mktemp("repo")
    write_add_one(repo)
    write_text_len(repo)
    with EmbeddedServer(repo, ServerOptions(guard=True, exit_timeout=2)) as server:
        yield server


def _one_line(message: str) -> bool:
    return bool(message.strip()) and "\n" not in message.strip() and "Traceback" not in message


@pytest.mark.parametrize("case", list(HTTP_CASES))
def test_http_bad_input(served: EmbeddedServer, record: Record, case: str) -> None:
    try:
        kept_open = case in KEPT_OPEN
        status, message = raw_http(served.http_port, HTTP_CASES[case](), timeout=15, half_close=not kept_open)
    except OSError as exc:
        status, message = 0, f"{type(exc).__name__}: {exc}"
    ready, good = http_ready(served.http_port), http_good(served.http_port)
    clean = (
        (400 <= status < 500 or status == 505) and _one_line(message) and not (kept_open and status == 408)
    )
    record(
        "bad-input",
        f"HTTP: {case}",
        clean and ready and good,
        status=status,
        message=message[:100],
        ready_after=ready,
        next_good=good,
    )
    assert ready and good, f"{case}: ready={ready} next good served={good}"
    assert clean, f"{case}: got {status} {message!r}"


@pytest.mark.parametrize("case", list(GRPC_CASES))
def test_grpc_bad_input(served: EmbeddedServer, record: Record, case: str) -> None:
    channel, stub = grpc_stub(served.grpc_url)
    try:
        stub.ModelInfer(GRPC_CASES[case](), timeout=15)
        status, message = "OK", ""
    except grpc.RpcError as exc:
        status, message = exc.code().name, (exc.details() or "").strip()  # type: ignore[attr-defined]
    finally:
        channel.close()
    ready, good = grpc_ready_and_good(served.grpc_url)
    clean = status not in ("OK", "INTERNAL", "UNKNOWN", "DEADLINE_EXCEEDED", "UNAVAILABLE") and _one_line(
        message
    )
    first = (message.splitlines() or [""])[0][:100]
    record(
        "bad-input",
        f"gRPC: {case}",
        clean and ready and good,
        status=status,
        message=first,
        ready_after=ready,
        next_good=good,
    )
    assert ready and good, f"{case}: ready={ready} next good served={good}"
    assert clean, f"{case}: got {status} {message!r}"


def test_catalogue_has_at_least_40_kinds() -> None:
    assert len(HTTP_CASES) + len(GRPC_CASES) >= 40
