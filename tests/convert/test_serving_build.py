"""The spec's ``serving`` section chooses where each portable version executes: today's CPU version
(and its plan in build.json) where no GPU is visible, the torch-runner GPU version (exported
program, KIND_GPU placement, FP16 gated) where one is, one-line refusals of what cannot be had,
and ``tritonkit check`` showing the execution and refusing KIND_GPU where no GPU is visible.

GPU visibility is injected (``build_from_spec(..., gpus=[0])``): torch.export and the FP16 gate run
on the CPU here, and only the files are inspected; tests/convert/test_serving_gpu.py serves them on a GPU.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonkit.backends import native
from tritonkit.backends.runners import runner_path
from tritonkit.cli import main
from tritonkit.convert.graph.export import TorchSource
from tritonkit.convert.graph.source import Source
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.spec.buildspec import apply_overrides, parse_spec
from tritonkit.convert.spec.execution import ServingSpec, visible_gpus
from tritonkit.convert.targets import torch_program
from tritonkit.convert.targets.gpu_target import plan_version
from tritonkit.errors import BuildError, SpecError
from tritonkit.repository.check import check_repository, executions
from tritonkit.repository.onnx_io import read_io
from tritonkit.repository.store import ModelRepository

SpecDict = Callable[..., dict[str, Any]]


NO_HEADERS = "no CUDA headers (CUDA_HOME unset and nvcc not on PATH)"


def tiny_torch() -> TorchSource:
    """A `source.torch` entry point: a small MLP, example batch 1 (the build widens it to 2)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    return TorchSource(model, (torch.zeros(1, 16),), ["x"], ["y"])


@pytest.fixture(autouse=True)
def no_cuda_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """These builds happen on a host like CI's: a C++ compiler but no CUDA headers, so ``runner: auto``
    chooses the python runner whatever this machine has (the native choice: the tests that set it back
    here, and tests/backends/test_native.py)."""
    monkeypatch.setattr(native, "unavailable", lambda cuda=True: NO_HEADERS)


@pytest.fixture
def torch_spec(
    tmp_path: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., dict[str, Any]]]:
    """``torch_spec(**overrides)``: the tiny spec with ``source.torch`` pointing at :func:`tiny_torch`."""
    module = types.ModuleType("tritonkit_test_serving_torch")
    module.tiny_torch = tiny_torch  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def make(**overrides: Any) -> dict[str, Any]:
        data = tiny_spec(tmp_path / "unused.onnx", *tiny_data, **overrides)
        data["source"] = {"torch": f"{module.__name__}:tiny_torch"}
        return data

    yield make


def _execution(repo: Path, name: str) -> dict[str, Any]:
    record = json.loads((repo / name / "1" / "build.json").read_text(encoding="utf-8"))
    execution: dict[str, Any] = record["extra"]["execution"]
    return execution


def test_default_spec_without_a_gpu_is_todays_cpu_version_and_records_it(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict
) -> None:
    repo = tmp_path / "repo"
    spec = parse_spec(tiny_spec(tiny_onnx, *tiny_data, precisions=["fp32", "int8"]))
    assert spec.serving == ServingSpec()
    build_from_spec(spec, repo, gpus=[])
    for name, precision in (("tiny_fp32", "fp32"), ("tiny_int8", "int8")):
        assert sorted(p.name for p in (repo / name / "1").iterdir()) == [
            "build.json",
            "model.onnx",
            "model.py",
        ]
        config = ModelRepository(repo).read_config(name)
        assert config.parameters["runner"] == "onnx_runner"
        assert [(g.kind, g.count) for g in config.instance_groups] == [("KIND_CPU", 1)]
        assert _execution(repo, name) == {
            "device": "cpu",
            "engine": "onnxruntime",
            "precision": precision,
            "batch_buckets": [],
            "cuda_graphs": False,
            "instances": [{"kind": "KIND_CPU", "count": 1, "gpus": []}],
            "reason": "no GPU visible here",
        }
    assert executions(repo) == [
        "tiny_fp32 version 1 executes on cpu: engine onnxruntime, fp32, buckets none, instances 1 x KIND_CPU "
        "(no GPU visible here)",
        "tiny_int8 version 1 executes on cpu: engine onnxruntime, int8, buckets none, instances 1 x KIND_CPU "
        "(no GPU visible here)",
    ]


