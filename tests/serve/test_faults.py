"""Faults around the embedded server, against the real tritonserver: restricted shared memory and
statistics, the admin key kept out of ``ps``, no orphans after a crash, dead stubs noticed, clear
usage errors, fast failure of a model that cannot start, and bounded text tokenization."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.support.processes import alive, assert_adds_one, children, serve_cli, stop, wait_until
from tests.support.python_models import ADD_ONE, write_python_model
from tritonclient.utils import InferenceServerException
from tritonclient.utils import shared_memory as shm

from tritonkit.cli import main
from tritonkit.client.protocol import grpc_headers
from tritonkit.errors import ModelLoadError
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions, free_port
from tritonkit.serve.process import stubs_of


def _stub_path(server: EmbeddedServer) -> Path:
    return server._stub_path()


# --- 1. shared memory is restricted, statistics are open -----------------------------------------------
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shared_memory_registration_needs_the_admin_key(served: EmbeddedServer, protocol: str) -> None:
    name = f"/tritonkit-test-{os.getpid()}-{protocol}"
    handle = shm.create_shared_memory_region(f"r-{protocol}", name, 64)
    module = httpclient if protocol == "http" else grpcclient
    url = served.http_url if protocol == "http" else served.grpc_url
    raw = module.InferenceServerClient(url)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            raw.register_system_shared_memory(f"r-{protocol}", name, 64)
        with pytest.raises(InferenceServerException, match="restricted"):
            raw.get_system_shared_memory_status()
        # Statistics are open by default (NVIDIA's tools and examples read them); the counts are
        # public on /metrics anyway.
        assert raw.get_inference_statistics("add_one") is not None
        # Over gRPC, Triton reads the key under a prefix; grpc_headers adds it (HTTP ignores the twin).
        keyed = grpc_headers(served.admin_headers)
        raw.register_system_shared_memory(f"r-{protocol}", name, 64, headers=keyed)
        status = raw.get_system_shared_memory_status(headers=keyed)
        names = [r["name"] for r in status] if protocol == "http" else list(status.regions)
        assert f"r-{protocol}" in names
        raw.unregister_system_shared_memory(f"r-{protocol}", headers=keyed)
        assert raw.get_inference_statistics("add_one", headers=keyed) is not None
    finally:
        raw.close()
        shm.destroy_shared_memory_region(handle)


# --- 3. the admin key is not on the command line ps shows ------------------------------------
def test_admin_key_is_not_in_the_servers_command_line(served: EmbeddedServer) -> None:
    assert served.pid is not None
    cmdline = Path(f"/proc/{served.pid}/cmdline").read_bytes().decode()
    assert "--http-restricted-api=" in cmdline
    assert served.key_hidden
    assert served.admin_key not in cmdline
    # ...and Triton still holds the real key: the restricted index answers with it, not without.
    raw = httpclient.InferenceServerClient(served.http_url)
    try:
        assert raw.get_model_repository_index(headers=served.admin_headers)
        with pytest.raises(InferenceServerException, match="restricted"):
            raw.get_model_repository_index()
    finally:
        raw.close()


# --- 2. no orphans ------------------------------------------------------------------------------
def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow
def test_kill_9_of_the_wrapper_takes_the_server_down(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    port = free_port()
    wrapper = serve_cli(tmp_path, "--http-port", str(port), stderr=subprocess.DEVNULL)
    try:
        assert wrapper.stdout is not None
        assert wrapper.stdout.readline().startswith("tritonkit serve: ready")
        (triton,) = children(wrapper.pid)
        stubs = stubs_of(triton, EmbeddedServer(tmp_path)._stub_path())
        assert len(stubs) == 1
        wrapper.kill()
        wrapper.wait()
        assert wait_until(lambda: not alive(triton), 10), "tritonserver outlived its wrapper"
        assert wait_until(lambda: _port_free(port), 5)
        # Triton stopped gracefully (SIGTERM, not a crash): it ended its stubs and removed their regions.
        assert wait_until(lambda: not any(alive(s.pid) for s in stubs), 10)
        assert not any(Path("/dev/shm", s.region).exists() for s in stubs)
    finally:
        stop(wrapper)


@pytest.mark.slow
def test_stubs_of_a_crashed_server_are_reaped_at_the_next_start(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    first = EmbeddedServer(tmp_path, ServerOptions(exit_timeout=1)).start()
    assert first.pid is not None
    stubs = stubs_of(first.pid, _stub_path(first))
    assert [s.model for s in stubs] == ["add_one"]
    regions = [Path("/dev/shm", s.region) for s in stubs]
    assert all(r.exists() for r in regions)
    crashed, first._process = first._process, None  # held, not reaped: as when its wrapper was killed
    assert crashed is not None
    os.kill(crashed.pid, signal.SIGKILL)
    assert wait_until(lambda: not alive(crashed.pid), 5)
    # While the dead server is not reaped, its stubs see it as alive and keep running with their regions.
    time.sleep(0.5)
    if not any(alive(s.pid) for s in stubs):
        # Seen on a GPU host (containerised, another init): the killed server was reaped at once, its
        # stubs saw their parent gone and exited; the next start then has nothing to reap.
        crashed.wait()
        pytest.skip("the killed server's stubs exited by themselves on this host: nothing left to reap")
    assert all(alive(s.pid) for s in stubs) and all(r.exists() for r in regions)
    with EmbeddedServer(tmp_path, ServerOptions(exit_timeout=1)) as second:
        assert not any(alive(s.pid) for s in stubs)
        assert not any(r.exists() for r in regions)
        assert second.pid is not None
        live = stubs_of(second.pid, _stub_path(second))
        second.reap()
        assert live and all(alive(s.pid) for s in live), "a running server's stubs are kept"
        assert_adds_one(second.http_url)
    crashed.wait()


def test_stop_after_a_crash_reaps_the_stubs(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    server = EmbeddedServer(tmp_path, ServerOptions(exit_timeout=1)).start()
    assert server.pid is not None
    stubs = stubs_of(server.pid, _stub_path(server))
    os.kill(server.pid, signal.SIGKILL)
    assert wait_until(lambda: not server.is_running(), 5)
    assert server.problems() == ["tritonserver exited with code -9"]
    server.stop()
    assert stubs and not any(alive(s.pid) for s in stubs)
    assert not any(Path("/dev/shm", s.region).exists() for s in stubs)


# --- 5. a dead stub is noticed --------------------------------------------------------------
def test_dead_stub_is_reported_while_triton_still_says_ready(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    with EmbeddedServer(tmp_path, ServerOptions(exit_timeout=1)) as server:
        assert server.problems() == []
        assert server.pid is not None
        (stub,) = stubs_of(server.pid, _stub_path(server))
        os.kill(stub.pid, signal.SIGKILL)
        assert wait_until(lambda: server.problems() != [], 5)
        assert server.problems() == [
            f"the python stub of model `add_one` (instance add_one_0_0, pid {stub.pid}) died"
        ]
        raw = httpclient.InferenceServerClient(server.http_url)
        try:
            assert raw.is_server_ready() and raw.is_model_ready("add_one")  # Triton's own answer
        finally:
            raw.close()


@pytest.mark.slow
def test_cli_serve_restarts_after_a_dead_stub(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    port = free_port()
    process = serve_cli(tmp_path, "--http-port", str(port), "--max-restarts", "1", "--exit-timeout", "1")
    try:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith("tritonkit serve: ready")
        assert process.stdout.readline().startswith("tritonkit serve: restricted APIs need header")
        (triton,) = children(process.pid)
        (stub,) = children(triton)
        os.kill(stub, signal.SIGKILL)
        assert "restarting (1/1): the python stub of model `add_one`" in process.stderr.readline()
        assert process.stdout.readline().startswith("tritonkit serve: ready again")
        assert_adds_one(f"127.0.0.1:{port}")
        (triton,) = children(process.pid)
        (stub,) = children(triton)
        os.kill(stub, signal.SIGKILL)  # no restarts left: exit 1 with one line
        assert process.wait(timeout=60) == 1
        assert "error: the python stub of model `add_one`" in process.stderr.read()
    finally:
        stop(process)


# --- 6. usage errors and a model that cannot start -----------------------------------------------
@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--http-port", "99999", "http port must be 1-65535, given 99999"),
        ("--exit-timeout", "-3", "exit timeout must be 0 or more seconds, given -3"),
        ("--restricted-apis", "bogus", "unknown restricted API 'bogus'; expected some of health, metadata"),
        ("--max-restarts", "-1", "--max-restarts must be 0 or more, given -1"),
    ],
)
def test_cli_serve_bad_option_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    assert main(["serve", "--repo", str(tmp_path), flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tritonkit serve: error: {message}"), err


def test_empty_version_folder_fails_fast_naming_the_model(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    write_python_model(tmp_path, "hollow", ADD_ONE)
    (tmp_path / "hollow" / "1" / "model.py").unlink()
    started = time.monotonic()
    with pytest.raises(
        ModelLoadError, match=r"model `hollow` version 1 failed to load: Python model file not found"
    ):
        EmbeddedServer(tmp_path, ServerOptions(startup_timeout=60)).start()
    assert time.monotonic() - started < 15


# --- the log stays bounded -------------------------------------------------------------------------
def test_server_log_is_rotated_at_its_cap(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "add_one", ADD_ONE)
    log = tmp_path / "logs" / "triton.log"
    cap = 64 * 1024
    with EmbeddedServer(
        repo, ServerOptions(exit_timeout=1, log_verbose=1, log_file=log, log_max_bytes=cap)
    ) as server:
        raw = httpclient.InferenceServerClient(server.http_url)
        try:
            tensor = httpclient.InferInput("X", [1, 4], "FP32")
            tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
            deadline = time.monotonic() + 30
            while not log.with_name("triton.log.1").exists() and time.monotonic() < deadline:
                for _ in range(20):  # verbose logging writes several lines per request
                    raw.infer("add_one", [tensor])
        finally:
            raw.close()
        assert log.with_name("triton.log.1").exists()
        assert server.tail(1)  # the current file is the one read for errors
    for path in (log, log.with_name("triton.log.1")):
        assert path.stat().st_size <= 2 * cap, path  # one 64 KiB read may land after the cap


@pytest.mark.slow
def test_cli_serve_restarts_a_crashed_server(tmp_path: Path) -> None:
    write_python_model(tmp_path, "add_one", ADD_ONE)
    port = free_port()
    # --exit-timeout 10: a python model takes about a second to unload
    process = serve_cli(tmp_path, "--http-port", str(port), "--max-restarts", "1", "--exit-timeout", "10")
    try:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith("tritonkit serve: ready")
        assert process.stdout.readline().startswith("tritonkit serve: restricted APIs need header")
        (triton,) = children(process.pid)
        os.kill(triton, signal.SIGKILL)  # as a hostile body that crashes Triton's parser would
        assert (
            "restarting (1/1): tritonserver died of SIGKILL (signal 9, exit code -9)"
            in process.stderr.readline()
        )
        assert process.stdout.readline().startswith("tritonkit serve: ready again")
        assert_adds_one(f"127.0.0.1:{port}")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        stop(process)
