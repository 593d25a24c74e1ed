"""``check_repository`` and ``tritonkit check``: one line per problem, exit 1; "N models OK" otherwise."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tritonkit import config
from tritonkit.backends.runners import runner_path
from tritonkit.cli import main
from tritonkit.config import ModelConfig, TensorConfig
from tritonkit.convert.onnx_import import import_onnx
from tritonkit.repository import STAGING_PREFIX
from tritonkit.repository.check import check_repository


def edit_config(model_dir: Path, change: Callable[[ModelConfig], None]) -> None:
    cfg = config.load(model_dir / "config.pbtxt")
    change(cfg)
    config.save(cfg, model_dir / "config.pbtxt", check=False)


@pytest.fixture
def repo(tmp_path: Path, onnx_file: Callable[[str], Path]) -> Path:
    root = tmp_path / "repo"
    import_onnx(onnx_file("two_in"), root, "good")
    import_onnx(onnx_file("fixed"), root, "good_fixed")
    return root


def imported(repo: Path, onnx_file: Callable[[str], Path], name: str, model: str = "two_in") -> Path:
    return import_onnx(onnx_file(model), repo, name).parent


def test_clean_repository_has_no_problems(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_repository(repo) == []
    assert main(["check", "--repo", str(repo)]) == 0
    assert capsys.readouterr().out == "2 models OK\n"


def test_layout_problems(repo: Path, onnx_file: Callable[[str], Path]) -> None:
    (repo / "noconfig").mkdir()
    (repo / "badparse").mkdir()
    (repo / "badparse" / "config.pbtxt").write_text("name: 'badparse'\nmax_batch_size: lots\n")
    novers = imported(repo, onnx_file, "noversion")
    shutil.rmtree(novers / "1")
    noart = imported(repo, onnx_file, "noartifact")
    (noart / "1" / "model.onnx").unlink()
    renamed = imported(repo, onnx_file, "renamed")
    edit_config(renamed, lambda c: setattr(c, "name", "other"))
    (repo / ".ipynb_checkpoints").mkdir()
    (repo / "README.txt").write_text("files at the root are ignored by Triton")
    broken_manifest = imported(repo, onnx_file, "manifest")
    (broken_manifest / "1" / "build.json").write_text("{")
    # After the last write: a write removes staging directories whose writer is gone.
    (repo / f"{STAGING_PREFIX}abc123").mkdir()

    problems = check_repository(repo)
    assert (
        f"{STAGING_PREFIX}abc123: staging directory left by an interrupted write; Triton would try to load it as a model (`tritonkit serve` and the next write remove it)"
        in problems
    )
    assert ".ipynb_checkpoints: hidden directory; Triton would try to load it as a model" in problems
    assert "noconfig: no config.pbtxt; Triton cannot load this directory as a model" in problems
    assert any(p.startswith("badparse: config.pbtxt does not parse (") for p in problems)
    assert "noversion: no version directory; expected a numeric subdirectory such as `1/`" in problems
    assert "noartifact: version 1: artifact `model.onnx` is missing" in problems
    assert "renamed: config name `other` does not match the directory name `renamed`" in problems
    assert any(p.startswith("manifest: version 1: `build.json` is not valid JSON") for p in problems)
    assert not any(p.startswith("good") for p in problems)
    assert len(problems) == 8


def test_config_and_graph_mismatches(repo: Path, onnx_file: Callable[[str], Path]) -> None:
    def dtype(c: ModelConfig) -> None:
        c.inputs[0].data_type = "INT32"

    def dims(c: ModelConfig) -> None:
        c.outputs[1].dims = [5]

    def rename(c: ModelConfig) -> None:
        c.inputs[1].name = "q"

    def variable(c: ModelConfig) -> None:
        c.inputs[0].dims = [-1, 3]

    edit_config(imported(repo, onnx_file, "dtype"), dtype)
    edit_config(imported(repo, onnx_file, "dims"), dims)
    edit_config(imported(repo, onnx_file, "names"), rename)
    edit_config(
        imported(repo, onnx_file, "fixed_batched", "fixed"), lambda c: setattr(c, "max_batch_size", 4)
    )
    edit_config(imported(repo, onnx_file, "variable", "fixed"), variable)

    problems = check_repository(repo)
    assert "dtype: version 1: input `x`: config data type INT32, graph has FP32" in problems
    assert (
        "dims: version 1: output `prod`: config dims [5], graph has [4] (without the batch axis)" in problems
    )
    assert "names: version 1: config input `q` is not a graph input; graph has: x, y" in problems
    assert "names: version 1: graph input `y` is missing from the config" in problems
    assert (
        "fixed_batched: version 1: input `m`: max_batch_size 4 needs a dynamic first axis, graph shape is [2, 3]"
        in problems
    )
    # -1 where the graph is fixed would let requests through that the graph cannot run
    assert "variable: version 1: input `m`: config dims [-1, 3], graph has [2, 3] (full shape)" in problems


def test_validation_problems_are_listed(repo: Path, onnx_file: Callable[[str], Path]) -> None:
    edit_config(imported(repo, onnx_file, "invalid"), lambda c: setattr(c, "max_batch_size", -1))
    problems = [p for p in check_repository(repo) if p.startswith("invalid: ")]
    assert problems and any("max_batch_size" in p for p in problems)


def test_other_platforms_need_their_artifacts(repo: Path, onnx_file: Callable[[str], Path]) -> None:
    ort_model = repo / "ort"
    (ort_model / "1").mkdir(parents=True)
    shutil.copy(onnx_file("gemm_names"), ort_model / "1" / "model.onnx")
    config.save(
        ModelConfig(
            name="ort",
            platform="onnxruntime_onnx",
            max_batch_size=8,
            inputs=[TensorConfig("input.1", "FP32", [4])],
            outputs=[TensorConfig("onnx::Gemm_0", "FP32", [2])],
        ),
        ort_model / "config.pbtxt",
    )
    plan_model = repo / "plan"
    (plan_model / "1").mkdir(parents=True)
    config.save(
        ModelConfig(
            name="plan",
            platform="tensorrt_plan",
            max_batch_size=8,
            inputs=[TensorConfig("x", "FP16", [4])],
            outputs=[TensorConfig("y", "FP16", [4])],
        ),
        plan_model / "config.pbtxt",
    )
    problems = check_repository(repo)
    assert problems == [
        "ort: version 1: output `onnx::Gemm_0`: config dims [2], graph has [3] (without the batch axis)",
        "plan: version 1: artifact `model.plan` is missing",
    ]


def test_cli_prints_one_line_per_problem_and_exits_1(
    repo: Path, onnx_file: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "noconfig").mkdir()
    (imported(repo, onnx_file, "noartifact") / "1" / "model.py").unlink()
    assert main(["check", "--repo", str(repo)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "noartifact: version 1: artifact `model.py` is missing",
        "noconfig: no config.pbtxt; Triton cannot load this directory as a model",
    ]


def test_cli_missing_repository_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--repo", str(tmp_path / "absent")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith("tritonkit check: error: repository ")
        and "does not exist" in err[0]
    )


def test_other_python_runners_are_not_compared_with_their_graph(
    repo: Path, onnx_file: Callable[[str], Path]
) -> None:
    """A runner that tokenizes server-side names an `onnx_file` but serves other tensors."""
    model = imported(repo, onnx_file, "text")

    def as_text_runner(c: ModelConfig) -> None:
        del c.parameters["runner"]
        c.inputs = [TensorConfig("TEXT", "BYTES", [1])]

    edit_config(model, as_text_runner)
    (model / "1" / "model.py").write_text("# another runner\n")
    assert check_repository(repo) == []
    (model / "1" / "model.onnx").unlink()
    assert check_repository(repo) == ["text: version 1: artifact `model.onnx` is missing"]


def test_a_gpu_runner_without_its_shared_request_path_is_named(
    repo: Path, onnx_file: Callable[[str], Path]
) -> None:
    """The GPU runners import ``gpu_requests.py`` from their version folder; a copy without it would fail to load."""
    model = imported(repo, onnx_file, "gpu")
    edit_config(model, lambda c: c.parameters.pop("runner"))
    shutil.copy(runner_path("onnx_cuda_runner"), model / "1" / "model.py")
    assert check_repository(repo) == [
        "gpu: version 1: `model.py` imports `gpu_requests.py`, which its version folder lacks (rebuild it)"
    ]
    shutil.copy(runner_path("gpu_requests"), model / "1" / "gpu_requests.py")
    assert check_repository(repo) == []
    # The torch runner imports its host-time statistics from the folder too.
    shutil.copy(runner_path("torch_runner"), model / "1" / "model.py")
    assert check_repository(repo) == [
        "gpu: version 1: `model.py` imports `host_stats.py`, which its version folder lacks (rebuild it)"
    ]
    shutil.copy(runner_path("host_stats"), model / "1" / "host_stats.py")
    assert check_repository(repo) == []


def test_the_portable_runner_is_recognised_without_the_parameter(
    repo: Path, onnx_file: Callable[[str], Path]
) -> None:
    def old_style(c: ModelConfig) -> None:
        del c.parameters["runner"]
        c.inputs[0].data_type = "FP16"

    edit_config(imported(repo, onnx_file, "old"), old_style)
    assert check_repository(repo) == ["old: version 1: input `x`: config data type FP16, graph has FP32"]


def _as_onnxruntime_model(c: ModelConfig) -> None:
    c.backend, c.platform, c.parameters, c.default_model_filename = None, "onnxruntime_onnx", {}, "model.onnx"
    c.instance_groups[0].kind = "KIND_CPU"


def test_check_names_what_the_embedded_server_cannot_load(
    repo: Path, onnx_file: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A repository of onnxruntime models is fine for NVIDIA's Triton image, not for the embedded server."""
    edit_config(imported(repo, onnx_file, "ort"), _as_onnxruntime_model)
    assert check_repository(repo) == []  # without a target: only the artifacts are checked
    assert main(["check", "--repo", str(repo)]) == 1  # the embedded server is the default target
    assert capsys.readouterr().out.splitlines() == [
        "ort: the embedded server cannot load platform `onnxruntime_onnx`: it has the python backend, "
        "tritonkit's native backend and ensembles only; serve it with NVIDIA's Triton image (check with "
        "--target triton-image)"
    ]
    assert main(["check", "--repo", str(repo), "--target", "triton-image"]) == 0
    assert capsys.readouterr().out == "3 models OK\n"


