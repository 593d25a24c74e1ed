"""The native runner on the CPU: a torch version built with ``serving: {runner: native}`` is served by
tritonkit's C++ backend (compiled here for this torch) inside the real tritonserver, answers as the
module does over HTTP and gRPC, batches concurrent requests, refuses a bad request alone, and a config
naming a bucket its program lacks fails to load with one line. The GPU half (CUDA graphs) runs in
``tests/backends/test_gpu_runner.py`` and ``scripts/gpu/native_ab.sh``."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tritonkit.backends.native import cache_key
from tritonkit.config import load, save
from tritonkit.convert.spec.execution import ServingSpec, plan_execution
from tritonkit.convert.targets.torch_program import write_torch_version
from tritonkit.errors import ServerError, SpecError
from tritonkit.repository.check import check_repository, executions
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the native backend needs g++ to compile")


def _module() -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Two(torch.nn.Module):
        """Two inputs, two outputs, a reshape by the batch and a tensor made on the input's device."""

        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(8, 6)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            b = x.shape[0]
            pos = torch.arange(x.shape[1], device=x.device).to(x.dtype)
            y = self.proj(x + pos).view(b, 3, 2).transpose(1, 2).reshape(b, 6)
            return y, mask.sum(dim=1, keepdim=True).to(torch.int32)

    torch.manual_seed(0)
    return Two().eval()


def _expected(x: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    import torch  # noqa: PLC0415

    with torch.no_grad():
        y, s = _module()(torch.from_numpy(x), torch.from_numpy(mask))
    return y.numpy(), s.numpy()


LONG_DELAY_US = 1_500_000


@pytest.fixture(scope="module")
def native_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch  # noqa: PLC0415

    repo = tmp_path_factory.mktemp("native") / "repo"
    plan = plan_execution(ServingSpec(engine="torch", runner="native"), max_batch_size=8, gpus=[])
    examples = {"X": torch.randn(2, 8), "MASK": torch.ones(2, 5, dtype=torch.int64)}
    write_torch_version(repo, "two", _module(), examples, ["Y", "S"], plan, max_batch_size=8)
    write_torch_version(  # the same with a long batching delay
        repo,
        "patient",
        _module(),
        examples,
        ["Y", "S"],
        plan,
        max_batch_size=8,
        max_queue_delay_us=LONG_DELAY_US,
    )
    shutil.copytree(repo / "two", repo / "split")  # the same, every batch's input copy split over threads
    config = load(repo / "split" / "config.pbtxt")
    config.name = "split"
    # jit_optimize is read and, on a CPU instance, leaves the plain plan: this version answers as "two"
    config.parameters.update({"copy_split_bytes": "1", "copy_threads": "3", "jit_optimize": "true"})
    save(config, repo / "split" / "config.pbtxt")
    shutil.copytree(
        repo / "two", repo / "answering"
    )  # the same, its answers written on a thread of their own
    config = load(repo / "answering" / "config.pbtxt")
    config.name = "answering"
    config.parameters["answer_thread"] = "true"
    save(config, repo / "answering" / "config.pbtxt")
    return repo


@pytest.fixture(scope="module")
def server(native_repo: Path) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(native_repo, ServerOptions(exit_timeout=1)) as running:
        yield running


def _feeds(rows: int, seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, 8)).astype(np.float32), rng.integers(0, 2, (rows, 5)).astype(np.int64)


@pytest.mark.slow
def test_build_writes_a_native_version_that_checks_clean(native_repo: Path) -> None:
    config = load(native_repo / "two" / "config.pbtxt")
    assert config.backend == "tritonkit_torch"
    assert (native_repo / "two" / "1" / "model.ts").is_file()
    assert not (native_repo / "two" / "1" / "model.py").exists()
    execution = json.loads((native_repo / "two" / "1" / "build.json").read_text())["extra"]["execution"]
    assert execution["runner"] == "native"
    assert check_repository(native_repo, "embedded", gpus=[]) == []
    line = next(e for e in executions(native_repo) if e.startswith("two "))
    assert line.startswith("two version 1 executes on cpu: engine torch (native runner), fp32")
    assert any(
        "NVIDIA's Triton image does not have" in p for p in check_repository(native_repo, "triton-image")
    )


