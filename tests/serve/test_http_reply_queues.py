"""Many HTTP inferences in flight on one server: every one is answered. tritonserver 2.51 drops an
answer when more than ~278 wait on one HTTP thread's reply queue (tritonkit.serve.reply_queues); the
embedded server widens those queues at start."""

from __future__ import annotations

import asyncio
import json
import resource
from pathlib import Path

import pytest
from tests.support.python_models import ADD_ONE, write_python_model

from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit.serve.reply_queues import DEFAULT_SNDBUF_ROOM, widen_reply_queues

IN_FLIGHT = 1024  # 485 of 1,024 went unanswered on this 2-core host without the widening
ROUNDS = 6


def _request(value: int) -> bytes:
    body = json.dumps(
        {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [value, 0, 0, 0]}]}
    )
    return (
        f"POST /v2/models/add_one/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


async def _answer(reader: asyncio.StreamReader, timeout_s: float) -> float | None:
    """Y[0] of the answer on one connection; None when none came."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        answer = json.loads(await asyncio.wait_for(reader.readexactly(length), timeout_s))
        return float(answer["outputs"][0]["data"][0])
    except TimeoutError:
        return None


async def _closed_loop(port: int, connections: int, rounds: int, timeout_s: float) -> list[float | None]:
    """``connections`` keep-alive connections opened first, then on each ``rounds`` requests one after
    the other (the next written when the last is answered); the answers in order, None where none came
    (that connection stops there)."""
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]

    async def loop(index: int) -> list[float | None]:
        reader, writer = streams[index]
        got: list[float | None] = []
        for r in range(rounds):
            writer.write(_request(index * rounds + r))
            got.append(await _answer(reader, timeout_s))
            if got[-1] is None:
                return got + [None] * (rounds - r - 1)
        return got

    try:
        per_connection = await asyncio.gather(*(loop(i) for i in range(connections)))
    finally:
        for _, writer in streams:
            writer.close()
    return [y for answers in per_connection for y in answers]


def test_a_thousand_http_inferences_in_flight_are_all_answered(served: EmbeddedServer) -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 4 * IN_FLIGHT:
        pytest.skip(f"needs {4 * IN_FLIGHT} open files (ulimit -n); this process may open fewer")
    if served.http_reply_problem:
        pytest.skip(f"tritonserver's reply queues could not be widened here: {served.http_reply_problem}")
    assert served.http_reply_room is not None and served.http_reply_room >= IN_FLIGHT > DEFAULT_SNDBUF_ROOM
    port = int(served.http_url.rsplit(":", 1)[1])
    answers = asyncio.run(_closed_loop(port, IN_FLIGHT, ROUNDS, timeout_s=20.0))
    missing = [i for i, y in enumerate(answers) if y is None]
    assert not missing, f"{len(missing)} of {IN_FLIGHT * ROUNDS} requests unanswered after 20 s"
    assert answers == [float(i + 1) for i in range(IN_FLIGHT * ROUNDS)]


def test_the_room_is_left_alone_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONKIT_REPLY_QUEUES", "0")
    write_python_model(tmp_path, "add_one", ADD_ONE)
    with EmbeddedServer(tmp_path, ServerOptions(exit_timeout=1)) as plain:
        assert plain.http_reply_room is None and plain.http_reply_problem is None


def test_a_process_that_cannot_be_reached_is_an_os_error() -> None:
    with pytest.raises(OSError, match=r"pidfd_open\(4194303\)"):
        widen_reply_queues(4194303)  # above Linux's highest pid: no such process
