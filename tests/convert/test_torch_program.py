"""GPU execution path, everything up to the GPU: the serving spec, the execution plan (device,
engine, precision, buckets, KIND_GPU placement), the torch runner's bucket logic and engine on the
CPU, the export of a tiny module, and the version it writes served by the real tritonserver."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonkit.backends.runners import load_runner
from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig
from tritonkit.convert.spec.execution import (
    PIPELINE_REMOVED,
    ExecutionPlan,
    Placement,
    ServingSpec,
    default_buckets,
    gpu_placement_problems,
    plan_execution,
)
from tritonkit.convert.spec.gpu_profiles import PROFILES
from tritonkit.convert.targets.torch_program import write_torch_version
from tritonkit.errors import AccuracyError, BuildError, SpecError
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions


def _runner() -> ModuleType:
    return load_runner("torch_runner")


def test_buckets_pad_up_and_chunk_over_the_largest() -> None:
    runner = _runner()
    buckets = runner.parse_buckets("", 48)
    assert buckets == [1, 2, 4, 8, 16, 32, 48] == list(default_buckets(48))
    assert runner.plan_chunks(5, buckets) == [(5, 8)]
    assert runner.plan_chunks(1, buckets) == [(1, 1)]
    assert runner.plan_chunks(100, buckets) == [(48, 48), (48, 48), (4, 4)]
    assert runner.parse_buckets("16, 4,64", 64) == [4, 16, 64]
    # A max batch below the buckets (lowered by hand or by tune) clamps them instead of refusing to load.
    assert runner.parse_buckets("1,8,64,128", 32) == [1, 8, 32]
    assert runner.parse_buckets("128", 64) == [64]
    assert runner.padded_rows(5, buckets) == 3 and runner.padded_rows(32, buckets) == 0
    with pytest.raises(ValueError, match="comma-separated integers; got 'a,b'"):
        runner.parse_buckets("a,b", 64)


def test_engine_on_cpu_matches_the_module_for_every_batch() -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    runner = _runner()
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh())
    engine = runner.GraphEngine(module, "cpu", [torch.float32], [torch.float32], [1, 2, 4, 8])
    assert not engine.use_graphs  # CUDA graphs only on a GPU
    for batch in (1, 3, 8, 19):
        x = torch.randn(batch, 6)
        (out,) = engine.run([x])
        assert out.shape == (batch, 5)
        torch.testing.assert_close(out, module(x).detach())


def test_serving_spec_parses_and_refuses_in_one_line() -> None:
    spec = ServingSpec.from_mapping(
        {
            "device": "gpu",
            "engine": "torch",
            "precision": "fp16",
            "batch_buckets": [8, 1, 64],
            "instances": {"count": 2, "gpus": [1, 0]},
        }
    )
    assert spec.batch_buckets == (1, 8, 64) and spec.placement == Placement(2, (0, 1))
    assert ServingSpec.from_mapping(None) == ServingSpec()
    with pytest.raises(SpecError, match=re.escape("serving.device must be one of auto, gpu, cpu; got 'tpu'")):
        ServingSpec.from_mapping({"device": "tpu"})
    with pytest.raises(SpecError, match=re.escape("serving.instances.count must be an integer >= 1; got 0")):
        ServingSpec.from_mapping({"instances": {"count": 0}})
    with pytest.raises(SpecError, match="unknown key"):
        ServingSpec.from_mapping({"gpu": "h100"})


def test_the_removed_pipeline_flag_is_refused_in_one_line_naming_the_native_runner() -> None:
    for asked in (True, "yes"):
        with pytest.raises(SpecError, match=re.escape(PIPELINE_REMOVED)):
            ServingSpec.from_mapping({"engine": "torch", "pipeline": asked})
    assert "serving.runner: native" in PIPELINE_REMOVED and "\n" not in PIPELINE_REMOVED
    # a spec written before the removal says false: the only behaviour left, accepted
    assert ServingSpec.from_mapping({"engine": "torch", "pipeline": False}) == ServingSpec(engine="torch")
    assert "pipeline" not in ServingSpec().to_mapping()
    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=8, gpus=[0])
    assert "pipeline" not in plan.runner_parameters()
    assert "pipeline" not in plan.manifest_extra()["execution"]


def test_plan_defaults_to_the_gpu_when_one_is_visible() -> None:
    plan = plan_execution(ServingSpec(), max_batch_size=64, gpus=[0, 1], profile=PROFILES["H100"])
    assert (plan.device, plan.engine, plan.precision) == ("gpu", "torch", "fp16")
    assert plan.batch_buckets == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)  # the fine ladder
    assert plan.instance_groups == (InstanceGroup(kind="KIND_GPU", count=2, gpus=[0, 1]),)
    assert plan.runner_parameters()["FORCE_CPU_ONLY_INPUT_TENSORS"] == "no"
    placed = plan_execution(
        ServingSpec(placement=Placement(3, (1,))), max_batch_size=8, gpus=[0, 1], engines=("onnxruntime",)
    )
    assert placed.engine == "onnxruntime"
    assert placed.instance_groups == (InstanceGroup(kind="KIND_GPU", count=3, gpus=[1]),)
    recorded = plan.manifest_extra()["execution"]
    assert recorded["precision"] == "fp16" and recorded["instances"] == [
        {"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}
    ]


def test_without_a_gpu_nothing_changes_and_gpu_requests_are_refused() -> None:
    plan = plan_execution(ServingSpec(), max_batch_size=16, gpus=[])
    assert (plan.device, plan.engine, plan.precision, plan.reason) == (
        "cpu",
        "onnxruntime",
        "fp32",
        "no GPU visible here",
    )
    assert plan.instance_groups == (InstanceGroup(kind="KIND_CPU", count=1),)
    with pytest.raises(SpecError, match=re.escape("serving.device is gpu but no GPU is visible here")):
        plan_execution(ServingSpec(device="gpu"), max_batch_size=16, gpus=[])
    with pytest.raises(
        SpecError, match=re.escape("serving.instances.gpus names GPU(s) [3]; visible here: [0]")
    ):
        plan_execution(ServingSpec(placement=Placement(1, (3,))), max_batch_size=16, gpus=[0])
    t4_fp32 = plan_execution(
        ServingSpec(precision="fp32"), max_batch_size=16, gpus=[0], profile=PROFILES["T4"]
    )
    assert t4_fp32.precision == "fp32"


def test_check_refuses_kind_gpu_without_a_gpu() -> None:
    config = ModelConfig(
        name="m",
        backend="python",
        max_batch_size=4,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("Y", "FP32", [4])],
        instance_groups=[InstanceGroup(kind="KIND_GPU", count=1, gpus=[0, 2])],
    )
    assert gpu_placement_problems(config, []) == [
        "m: instance_group KIND_GPU needs a GPU; none is visible here"
    ]
    assert gpu_placement_problems(config, [0, 1]) == ["m: instance_group names GPU(s) [2]; visible: [0, 1]"]
    assert gpu_placement_problems(config, [0, 1, 2]) == []


class _Tiny:  # built lazily so collection does not import torch
    @staticmethod
    def make() -> object:
        import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

        class Tiny(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.proj = torch.nn.Linear(8, 4)

            def forward(self, X: torch.Tensor, MASK: torch.Tensor) -> torch.Tensor:  # noqa: N803 (ONNX input names)
                return self.proj(X) * MASK.to(X.dtype).sum(dim=1, keepdim=True)

        torch.manual_seed(0)
        return Tiny()


@pytest.mark.slow
def test_export_writes_a_version_that_serves_on_the_cpu(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    module = _Tiny.make()
    examples = {"X": torch.randn(2, 8), "MASK": torch.ones(2, 3, dtype=torch.int64)}
    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=8, gpus=[])
    version = write_torch_version(tmp_path / "repo", "tiny", module, examples, ["Y"], plan, max_batch_size=8)
    names = ["build.json", "gpu_requests.py", "host_stats.py", "model.fx.pt", "model.pt2", "model.py"]
    assert sorted(p.name for p in version.iterdir()) == names
    execution = json.loads((version / "build.json").read_text())["extra"]["execution"]
    assert (execution["device"], execution["engine"], execution["precision"]) == ("cpu", "torch", "fp32")

    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    mask = np.ones((5, 3), dtype=np.int64)
    want = module(torch.from_numpy(x), torch.from_numpy(mask)).detach().numpy()  # type: ignore[operator]
    # The client is closed before the server stops: Triton waits out its exit timeout for an open connection.
    with (
        EmbeddedServer(tmp_path / "repo", ServerOptions(exit_timeout=1)) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        inputs = [httpclient.InferInput("X", [5, 8], "FP32"), httpclient.InferInput("MASK", [5, 3], "INT64")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(mask)
        got = client.infer("tiny", inputs).as_numpy("Y")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bucket_ladders_end_at_the_max_batch() -> None:
    from tritonkit.convert.spec.execution import bucket_ladder, bucket_style  # noqa: PLC0415 (only here)

    assert bucket_ladder(128) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128)
    assert bucket_ladder(100, "pow2") == (1, 2, 4, 8, 16, 32, 64, 100) == default_buckets(100)
    assert bucket_ladder(256)[-5:] == (128, 160, 192, 224, 256) and bucket_ladder(0) == (1,)
    assert bucket_style(bucket_ladder(64), 64) == "fine" and bucket_style((1, 3, 64), 64) is None
    with pytest.raises(SpecError, match="bucket style 'odd': expected one of pow2, fine"):
        bucket_ladder(8, "odd")


def test_fast_artifact_moves_every_device_written_in_the_graph(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    from tritonkit.convert.targets.torch_program import export_program  # noqa: PLC0415 (only here)

    class Pick(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            steps = torch.arange(x.shape[1], device=x.device)  # written into the graph as device=cpu
            return (x + steps).index_select(1, torch.tensor([0, 2]).to(x.device))

    export_program(Pick(), {"x": torch.randn(2, 4)}, tmp_path / "model.pt2")
    assert (tmp_path / "model.fx.pt").is_file()
    runner = _runner()
    module, dtypes = runner.load_program(str(tmp_path / "model.pt2"), "meta")  # another device, no GPU needed
    assert dtypes == [torch.float32]
    with torch.inference_mode():
        (out,) = module(torch.zeros(3, 4, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (3, 2)
    eager, _ = runner.load_program(str(tmp_path / "model.pt2"), "cpu")
    x = torch.randn(3, 4)
    torch.testing.assert_close(eager(x)[0], Pick()(x))


@pytest.mark.slow
def test_fast_path_answers_with_numpy_and_dlpack_and_logs_its_host_time(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    from tritonkit.config import load, save  # noqa: PLC0415 (only here)

    module = _Tiny.make()
    examples = {"X": torch.randn(2, 8), "MASK": torch.ones(2, 3, dtype=torch.int64)}
    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=8, gpus=[])
    for exchange in ("numpy", "dlpack"):
        write_torch_version(
            tmp_path / "repo", f"tiny_{exchange}", module, examples, ["Y"], plan, max_batch_size=8
        )
        path = tmp_path / "repo" / f"tiny_{exchange}" / "config.pbtxt"
        config = load(path)
        config.parameters.update(tensor_exchange=exchange, stats_interval_s="0.000001")
        save(config, path)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    mask = np.ones((3, 3), dtype=np.int64)
    want = module(torch.from_numpy(x), torch.from_numpy(mask)).detach().numpy()  # type: ignore[operator]
    log = tmp_path / "server.log"
    with (
        EmbeddedServer(tmp_path / "repo", ServerOptions(log_file=log, exit_timeout=1)) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        for exchange in ("numpy", "dlpack"):
            inputs = [
                httpclient.InferInput("X", [3, 8], "FP32"),
                httpclient.InferInput("MASK", [3, 3], "INT64"),
            ]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(mask)
            got = client.infer(f"tiny_{exchange}", inputs).as_numpy("Y")
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    text = log.read_text()
    for exchange in ("numpy", "dlpack"):
        assert re.search(
            rf"torch_runner ready: tiny_{exchange} on cpu in [\d.]+ s .*{exchange} exchange", text
        )
        # The stats line comes only from the fast path: 3 rows in one execute, no padding on the CPU.
        stats = re.search(rf'torch_runner stats .*\\"model\\": \\"tiny_{exchange}\\".*', text)
        assert (
            stats is not None
            and '\\"rows\\": 3' in stats.group(0)
            and '\\"padded_rows\\": 0' in stats.group(0)
        )


def _fp16_plan() -> ExecutionPlan:
    """An FP16 torch plan: what a GPU host plans; export and the gate run on this CPU all the same."""
    return ExecutionPlan(
        "gpu", "torch", "fp16", (1, 2, 4, 8), False, (InstanceGroup("KIND_GPU", 1, [0]),), "test"
    )


@pytest.mark.slow
def test_an_fp16_program_with_half_io_takes_and_answers_fp16_on_the_server(tmp_path: Path) -> None:
    """``half_io``: the served version declares its float input and output FP16 and answers FP16 rows
    the FP16 program's way; an FP32 request is refused in one answer and the server keeps serving."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    module = _Tiny.make()
    examples = {"X": torch.randn(4, 8), "MASK": torch.ones(4, 3, dtype=torch.int64)}
    plan = ExecutionPlan(
        "cpu", "torch", "fp16", (1, 2, 4, 8), False, (InstanceGroup("KIND_CPU", 1, []),), "t"
    )
    repo = tmp_path / "repo"
    write_torch_version(repo, "tiny", module, examples, ["Y"], plan, max_batch_size=8, half_io=True)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float16)
    mask = np.ones((3, 3), dtype=np.int64)
    want = module(torch.from_numpy(x).float(), torch.from_numpy(mask)).detach().numpy()  # type: ignore[operator]
    with (
        EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        config = client.get_model_config("tiny")
        assert [(t["name"], t["data_type"]) for t in config["input"]] == [
            ("X", "TYPE_FP16"),
            ("MASK", "TYPE_INT64"),
        ]
        assert [(t["name"], t["data_type"]) for t in config["output"]] == [("Y", "TYPE_FP16")]

        def call(data: np.ndarray, datatype: str) -> np.ndarray:
            inputs = [
                httpclient.InferInput("X", [3, 8], datatype),
                httpclient.InferInput("MASK", [3, 3], "INT64"),
            ]
            inputs[0].set_data_from_numpy(data)
            inputs[1].set_data_from_numpy(mask)
            answer: np.ndarray = client.infer("tiny", inputs).as_numpy("Y")
            return answer

        got = call(x, "FP16")
        assert got.dtype == np.float16 and got.shape == (3, 4)
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
        with pytest.raises(Exception, match="FP32") as refused:
            call(x.astype(np.float32), "FP32")
        assert "FP16" in str(refused.value)
        assert call(x, "FP16").dtype == np.float16  # still serving


def test_half_io_needs_an_fp16_program(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=8, gpus=[])
    examples = {"X": torch.randn(2, 8), "MASK": torch.ones(2, 3, dtype=torch.int64)}
    with pytest.raises(
        BuildError, match=r"^FP16 inputs and outputs need an fp16 program; got precision fp32$"
    ):
        write_torch_version(
            tmp_path / "r", "tiny", _Tiny.make(), examples, ["Y"], plan, max_batch_size=8, half_io=True
        )
    assert not (tmp_path / "r" / "tiny").exists()


def test_a_write_below_fp32_is_gated_against_the_fp32_module(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    module = _Tiny.make()
    examples = {"X": torch.randn(4, 8), "MASK": torch.ones(4, 3, dtype=torch.int64)}
    version = write_torch_version(
        tmp_path / "repo", "tiny", module, examples, ["Y"], _fp16_plan(), max_batch_size=8
    )
    gate = json.loads((version / "build.json").read_text())["accuracy"]
    assert gate["passed"] and gate["samples"] == 4 and gate["runtime"].startswith("torch.export-")
    assert gate["thresholds"] == {"mean": 0.999, "min": 0.99}  # the spec's default fp16 marks


def test_a_program_below_its_marks_writes_nothing(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Fragile(torch.nn.Module):  # FP16 keeps 11 bits: sin(3000 x) of a half x is another number
        def forward(self, X: torch.Tensor) -> torch.Tensor:  # noqa: N803 (ONNX input names)
            return torch.sin(X * 3000.0)

    examples = {"X": torch.rand(8, 16)}
    with pytest.raises(AccuracyError, match=r"^accuracy gate failed for `fragile` \(fp16\): mean cosine"):
        write_torch_version(
            tmp_path / "repo", "fragile", Fragile(), examples, ["Y"], _fp16_plan(), max_batch_size=8
        )
    assert not (tmp_path / "repo" / "fragile").exists()
