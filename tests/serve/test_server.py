"""EmbeddedServer against the real tritonserver from the nvidia-pytriton wheel."""

from __future__ import annotations

import importlib.util
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.support.processes import assert_adds_one, http_infer, serve_cli
from tests.support.python_models import ADD_ONE, SLOW_ADD_ONE, write_python_model
from tritonclient.utils import InferenceServerException

from tritonkit.deploy.checks.server import REQUIRED_FLAGS
from tritonkit.errors import (
    ModelLoadError,
    PortInUseError,
    ServerError,
    ServerNotInstalledError,
    ServerStartTimeoutError,
)
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions, find_triton, free_port
from tritonkit.serve.options import ADMIN_HEADER, SERVER_SWITCHES

FAILS_TO_LOAD = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights file missing")
"""

SLOW_TO_LOAD = """
import time
class TritonPythonModel:
    def initialize(self, args):
        time.sleep(60)
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedServer:
    repo = tmp_path_factory.mktemp("repo")
    write_python_model(repo, "add_one", ADD_ONE)
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        yield server


def test_serves_http_and_grpc_on_free_loopback_ports(served: EmbeddedServer) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(http_infer(served.http_url, "add_one", x), x + 1)

    client = grpcclient.InferenceServerClient(served.grpc_url)
    tensor = grpcclient.InferInput("X", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("add_one", [tensor]).as_numpy("Y"), x + 1)
    client.close()
    assert len({served.http_port, served.grpc_port, served.metrics_port}) == 3
    assert served.http_url.startswith("127.0.0.1:")


def test_metrics_endpoint_reports_inference_counters(served: EmbeddedServer) -> None:
    http_infer(served.http_url, "add_one", np.zeros((1, 4), np.float32))
    with urllib.request.urlopen(served.metrics_url, timeout=5) as response:
        text = response.read().decode()
    assert 'nv_inference_request_success{model="add_one",version="1"}' in text


def test_restricted_model_repository_api_needs_the_admin_key(served: EmbeddedServer) -> None:
    client = httpclient.InferenceServerClient(served.http_url)
    with pytest.raises(InferenceServerException, match="restricted"):
        client.get_model_repository_index()
    index = client.get_model_repository_index(headers=served.admin_headers)
    assert [m["name"] for m in index] == ["add_one"]
    # Inference itself is never restricted.
    assert client.is_model_ready("add_one")
    client.close()


def test_the_command_line_holds_every_flag_a_deployment_must_run_with(tmp_path: Path) -> None:
    """One description of a server (``serve.options.SERVER_FLAGS``): the embedded server writes each flag
    ``tritonkit k8s check`` requires of a deployment, with the value it requires."""
    command = EmbeddedServer(tmp_path, ServerOptions(http_port=1, grpc_port=2, metrics_port=3)).command()
    assert [
        f"{flag}={value}" for flag, value in REQUIRED_FLAGS.items() if f"{flag}={value}" not in command
    ] == []
    assert [switch for switch in SERVER_SWITCHES if switch not in command] == []


def test_safe_defaults_are_on_the_command_line(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path, ServerOptions(http_port=1, grpc_port=2, metrics_port=3))
    command = server.command()
    for flag in (
        "--model-control-mode=none",
        "--strict-readiness=true",
        "--disable-auto-complete-config",
        "--http-address=127.0.0.1",
    ):
        assert flag in command
    restricted = next(arg for arg in command if arg.startswith("--http-restricted-api="))
    apis = "model-repository,shared-memory,trace,logging"
    assert restricted.startswith(f"--http-restricted-api={apis}:{ADMIN_HEADER}")
    assert any(arg.startswith(f"--grpc-restricted-protocol={apis}:") for arg in command)
    overridden = EmbeddedServer(
        tmp_path,
        ServerOptions(
            http_port=1, grpc_port=2, metrics_port=3, restricted_apis=(), model_control_mode="explicit"
        ),
    ).command()
    assert "--model-control-mode=explicit" in overridden
    assert not any("restricted" in arg for arg in overridden)


