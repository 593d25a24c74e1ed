"""FP16 torch programs of modules that hold state beyond parameters and buffers: a cache an FP32 run
filled (timm LeViT's attention-bias dict, rotary tables, anchor grids) is converted with the module,
so the program exports, passes its gate and is served by the real tritonserver."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient

from tritonkit.config import InstanceGroup
from tritonkit.convert.spec.execution import ExecutionPlan
from tritonkit.convert.targets.torch_program import export_program, half_module, write_torch_version
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions


class CachedBias(torch.nn.Module):
    """LeViT's pattern on a CPU scale: attention biases gathered from a parameter by an index buffer,
    cached in a plain dict (keyed by device) on the first eval-mode forward; ``scales`` a tuple of
    plain tensors, ``table`` a list (rotary-table style), both outside ``.half()``'s reach."""

    idxs: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 8)
        self.biases = torch.nn.Parameter(torch.randn(4) * 0.1)
        self.register_buffer("idxs", torch.arange(64).reshape(8, 8) % 4, persistent=False)
        self.bias_cache: dict[str, Any] = {}
        self.scales = (torch.full((8,), 0.5), torch.ones(8))
        self.table = [torch.linspace(0, 1, 8)]

    def bias(self, device: Any) -> Any:
        if self.training:
            return self.biases[self.idxs]
        key = str(device)
        if key not in self.bias_cache:
            self.bias_cache[key] = self.biases[self.idxs]
        return self.bias_cache[key]

    def forward(self, x: Any) -> Any:
        mixed = self.proj(x) @ self.bias(x.device)  # FP32 cache, half activations: a dtype error
        return mixed * self.scales[0] + self.table[0] + self.scales[1]


def _ran_in_fp32() -> Any:
    module = CachedBias().eval()
    with torch.no_grad():
        module(torch.randn(2, 8))  # fills the cache in FP32, as an earlier run of the build does
    assert module.bias_cache["cpu"].dtype == torch.float32
    return module


def test_plain_half_of_a_module_that_ran_keeps_its_fp32_cache() -> None:
    """The failure this guards against: ``.half()`` leaves the cache FP32, and the half module fails."""
    stale = copy.deepcopy(_ran_in_fp32()).half()
    with pytest.raises(RuntimeError, match="dtype"):
        stale(torch.randn(2, 8).half())


def test_every_tensor_the_module_holds_is_converted_and_the_original_left_fp32() -> None:
    module = _ran_in_fp32()
    half = half_module(module)
    assert half.bias_cache["cpu"].dtype == torch.float16
    assert [t.dtype for t in half.scales] == [torch.float16] * 2 and half.table[0].dtype == torch.float16
    assert half.idxs.dtype == torch.int64  # integer state stays as it is
    assert module.bias_cache["cpu"].dtype == torch.float32 and module.scales[0].dtype == torch.float32
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(half(x.half()).float(), module(x), rtol=2e-2, atol=2e-2)


def test_an_fp16_program_of_a_cached_module_exports_runs_and_serves(tmp_path: Path) -> None:
    module = _ran_in_fp32()
    outs = export_program(
        module, {"X": torch.randn(4, 8)}, tmp_path / "export" / "model.pt2", precision="fp16"
    )
    assert outs == [("FP32", "OUTPUT_0", [8])]
    plan = ExecutionPlan(
        "cpu", "torch", "fp16", (1, 2, 4, 8), False, (InstanceGroup("KIND_CPU", 1, []),), "t"
    )
    repo = tmp_path / "repo"
    version = write_torch_version(
        repo, "cached", module, {"X": torch.randn(4, 8)}, ["Y"], plan, max_batch_size=8
    )
    gate = (version / "build.json").read_text()
    assert '"passed": true' in gate
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    with (
        EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        request = httpclient.InferInput("X", [3, 8], "FP32")
        request.set_data_from_numpy(x)
        got = client.infer("cached", [request]).as_numpy("Y")
    assert got is not None and got.shape == (3, 8)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
