"""The GPU benchmark up to the GPU: its versions as a build writes them, the parts' payloads, a served
sweep and the tune step (``tritonkit tune`` then ``tritonkit profile`` as commands) against the real
embedded server on the CPU with a tiny model, arguments, and the page rendered from figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tritonkit.config import load, save
from tritonkit.convert.graph.flagship.resnet import build_resnet50
from tritonkit_bench import gpu, gpu_render, gpu_tune
from tritonkit_bench.gpu_measure import alone, in_process, sweep
from tritonkit_bench.gpu_models import (
    PARTS,
    TINY,
    Part,
    Payload,
    build_part,
    image_examples,
    runner,
    served_examples,
    tiny_inputs,
    tiny_module,
)

TINY16 = Payload((("X", (8,), "normal16"), ("MASK", (3,), "ones")), "Y")


@pytest.fixture
def tiny_part(monkeypatch: pytest.MonkeyPatch) -> str:
    part = Part("tiny", "a linear layer", TINY, 16, (1, 4, 16), (1, 4), 500.0, tiny_module, tiny_inputs)
    monkeypatch.setitem(PARTS, "tiny", part)
    return "tiny"


def _on_cpu(repo: Path, model: str) -> None:
    """The KIND_GPU version the build wrote, placed on the CPU (this machine has no GPU)."""
    path = repo / model / "config.pbtxt"
    config = load(path)
    config.instance_groups[0].kind, config.instance_groups[0].gpus = "KIND_CPU", []
    config.parameters["device"] = "cpu"
    save(config, path)


def test_versions_are_what_a_build_writes(tmp_path: Path, tiny_part: str) -> None:
    built: list[str] = []
    version = build_part(tmp_path, tiny_part, built.append, gpus=[0])
    cfg = load(tmp_path / "tiny_fp16" / "config.pbtxt")
    names = ["build.json", "gpu_requests.py", "host_stats.py", "model.fx.pt", "model.pt2", "model.py"]
    assert sorted(p.name for p in version.iterdir()) == names
    assert cfg.instance_groups[0].kind == "KIND_GPU" and cfg.instance_groups[0].count == 2
    assert cfg.parameters["batch_buckets"] == "1,2,4,8,16" and cfg.parameters["precision"] == "fp16"
    assert cfg.dynamic_batching is not None and cfg.dynamic_batching.preferred_batch_size == [1, 2, 4, 8, 16]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert built == ["built tiny_fp16 (python runner): 2 instance(s) per GPU, buckets [1, 2, 4, 8, 16]"]


def test_resnet_fp16_program_takes_fp32_images_and_matches_fp32(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    build_part(tmp_path, "resnet", lambda _: None, gpus=[0])
    cfg = load(tmp_path / "resnet_fp16" / "config.pbtxt")
    assert [(t.name, t.data_type, t.dims) for t in cfg.inputs] == [("image", "FP32", [3, 224, 224])]
    assert cfg.parameters["batch_buckets"] == "1,2,4,8,16,24,32,40,48,56,64"
    torch_runner = runner("torch_runner")
    module, dtypes = torch_runner.load_program(str(tmp_path / "resnet_fp16" / "1" / "model.pt2"), "cpu")
    assert dtypes == [torch.float16]  # the fast FX twin carries the program's input dtypes
    # 32 x 32 images: the same graph (adaptive pooling), small enough for the CPU.
    images = image_examples(3, seed=7, size=32)["image"]
    (out,) = torch_runner.GraphEngine(module, "cpu", dtypes, [torch.float32], [1, 2, 4]).run([images])
    assert out.dtype == torch.float32 and tuple(out.shape) == (3, 1000)
    with torch.inference_mode():
        ref = build_resnet50()(images)
    assert float(torch.nn.functional.cosine_similarity(out.double(), ref.double(), dim=1).min()) > 0.99


def test_every_part_s_payload_names_the_inputs_and_output_its_version_takes(tmp_path: Path) -> None:
    """A part's payload describes its version: the inputs (names, per-row shapes) its examples feed and
    the output the build names."""
    for name, part in PARTS.items():
        feeds = served_examples(name, 2)
        assert [(n, tuple(shape)) for n, shape, _ in part.payload.inputs] == [
            (n, tuple(t.shape[1:])) for n, t in zip(part.inputs(2, 1, False), feeds, strict=True)
        ], name
        assert {fill for _, _, fill in part.payload.inputs} <= {"ids", "ones", "normal", "normal16"}
    assert PARTS["bert"].payload.output == "CLS" and PARTS["minilm"].payload.output == "EMBEDDING"
    assert PARTS["resnet16"].payload.inputs[0][2] == "normal16" and PARTS["resnet16"].half_io


@pytest.mark.parametrize("runner", ["python", "native"])
def test_sweep_then_tune_and_profile_as_commands(tmp_path: Path, tiny_part: str, runner: str) -> None:
    repo = tmp_path / "repo"
    build_part(repo, tiny_part, lambda _: None, gpus=[0], runner=runner)
    assert load(repo / "tiny_fp16" / "config.pbtxt").backend == (
        "tritonkit_torch" if runner == "native" else "python"
    )
    _on_cpu(repo, "tiny_fp16")
    rows = sweep(repo, tiny_part, (1, 4), 0.5, lambda _: None)
    assert [r["in_flight"] for r in rows] == [1, 4] and all(r["errors"] == 0 for r in rows)
    assert all(r["samples_per_s"] > 0 and r["avg_batch"] >= 1 for r in rows)
    assert rows[0]["padded_share"] == 0.0  # one row at a time: bucket 1, nothing padded
    # A grid whose max batches lie below the built buckets: every trial must load (buckets follow).
    settings = gpu_tune.TuneSettings(
        window_s=0.15, max_windows=3, stability_pct=50, workers=1, max_concurrency=2, finalists=0,
        profile_window_s=0.15,
        extra=("--instances", "1", "--max-batch-sizes", "2,16", "--delays-us", "0", "--no-queue-policy"),
    )  # fmt: skip
    figures = gpu_tune.run(repo, tiny_part, tmp_path / "work", settings, lambda _: None)
    assert figures["rc"] == 0 and not figures.get("error"), figures.get("log_tail")
    assert figures["refused"] == [] and figures["runs"] == len(figures["trials"]) >= 2
    keys = {t["key"] for t in figures["trials"]}
    assert any("max_batch_size=2" in k.split() for k in keys) and all("buckets=" in k for k in keys)
    # Where a trial's seconds go is shown: measuring in every trial, loading where a config was put in
    # (a config already in service, or a load under 0.05 s, rounds to 0.0).
    assert all(t["measure_s"] > 0 for t in figures["trials"]) and any(
        t["load_s"] > 0 for t in figures["trials"]
    )
    written = load(repo / "tiny_fp16" / "config.pbtxt")
    mbs = written.max_batch_size
    assert written.parameters["batch_buckets"].split(",")[-1] == str(mbs)  # buckets follow the winner
    profile = figures["profile"]
    assert profile["rc"] == 0 and profile["throughput"] > 0 and profile["ratio"] is not None
    # profile measures the config tune left: the winner when written, else the built config
    chosen = figures["winner"] if figures["written"] else figures["baseline"]
    assert isinstance(figures["written"], bool) and profile["concurrency"] == chosen["concurrency"]
    assert profile["padded_share"] is not None  # profile reports padding for a bucketed runner


def test_a_half_io_part_is_built_timed_served_and_tuned_in_fp16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part whose float input and output travel as FP16: the version declares them FP16, the engine
    timed in-process takes FP16 feeds, the generator sends FP16 rows, and tune and profile (whose own
    generator reads the config's types) load and measure it."""
    half = TINY16
    part = Part(
        "half", "a linear layer", half, 16, (1, 4), (1, 4), 500.0, tiny_module, tiny_inputs, half_io=True
    )
    monkeypatch.setitem(PARTS, "half", part)
    repo = tmp_path / "repo"
    build_part(repo, "half", lambda _: None, gpus=[0], runner="native")
    config = load(repo / "half_fp16" / "config.pbtxt")
    assert [t.data_type for t in [*config.inputs, *config.outputs]] == ["FP16", "INT64", "FP16"]
    _on_cpu(repo, "half_fp16")
    assert set(in_process(repo, "half", seconds=0.05, device="cpu")) == {"1", "4"}
    (back_to_back,) = alone(repo, "half", seconds=0.05, device="cpu")  # one FP16 row, host in and out
    assert 0.0 < back_to_back < 1000.0
    both = alone(repo, "half", seconds=0.05, device="cpu", pauses=(0.0, 0.001))  # one figure per pause
    assert len(both) == 2 and all(0.0 < ms < 1000.0 for ms in both)
    rows = sweep(repo, "half", (1, 4), 0.5, lambda _: None)
    assert all(r["errors"] == 0 and r["samples_per_s"] > 0 for r in rows)
    settings = gpu_tune.TuneSettings(
        window_s=0.15, max_windows=3, stability_pct=50, workers=1, max_concurrency=2, finalists=0,
        profile_window_s=0.15,
        extra=("--instances", "1", "--max-batch-sizes", "4", "--delays-us", "0", "--no-queue-policy"),
    )  # fmt: skip
    figures = gpu_tune.run(repo, "half", tmp_path / "work", settings, lambda _: None)
    assert figures["rc"] == 0 and figures["refused"] == [], figures.get("log_tail")
    assert figures["profile"]["rc"] == 0 and figures["profile"]["throughput"] > 0