def test_check_names_gpu_instances_where_no_gpu_is_found(
    repo: Path, onnx_file: Callable[[str], Path]
) -> None:
    edit_config(
        imported(repo, onnx_file, "ongpu"), lambda c: setattr(c.instance_groups[0], "kind", "KIND_GPU")
    )
    assert check_repository(repo, "embedded", gpu_available=False) == [
        "ongpu: instance_group kind KIND_GPU, but no GPU is found here; the embedded server would refuse "
        "to load it (rebuild with --instance-kind KIND_CPU)"
    ]
    assert check_repository(repo, "embedded", gpu_available=True) == []
    assert check_repository(repo, "triton-image", gpu_available=False) == []


def test_check_refuses_a_tensorrt_engine_on_cpu_instances(
    repo: Path, onnx_file: Callable[[str], Path]
) -> None:
    def as_plan(c: ModelConfig) -> None:
        c.backend, c.platform, c.parameters, c.default_model_filename = None, "tensorrt_plan", {}, "model.py"

    edit_config(imported(repo, onnx_file, "plan"), as_plan)
    problems = check_repository(repo, "triton-image")
    assert problems == ["plan: a TensorRT engine runs on GPU instances only; got instance kinds ['KIND_CPU']"]
    assert "the embedded server cannot load platform `tensorrt_plan`" in check_repository(repo, "embedded")[0]
