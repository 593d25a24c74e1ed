"""The GPU benchmark's parts that need no GPU: versions built on the CPU (ResNet-50 FP16 taking FP32
images, the tune's MiniLM version whose buckets follow the max batch), the load payloads, argument
parsing, and the page rendered from a figures dict with every section. A ``gpu``-marked smoke test
runs the ResNet part for real where a GPU is present."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonkit.config import load
from tritonkit.convert.flagship.resnet import build_resnet50
from tritonkit.tune.space import apply_point, axes_for, base_point
from tritonkit_bench import gpu, gpu_render, gpu_tune
from tritonkit_bench.gpu_load import IMAGE, TEXT
from tritonkit_bench.gpu_models import PARTS, build_part, image_examples, runner


def test_resnet_fp16_version_takes_fp32_images_and_matches_fp32(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    built: list[str] = []
    # 32 x 32 images: the same graph as 224 x 224 (adaptive pooling), small enough for the CPU.
    versions = build_part(tmp_path / "repo", "resnet", False, built.append, gpus=[0], image_size=32)
    assert list(versions) == ["resnet50_fp16", "resnet50_fp32"] and built == [f"built {v}" for v in versions]
    cfg = load(tmp_path / "repo" / "resnet50_fp16" / "config.pbtxt")
    assert [(t.name, t.data_type, t.dims) for t in cfg.inputs] == [("image", "FP32", [3, 32, 32])]
    assert [(t.name, t.data_type, t.dims) for t in cfg.outputs] == [("logits", "FP32", [1000])]
    assert cfg.max_batch_size == 64 and cfg.parameters["precision"] == "fp16"
    assert cfg.parameters["batch_buckets"] == "1,2,4,8,16,32,64"
    assert cfg.dynamic_batching is not None and cfg.instance_groups[0].kind == "KIND_GPU"

    torch_runner = runner("torch_runner")
    module, dtypes = torch_runner.load_program(
        str(tmp_path / "repo" / "resnet50_fp16" / "1" / "model.pt2"), "cpu"
    )
    assert dtypes == [torch.float16]  # the program is half; the engine casts the FP32 images
    engine = torch_runner.GraphEngine(module, "cpu", dtypes, [torch.float32], [1, 2, 4])
    images = image_examples(3, seed=7, size=32)["image"]
    (out,) = engine.run([images])
    assert out.dtype == torch.float32 and tuple(out.shape) == (3, 1000)
    with torch.inference_mode():
        ref = build_resnet50()(images)
    cosine = torch.nn.functional.cosine_similarity(out.double(), ref.double(), dim=1)
    assert float(cosine.min()) > 0.99


def test_tune_version_buckets_follow_the_max_batch(tmp_path: Path) -> None:
    gpu_tune.write_tune_version(tmp_path, gpus=[0])
    cfg = load(tmp_path / gpu_tune.MODEL / "config.pbtxt")
    assert cfg.parameters["batch_buckets"] == ""  # the runner's default: powers of two up to max batch
    assert cfg.max_batch_size == 256 and cfg.dynamic_batching is not None
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert runner("torch_runner").parse_buckets(cfg.parameters["batch_buckets"], 16) == [1, 2, 4, 8, 16]
    settings = gpu_tune.TuneSettings()
    axes = axes_for(
        cfg,
        max_batch_sizes=settings.max_batch_sizes,
        delays_us=settings.delays_us,
        instances=settings.instances,
        queue=False,
    )
    base = base_point(cfg)
    assert (base["instances"], base["max_batch_size"], base["delay_us"]) == (2, 256, 500)
    assert base["instances"] in settings.instances and 256 in settings.max_batch_sizes
    small = apply_point(cfg, {**base, "max_batch_size": 16, "delay_us": "off", "kind": "KIND_CPU"})
    assert small.max_batch_size == 16 and small.dynamic_batching is None
    assert {a.name for a in axes} == {"instances", "kind", "max_batch_size", "delay_us", "preferred"}


def test_payloads_build_requests_of_the_models_inputs() -> None:
    (image,) = IMAGE.arrays(2, seed=1)
    assert image[0] == "image" and image[1].shape == (2, 3, 224, 224) and image[2] == "FP32"
    assert image[1].dtype == np.float32 and image[1].nbytes == 2 * 602112
    ids, mask = TEXT.arrays(4, seed=1)
    assert (ids[0], ids[1].shape, ids[2]) == ("input_ids", (4, 128), "INT64")
    assert ids[1].min() >= 1000 and ids[1].max() < 30522
    assert mask[0] == "attention_mask" and (mask[1] == 1).all()


def test_arguments() -> None:
    args = gpu.parse_args(
        ["--only", "resnet,tune", "--tune-delays-us", "off,0,2000", "--tune-protocol", "http"]
    )
    assert args.only == ["resnet", "tune"]
    assert args.tune.delays_us == ("off", 0, 2000) and args.tune.protocol == "http"
    default = gpu.parse_args([])
    assert default.only == ["minilm", "resnet", "tune"] and default.tune.protocol == "http"
    assert gpu.parse_args(["--tune-protocol", "grpc"]).tune.protocol == "grpc"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--only", "bert"], "expected a comma-separated subset of minilm,resnet,tune; got 'bert'"),
        (
            ["--tune-delays-us", "off,soon"],
            "--tune-delays-us 'off,soon': expected comma-separated whole numbers or off",
        ),
        (["--tune-instances", "off"], "--tune-instances 'off': expected comma-separated whole numbers"),
        (["--merge", "/nonexistent.json"], "/nonexistent.json: file not found"),
        (["--render-from", "/nonexistent.json"], "/nonexistent.json: file not found"),
    ],
)
def test_bad_arguments_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        gpu.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _row(
    part: str, model: str, batch: int, flight: int, rate: float, avg: float, **extra: Any
) -> dict[str, Any]:
    return {
        "part": part, "model": model, "batch": batch, "in_flight": flight, "samples_per_s": rate,
        "requests": int(rate), "errors": 0, "first_error": "", "p50_ms": 5.0, "p99_ms": 8.0,
        "avg_batch": avg, "queue_us": 1400.0, "compute_us": 4000.0, "client_cpu_share": 0.1,
        "server_cpu_share": 0.1, "gpu_util": 30.0, **extra,
    }  # fmt: skip


def _figures() -> dict[str, Any]:
    minilm = {
        "versions": {
            "minilm_fp16": "torch fp16",
            "minilm_fp16_nodb": "torch fp16",
            "minilm_fp32": "torch fp32",
        },
        "batches": [1, 16, 64, 256],
        "in_process": {
            "torch fp16 CUDA graphs": {
                "1": 3000.0,
                "16": 30000.0,
                "20": 27000.0,
                "64": 56000.0,
                "256": 65000.0,
            },
            "torch fp32 CUDA graphs": {"1": 1100.0, "16": 7900.0, "64": 11000.0, "256": 12400.0},
        },
        "accuracy": {"minilm_fp16": {"min": 0.9999998, "mean": 0.9999999, "top1": 1.0}},
        "served": [
            _row(
                "minilm",
                "minilm_fp16",
                1,
                64,
                11600.0,
                20.0,
                effective_batch=20,
                effective_in_process=27000.0,
            ),
            _row("minilm", "minilm_fp16_nodb", 1, 64, 2100.0, 1.0),
            _row("minilm", "minilm_fp16", 16, 16, 48000.0, 84.0),
            _row("minilm", "minilm_fp32", 16, 16, 10000.0, 80.0),
        ],
    }
    resnet = {
        "versions": {"resnet50_fp16": "torch fp16", "resnet50_fp32": "torch fp32"},
        "batches": [1, 16, 64],
        "in_process": {
            "torch fp16 CUDA graphs": {"1": 400.0, "16": 3000.0, "64": 4000.0},
            "torch fp32 CUDA graphs": {"1": 200.0, "16": 1000.0, "64": 1200.0},
        },
        "accuracy": {
            "resnet50_fp16": {"min": 0.9981, "mean": 0.9995, "top1": 0.95},
            "resnet50_fp32": {"min": 1.0, "mean": 1.0, "top1": 1.0},
        },
        "served": [
            _row(
                "resnet",
                "resnet50_fp16",
                16,
                16,
                3600.0,
                64.0,
                effective_batch=64,
                effective_in_process=4000.0,
            ),
            _row(
                "resnet",
                "resnet50_fp32",
                16,
                16,
                1000.0,
                64.0,
                effective_batch=64,
                effective_in_process=1200.0,
            ),
        ],
    }

    def trial(instances: int, mbs: int, delay: int | str, rate: float) -> dict[str, Any]:
        point = {"instances": instances, "kind": "KIND_CPU", "max_batch_size": mbs, "delay_us": delay}
        key = " ".join(f"{k}={point[k]}" for k in sorted(point))
        best = {
            "average_batch": 12.0,
            "queue_us": 900.0,
            "compute_infer_us": 2000.0,
            "generator_limited": False,
        }
        return {"key": key, "point": point, "throughput": rate, "concurrency": 32, "p50_ms": 3.0, "p99_ms": 9.0,
                "stable": True, "best": best, "levels": [best]}  # fmt: skip

    trials = [trial(2, 256, 500, 9000.0), trial(1, 16, "off", 1500.0), trial(2, 256, "off", 2500.0)]
    tune = {
        "settings": {**json.loads(json.dumps(gpu_tune.TuneSettings().__dict__)), "model": "minilm_fp16", "about": "x"},
        "seconds": 110.0, "evaluations": 3, "measurements": 21,
        "winner": trials[0], "baseline": trials[0], "trials": trials,
    }  # fmt: skip
    return {
        "machine": {"gpu": "NVIDIA H100", "driver": "580", "cores": 16, "python": "3.12", "torch": "2.11",
                    "onnxruntime": "absent"},
        "when": "2026-11-23 04:00 UTC", "parts": {"minilm": minilm, "resnet": resnet}, "tune": tune,
    }  # fmt: skip


def test_render_every_section() -> None:
    text = gpu_render.render(_figures())
    for heading in ("# GPU benchmarks", "## MiniLM", "## ResNet-50", "## Targets", "## Tune on the GPU"):
        assert f"\n{heading}\n" in f"\n{text}"
    assert "| torch fp16 CUDA graphs | 400 | 3,000 | 4,000 |" in text
    assert "| resnet50_fp16 | 0.9981000 | 0.9995000 | 95.0 % | >= 0.999 | no |" in text
    assert (
        "| dynamic batching gain, 2 instances, requests of 1, 64 in flight (fp16) | 5.5x | >= 12x | no |"
        in text
    )
    assert "| serving efficiency resnet50_fp16, requests of 16, 16 in flight (in-process at batch 64: 4,000/s) " \
        "| 0.90 | >= 0.85 | yes |" in text  # fmt: skip
    assert "| FP16 cosine vs FP32 (resnet50_fp16, min over rows) | 0.9981000 | >= 0.999 | no |" in text
    # Misses name the gap and its cause: host work per execute against the engine's own time.
    missed = text.split("### Missed: the gap and its cause")[1].split("## Tune")[0]
    assert "minilm_fp16, requests of 1 at 64 in flight: 0.43 (target 0.85)" in missed
    assert "Each execute took 4,000 µs against 741 µs for the engine alone" in missed
    assert "resnet50_fp32, requests of 16 at 16 in flight: 0.83" in missed and "602 KB" in missed
    assert "so the time is lost outside the execute call" in missed  # execute no slower than the engine
    assert "resnet50_fp16: FP16 cosine min 0.9981000" in missed
    assert "FP16 against FP32 in-process at batch 64: 4,000 against 1,200 samples/s (3.3x)." in text
    assert "Served, requests of 16 at 16 in flight: 48,000 against 10,000 samples/s (4.8x)." in text
    ranked = [line for line in text.splitlines() if line.startswith("| 1 |") or line.startswith("| 3 |")]
    assert ranked[0].startswith(
        "| 1 | `instances=2 max_batch_size=256 delay_us=500` (winner) (baseline: as built)"
    )
    assert ranked[1].startswith("| 3 | `instances=1 max_batch_size=16 delay_us=off`")
    assert "3 configs, 21 load levels, 1.8 minutes." in text
    data = _figures()
    data["tune"]["trials"][2] = {**data["tune"]["trials"][2], "error": "", "throughput": 0.0, "levels": []}
    assert " | 0 | failed: (no message)" in gpu_render.render(data)


def test_render_partial_and_failed_tune() -> None:
    data = _figures()
    del data["parts"]["minilm"]
    data["tune"] = {**data["tune"], "error": "TritonKitError: model failed to load"}
    text = gpu_render.render(data)
    assert "## MiniLM" not in text and "## ResNet-50" in text and "dynamic batching gain" not in text
    assert "Tune did not finish: TritonKitError: model failed to load" in text
    empty = copy.deepcopy(data)
    empty["parts"]["resnet"]["served"] = []
    empty["parts"]["resnet"]["accuracy"] = {}
    assert "(not run: --skip-served)" in gpu_render.render(empty)
    row = _row("resnet", "resnet50_fp16", 1, 64, 0.0, 1.0, p50_ms=math.nan, p99_ms=math.nan)  # all failed
    assert "| nan" not in gpu_render.render(
        {**empty, "parts": {"resnet": {**empty["parts"]["resnet"], "served": [row]}}}
    )


def test_every_part_serves_its_scenarios_versions() -> None:
    for part in PARTS.values():
        built = {v[0] for v in part.versions} | ({"minilm_ort_fp32"} if part.name == "minilm" else set())
        assert {s[0] for s in part.scenarios} <= built
        assert set(part.engine_of) <= built
        assert {e[2] for e in part.engines} | {"onnxruntime fp32 CUDA I/O binding"} >= set(
            part.engine_of.values()
        )


@pytest.mark.gpu
def test_resnet_part_on_the_gpu(tmp_path: Path) -> None:
    """The ResNet part end to end (short windows): every row answered, figures in the page."""
    out, raw = tmp_path / "page.md", tmp_path / "raw.json"
    assert gpu.main(["--only", "resnet", "--seconds", "1", "--out", str(out), "--raw", str(raw)]) == 0
    data = json.loads(raw.read_text())
    rows = data["parts"]["resnet"]["served"]
    assert len(rows) == 3 and all(r["errors"] == 0 and r["requests"] > 0 for r in rows)
    assert data["parts"]["resnet"]["accuracy"]["resnet50_fp16"]["min"] > 0.99
    assert "## ResNet-50" in out.read_text()


def test_render_from_runs_measured_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Parts measured in separate runs (the device's per-command limit) make one page, no GPU needed."""
    full = _figures()
    first = {**full, "parts": {"minilm": full["parts"]["minilm"]}, "tune": None}
    second = {**full, "parts": {"resnet": full["parts"]["resnet"]}, "when": "2026-11-23 04:30 UTC"}
    a, b, out, raw = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "page.md", tmp_path / "all.json"
    a.write_text(json.dumps(first))
    b.write_text(json.dumps(second))
    assert gpu.main(["--render-from", str(a), str(b), "--out", str(out), "--raw", str(raw)]) == 0
    assert out.read_text() == gpu_render.render(json.loads(raw.read_text()))
    text = out.read_text()
    assert "## MiniLM" in text and "## ResNet-50" in text and "## Tune on the GPU" in text
    assert "Run 2026-11-23 04:30 UTC." in text
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    capsys.readouterr()
    assert gpu.main(["--render-from", str(bad), "--out", str(tmp_path / "x.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected a --raw JSON of this benchmark" in err
    assert not (tmp_path / "x.md").exists()
