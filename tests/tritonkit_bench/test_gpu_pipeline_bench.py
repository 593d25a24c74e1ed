"""The pipeline A/B benchmark up to the GPU: its arguments, the table rendered from figures (the
hand-over marked for pipelined variants), and a dry run of the whole path on the CPU (build, engine
in-process, the same version served with the runner's pipeline off and on) against the real server."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tritonkit.config import load
from tritonkit_bench import gpu_pipeline
from tritonkit_bench.gpu_models import PARTS


def test_variants_and_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_pipeline.parse_variants(
        "off:2,on:4:3,on:2:2:4,off:4:2:1:0+1,native:4@0,native:4@500+1,native:2@-1,native:4%copy_threads=1/a=b,"
        "native:2%copy_threads=2^grpc-infer-allocation-pool-size=512/http-thread-count=4"
    ) == [
        ("off", 2, 2, 1, (0,), None, None, (), ()),
        ("on", 4, 3, 1, (0,), None, None, (), ()),
        ("on", 2, 2, 4, (0,), None, None, (), ()),
        ("off", 4, 2, 1, (0, 1), None, None, (), ()),
        ("native", 4, 2, 1, (0,), 0, None, (), ()),
        ("native", 4, 2, 1, (0,), 500, True, (), ()),
        ("native", 2, 2, 1, (0,), None, False, (), ()),
        ("native", 4, 2, 1, (0,), None, None, (("copy_threads", "1"), ("a", "b")), ()),
        (
            "native",
            2,
            2,
            1,
            (0,),
            None,
            None,
            (("copy_threads", "2"),),
            (("grpc-infer-allocation-pool-size", "512"), ("http-thread-count", "4")),
        ),
    ]
    args = gpu_pipeline.parse_args([])
    assert args.part == "bert" and args.levels == [1, 64, 256] and args.seconds == 3.0
    assert args.variants == [
        ("off", 2, 2, 1, (0,), None, None, (), ()),
        ("on", 2, 2, 1, (0,), None, None, (), ()),
        ("off", 4, 2, 1, (0,), None, None, (), ()),
        ("on", 4, 2, 1, (0,), None, None, (), ()),
        ("on", 2, 2, 4, (0,), None, None, (), ()),
    ]
    with pytest.raises(
        argparse.ArgumentTypeError,
        match=r"\[%key=value/\.\.\.\]\[\^server-flag=value/\.\.\.\]\); got 'maybe:2'",
    ):
        gpu_pipeline.parse_variants("maybe:2")
    with pytest.raises(argparse.ArgumentTypeError, match="got 'native:4%copy_threads'"):
        gpu_pipeline.parse_variants("native:4%copy_threads")
    with pytest.raises(
        argparse.ArgumentTypeError, match=r"\[\^server-flag=value/\.\.\.\]\); got 'native:4\^pool'"
    ):
        gpu_pipeline.parse_variants("native:4^pool")
    with pytest.raises(SystemExit) as exited:
        gpu_pipeline.parse_args(["--levels", "1,x"])
    assert exited.value.code == 2
    assert "expected comma-separated integers >= 1; got '1,x'" in capsys.readouterr().err


def test_render_marks_the_hand_over_of_pipelined_variants() -> None:
    row = {"in_flight": 64, "samples_per_s": 12000.0, "p50_ms": 5.0, "p99_ms": 9.0, "avg_batch": 40.0,
           "padded_share": 0.02, "queue_us": 900.0, "compute_input_us": 300.0, "compute_infer_us": 150.0,
           "compute_output_us": 10.0, "gpu_util": 90.0, "server_cpu_share": 0.2, "errors": 0}  # fmt: skip
    data = {
        "model": "bert_fp16", "seconds": 3.0, "in_process": {"64": 15000.0, "96": 16000.0},
        "variants": [
            {"label": "pipeline off, 2 instances", "pipeline": False, "instances": 2, "depth": 2, "rows": [row]},
            {"label": "pipeline on, depth 2, 2 instances", "pipeline": True, "instances": 2, "depth": 2, "rows": [row]},
            {"label": "pipeline on, depth 2, 4 instances", "pipeline": True, "instances": 4, "depth": 2, "error": "ModelLoadError: x"},
            {"label": "native backend, 4 instances", "runner": "native", "pipeline": False, "instances": 4, "depth": 2,
             "rows": [row, {**row, "protocol": "grpc-stream", "samples_per_s": 6000.0}]},
        ],
        "in_process_native": {"64": 20000.0, "96": 24000.0},
    }  # fmt: skip
    text = gpu_pipeline.render(data)
    assert (
        "In-process peak 16,000 samples/s (batch 96; " in text
        and "24,000 (batch 96) for the traced methods" in text
    )
    assert "| pipeline off, 2 instances | grpc | 64 | 12,000 | 0.75 |" in text and "300 / 150 / 10 |" in text
    assert "300 / 150† / 10 |" in text  # the pipelined row's compute infer is the hand-over
    assert "failed: ModelLoadError: x" in text
    assert "pipeline on, depth 2, 2 instances, grpc: 12,000 at c64 (0.75 of in-process)" in text
    # a native variant's ratio is against the program it serves, per front end
    assert "| native backend, 4 instances | grpc | 64 | 12,000 | 0.50 |" in text
    assert "| native backend, 4 instances | grpc-stream | 64 | 6,000 | 0.25 |" in text
    assert "native backend, 4 instances, grpc-stream: 6,000 at c64 (0.25 of in-process)" in text


def test_dry_run_serves_the_same_version_pipelined_and_not(tmp_path: Path) -> None:
    out, raw = tmp_path / "ab.md", tmp_path / "ab.json"
    try:
        rc = gpu_pipeline.main([
            "--dry-run", "--variants", "off:1,on:1:3:2,native:1@500+1%copy_threads=2", "--levels", "2", "--seconds", "0.3",
            "--work", str(tmp_path / "work"), "--out", str(out), "--raw", str(raw),
        ])  # fmt: skip
    finally:
        PARTS.pop(gpu_pipeline.DRY, None)
    assert rc == 0
    data = json.loads(raw.read_text())
    assert [
        (v["runner"], v["instances"], v["depth"], v["senders"], v["delay_us"], v["lone_preferred"])
        for v in data["variants"]
    ] == [
        ("off", 1, 2, 1, None, None),
        ("on", 1, 3, 2, None, None),
        ("native", 1, 2, 1, 500, True),
    ]
    for variant in data["variants"]:
        (level,) = variant["rows"]
        assert level["errors"] == 0 and level["samples_per_s"] > 0
    # the native variant's engine timed as the backend replays it: the traced methods, per batch
    assert set(data["in_process_native"]) == set(data["in_process"])
    logs = {p.name: p.read_text() for p in (tmp_path / "work").glob("server-*.log")}
    assert "pipeline depth 3, senders 2" in logs["server-on-1-3-2-0-None-None-grpc.log"]
    assert "pipeline off" in logs["server-off-1-2-1-0-None-None-grpc.log"]
    assert (
        "libtriton_tritonkit_torch.so" in logs["server-native-1-2-1-0-500-True-copy_threads=2-grpc.log"]
    )  # the native backend served it
    (config_path,) = (tmp_path / "work" / "repo").glob("*/config.pbtxt")  # as the last variant set it
    config = load(config_path)
    batching = config.dynamic_batching
    assert config.parameters["copy_threads"] == "2"
    assert batching is not None and batching.max_queue_delay_microseconds == 500
    assert batching.preferred_batch_size[0] == 1 and len(batching.preferred_batch_size) > 1
    assert "(dry run, CPU)" in out.read_text()
