"""The GPU runners on a GPU (``gpu`` marker: skipped here with the reason printed): versions written
by tritonkit.convert.targets.torch_program, served by the real tritonserver on KIND_GPU instances, answer as
the module does; CUDA graph replay equals eager execution for every batch size."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonkit.backends.runners import load_runner
from tritonkit.convert.spec.execution import Placement, ServingSpec, plan_execution
from tritonkit.convert.targets.torch_program import write_onnx_gpu_version, write_torch_version
from tritonkit.serve.embedded import EmbeddedServer

pytestmark = pytest.mark.gpu


def _load(name: str) -> ModuleType:
    return load_runner(name)


def _tiny() -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            # a tensor made on the input's device: a traced program must follow its instance's GPU
            offset = torch.arange(8, device=x.device).to(x.dtype) * 0.01
            out: torch.Tensor = self.mlp(x) * mask.to(x.dtype).sum(dim=1, keepdim=True) + offset
            return out

    torch.manual_seed(0)
    return Tiny().eval()


def test_cuda_graph_replay_equals_eager_for_every_batch() -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    runner = _load("torch_runner")
    module = _tiny().cuda()
    graphs = runner.GraphEngine(module, "cuda:0", [torch.float32, torch.int64], [torch.float32], [1, 4, 16])
    assert graphs.use_graphs
    for batch in (1, 3, 16, 37):
        x = torch.randn(batch, 16, device="cuda")
        mask = torch.ones(batch, 5, dtype=torch.int64, device="cuda")
        (out,) = graphs.run([x, mask])
        with torch.inference_mode():
            torch.testing.assert_close(out, module(x, mask), rtol=1e-4, atol=1e-4)
    assert {key[0] for key in graphs.graphs} == {1, 4, 16}


@pytest.mark.parametrize("runner", ["python", "native"])
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_torch_version_serves_on_kind_gpu(tmp_path: Path, precision: str, runner: str) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    module = _tiny()
    examples = {"X": torch.randn(2, 16), "MASK": torch.ones(2, 5, dtype=torch.int64)}
    # The last visible GPU: on a host of several, the program runs on a GPU other than the one it was traced on.
    last = torch.cuda.device_count() - 1
    serving = ServingSpec(precision=precision, runner=runner, placement=Placement(1, (last,)))
    plan = plan_execution(serving, max_batch_size=32)
    assert (plan.device, plan.engine, plan.precision) == ("gpu", "torch", precision)
    version = write_torch_version(
        tmp_path / "repo", "tiny", _tiny(), examples, ["Y"], plan, max_batch_size=32
    )
    execution = json.loads((version / "build.json").read_text())["extra"]["execution"]
    assert execution["instances"][0]["kind"] == "KIND_GPU"

    rng = np.random.default_rng(3)
    with EmbeddedServer(tmp_path / "repo") as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for batch in (1, 7, 32):
            x = rng.standard_normal((batch, 16)).astype(np.float32)
            mask = np.ones((batch, 5), dtype=np.int64)
            inputs = [
                grpcclient.InferInput("X", [batch, 16], "FP32"),
                grpcclient.InferInput("MASK", [batch, 5], "INT64"),
            ]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(mask)
            got = client.infer("tiny", inputs).as_numpy("Y")
            with torch.inference_mode():
                want = module(torch.from_numpy(x), torch.from_numpy(mask)).numpy()
            tolerance = 2e-2 if precision == "fp16" else 1e-4
            np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_onnx_cuda_runner_serves_on_kind_gpu(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip(
            f"needs onnxruntime-gpu first on the path; onnxruntime {ort.__version__} offers {ort.get_available_providers()}"
        )

    module = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh()).eval()
    onnx_path = tmp_path / "m.onnx"
    torch.onnx.export(
        module,
        (torch.randn(2, 16),),
        str(onnx_path),
        input_names=["X"],
        output_names=["Y"],
        dynamic_axes={"X": {0: "batch"}, "Y": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    plan = plan_execution(
        ServingSpec(engine="onnxruntime", precision="fp32"), max_batch_size=16, engines=("onnxruntime",)
    )
    write_onnx_gpu_version(onnx_path, tmp_path / "repo", "m", plan, max_batch_size=16)
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    with EmbeddedServer(tmp_path / "repo") as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        inp = grpcclient.InferInput("X", [5, 16], "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("m", [inp]).as_numpy("Y")
    with torch.inference_mode():
        # ONNX Runtime's CUDA provider multiplies FP32 in TF32 by default (about 3e-4 relative).
        np.testing.assert_allclose(got, module(torch.from_numpy(x)).numpy(), rtol=2e-3, atol=2e-3)


def test_shape_buckets_on_kind_gpu_pad_group_and_cut(tmp_path: Path) -> None:
    """The torch runner's bucketed path on a GPU: every (batch, shape) graph captured at load, mixed
    lengths in one execute through the real tritonserver, token-level answers at their own length."""
    import threading  # noqa: PLC0415

    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from tests.convert.test_shape_buckets_build import tokens  # noqa: PLC0415
    from tests.convert.test_shape_buckets_torch import BUCKETS  # noqa: PLC0415

    source = tokens()
    examples = dict(zip(source.input_names, source.example_inputs, strict=True))
    plan = plan_execution(ServingSpec(engine="torch", runner="python"), max_batch_size=16)
    assert (plan.device, plan.engine) == ("gpu", "torch")
    write_torch_version(
        tmp_path / "repo", "tok", source.module, examples, list(source.output_names), plan,
        max_batch_size=16, buckets=BUCKETS, max_queue_delay_us=100000,
    )  # fmt: skip
    lengths = [2, 31, 9, 16, 17, 5, 32, 11]
    rng = np.random.default_rng(5)
    sent = [rng.integers(1, 100, (1, n)).astype(np.int64) for n in lengths]
    got: dict[int, Any] = {}

    def call(url: str, i: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        feeds = []
        for name, value in (("input_ids", sent[i]), ("attention_mask", np.ones_like(sent[i]))):
            tensor = grpcclient.InferInput(name, list(value.shape), "INT64")
            tensor.set_data_from_numpy(value)
            feeds.append(tensor)
        got[i] = client.infer("tok", feeds).as_numpy("hidden")

    with EmbeddedServer(tmp_path / "repo") as server:
        threads = [threading.Thread(target=call, args=(server.grpc_url, i)) for i in range(len(sent))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for i, ids in enumerate(sent):
        with torch.inference_mode():
            hidden, _ = source.module(torch.from_numpy(ids), torch.ones_like(torch.from_numpy(ids)))
        assert got[i].shape == (1, lengths[i], 8)
        np.testing.assert_allclose(got[i], hidden.numpy(), rtol=1e-4, atol=1e-4)