def test_busy_port_is_refused_before_start(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"http port {port} is already in use"):
            EmbeddedServer(tmp_path, ServerOptions(http_port=port)).start()


def test_model_that_fails_to_load_reports_tritons_line(tmp_path: Path) -> None:
    write_python_model(tmp_path, "broken", FAILS_TO_LOAD)
    server = EmbeddedServer(tmp_path)
    with pytest.raises(ModelLoadError) as info:
        server.start()
    message = str(info.value)
    assert message.startswith("model `broken` version 1 failed to load:")
    assert "weights file missing" in message
    assert "\n" not in message
    assert not server.is_running()


@pytest.mark.slow
def test_readiness_timeout_is_reported_and_the_process_stopped(tmp_path: Path) -> None:
    write_python_model(tmp_path, "sleepy", SLOW_TO_LOAD)
    server = EmbeddedServer(tmp_path, ServerOptions(startup_timeout=3))
    with pytest.raises(ServerStartTimeoutError, match="not ready after 3 s"):
        server.start()
    assert not server.is_running()


def test_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="is not a directory"):
        EmbeddedServer(tmp_path / "nope").start()


def test_missing_wheel_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulates an environment without the wheel; the real lookup is exercised by every other test.
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ServerNotInstalledError, match="pip install 'nvidia-pytriton"):
        find_triton()


@pytest.mark.slow
def test_stop_lets_in_flight_requests_finish(tmp_path: Path) -> None:
    write_python_model(tmp_path, "slow", SLOW_ADD_ONE.replace("SECONDS", "1.5"))
    server = EmbeddedServer(tmp_path, ServerOptions(exit_timeout=10)).start()
    results: list[np.ndarray] = []
    worker = threading.Thread(
        target=lambda: results.append(http_infer(server.http_url, "slow", np.ones((1, 4), np.float32)))
    )
    worker.start()
    time.sleep(0.5)  # the request is now executing inside the model
    server.stop()
    worker.join(timeout=10)
    np.testing.assert_array_equal(results[0], np.full((1, 4), 2, np.float32))
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/v2/health/live", timeout=2)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_serve_until_signal(tmp_path: Path, sig: signal.Signals) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    port = free_port()
    process = serve_cli(tmp_path, "--http-port", str(port))
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("tritonkit serve: ready"), line + (process.stderr.read() if process.stderr else "")
    assert f"http=127.0.0.1:{port}" in line
    assert_adds_one(f"127.0.0.1:{port}")
    process.send_signal(sig)
    process.communicate(timeout=60)  # also closes the pipes
    assert process.returncode == 0


def test_cli_serve_busy_port_is_one_line_and_nonzero(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        process = serve_cli(tmp_path, "--grpc-port", str(port))
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert stderr.strip().splitlines() == [
        f"tritonkit serve: error: grpc port {port} is already in use on 127.0.0.1; expected a free port "
        "(choose another with --grpc-port, or omit it to pick one)"
    ]


def test_unreadable_model_directory_names_the_directory(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    (tmp_path / "stray").mkdir()  # a folder without config.pbtxt: Triton cannot poll it
    with pytest.raises(ServerError, match="model directory `stray` could not be read by Triton"):
        EmbeddedServer(
            tmp_path, ServerOptions(exit_timeout=1)
        ).start()  # add_one loaded: not waited for on the way out


def test_a_generated_admin_key_passes_as_an_option_value(tmp_path: Path) -> None:
    """The key printed at start is given back as `--admin-key KEY`: it never starts with '-' (argparse
    would read it as an option; a urlsafe token did one time in 64)."""
    keys = [EmbeddedServer(tmp_path).admin_key for _ in range(64)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", key) for key in keys)
    assert len(set(keys)) == len(keys)
