"""NVIDIA's stock tritonclient example programs, unmodified, against ``tritonkit serve``.

The programs in ``tests/serve/nvidia_examples`` are every Python program of triton-inference-server/client
``src/python/examples`` (BSD-3-Clause, license headers kept; the commit is named in that folder's
README). The models they call are python-backend stand-ins (``tests/serve/nvidia_models.py``). Against
a default server every program passes except those that need an API a default server restricts: the
shared-memory ones (and ``reuse_infer_objects_client``) and the model-control ones are refused; none of
them can send the admin key (they take no header option), so they pass once their API group is left
out of ``--restricted-apis`` (model control also needs ``--model-control-mode explicit``). The table of
outcomes is in README.md (Serving, NVIDIA's example programs).
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.serve.nvidia_models import write_all, write_core_models, write_repeat
from tests.support.processes import serve_cli, stop

from tritonkit.serve.embedded import free_port

EXAMPLES = Path(__file__).parent / "nvidia_examples"
#: Replaced by the path of a generated PNG image in a case's arguments.
IMAGE = "{image}"

#: (program, protocol, arguments after ``-u URL``): each passes against a default ``tritonkit serve``.
PASSING: list[tuple[str, str, tuple[str, ...]]] = [
    ("simple_http_infer_client", "http", ()),
    ("simple_grpc_infer_client", "grpc", ()),
    ("simple_http_async_infer_client", "http", ()),
    ("simple_grpc_async_infer_client", "grpc", ()),
    ("simple_http_aio_infer_client", "http", ()),
    ("simple_grpc_aio_infer_client", "grpc", ()),
    ("simple_http_infer_client", "http", ("--request-compression-algorithm", "gzip")),
    ("simple_http_infer_client", "http", ("--request-compression-algorithm", "deflate")),
    ("simple_http_string_infer_client", "http", ()),
    ("simple_grpc_string_infer_client", "grpc", ()),
    ("simple_http_health_metadata", "http", ()),
    ("simple_grpc_health_metadata", "grpc", ()),
    ("simple_grpc_custom_args_client", "grpc", ()),
    ("simple_grpc_keepalive_client", "grpc", ()),
    ("simple_grpc_custom_repeat", "grpc", ()),
    ("grpc_client", "grpc", ()),
    ("grpc_explicit_int_content_client", "grpc", ()),
    ("grpc_explicit_int8_content_client", "grpc", ()),
    ("grpc_explicit_byte_content_client", "grpc", ()),
    *(
        (program, protocol, flags)
        for program, protocol in (
            ("simple_http_sequence_sync_infer_client", "http"),
            ("simple_grpc_sequence_sync_infer_client", "grpc"),
            ("simple_grpc_sequence_stream_infer_client", "grpc"),
            ("simple_grpc_aio_sequence_stream_infer_client", "grpc"),
        )
        for flags in ((), ("-d",))
    ),
    ("image_client", "grpc", ("-i", "grpc", "-m", "densenet_onnx", "-c", "3", IMAGE)),
    ("image_client", "grpc", ("-i", "grpc", "-a", "-m", "densenet_onnx", IMAGE)),
    ("image_client", "grpc", ("-i", "grpc", "--streaming", "-m", "densenet_onnx", IMAGE)),
    ("grpc_image_client", "grpc", ("-m", "densenet_onnx", "-c", "2", IMAGE)),
    ("ensemble_image_client", "http", ("-c", "2", IMAGE)),
    ("ensemble_image_client", "grpc", ("-i", "grpc", IMAGE)),
]
#: Programs that register system shared memory (refused by default).
SHARED_MEMORY: list[tuple[str, str, tuple[str, ...]]] = [
    ("simple_http_shm_client", "http", ()),
    ("simple_grpc_shm_client", "grpc", ()),
    ("simple_http_shm_string_client", "http", ()),
    ("simple_grpc_shm_string_client", "grpc", ()),
    ("reuse_infer_objects_client", "http", ()),
    ("reuse_infer_objects_client", "grpc", ("-i", "grpc")),
]
CUDA_SHARED_MEMORY = [("simple_http_cudashm_client", "http"), ("simple_grpc_cudashm_client", "grpc")]
MODEL_CONTROL = [("simple_http_model_control", "http"), ("simple_grpc_model_control", "grpc")]
OPEN_SHARED_MEMORY = ("--restricted-apis", "model-repository,trace,logging")
OPEN_MODEL_CONTROL = ("--restricted-apis", "shared-memory,trace,logging", "--model-control-mode", "explicit")


def _case_id(case: tuple[str, str, tuple[str, ...]]) -> str:
    program, _, args = case
    return " ".join([program, *(a for a in args if a != IMAGE)])


def _serve(repo: Path, *extra: str, http: int = 0, grpc: int = 0) -> Iterator[tuple[str, str]]:
    http, grpc = http or free_port(), grpc or free_port()
    process = serve_cli(repo, "--http-port", str(http), "--grpc-port", str(grpc), *extra)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("tritonkit serve: ready"), line
        yield f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"
    finally:
        stop(process)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nvidia")
    write_all(root)
    return root


@pytest.fixture(scope="module")
def default_server(repo: Path) -> Iterator[tuple[str, str]]:
    yield from _serve(repo)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pillow = pytest.importorskip("PIL.Image", reason="the image examples import Pillow")
    pixels = np.zeros((48, 64, 3), np.uint8)
    pixels[..., 0] = np.arange(64, dtype=np.uint8) * 4
    pixels[..., 1] = 120
    path = tmp_path_factory.mktemp("image") / "gradient.png"
    pillow.fromarray(pixels).save(path)
    return path


def _run(program: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{program}.py"), "-u", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _passed(program: str, done: subprocess.CompletedProcess[str]) -> bool:
    """Exit 0, and the program's PASS line where it prints one (some exit 0 after a failed check)."""
    prints_pass = "PASS" in (EXAMPLES / f"{program}.py").read_text()
    return done.returncode == 0 and ("PASS" in done.stdout or not prints_pass)


