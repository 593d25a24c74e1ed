"""The spec route on a GPU (``gpu`` marker: skipped here with the reason printed): a default build spec
of a torch source, built where a GPU is visible, plans every FP32/FP16 version onto it, gates the
FP16 program on the GPU, serves them with the native backend where it compiles (the default runner), and
the real tritonserver serves the versions on KIND_GPU instances with the module's answers; ``tritonkit check`` passes it for the embedded server."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonkit.backends import native
from tritonkit.convert.graph.export import TorchSource
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.repository.check import check_repository
from tritonkit.repository.store import ModelRepository
from tritonkit.serve.embedded import EmbeddedServer

pytestmark = pytest.mark.gpu


def gpu_torch() -> TorchSource:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.manual_seed(2)
    module = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    return TorchSource(module, (torch.zeros(2, 16),), ["x"], ["y"])


def test_spec_build_serves_on_the_gpu(
    tmp_path: Path, tiny_data: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    module = types.ModuleType("tritonkit_test_serving_gpu")
    module.gpu_torch = gpu_torch  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cal, ev = tiny_data
    spec = parse_spec(
        {
            "name": "mlp",
            "source": {"torch": f"{module.__name__}:gpu_torch"},
            "precisions": ["fp32", "fp16"],
            "calibration": {"data": str(cal), "samples": 64, "min_samples": 16},
            "evaluation": {"data": str(ev), "samples": 32},
            "batching": {"max_batch_size": 32},
        }
    )
    repo = tmp_path / "repo"
    build_from_spec(spec, repo)  # GPUs from nvidia-smi, as `tritonkit build` sees them
    repository = ModelRepository(repo)
    fp16 = repository.read_manifest("mlp_fp16", 1)
    assert fp16.extra["execution"]["device"] == "gpu" and fp16.extra["execution"]["engine"] == "torch"
    assert fp16.accuracy is not None and fp16.accuracy["runtime"] == "torch.export-cuda"
    # the default runner: the native backend where it compiles here (g++ and CUDA's headers)
    problem = native.unavailable(cuda=True)
    assert fp16.extra["execution"]["runner"] == ("native" if problem is None else "python"), problem
    assert (repository.read_config("mlp_fp16").backend == "tritonkit_torch") == (problem is None)
    assert check_repository(repo, "embedded") == []

    reference = gpu_torch().module.eval()
    rng = np.random.default_rng(5)
    with EmbeddedServer(repo) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for name, tolerance in (("mlp_fp32", 1e-4), ("mlp_fp16", 2e-2)):
            assert repository.read_config(name).instance_groups[0].kind == "KIND_GPU"
            for batch in (1, 5, 32):
                x = rng.standard_normal((batch, 16)).astype(np.float32)
                inp = grpcclient.InferInput("x", [batch, 16], "FP32")
                inp.set_data_from_numpy(x)
                got = client.infer(name, [inp]).as_numpy("y")
                with torch.inference_mode():
                    want = reference(torch.from_numpy(x)).numpy()
                np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
