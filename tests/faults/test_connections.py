"""Slow and idle connections: slow-loris clients trickling headers, a Content-Length lie and many idle
connections (bounded by ``ulimit -n``) must not stop good requests, and the server log must stay
bounded. The time each hostile connection is held open is recorded."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

from .conftest import Record, Scale
from .support import grpc_ready_and_good, http_good, write_add_one

pytestmark = pytest.mark.faults

LOG_BOUND = 1 << 20


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo: Path = tmp_path_factory.mktemp("repo")
    write_add_one(repo)
    with EmbeddedServer(
        repo,
        ServerOptions(guard=True, exit_timeout=2, log_file=tmp_path_factory.mktemp("log") / "server.log"),
    ) as server:
        yield server


def _good_while(server: EmbeddedServer, seconds: float) -> tuple[int, int, float]:
    """Good HTTP requests sent for ``seconds``: (served, sent, worst latency)."""
    served = sent = 0
    worst = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.monotonic()
        sent += 1
        served += http_good(server.http_port)
        worst = max(worst, time.monotonic() - start)
        time.sleep(0.1)
    return served, sent, worst


def _open(sock: socket.socket) -> bool:
    """Whether the server still holds ``sock`` open (no EOF, no reset)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _log_size(server: EmbeddedServer) -> int:
    assert server.log_file is not None
    return sum(p.stat().st_size for p in server.log_file.parent.glob(server.log_file.name + "*"))


def test_slow_loris(served: EmbeddedServer, fault_scale: Scale, record: Record) -> None:
    socks = []
    for _ in range(fault_scale.slow_loris):
        sock = socket.create_connection(("127.0.0.1", served.http_port), timeout=5)
        sock.sendall(b"POST /v2/models/add_one/infer HTTP/1.1\r\nHost: x\r\n")
        socks.append(sock)
    duration = 12.0 if fault_scale.form == "full" else 4.0
    served_n = sent = 0
    worst = 0.0
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b"X")  # one header byte at a time, never the end of the head
        ok, n, slowest = _good_while(served, 0.5)
        served_n, sent, worst = served_n + ok, sent + n, max(worst, slowest)
    still_open = sum(_open(sock) for sock in socks)
    for sock in socks:
        sock.close()
    passed = served_n == sent and worst < 2.0
    record(
        "connections",
        f"slow-loris x{len(socks)}, {duration:.0f} s",
        passed,
        good_served=f"{served_n}/{sent}",
        worst_good_s=round(worst, 3),
        hostile_still_open=still_open,
        log_bytes=_log_size(served),
    )
    assert passed, f"good requests served {served_n}/{sent}, worst {worst:.2f} s"


def test_content_length_lie(served: EmbeddedServer, fault_scale: Scale, record: Record) -> None:
    cap = 30.0 if fault_scale.form == "full" else 8.0
    sock = socket.create_connection(("127.0.0.1", served.http_port), timeout=cap)
    sock.sendall(b"POST /v2/models/add_one/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{}")
    start = time.monotonic()
    try:
        answer = sock.recv(200)
    except TimeoutError:
        answer = b"(no answer)"
    held = time.monotonic() - start
    sock.close()
    ok, n, _worst = _good_while(served, 1.0)
    closed = held < cap
    passed = closed and ok == n
    record(
        "connections",
        "Content-Length 1000, 2 bytes sent",
        passed,
        held_open_s=round(held, 2),
        answer=answer.split(b"\r\n", 1)[0].decode("latin-1"),
        good_served=f"{ok}/{n}",
        log_bytes=_log_size(served),
    )
    assert ok == n
    assert closed, f"the connection was held {held:.1f} s with no answer"


def test_idle_connections(served: EmbeddedServer, fault_scale: Scale, record: Record) -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # the guard runs in this process: each idle connection costs two descriptors here
    count = max(10, min(fault_scale.idle_connections, (soft - 500) // 3))
    log_before = _log_size(served)
    socks: list[socket.socket] = []
    refused = 0
    for i in range(count):
        port = served.http_port if i % 2 == 0 else served.grpc_port
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            refused += 1
    time.sleep(1.0)
    http_ok, n, worst = _good_while(served, 1.0)
    _ready, grpc_ok = grpc_ready_and_good(served.grpc_url)
    for sock in socks:
        sock.close()
    grown = _log_size(served) - log_before
    passed = http_ok == n and grpc_ok and grown < LOG_BOUND
    record(
        "connections",
        f"{count} idle connections (HTTP and gRPC ports; ulimit -n {soft})",
        passed,
        opened=len(socks),
        refused=refused,
        good_served=f"{http_ok}/{n}",
        grpc_good=grpc_ok,
        worst_good_s=round(worst, 3),
        log_growth_bytes=grown,
    )
    assert passed, f"http {http_ok}/{n}, grpc {grpc_ok}, log grew {grown} bytes"