@pytest.mark.slow
def test_native_answers_equal_the_module_over_http_and_grpc(server: EmbeddedServer) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    http = httpclient.InferenceServerClient(server.http_url)
    for rows, seed in ((1, 1), (3, 2), (8, 3)):
        x, mask = _feeds(rows, seed)
        want_y, want_s = _expected(x, mask)
        for module, client in ((grpcclient, grpc), (httpclient, http)):
            inputs = [
                module.InferInput("X", list(x.shape), "FP32"),
                module.InferInput("MASK", list(mask.shape), "INT64"),
            ]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(mask)
            result = client.infer("two", inputs)
            np.testing.assert_allclose(result.as_numpy("Y"), want_y, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(result.as_numpy("S"), want_s)
            assert result.as_numpy("S").dtype == np.int32


@pytest.mark.slow
@pytest.mark.parametrize("model", ["two", "split", "answering"])
def test_concurrent_requests_are_batched_and_each_gets_its_rows(server: EmbeddedServer, model: str) -> None:
    """``split`` copies every batch's inputs over three threads (from one byte on), ``answering`` writes
    its answers on a second thread while the next batch runs: rows land where their request's answer
    reads them either way."""
    feeds = [_feeds(1 + seed % 2, seed) for seed in range(200)]
    expected = [_expected(x, mask)[0] for x, mask in feeds]  # built here: torch's seed is process-wide

    def one(index: int) -> bool:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        x, mask = feeds[index]
        inputs = [
            grpcclient.InferInput("X", list(x.shape), "FP32"),
            grpcclient.InferInput("MASK", list(mask.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(mask)
        got = client.infer(model, inputs).as_numpy("Y")
        return bool(np.allclose(got, expected[index], rtol=1e-5, atol=1e-5))

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(one, range(len(feeds))))
    stats = grpcclient.InferenceServerClient(server.grpc_url).get_inference_statistics(model).model_stats[0]
    assert stats.execution_count < stats.inference_count  # some executions held several requests
    assert stats.inference_stats.compute_infer.count > 0


@pytest.mark.slow
def test_a_lone_request_leaves_at_once_and_rows_off_the_buckets_wait_the_delay(
    server: EmbeddedServer,
) -> None:
    """Every bucket, one included, is a preferred batch size: Triton sends a lone request of one row at
    once instead of holding it for the delay; a request of 3 rows (no bucket of 8's ladder) waits."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    config = load(server.repo / "patient" / "config.pbtxt")
    assert config.dynamic_batching is not None and config.dynamic_batching.preferred_batch_size == [
        1,
        2,
        4,
        8,
    ]

    def seconds(rows: int) -> float:
        x, mask = _feeds(rows, rows)
        inputs = [
            grpcclient.InferInput("X", [rows, 8], "FP32"),
            grpcclient.InferInput("MASK", [rows, 5], "INT64"),
        ]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(mask)
        started = time.perf_counter()
        np.testing.assert_allclose(
            client.infer("patient", inputs).as_numpy("Y"), _expected(x, mask)[0], rtol=1e-5, atol=1e-5
        )
        return time.perf_counter() - started

    assert seconds(1) < LONG_DELAY_US / 1e6 / 3
    assert seconds(3) >= LONG_DELAY_US / 1e6 * 0.9


@pytest.mark.slow
@pytest.mark.parametrize("model", ["two", "answering"])
def test_a_bad_request_fails_alone_and_the_server_keeps_serving(server: EmbeddedServer, model: str) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x, mask = _feeds(2, 9)
    bad = [grpcclient.InferInput("X", [2, 8], "FP32"), grpcclient.InferInput("MASK", [2, 5], "INT32")]
    bad[0].set_data_from_numpy(x)
    bad[1].set_data_from_numpy(mask.astype(np.int32))
    with pytest.raises(Exception, match="MASK"):
        client.infer(model, bad)
    good = [grpcclient.InferInput("X", [2, 8], "FP32"), grpcclient.InferInput("MASK", [2, 5], "INT64")]
    good[0].set_data_from_numpy(x)
    good[1].set_data_from_numpy(mask)
    np.testing.assert_allclose(
        client.infer(model, good).as_numpy("Y"), _expected(x, mask)[0], rtol=1e-5, atol=1e-5
    )


@pytest.mark.slow
def test_a_bucket_without_a_method_fails_to_load_with_one_line(native_repo: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(native_repo, repo)
    path = repo / "two" / "config.pbtxt"
    config = load(path)
    config.parameters["batch_buckets"] = "1,3,8"  # the program was traced for the fine and pow2 ladders
    save(config, path)
    with (
        pytest.raises(ServerError, match="no method b3"),
        EmbeddedServer(repo, ServerOptions(exit_timeout=1)),
    ):
        pass


@pytest.mark.slow
def test_a_server_stopped_under_load_with_an_answer_thread_exits_cleanly(
    native_repo: Path, tmp_path: Path
) -> None:
    """Stopped while requests are in flight on a model with an answer thread: every request gets its
    right answer or a clean refusal, and tritonserver exits 0 (a thread left running at unload would
    crash it)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(native_repo / "answering", repo / "answering")
    server = EmbeddedServer(repo, ServerOptions(exit_timeout=5)).start()
    x, mask = _feeds(1, 4)
    want = _expected(x, mask)[0]

    def one(_: int) -> str:
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = [httpclient.InferInput("X", [1, 8], "FP32"), httpclient.InferInput("MASK", [1, 5], "INT64")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(mask)
        try:
            got = client.infer("answering", inputs).as_numpy("Y")
        except Exception:  # refused once the server drains: the connection goes or a 503
            return "refused"
        return "answered" if np.allclose(got, want, rtol=1e-5, atol=1e-5) else "wrong"

    with ThreadPoolExecutor(16) as pool:
        results = pool.map(one, range(400))
        time.sleep(0.2)
        code = server.stop()
        outcomes = list(results)
    assert code == 0
    assert "wrong" not in outcomes and "answered" in outcomes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "key", "value", "message"),
    [
        ("split", "copy_threads", "4x", "parameter `copy_threads` must be a positive integer; got `4x`"),
        ("answering", "answer_thread", "yes", "parameter `answer_thread` must be true or false; got `yes`"),
        ("split", "jit_optimize", "on", "parameter `jit_optimize` must be true or false; got `on`"),
    ],
)
def test_a_bad_backend_parameter_fails_to_load_with_one_line(
    native_repo: Path, tmp_path: Path, name: str, key: str, value: str, message: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(native_repo / name, repo / name)
    path = repo / name / "config.pbtxt"
    config = load(path)
    config.parameters[key] = value
    save(config, path)
    with pytest.raises(ServerError, match=message), EmbeddedServer(repo, ServerOptions(exit_timeout=1)):
        pass


@pytest.mark.slow
def test_a_half_io_version_takes_and_answers_fp16_through_the_native_backend(tmp_path: Path) -> None:
    """An FP16 program whose float input and output travel as FP16 (``half_io``): the backend stages
    and answers FP16 rows, the FP16 program's answer; an FP32 request is refused alone."""
    import torch  # noqa: PLC0415

    plan = dataclasses.replace(
        plan_execution(ServingSpec(engine="torch", runner="native"), max_batch_size=8, gpus=[]),
        precision="fp16",
    )
    examples = {"X": torch.randn(2, 8), "MASK": torch.ones(2, 5, dtype=torch.int64)}
    repo = tmp_path / "repo"
    write_torch_version(repo, "half", _module(), examples, ["Y", "S"], plan, max_batch_size=8, half_io=True)
    config = load(repo / "half" / "config.pbtxt")
    assert config.backend == "tritonkit_torch"
    assert [t.data_type for t in [*config.inputs, *config.outputs]] == ["FP16", "INT64", "FP16", "INT32"]
    x, mask = _feeds(3, 4)
    half = x.astype(np.float16)
    with torch.no_grad():
        y, s = _module().half()(torch.from_numpy(half), torch.from_numpy(mask))
    with (
        EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as running,
        httpclient.InferenceServerClient(running.http_url) as client,
    ):

        def call(data: np.ndarray[Any, Any], datatype: str) -> Any:
            inputs = [
                httpclient.InferInput("X", [3, 8], datatype),
                httpclient.InferInput("MASK", [3, 5], "INT64"),
            ]
            inputs[0].set_data_from_numpy(data)
            inputs[1].set_data_from_numpy(mask)
            return client.infer("half", inputs)

        answer = call(half, "FP16")
        assert answer.as_numpy("Y").dtype == np.float16
        np.testing.assert_allclose(answer.as_numpy("Y"), y.numpy(), rtol=1e-3, atol=1e-3)
        np.testing.assert_array_equal(answer.as_numpy("S"), s.numpy())
        with pytest.raises(Exception, match="FP16"):
            call(x, "FP32")
        assert call(half, "FP16").as_numpy("Y").shape == (3, 6)


def test_spec_refuses_native_where_it_cannot_serve() -> None:
    with pytest.raises(SpecError, match="torch engine"):
        ServingSpec.from_mapping({"runner": "native", "engine": "onnxruntime"})
    with pytest.raises(SpecError, match="pipeline was removed"):
        ServingSpec.from_mapping({"runner": "native", "pipeline": True})
    with pytest.raises(SpecError, match="runner must be one of"):
        ServingSpec.from_mapping({"runner": "cpp"})
    assert ServingSpec.from_mapping({"runner": "native"}).to_mapping()["runner"] == "native"


def test_jit_optimize_is_the_native_gpu_runners_and_opt_in() -> None:
    """``serving.jit_optimize``: a bool, only with the native runner, written as the backend's config
    parameter for its GPU versions (a CPU instance runs the plain plan, so nothing is written)."""
    with pytest.raises(SpecError, match=re.escape("serving.jit_optimize must be true or false; got 'yes'")):
        ServingSpec.from_mapping({"runner": "native", "jit_optimize": "yes"})
    with pytest.raises(SpecError, match=re.escape("set serving.runner: native")):
        ServingSpec.from_mapping({"jit_optimize": True})
    spec = ServingSpec.from_mapping({"runner": "native", "jit_optimize": True})
    assert spec.jit_optimize and ServingSpec.from_mapping(spec.to_mapping()) == spec
    on_gpu = plan_execution(spec, max_batch_size=8, gpus=[0])
    assert on_gpu.runner_parameters()["jit_optimize"] == "true"
    assert on_gpu.manifest_extra()["execution"]["jit_optimize"] is True
    default = plan_execution(ServingSpec(runner="native"), max_batch_size=8, gpus=[0])
    assert "jit_optimize" not in default.runner_parameters()
    assert "jit_optimize" not in default.manifest_extra()["execution"]
    on_cpu = plan_execution(dataclasses.replace(spec, engine="torch"), max_batch_size=8, gpus=[])
    assert "jit_optimize" not in on_cpu.runner_parameters()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "swin", "lstm"])
def test_held_out_families_trace_per_bucket_as_the_module_answers(tmp_path: Path, family: str) -> None:
    """Families the project did not write (keyword-bound inputs, shifted windows, a recurrent layer):
    each bucket's traced method, fed a padded batch, answers the real rows as the module does."""
    import torch  # noqa: PLC0415
    from tests.support.torch_zoo_more import arrays, source  # noqa: PLC0415 (transformers is heavy)

    built = source(family)
    plan = plan_execution(
        ServingSpec(engine="torch", runner="native", precision="fp32"), max_batch_size=4, gpus=[]
    )
    examples = dict(zip(built.input_names, built.example_inputs, strict=True))
    version = write_torch_version(
        tmp_path, "m", built.module, examples, list(built.output_names), plan, max_batch_size=4
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load: what the C++ backend reads
        traced = torch.jit.load(str(version / "model.ts"), map_location="cpu")  # traced on a GPU where one is
    feeds = [torch.from_numpy(a) for a in arrays(built, 3, 1).values()]
    got = traced.b4(*[torch.cat([x, x[:1]]) for x in feeds])[0][:3]
    with torch.no_grad():
        want = built.module(**dict(zip(built.input_names, feeds, strict=True)))
    want = want[0] if isinstance(want, (tuple, list)) else getattr(want, built.output_names[0], want)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_native_plans_two_pipelined_instances_per_gpu_unless_counted() -> None:
    native = plan_execution(ServingSpec(runner="native"), max_batch_size=8, gpus=[0])
    assert native.instance_groups[0].count == 2 and native.runner_parameters()["answer_thread"] == "true"
    python = plan_execution(ServingSpec(runner="python"), max_batch_size=8, gpus=[0])
    assert python.instance_groups[0].count == 2 and "answer_thread" not in python.runner_parameters()
    on_cpu = plan_execution(ServingSpec(engine="torch", runner="native"), max_batch_size=8, gpus=[])
    assert "answer_thread" not in on_cpu.runner_parameters()  # nothing to overlap without a GPU
    counted = ServingSpec.from_mapping({"runner": "native", "instances": {"count": 3}})
    assert plan_execution(counted, max_batch_size=8, gpus=[0]).instance_groups[0].count == 3


def test_runner_auto_is_native_on_a_gpu_where_the_backend_compiles() -> None:
    auto = ServingSpec.from_mapping({"engine": "torch"})
    assert auto.runner == "auto" and ServingSpec.from_mapping(auto.to_mapping()) == auto
    native = plan_execution(auto, max_batch_size=8, gpus=[0], native_problem=None)
    assert (native.runner, native.runner_reason, native.instance_groups[0].count) == ("native", "", 2)
    headers = "no CUDA headers (CUDA_HOME unset and nvcc not on PATH)"
    python = plan_execution(auto, max_batch_size=8, gpus=[0], native_problem=headers)
    assert (python.runner, python.instance_groups[0].count) == ("python", 2)
    assert python.runner_reason == f"the native backend: {headers}"
    assert python.manifest_extra()["execution"]["runner_reason"] == python.runner_reason
    on_cpu = plan_execution(auto, max_batch_size=8, gpus=[], native_problem=None)
    assert (on_cpu.device, on_cpu.runner, on_cpu.runner_reason) == ("cpu", "python", "")
    asked = ServingSpec(engine="torch", runner="python")
    assert plan_execution(asked, max_batch_size=8, gpus=[0], native_problem=None).runner == "python"
    # a caller that did not look for the toolchain gets the python runner and is told so
    unchecked = plan_execution(auto, max_batch_size=8, gpus=[0])
    assert unchecked.runner == "python" and unchecked.runner_reason.endswith("was not looked for")


def test_the_toolchain_check_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils import cpp_extension  # noqa: PLC0415

    from tritonkit.backends import native  # noqa: PLC0415

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler on it
    assert native.unavailable(cuda=False) == "no C++ compiler (g++ or $CXX) on PATH"
    compiler = tmp_path / "g++"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    assert native.unavailable(cuda=False) is None
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    assert native.unavailable(cuda=True) == "no CUDA headers (CUDA_HOME unset and nvcc not on PATH)"
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(home))
    assert native.unavailable(cuda=True) == f"no CUDA headers ({home}/include/cuda_runtime_api.h is missing)"
    (home / "include" / "cuda_runtime_api.h").write_text("")
    assert (
        native.unavailable(cuda=True)
        == f"no CUDA runtime to link against ({home}/lib64/libcudart.so is missing)"
    )
    (home / "lib64").mkdir()
    (home / "lib64" / "libcudart.so").write_text("")
    assert native.unavailable(cuda=True) is None


def test_the_compiled_backend_is_cached_per_place_of_the_torch_it_links(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A torch installed elsewhere (a new virtual environment, the old one deleted) gets its own build:
    the cache key follows where the linked libraries are, so no cached library's run path names a
    folder that is gone (that failed every native load with "libtorch.so: cannot open shared object")."""
    from torch.utils import cpp_extension  # noqa: PLC0415 (torch is optional)

    here = cache_key(False)
    assert cache_key(False) == here  # stable for one environment
    elsewhere = tmp_path / "venv2" / "lib" / "torch" / "lib"
    elsewhere.mkdir(parents=True)
    monkeypatch.setattr(cpp_extension, "library_paths", lambda *args, **kwargs: [str(elsewhere)])
    assert cache_key(False) != here
