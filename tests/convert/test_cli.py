"""`tritonkit build SPEC` / `--onnx ... --precision` and `tritonkit accuracy` through the real CLI:
one line on stderr and a non-zero exit for bad input, nothing written."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tritonkit.cli import main
from tritonkit.repository.store import ModelRepository


def _write_spec(path: Path, data: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_build_spec_then_accuracy_table_and_report(
    tmp_path: Path,
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = _write_spec(tmp_path / "tiny.yaml", tiny_spec(tiny_onnx, *tiny_data))  # type: ignore[operator]
    repo = tmp_path / "repo"
    # Flag beats spec: only int8 is built although the spec lists three precisions.
    assert main(["build", str(spec), "--repo", str(repo), "--precision", "int8"]) == 0
    out = capsys.readouterr().out
    assert "built `tiny_int8` version 1 (int8, cosine mean" in out
    assert sorted(p.name for p in repo.iterdir()) == ["tiny_int8"]

    report = tmp_path / "docs" / "accuracy.md"
    assert main(["accuracy", "--repo", str(repo), "--report", str(report)]) == 0
    table = capsys.readouterr().out
    assert "tiny_int8" in table and "pass" in table
    text = report.read_text(encoding="utf-8")
    assert "| tiny_int8 | 1 | int8 | portable | cosine | 32 |" in text
    assert "Measured on:" in text and "cores" in text


def test_env_overrides_spec(
    tmp_path: Path,
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _write_spec(tmp_path / "tiny.yaml", tiny_spec(tiny_onnx, *tiny_data))  # type: ignore[operator]
    monkeypatch.setenv("TRITONKIT_PRECISION", "fp16")
    assert main(["build", str(spec), "--repo", str(tmp_path / "repo")]) == 0
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["tiny_fp16"]


def test_onnx_with_precision(tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path]) -> None:
    cal, ev = tiny_data
    argv = ["build", "--onnx", str(tiny_onnx), "--repo", str(tmp_path / "repo"), "--precision", "fp16,int8"]
    assert main([*argv, "--calibration-data", str(cal), "--eval-data", str(ev)]) == 0
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["tiny_fp16", "tiny_int8"]


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ({"name": "tiny", "source": {"onnx": "x.onnx"}, "bogus": 1}, [], "unknown spec key `bogus`"),
        (
            {"name": "tiny", "source": {"onnx": "x.onnx"}, "batching": {"max_batch_size": "x"}},
            [],
            "expected int or 'auto'",
        ),
        (None, ["--precision", "int8"], "need held-out data"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path,
    tiny_onnx: Path,
    capsys: pytest.CaptureFixture[str],
    content: object,
    extra: list[str],
    message: str,
) -> None:
    repo = tmp_path / "repo"
    if content is None:
        argv = ["build", "--onnx", str(tiny_onnx), "--repo", str(repo), *extra]
    else:
        argv = ["build", str(_write_spec(tmp_path / "s.yaml", content)), "--repo", str(repo), *extra]  # type: ignore[arg-type]
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("tritonkit build: error:") and message in err and "\n" not in err
    assert "Traceback" not in err
    assert not repo.exists() or not any(repo.iterdir())


def test_accuracy_on_empty_repo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "repo").mkdir()
    assert main(["accuracy", "--repo", str(tmp_path / "repo")]) != 0
    assert "no converted (fp16/int8) versions" in capsys.readouterr().err


def test_onnxruntime_target_honours_the_instance_kind(
    tmp_path: Path,
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The dev overlay (no GPU) builds `--target onnxruntime --instance-kind KIND_CPU`: Triton refuses
    KIND_GPU without a GPU, so the flag (and TRITONKIT_INSTANCE_KIND) must reach the config."""

    data = tiny_spec(tiny_onnx, *tiny_data, precisions=["fp32"])  # type: ignore[operator]
    spec = _write_spec(tmp_path / "tiny.yaml", data)
    base = ["build", str(spec), "--target", "onnxruntime", "--force", "--version", "1"]
    cpu, gpu, env = tmp_path / "cpu", tmp_path / "gpu", tmp_path / "env"
    assert main([*base, "--repo", str(cpu), "--instance-kind", "KIND_CPU"]) == 0
    config = ModelRepository(cpu).read_config("tiny_fp32_ort")
    assert [g.kind for g in config.instance_groups] == ["KIND_CPU"] and config.optimization is None
    assert main(["check", "--repo", str(cpu), "--target", "triton-image"]) == 0

    assert main([*base, "--repo", str(gpu)]) == 0  # not given: KIND_GPU for this target
    config = ModelRepository(gpu).read_config("tiny_fp32_ort")
    assert [g.kind for g in config.instance_groups] == ["KIND_GPU"]
    assert config.optimization is not None and config.optimization.execution_accelerators is not None
    accel = config.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accel.parameters == {
        "precision_mode": "FP32",
        "trt_engine_cache_enable": "true",
        "trt_engine_cache_path": "/tmp/tritonkit/ort-trt-engines",
    }

    monkeypatch.setenv("TRITONKIT_INSTANCE_KIND", "KIND_CPU")
    assert main([*base, "--repo", str(env)]) == 0
    assert [g.kind for g in ModelRepository(env).read_config("tiny_fp32_ort").instance_groups] == ["KIND_CPU"]
    capsys.readouterr()


def test_flag_paths_resolve_against_the_working_directory(
    tmp_path: Path,
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--calibration-data cal.npz` names a file in the working directory, not beside the spec;
    the same relative path written in the spec resolves against the spec's folder."""

    work, specs = tmp_path / "work", tmp_path / "specs"
    work.mkdir()
    specs.mkdir()
    shutil.copy(tiny_data[0], work / "mycal.npz")
    shutil.copy(tiny_data[1], specs / "myeval.npz")
    data = tiny_spec(tiny_onnx, *tiny_data, precisions=["int8"])  # type: ignore[operator]
    data["evaluation"] = {"data": "myeval.npz", "samples": 32}  # beside the spec
    spec = _write_spec(specs / "tiny.yaml", data)
    monkeypatch.chdir(work)
    argv = ["build", str(spec), "--repo", str(tmp_path / "repo"), "--calibration-data", "mycal.npz"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "built `tiny_int8` version 1" in capsys.readouterr().out


def test_a_torch_module_beside_the_spec_is_found_without_pythonpath(
    tmp_path: Path,
    tiny_data: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "my_tiny_model.py").write_text(
        "import torch\n"
        "from tritonkit.convert.graph.export import TorchSource\n\n\n"
        "def make() -> TorchSource:\n"
        "    torch.manual_seed(0)\n"
        "    module = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU())\n"
        "    return TorchSource(module, (torch.zeros(2, 16),), ('x',), ('y',))\n",
        encoding="utf-8",
    )
    spec = _write_spec(
        specs / "mine.yaml",
        {"name": "mine", "source": {"torch": "my_tiny_model:make"}, "batching": {"max_batch_size": 8}},
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    before = list(sys.path)
    assert main(["build", str(spec), "--repo", str(tmp_path / "repo")]) == 0, capsys.readouterr().err
    assert "built `mine_fp32` version 1" in capsys.readouterr().out
    assert sys.path == before  # the spec's folder is on the path only while the module is imported
    sys.modules.pop("my_tiny_model", None)
