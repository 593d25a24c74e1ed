"""`tritonkit build SPEC` / `--onnx ... --precision` and `tritonkit accuracy` through the real CLI:
one line on stderr and a non-zero exit for bad input, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tritonkit.cli import main


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
