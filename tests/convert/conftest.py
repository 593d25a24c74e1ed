"""Shared fixtures for the conversion tests: one reduced flagship build per session (CPU builds are
the slow part of this area), served by the real embedded Triton server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tritonkit.convert.graph.export import export_model
from tritonkit.convert.graph.flagship import flagship_spec
from tritonkit.convert.pipeline import BuildResult, build_all, build_from_spec
from tritonkit.convert.spec.buildspec import with_overrides
from tritonkit.errors import ModelImportError
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions


@pytest.fixture(scope="session")
def flagship_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[BuildResult]]:
    """minilm_{fp32,fp16,int8} and resnet50_{fp32,fp16,int8} at reduced size, built once."""

    repo = tmp_path_factory.mktemp("flagship") / "repo"
    try:
        results = build_all(repo, reduced=True, log=lambda _: None)
    except ModelImportError as exc:  # a host without the flagships' packages (the GPU machine)
        pytest.skip(f"flagship sources not installed: {exc}")
    # The ensemble layout (tokenizer model + tensor model + `_text` ensemble) that the onnxruntime and
    # tensorrt targets use, here over the portable ONNX runner so the embedded server can serve it.
    ensemble = with_overrides(
        flagship_spec("minilm", reduced=True),
        name="minilmens",
        precisions=["fp32"],
        preprocessing={"tokenize": "ensemble"},
    )
    results += build_from_spec(ensemble, repo)
    return repo, results


@pytest.fixture(scope="session")
def flagship_server(flagship_repo: tuple[Path, list[BuildResult]]) -> Iterator[object]:

    with EmbeddedServer(flagship_repo[0], ServerOptions(startup_timeout=240.0, exit_timeout=1)) as server:
        yield server


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small MLP (Gemm/MatMul + ReLU) with a dynamic batch axis: fast to quantize and gate."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    export_model(
        model,
        (torch.zeros(2, 16),),
        path,
        input_names=("x",),
        output_names=("y",),
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        exporter="torchscript",  # a test graph: the dynamo exporter's start-up would only slow it
    )
    return path


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(calibration.npz with 64 samples, evaluation.npz with 32 other samples) for ``tiny_onnx``."""

    folder = tmp_path_factory.mktemp("tinydata")
    rng = np.random.default_rng(7)
    cal, ev = folder / "cal.npz", folder / "eval.npz"
    np.savez(cal, x=rng.standard_normal((64, 16)).astype(np.float32))
    np.savez(ev, x=rng.standard_normal((32, 16)).astype(np.float32))
    return cal, ev


def _tiny_spec_dict(onnx: Path, cal: Path, ev: Path, **overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "name": "tiny",
        "source": {"onnx": str(onnx)},
        "precisions": ["fp32", "fp16", "int8"],
        "int8": {"op_types": ["MatMul", "Gemm"]},
        "calibration": {"data": str(cal), "samples": 64, "min_samples": 16},
        "evaluation": {"data": str(ev), "samples": 32},
        "accuracy": {"metric": "cosine", "int8": {"mean": 0.98, "min": 0.9}},
        "batching": {"max_batch_size": 8},
    }
    spec.update(overrides)
    return spec


@pytest.fixture(scope="session")
def tiny_spec() -> Callable[..., dict[str, object]]:
    """``tiny_spec(onnx, cal, ev, **top_level_overrides)``: a spec dict for the tiny model."""
    return _tiny_spec_dict