def test_arguments() -> None:
    default = gpu.parse_args([])
    every = ["bert", "minilm", "resnet", "resnet16"]
    assert default.only == every and default.tune == every
    args = gpu.parse_args(["--only", "resnet,bert", "--tune", "bert"])
    assert args.only == ["resnet", "bert"] and args.tune == ["bert"]
    assert gpu.parse_args(["--no-tune"]).tune == []
    assert default.protocols == ["grpc", "http"] and gpu.parse_args(["--protocols", "grpc"]).protocols == [
        "grpc"
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--only", "gpt"], "expected a comma-separated subset of bert,minilm,resnet,resnet16; got 'gpt'"),
        (["--merge", "/nonexistent.json"], "/nonexistent.json: file not found"),
        (["--render-from", "/nonexistent.json"], "/nonexistent.json: file not found"),
        (["--seconds", "0"], "--seconds and --tune-window-s must be > 0"),
        (["--protocols", "http"], "expected grpc or grpc,http; got 'http'"),
        (["--http-threads", "0"], "--http-threads must be >= 1; got 0"),
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


def _level(in_flight: int, rate: float, p50: float, padded: float | None) -> dict[str, Any]:
    return {
        "in_flight": in_flight, "samples_per_s": rate, "p50_ms": p50, "p99_ms": 2 * p50, "errors": 0,
        "first_error": "", "client_cpu_share": 0.1, "server_cpu_share": 0.2, "gpu_util": 50.0,
        "queue_us": 100.0, "compute_input_us": 30.0, "compute_infer_us": 900.0, "compute_output_us": 80.0,
        "avg_batch": 1.0 if in_flight == 1 else 40.0, "batches": {}, "padded_share": padded,
    }  # fmt: skip


def _figures() -> dict[str, Any]:
    trial = {"key": "buckets=fine delay_us=0 gpus=0 instances=3 kind=KIND_GPU max_batch_size=128", "throughput": 14000.0,
             "concurrency": 128, "p99_ms": 12.0, "padded_share": 0.0, "load_s": 4.0, "measure_s": 5.0,
             "confirmed_throughput": 13900.0, "average_batch": 60.0}  # fmt: skip
    base = {**trial, "key": "buckets=fine delay_us=500 gpus=0 instances=2 kind=KIND_GPU max_batch_size=128",
            "throughput": 9000.0, "confirmed_throughput": None}  # fmt: skip
    bert = {
        "about": "BERT-base", "model": "bert_fp16", "max_batch": 128, "buckets": [1, 2, 128], "instances": 2,
        "delay_us": 500, "accuracy": {"min": 0.9999, "mean": 0.99995, "top1": 1.0},
        "in_process": {"1": 1250.0, "64": 15200.0, "128": 15400.0},
        "served": [_level(1, 400.0, 2.4, 0.0), _level(64, 9000.0, 7.0, 0.01)],
        "tune": {"command": "tritonkit tune --model bert_fp16", "seconds": 200.0, "runs": 20, "measurements": 60,
                 "load_s": 90.0, "measure_s": 100.0, "refused": [], "trials": [trial, base], "winner": trial,
                 "baseline": base, "profile": {"concurrency": 128, "throughput": 13500.0, "tune_figure": 13900.0,
                                               "ratio": 0.971, "p99_ms": 11.0, "padded_share": 0.0}},
        "tuned_config": {"instances": 3, "max_batch": 128, "delay_us": 0, "buckets": [1, 2, 128]},
        "tuned_served": [_level(1, 900.0, 1.05, 0.0), _level(128, 13500.0, 9.0, 0.02)],
    }  # fmt: skip
    return {"machine": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580", "cores": 16, "python": "3.12",
                        "torch": "2.11"}, "when": "2026-11-25 20:00 UTC",
            "parts": {"bert": bert, "resnet": {"error": "RuntimeError: out of memory"}}}  # fmt: skip


