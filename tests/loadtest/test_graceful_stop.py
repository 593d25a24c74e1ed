"""A load test's end never cancels a call Triton is still answering.

tritonserver 2.51 crashes (SIGSEGV, or ``sync.cc:105 ASSERTION FAILED: prior > 0``) when a gRPC call
is cancelled while its answer is on the way: an RST_STREAM, a ``grpc-timeout`` that runs out, or the
connection closed with the call in flight (triton-inference-server/server#7368, fixed in 2.53). So when
Locust stops its users, each finishes the request it is in, whatever ``--stop-timeout`` says; a user
killed anyway leaves its gRPC call to be answered; the process's connection is closed only once its
calls are answered. Checked against the real server: every request Triton served is one Locust
reported (a call abandoned mid-flight is served but never reported), and the server still serves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tritonkit.measure.payloads import fetch_model_spec, make_payloads, request_body
from tritonkit.serve.embedded import EmbeddedServer

from .conftest import triton_requests

#: plain Locust users on both transports, as a hand-written locustfile (``loadtests/mixed.py``) has them
LOCUSTFILE = """\
import os

from tritonkit.loadtest.users import TritonGrpcUser, TritonHttpUser


class Grpc(TritonGrpcUser):
    http_url, grpc_url = os.environ["TRITON_HTTP"], os.environ["TRITON_GRPC"]
    model = "probe_add"


class Http(TritonHttpUser):
    http_url, grpc_url = os.environ["TRITON_HTTP"], os.environ["TRITON_GRPC"]
    model = "probe_add"
"""


def _settled(server: EmbeddedServer, seconds: float = 3.0) -> int:
    """Triton's request count once it stops moving (an abandoned call is counted when it is served)."""
    last, end = triton_requests(server), time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.3)
        now = triton_requests(server)
        if now == last:
            return now
        last = now
    return last


@pytest.mark.slow
def test_locust_stopping_mid_flight_abandons_no_call(server: EmbeddedServer, tmp_path: Path) -> None:
    """``-t`` ends the run with users in calls and no ``--stop-timeout`` (Locust's default 0:
    users killed at once): each call is still answered and reported, none cancelled."""
    locustfile = tmp_path / "graceful.py"
    locustfile.write_text(LOCUSTFILE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONKIT_")}
    env.update(TRITON_HTTP=server.http_url, TRITON_GRPC=server.grpc_url)
    before = _settled(server)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--skip-log-setup"),
            *("-u", "16", "-r", "16", "-t", "2s"),
            # the counts once the users stopped (the CSV lags by up to a second)
            *("--json-file", str(tmp_path / "run")),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    entries = json.loads((tmp_path / "run.json").read_text())
    counts = {e["method"]: (e["num_requests"], e["num_failures"]) for e in entries}
    assert set(counts) == {"grpc", "http"} and all(n > 0 for n, _ in counts.values())
    assert all(failed == 0 for _, failed in counts.values())
    reported = sum(n for n, _ in counts.values())
    served = _settled(server) - before
    assert served == reported, f"{served - reported} calls served by Triton but abandoned by Locust"
    with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=10) as ready:
        assert ready.status == 200  # still serving


def test_a_killed_grpc_call_is_answered_not_cancelled(server: EmbeddedServer) -> None:
    """A user greenlet killed mid-call (Locust's stop timeout ran out) sends no RST_STREAM: its call
    stays open until Triton answers it, and ``drain`` closes the connection only after that."""
    import gevent  # noqa: PLC0415 (gevent must be imported after Locust's monkey-patching, in the process that runs it)

    from tritonkit.loadtest.transports.wire import WireGrpcConnection  # noqa: PLC0415 (imports gevent)

    spec = fetch_model_spec(server.grpc_url, "probe_add", protocol="grpc")
    payload = make_payloads(spec, {1: 1.0}, per_batch=1, seed=13).payloads[0]
    body = request_body(spec.name, spec.version, payload.inputs, ["OUTPUT0"])
    before = _settled(server)
    connection = WireGrpcConnection(server.grpc_url)
    answered = [0]

    def user() -> None:
        while True:
            connection.infer(body, timeout=60)
            answered[0] += 1

    try:
        users = [gevent.spawn(user) for _ in range(8)]
        gevent.sleep(0.3)
        gevent.killall(users, block=True)
        open_calls = len(connection._streams)
        assert open_calls > 0  # killed users' calls are left open, not reset
        assert connection.drain(timeout=10) is True
        assert connection._streams == {} and connection.closed is not None
    finally:
        connection.close()
    assert _settled(server) - before == answered[0] + open_calls
    assert server.is_running()