def test_device_gpu_without_a_gpu_is_one_line_and_writes_nothing(
    tmp_path: Path,
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: SpecDict,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tiny_spec(tiny_onnx, *tiny_data, precisions=["fp32"], serving={"device": "gpu"})
    repo = tmp_path / "repo"
    with pytest.raises(SpecError) as info:
        build_from_spec(parse_spec(data), repo, gpus=[])
    assert str(info.value) == "serving.device is gpu but no GPU is visible here (nvidia-smi -L found none)"
    assert not repo.exists()
    if visible_gpus():
        return  # the command line asks nvidia-smi: on a GPU host it builds instead
    spec_file = tmp_path / "tiny.yaml"
    spec_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["build", str(spec_file), "--repo", str(repo)]) == 1  # every SpecError exits 1
    err = capsys.readouterr().err
    assert err == (
        "tritonkit build: error: serving.device is gpu but no GPU is visible here (nvidia-smi -L found none)\n"
    )
    assert not repo.exists()


@pytest.mark.parametrize(
    ("serving", "message"),
    [
        ({"device": "tpu"}, "serving.device must be one of auto, gpu, cpu; got 'tpu'"),
        ({"engine": "tensorrt"}, "serving.engine must be one of auto, torch, onnxruntime; got 'tensorrt'"),
        ({"batch_buckets": [0]}, "serving.batch_buckets must be a list of integers >= 1; got [0]"),
        ({"gpu": 1}, "serving: unknown key(s) gpu; expected"),
        ("fast", "spec key `serving`: expected a mapping, got str 'fast'"),
    ],
)
def test_bad_serving_values_are_one_line(
    tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict, serving: object, message: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(tiny_spec(tiny_onnx, *tiny_data, serving=serving))
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_serving_survives_overrides(
    tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict
) -> None:
    serving = {"device": "cpu", "batch_buckets": [8, 2], "instances": {"count": 3, "gpus": [1]}}
    spec = parse_spec(tiny_spec(tiny_onnx, *tiny_data, serving=serving))
    again = apply_overrides(spec, {"max_batch_size": 16}, {})
    assert again.serving == spec.serving == ServingSpec.from_mapping(serving)
    assert again.serving.batch_buckets == (2, 8) and again.batching.max_batch_size == 16


@pytest.mark.slow
def test_where_the_native_backend_compiles_the_default_build_is_native(
    tmp_path: Path, torch_spec: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        native, "unavailable", lambda cuda=True: None
    )  # a GPU host with g++ and CUDA's headers
    repo = tmp_path / "repo"
    build_from_spec(parse_spec(torch_spec(precisions=["fp16"])), repo, gpus=[0])
    config = ModelRepository(repo).read_config("tiny_fp16")
    assert config.backend == "tritonkit_torch"
    assert [(g.kind, g.count, list(g.gpus)) for g in config.instance_groups] == [("KIND_GPU", 2, [0])]
    assert config.parameters["answer_thread"] == "true"  # pipelined instances
    assert (repo / "tiny_fp16" / "1" / "model.ts").is_file()
    execution = _execution(repo, "tiny_fp16")
    assert execution["runner"] == "native" and "runner_reason" not in execution
    assert executions(repo) == [
        "tiny_fp16 version 1 executes on gpu: engine torch (native runner, 4 traced methods), fp16, buckets 1,2,4,8, "
        "instances 2 x KIND_GPU on GPU [0] (1 GPU(s) visible)"
    ]
    # asked for by name, the python runner is kept whatever the host has
    build_from_spec(
        parse_spec(torch_spec(precisions=["fp16"], serving={"runner": "python"})), tmp_path / "r2", gpus=[0]
    )
    assert ModelRepository(tmp_path / "r2").read_config("tiny_fp16").backend == "python"


def test_a_program_the_native_export_refuses_is_served_by_the_python_runner(
    tmp_path: Path, torch_spec: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runner: auto`` where the backend compiles, but tracing this program fails (torch.jit.trace
    refuses some programs torch.export takes): the version is the python runner's, and says why."""
    monkeypatch.setattr(native, "unavailable", lambda cuda=True: None)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Tracer cannot infer type of output\n(a second line)")

    monkeypatch.setattr(torch_program, "export_native", refuse)
    repo = tmp_path / "repo"
    build_from_spec(parse_spec(torch_spec(precisions=["fp16"])), repo, gpus=[0])
    config = ModelRepository(repo).read_config("tiny_fp16")
    assert config.backend == "python" and config.instance_groups[0].count == 2
    execution = _execution(repo, "tiny_fp16")
    assert execution["runner"] == "python"
    assert execution["runner_reason"] == (
        "tracing the program for the native runner failed: Tracer cannot infer type of output (a second line)"
    )
    assert sorted(p.name for p in (repo / "tiny_fp16" / "1").iterdir()) == [
        "build.json", "gpu_requests.py", "host_stats.py", "model.fx.pt", "model.pt2", "model.py",
    ]  # fmt: skip
    # asked for by name, the native runner is not swapped for another: the build stops and says why
    with pytest.raises(BuildError, match="tracing the program for the native runner failed"):
        build_from_spec(
            parse_spec(torch_spec(precisions=["fp16"], serving={"runner": "native"})),
            tmp_path / "r2",
            gpus=[0],
        )


def test_a_visible_gpu_writes_the_torch_runner_version(
    tmp_path: Path, torch_spec: Callable[..., dict[str, Any]]
) -> None:
    repo = tmp_path / "repo"
    results = build_from_spec(parse_spec(torch_spec()), repo, gpus=[0])
    assert [r.name for r in results] == ["tiny_fp32", "tiny_fp16", "tiny_int8"]
    repository = ModelRepository(repo)
    for name, precision in (("tiny_fp32", "fp32"), ("tiny_fp16", "fp16")):
        version = repo / name / "1"
        assert sorted(p.name for p in version.iterdir()) == [
            "build.json",
            "gpu_requests.py",
            "host_stats.py",
            "model.fx.pt",
            "model.pt2",
            "model.py",
        ]
        assert (version / "model.py").read_bytes() == runner_path("torch_runner").read_bytes()
        assert (version / "gpu_requests.py").read_bytes() == runner_path("gpu_requests").read_bytes()
        assert (version / "host_stats.py").read_bytes() == runner_path("host_stats").read_bytes()
        config = repository.read_config(name)
        assert config.backend == "python" and config.max_batch_size == 8
        assert [(g.kind, g.count, list(g.gpus)) for g in config.instance_groups] == [("KIND_GPU", 2, [0])]
        params = config.parameters
        assert (params["runner"], params["program_file"], params["engine"]) == (
            "torch_runner",
            "model.pt2",
            "torch",
        )
        assert (params["precision"], params["device"], params["batch_buckets"]) == (
            precision,
            "cuda",
            "1,2,4,8",
        )
        assert params["FORCE_CPU_ONLY_INPUT_TENSORS"] == "no" and "pipeline" not in params
        assert [(t.name, t.data_type, list(t.dims)) for t in config.inputs] == [("x", "FP32", [16])]
        assert [(t.name, t.data_type, list(t.dims)) for t in config.outputs] == [("y", "FP32", [8])]
        assert config.dynamic_batching is not None and config.dynamic_batching.preferred_batch_size == [
            1,
            2,
            4,
            8,
        ]
        execution = _execution(repo, name)
        assert execution["device"] == "gpu" and execution["engine"] == "torch"
        assert execution["precision"] == precision and execution["batch_buckets"] == [1, 2, 4, 8]
        assert execution["instances"] == [{"kind": "KIND_GPU", "count": 2, "gpus": [0]}]
        assert execution["reason"] == "1 GPU(s) visible" and "pipeline" not in execution
    fp16 = repository.read_manifest("tiny_fp16", 1)
    # The served program itself is gated against the FP32 reference, on CUDA where this process has it.
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    assert fp16.accuracy is not None and fp16.accuracy["passed"] and fp16.accuracy["samples"] == 32
    assert fp16.accuracy["runtime"] == f"torch.export-{'cuda' if torch.cuda.is_available() else 'cpu'}"
    assert fp16.extra["onnx_accuracy"]["runtime"] == "onnxruntime-cpu"
    assert repository.read_manifest("tiny_fp32", 1).accuracy is None  # the reference is not gated
    # The program is FP16 inside: its weights are half.
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    program = torch.export.load(str(repo / "tiny_fp16" / "1" / "model.pt2"))
    assert {p.dtype for p in program.state_dict.values()} == {torch.float16}
    int8 = _execution(repo, "tiny_int8")
    assert (int8["device"], int8["engine"]) == ("cpu", "onnxruntime")
    assert int8["reason"] == "int8 versions run on the CPU (the GPU runners serve fp32 and fp16)"
    assert repository.read_config("tiny_int8").parameters["runner"] == "onnx_runner"


def test_serving_placement_and_buckets_reach_the_config(
    tmp_path: Path, torch_spec: Callable[..., dict[str, Any]]
) -> None:
    serving = {
        "engine": "torch",
        "batch_buckets": [4, 8],
        "cuda_graphs": False,
        "instances": {"count": 1, "gpus": [1]},
    }
    data = torch_spec(precisions=["fp32"], serving=serving)
    build_from_spec(parse_spec(data), tmp_path / "repo", gpus=[0, 1])
    config = ModelRepository(tmp_path / "repo").read_config("tiny_fp32")
    assert [(g.kind, g.count, list(g.gpus)) for g in config.instance_groups] == [("KIND_GPU", 1, [1])]
    assert (config.parameters["batch_buckets"], config.parameters["cuda_graphs"]) == ("4,8", "false")
    with pytest.raises(SpecError, match=r"serving.instances.gpus names GPU\(s\) \[1\]; visible here: \[0\]"):
        build_from_spec(parse_spec(data), tmp_path / "other", gpus=[0])
    assert not (tmp_path / "other").exists()


def test_refusals_on_a_gpu_name_the_version(
    tmp_path: Path,
    torch_spec: Callable[..., dict[str, Any]],
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: SpecDict,
) -> None:
    repo = tmp_path / "repo"
    mismatch = torch_spec(precisions=["fp32"], serving={"precision": "fp16"})
    with pytest.raises(SpecError) as info:
        build_from_spec(parse_spec(mismatch), repo, gpus=[0])
    assert str(info.value).startswith("serving.precision fp16 does not match version `tiny_fp32` (fp32)")
    int8_on_gpu = torch_spec(precisions=["int8"], serving={"device": "gpu"})
    with pytest.raises(SpecError, match=r"^serving.device is gpu but int8 versions run on the CPU"):
        build_from_spec(parse_spec(int8_on_gpu), repo, gpus=[0])
    assert not repo.exists()

    import onnxruntime  # noqa: PLC0415 (only to know whether this install has the CUDA provider)

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        return  # an ONNX source can run on the GPU here: nothing to refuse
    onnx_only = tiny_spec(tiny_onnx, *tiny_data, precisions=["fp32"])
    build_from_spec(parse_spec(onnx_only), repo, gpus=[0])
    reason = _execution(repo, "tiny_fp32")["reason"]
    assert reason.startswith("no GPU engine for it here (torch needs a `source.torch` module; onnxruntime ")
    assert reason.endswith("here has no CUDAExecutionProvider)")
    with pytest.raises(SpecError) as info:
        build_from_spec(parse_spec({**onnx_only, "serving": {"engine": "torch"}}), tmp_path / "r2", gpus=[0])
    assert (
        str(info.value)
        == "serving.engine torch cannot serve `tiny_fp32`: torch needs a `source.torch` module"
    )
    assert not (tmp_path / "r2").exists()
    ort_gpu = {**onnx_only, "serving": {"engine": "onnxruntime", "device": "gpu"}}
    with pytest.raises(
        SpecError, match=r"^serving.device is gpu but serving.engine onnxruntime cannot serve"
    ):
        build_from_spec(parse_spec(ort_gpu), tmp_path / "r2", gpus=[0])


def test_check_shows_execution_and_refuses_kind_gpu_without_a_gpu(
    tmp_path: Path, torch_spec: Callable[..., dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    build_from_spec(parse_spec(torch_spec(precisions=["fp16"])), repo, gpus=[0])
    refusal = (
        "tiny_fp16: instance_group kind KIND_GPU, but no GPU is found here; the embedded server would refuse "
        "to load it (rebuild it with `serving: {device: cpu}`, or where it will be served)"
    )
    assert check_repository(repo, "embedded", gpus=[]) == [refusal]
    assert check_repository(repo, "embedded", gpus=[0]) == []
    assert check_repository(repo, "embedded", gpus=[1]) == [
        "tiny_fp16: instance_group names GPU(s) [0]; visible: [1]"
    ]
    assert check_repository(repo, "triton-image", gpus=[]) == []  # NVIDIA's image keeps its own rules
    shown = (
        "tiny_fp16 version 1 executes on gpu: engine torch, fp16, buckets 1,2,4,8, instances 2 x KIND_GPU "
        f"on GPU [0] (1 GPU(s) visible; python runner: the native backend: {NO_HEADERS})"
    )
    assert executions(repo) == [shown]
    if visible_gpus():
        return  # the command asks nvidia-smi: on a GPU host the version loads
    assert main(["check", "--repo", str(repo)]) == 1
    assert capsys.readouterr().out.splitlines() == [refusal, shown]
    assert main(["check", "--repo", str(repo), "--target", "triton-image"]) == 0
    assert capsys.readouterr().out.splitlines() == [shown, "1 models OK"]


def flat_torch() -> TorchSource:
    """A module answering one value per row: its output has no axis besides the batch."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 1), torch.nn.Flatten(0))
    return TorchSource(model, (torch.zeros(2, 16),), ["x"], ["y"])


def test_a_tensor_without_dims_stays_on_the_cpu(
    tmp_path: Path, tiny_data: tuple[Path, Path], tiny_spec: SpecDict, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("tritonkit_test_serving_flat")
    module.flat_torch = flat_torch  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    data = tiny_spec(tmp_path / "unused.onnx", *tiny_data, precisions=["fp32"])
    data["source"] = {"torch": f"{module.__name__}:flat_torch"}
    build_from_spec(parse_spec(data), tmp_path / "repo", gpus=[0])
    execution = _execution(tmp_path / "repo", "tiny_fp32")
    assert execution["device"] == "cpu"
    assert execution["reason"] == "tensor(s) y have no axis besides the batch, which the GPU runners need"
    assert ModelRepository(tmp_path / "repo").read_config("tiny_fp32").parameters["runner"] == "onnx_runner"


def test_server_side_tokenization_keeps_the_text_runner_on_the_cpu(tiny_onnx: Path) -> None:
    text = {"name": "enc", "source": {"flagship": "minilm"}, "preprocessing": {"kind": "text"}}
    source = Source(onnx=tiny_onnx, origin=tiny_onnx, graph=read_io(tiny_onnx))
    plan = plan_version(parse_spec(text), source, "fp32", 8, gpus=[0], profile=None)
    assert [(g.kind, g.count) for g in plan.instance_groups] == [("KIND_CPU", 1)]
    assert (plan.device, plan.engine) == ("cpu", "onnxruntime")
    assert plan.reason.startswith("the text-embedding runner tokenizes in the server, on the CPU")
    with pytest.raises(SpecError, match=r"^serving.device is gpu but the text-embedding runner tokenizes"):
        plan_version(
            parse_spec({**text, "serving": {"device": "gpu"}}),
            source,
            "fp32",
            8,
            gpus=[0],
            profile=None,
        )


@pytest.mark.slow
def test_flagship_builds_record_where_each_member_executes(flagship_repo: tuple[Path, Any]) -> None:
    repo = flagship_repo[0]
    if visible_gpus():
        pytest.skip("the flagship repository was planned for this machine's GPU")
    tokenizer = _execution(repo, "minilmens_tokenizer")
    assert (tokenizer["device"], tokenizer["reason"]) == ("cpu", "tokenization runs on the CPU")
    assert _execution(repo, "minilmens_fp32")["device"] == "cpu"
    ensemble = json.loads((repo / "minilmens_fp32_text" / "1" / "build.json").read_text(encoding="utf-8"))
    assert "execution" not in ensemble["extra"]  # it only routes to its members
    for name in ("minilm_fp32", "minilm_fp16", "minilm_int8", "resnet50_fp16"):
        assert _execution(repo, name)["reason"] == "no GPU visible here"


def test_keep_io_types_false_puts_an_fp16_programs_float_io_in_fp16(
    tmp_path: Path, torch_spec: Callable[..., dict[str, Any]]
) -> None:
    """``fp16.keep_io_types: false`` reaches the torch engine as it reaches an FP16 ONNX graph: the fp16
    version's float input and output are FP16 in its config; the fp32 version keeps FP32."""
    repo = tmp_path / "repo"
    spec = torch_spec(precisions=["fp32", "fp16"], serving={"runner": "python"})
    build_from_spec(parse_spec({**spec, "fp16": {"keep_io_types": False}}), repo, gpus=[0])
    repository = ModelRepository(repo)
    half, full = repository.read_config("tiny_fp16"), repository.read_config("tiny_fp32")
    assert [(t.name, t.data_type) for t in half.inputs] == [("x", "FP16")]
    assert [(t.name, t.data_type) for t in half.outputs] == [("y", "FP16")]
    assert [t.data_type for t in [*full.inputs, *full.outputs]] == ["FP32", "FP32"]
    gate = repository.read_manifest("tiny_fp16", 1).accuracy
    assert gate is not None and gate["passed"]