def test_render_summary_parts_and_anchors() -> None:
    data = _figures()
    (row,) = gpu_render.summary(data)
    assert (row["ratio"], row["ratio_met"], row["padded_met"], row["profile_met"]) == (
        "0.88 gRPC",
        "yes",
        "yes",
        "yes",
    )
    assert row["c1"] == "1.05 gRPC vs 0.80 + 0.3" and row["c1_met"] == "yes" and row["beats"] == "1.56x"
    # both measured again in the finals: their medians are compared, not a median with a search figure
    base = data["parts"]["bert"]["tune"]["baseline"]
    assert (
        gpu_render._beats(data["parts"]["bert"]["tune"]["winner"], {**base, "confirmed_throughput": 10000.0})
        == "1.39x"
    )
    text = gpu_render.render(data)
    assert "| bert | 15,400 (batch 128) | 13,500 (tuned, gRPC, c128, p99 18.0 ms) | 0.88 gRPC (yes) |" in text
    # Through HTTP too: each front end's ratio and one-request p50; the peak and the verdicts take the best
    data["parts"]["bert"]["served_http"] = [
        {**_level(1, 1100.0, 0.9, 0.0), "protocol": "http"},
        {**_level(128, 14000.0, 8.0, 0.0), "protocol": "http"},
    ]
    (row,) = gpu_render.summary(data)
    assert row["ratio"] == "0.88 gRPC, 0.91 HTTP" and row["c1"] == "1.05 gRPC, 0.90 HTTP vs 0.80 + 0.3"
    assert row["peak_served"] == "14,000 (tuned, HTTP, c128, p99 16.0 ms)"
    assert "Through Triton's HTTP front end, the tuned config" in gpu_render.render(data)
    # the built config through HTTP counts for the peak, named as built
    data["parts"]["bert"]["served_http_built"] = [{**_level(256, 15000.0, 20.0, 0.0), "protocol": "http"}]
    (row,) = gpu_render.summary(data)
    assert row["ratio"] == "0.88 gRPC, 0.97 HTTP" and row["peak_served"].startswith(
        "15,000 (as built, HTTP, c256"
    )
    assert "The built config through Triton's HTTP front end" in gpu_render.render(data)
    del data["parts"]["bert"]["served_http"], data["parts"]["bert"]["served_http_built"]
    # a lone row in-process, host in and out, is shown beside the line (the verdict keeps the line's terms)
    data["parts"]["bert"]["alone_ms"] = 1.234
    (row,) = gpu_render.summary(data)
    assert row["c1"] == "1.05 gRPC vs 0.80 + 0.3 (one row alone in-process, host in and out: 1.23)"
    data["parts"]["bert"]["alone_paused_ms"] = 1.456
    (row,) = gpu_render.summary(data)
    assert row["c1"].endswith("host in and out: 1.23, 1.46 with pauses)")
    assert row["c1_met"] == "yes"
    assert "**Not measured:** RuntimeError: out of memory" in text
    assert "0.996, BERT-Large 0.957" in text and "1.69 ms INT8, 1.95 ms FP16" in text
    assert "input / infer / output µs per execution" in text and "hand-over" not in text
    assert "90 s putting configs into service" in text and "(0.971)" in text
    assert "| nan" not in text
    # a winner within the spread of the built config's repeated measurements: tune kept the config
    data["parts"]["bert"]["tune"]["log_tail"] = (
        "+4.2% against the model's own config; NOT written, config.pbtxt unchanged"
    )
    (row,) = gpu_render.summary(data)
    assert row["beats"] == "1.56x (not written)"
    assert "so tune left the config as built." in gpu_render.render(data)


def test_render_from_runs_measured_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    data = _figures()
    first.write_text(
        json.dumps({**data, "when": "2026-11-26 11:16 UTC", "parts": {"bert": data["parts"]["bert"]}})
    )
    second.write_text(
        json.dumps({**data, "when": "2026-11-26 12:17 UTC", "parts": {"resnet": data["parts"]["resnet"]}})
    )
    notes = tmp_path / "notes.md"
    notes.write_text("## Reading\n\nwritten by hand\n")
    out = tmp_path / "page.md"
    assert gpu.main(["--render-from", str(first), str(second), "--notes", str(notes), "--out", str(out)]) == 0
    text = out.read_text()
    assert (
        "## BERT-base, sequence 128" in text
        and "## ResNet-50" in text
        and text.rstrip().endswith("written by hand")
    )
    assert "Runs: bert 2026-11-26 11:16 UTC; resnet 2026-11-26 12:17 UTC." in text  # each part's own run
    capsys.readouterr()
