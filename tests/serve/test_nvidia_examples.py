"""NVIDIA's stock tritonclient example programs, unmodified, against a default ``tritonkit serve``.

The programs in ``tests/serve/nvidia_examples`` are copied whole from triton-inference-server/client
(``src/python/examples``, BSD-3-Clause, their license header kept). They expect the models of NVIDIA's
QA repository: ``simple`` (INT32 sum and difference), ``simple_string`` (the same on numbers written as
strings) and ``simple_identity`` (BYTES echoed); python-backend equivalents are written here. The infer
examples read the statistics API, which a default server leaves open (the same counts ``/metrics``
publishes); the shared-memory ones register regions, refused without the admin key, and pass when
``shared-memory`` is left out of ``--restricted-apis`` (they send no headers: README, Serving).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.processes import serve_cli, stop
from tests.support.python_models import model_source

from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig, save
from tritonkit.serve.embedded import free_port

EXAMPLES = Path(__file__).parent / "nvidia_examples"

SIMPLE = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                a, b = _numpy_in(request, "INPUT0"), _numpy_in(request, "INPUT1")
                sums, diffs = (a + b).astype(np.int32), (a - b).astype(np.int32)
                out.append(pb_utils.InferenceResponse([_tensor_out("OUTPUT0", sums), _tensor_out("OUTPUT1", diffs)]))
            return out
    """
)
SIMPLE_STRING = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        number = np.vectorize(lambda v: int(v))
        text = np.vectorize(lambda v: str(v).encode(), otypes=[object])
        out = []
        for request in requests:
            a = number(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            b = number(pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy())
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", text(a + b)), pb_utils.Tensor("OUTPUT1", text(a - b))]
            ))
        return out
"""
IDENTITY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


def _model(repo: Path, name: str, datatype: str, dims: list[int], count: int, source: str) -> None:
    config = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig(f"INPUT{i}", datatype, dims) for i in range(count)],
        outputs=[TensorConfig(f"OUTPUT{i}", datatype, dims) for i in range(count)],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(source)
    save(config, repo / name / "config.pbtxt")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nvidia")
    _model(root, "simple", "INT32", [16], 2, SIMPLE)
    _model(root, "simple_string", "BYTES", [16], 2, SIMPLE_STRING)
    _model(root, "simple_identity", "BYTES", [-1], 1, IDENTITY)
    return root


def _serve(repo: Path, *extra: str) -> Iterator[tuple[str, str]]:
    http, grpc = free_port(), free_port()
    process = serve_cli(repo, "--http-port", str(http), "--grpc-port", str(grpc), *extra)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("tritonkit serve: ready"), line
        yield f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"
    finally:
        stop(process)


@pytest.fixture(scope="module")
def default_server(repo: Path) -> Iterator[tuple[str, str]]:
    yield from _serve(repo)


def _run(program: str, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{program}.py"), "-u", url, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


PROGRAMS = [
    "simple_http_infer_client",
    "simple_grpc_infer_client",
    "simple_http_async_infer_client",
    "simple_grpc_async_infer_client",
    "simple_http_aio_infer_client",
    "simple_grpc_aio_infer_client",
    "simple_http_string_infer_client",
    "simple_grpc_string_infer_client",
    "simple_http_health_metadata",
    "simple_grpc_health_metadata",
]
SHARED_MEMORY = ["simple_http_shm_client", "simple_grpc_shm_client"]


def _url(program: str, urls: tuple[str, str]) -> str:
    return urls[0] if "_http_" in program else urls[1]


@pytest.mark.parametrize("program", PROGRAMS)
def test_example_passes_against_a_default_server(default_server: tuple[str, str], program: str) -> None:
    done = _run(program, _url(program, default_server))
    assert done.returncode == 0, (done.stdout[-800:], done.stderr[-800:])


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_pass_the_guard(default_server: tuple[str, str], algorithm: str) -> None:
    done = _run("simple_http_infer_client", default_server[0], "--request-compression-algorithm", algorithm)
    assert done.returncode == 0, (done.stdout[-800:], done.stderr[-800:])


@pytest.mark.parametrize("program", SHARED_MEMORY)
def test_shared_memory_examples_are_refused_by_default(default_server: tuple[str, str], program: str) -> None:
    done = _run(program, _url(program, default_server))
    assert done.returncode != 0
    assert "restricted" in (done.stdout + done.stderr)


def test_shared_memory_examples_pass_with_shared_memory_open(repo: Path) -> None:
    for urls in _serve(repo, "--restricted-apis", "model-repository,trace,logging"):
        for program in SHARED_MEMORY:
            done = _run(program, _url(program, urls))
            assert done.returncode == 0, (program, done.stdout[-800:], done.stderr[-800:])
