"""The zoo: common architectures, unedited, build fp32 + fp16 + int8 through `tritonkit build` on
the CPU at small widths (tests/support/torch_zoo.py; scripts/gpu/zoo.py builds them at full size),
and the `onnx` package's own test CNNs build as ONNX files (a fixed batch of 1, served unbatched or
rewritten to a dynamic batch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from tests.support import torch_zoo

from tritonkit import cli

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _arrays(family: torch_zoo.Family, count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if family.kind == "image":
        size = family.image[0]
        return {"x": rng.standard_normal((count, 3, size, size)).astype(np.float32)}
    ids = rng.integers(1, family.vocab[0], (count, 16), dtype=np.int64)
    if not family.mask:
        return {"input_ids": ids}
    mask = np.ones_like(ids)
    mask[: count // 2, 12:] = 0  # half the samples padded: the mask matters
    return {"input_ids": ids, "attention_mask": mask}


def _build(tmp_path: Path, spec: dict[str, Any], *flags: str) -> tuple[int, Path]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    repo = tmp_path / "repo"
    return cli.main(["build", str(path), "--repo", str(repo), *flags]), repo


def _record(repo: Path, name: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((repo / name / "1" / "build.json").read_text(encoding="utf-8"))
    return record


@pytest.mark.parametrize("name", list(torch_zoo.FAMILIES))
def test_family_builds_fp32_fp16_int8(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    family = torch_zoo.FAMILIES[name]
    np.savez(tmp_path / "cal.npz", **_arrays(family, 16, seed=1))
    np.savez(tmp_path / "eval.npz", **_arrays(family, 16, seed=2))
    spec = {
        "name": name,
        "source": {"torch": f"tests.support.torch_zoo:{name}"},
        "precisions": ["fp32", "fp16", "int8"],
        "calibration": {"data": "cal.npz", "samples": 16, "min_samples": 8, "batch_size": 8},
        "evaluation": {"data": "eval.npz", "samples": 16, "batch_size": 8},
        "accuracy": {"metric": "cosine", "int8": {"mean": 0.95, "min": 0.8}},
        "batching": {"max_batch_size": 8},
    }
    code, repo = _build(tmp_path, spec)
    out = capsys.readouterr()
    assert code == 0, out.err
    for precision in ("fp32", "fp16", "int8"):
        record = _record(repo, f"{name}_{precision}")
        assert record["extra"]["sanitize"]["export"]["exporter"] == "dynamo"
        assert Path(record["source"]).name == "torch_zoo.py"  # the module, not a deleted temp file
        if precision != "fp32":
            assert record["accuracy"]["passed"], record["accuracy"]


@pytest.mark.parametrize(
    ("model", "flags"), [("light_squeezenet", ()), ("light_shufflenet", ("--dynamic-batch",))]
)
def test_the_onnx_packages_test_cnns_build(
    model: str, flags: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Opset 9, IR 3 (every weight also a graph input), batch fixed at 1: upgraded and folded; built
    unbatched with evaluation batches of 1, or rewritten to a dynamic batch. Their weights are
    constants, so every image gets the same answer: the gates pass, and say they pass trivially."""
    rng = np.random.default_rng(0)
    graph = onnx.load(str(LIGHT / f"{model}.onnx"), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    (name,) = [v.name for v in graph.input if v.name not in weights]
    np.savez(tmp_path / "cal.npz", **{name: rng.standard_normal((8, 3, 224, 224)).astype(np.float32)})
    np.savez(tmp_path / "eval.npz", **{name: rng.standard_normal((4, 3, 224, 224)).astype(np.float32)})
    spec = {
        "name": "cnn",
        "source": {"onnx": str(LIGHT / f"{model}.onnx")},
        "precisions": ["fp32", "fp16", "int8"],
        "calibration": {"data": str(tmp_path / "cal.npz"), "samples": 8, "min_samples": 4},
        "evaluation": {"data": str(tmp_path / "eval.npz"), "samples": 4},
        "batching": {"max_batch_size": 8 if flags else 0},
    }
    code, repo = _build(tmp_path, spec, *flags)
    out = capsys.readouterr()
    assert code == 0, out.err
    record = _record(repo, "cnn_int8")
    sanitize = record["extra"]["sanitize"]
    assert sanitize["upgraded_from_opset"] == 9 and sanitize["initializer_inputs_dropped"] > 0
    assert ("dynamic_batch" in sanitize) == bool(flags)
    if not flags:
        assert record["extra"]["data"]["fixed_batch"]["batch_size"] == 1
    assert "proves nothing" in record["accuracy"]["warning"]
    assert "warning: `cnn_fp16` (fp16) gate: the fp32 reference gives the same output" in out.err


def test_a_zero_initialised_head_builds_fp16_and_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torchvision's ViT-B/16 (random weights) answers zeros: its head is zero-initialised. FP32 and
    FP16 agree exactly; the gate passed that as cosine 0.0000 and refused the build ("FP16 answered
    garbage"). Now it passes, and says the gate proves nothing."""
    family = torch_zoo.FAMILIES["vit"]
    np.savez(tmp_path / "cal.npz", **_arrays(family, 8, seed=1))
    np.savez(tmp_path / "eval.npz", **_arrays(family, 8, seed=2))
    spec = {
        "name": "vit0",
        "source": {"torch": "tests.support.torch_zoo:vit_zero_head"},
        "precisions": ["fp32", "fp16"],
        "evaluation": {"data": "eval.npz", "samples": 8, "batch_size": 8},
        "accuracy": {"metric": "cosine"},
        "batching": {"max_batch_size": 8},
    }
    code, repo = _build(tmp_path, spec)
    out = capsys.readouterr()
    assert code == 0, out.err
    accuracy = _record(repo, "vit0_fp16")["accuracy"]
    assert accuracy["mean"] == 1.0 and "zero-initialised output layer" in accuracy["warning"]
    assert "proves nothing" in out.err