def _url(protocol: str, urls: tuple[str, str]) -> str:
    return urls[0] if protocol == "http" else urls[1]


@pytest.mark.parametrize("case", PASSING, ids=[_case_id(c) for c in PASSING])
def test_example_passes_against_a_default_server(
    default_server: tuple[str, str], request: pytest.FixtureRequest, case: tuple[str, str, tuple[str, ...]]
) -> None:
    program, protocol, args = case
    if IMAGE in args:
        path = str(request.getfixturevalue("image"))
        args = tuple(path if a == IMAGE else a for a in args)
    done = _run(program, _url(protocol, default_server), *args)
    assert _passed(program, done), (done.stdout[-800:], done.stderr[-800:])


def test_http_image_client_passes_with_attrdict(default_server: tuple[str, str], image: Path) -> None:
    """image_client.py reads HTTP metadata through ``attrdict`` (unmaintained since 2019, not a
    dependency here): it passes wherever that package imports."""
    if importlib.util.find_spec("attrdict") is None:
        pytest.skip("image_client.py over HTTP imports `attrdict` (pip install attrdict), absent here")
    done = _run("image_client", default_server[0], "-m", "densenet_onnx", "-c", "2", str(image))
    assert _passed("image_client", done), (done.stdout[-800:], done.stderr[-800:])


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow
def test_memory_growth_example_passes_on_the_default_ports(repo: Path) -> None:
    """memory_growth_test.py has no URL option: it calls localhost:8000 (HTTP) and :8001 (gRPC)."""
    if not (_port_free(8000) and _port_free(8001)):
        pytest.skip("memory_growth_test.py needs ports 8000 and 8001, which are in use here")
    for _ in _serve(repo, http=8000, grpc=8001):
        for protocol in ("HTTP", "gRPC"):
            done = subprocess.run(
                [sys.executable, str(EXAMPLES / "memory_growth_test.py"), "-i", protocol, "-r", "20"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, (protocol, done.stdout[-800:], done.stderr[-800:])


@pytest.mark.parametrize("case", SHARED_MEMORY, ids=[_case_id(c) for c in SHARED_MEMORY])
def test_shared_memory_examples_are_refused_by_default(
    default_server: tuple[str, str], case: tuple[str, str, tuple[str, ...]]
) -> None:
    program, protocol, args = case
    done = _run(program, _url(protocol, default_server), *args)
    assert done.returncode != 0
    assert "restricted" in (done.stdout + done.stderr)


@pytest.mark.parametrize(("program", "protocol"), MODEL_CONTROL)
def test_model_control_examples_are_refused_by_default(
    default_server: tuple[str, str], program: str, protocol: str
) -> None:
    done = _run(program, _url(protocol, default_server))
    assert done.returncode != 0
    assert "restricted" in (done.stdout + done.stderr)


@pytest.mark.slow
def test_shared_memory_examples_pass_with_shared_memory_open(repo: Path) -> None:
    for urls in _serve(repo, *OPEN_SHARED_MEMORY):
        for program, protocol, args in SHARED_MEMORY:
            done = _run(program, _url(protocol, urls), *args)
            assert _passed(program, done), (program, args, done.stdout[-800:], done.stderr[-800:])


@pytest.mark.gpu
@pytest.mark.parametrize(("program", "protocol"), CUDA_SHARED_MEMORY)
def test_cuda_shared_memory_examples_pass_with_shared_memory_open(
    repo: Path, program: str, protocol: str
) -> None:
    for urls in _serve(repo, *OPEN_SHARED_MEMORY):
        done = _run(program, _url(protocol, urls))
        assert _passed(program, done), (done.stdout[-800:], done.stderr[-800:])


def test_http_model_control_example_passes_with_the_repository_api_open(tmp_path: Path) -> None:
    """Its repository must hold seven models (it counts them); it loads and reloads ``simple``."""
    write_core_models(tmp_path)
    for urls in _serve(tmp_path, *OPEN_MODEL_CONTROL):
        done = _run("simple_http_model_control", urls[0])
        assert _passed("simple_http_model_control", done), (done.stdout[-800:], done.stderr[-800:])


def test_grpc_model_control_example_ends_triton_251_at_its_name_max_probe(tmp_path: Path) -> None:
    """With eight models (it counts them) every step passes up to its last probe (client#887, 2026): a
    model-load file name over NAME_MAX, which Triton 2.51 does not catch: it aborts (SIGABRT), and
    ``tritonkit serve`` exits with the signal on its error line. Only an admin-key holder reaches this
    API on a default server."""
    write_core_models(tmp_path)
    write_repeat(tmp_path)
    grpc = free_port()
    process = serve_cli(
        tmp_path, "--http-port", str(free_port()), "--grpc-port", str(grpc), *OPEN_MODEL_CONTROL
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("tritonkit serve: ready")
        done = _run("simple_grpc_model_control", f"127.0.0.1:{grpc}")
        assert done.returncode == 1
        assert "oversized file parameter, got status='StatusCode.UNAVAILABLE'" in done.stdout, done.stdout
        process.wait(timeout=30)
        error = process.stderr.read() if process.stderr is not None else ""
        assert process.returncode == 1
        assert "SIGABRT" in error and "File name too long" in error, error[-400:]
    finally:
        stop(process)
