"""The runner A/B benchmark (the python torch runner against the native backend) up to the GPU: its
arguments, the table rendered from figures, and a dry run of the whole path on the CPU (build, engine
in-process, the same version served by the python runner and by the native backend) against the real
server."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tritonkit.config import load
from tritonkit_bench import gpu_ab
from tritonkit_bench.gpu_models import PARTS


def test_variants_and_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_ab.parse_variants(
        "python:2,python:4:0+1,native:4@0,native:4@500+1,native:2@-1,native:4%copy_threads=1/a=b,"
        "native:2%copy_threads=2^grpc-infer-allocation-pool-size=512/http-thread-count=4"
    ) == [
        ("python", 2, (0,), None, None, (), ()),
        ("python", 4, (0, 1), None, None, (), ()),
        ("native", 4, (0,), 0, None, (), ()),
        ("native", 4, (0,), 500, True, (), ()),
        ("native", 2, (0,), None, False, (), ()),
        ("native", 4, (0,), None, None, (("copy_threads", "1"), ("a", "b")), ()),
        (
            "native",
            2,
            (0,),
            None,
            None,
            (("copy_threads", "2"),),
            (("grpc-infer-allocation-pool-size", "512"), ("http-thread-count", "4")),
        ),
    ]
    args = gpu_ab.parse_args([])
    assert args.part == "bert" and args.levels == [1, 64, 256] and args.seconds == 3.0
    assert args.variants == [
        ("python", 4, (0,), None, None, (), ()),
        ("native", 2, (0,), None, None, (), ()),
        ("native", 4, (0,), None, None, (), ()),
    ]
    for removed in ("on:2", "off:2", "python:2:2:4"):  # the pipelined runner's variants are gone
        with pytest.raises(argparse.ArgumentTypeError, match=f"got '{removed}'"):
            gpu_ab.parse_variants(removed)
    with pytest.raises(
        argparse.ArgumentTypeError,
        match=r"\[%key=value/\.\.\.\]\[\^server-flag=value/\.\.\.\]\); got 'maybe:2'",
    ):
        gpu_ab.parse_variants("maybe:2")
    with pytest.raises(argparse.ArgumentTypeError, match="got 'native:4%copy_threads'"):
        gpu_ab.parse_variants("native:4%copy_threads")
    with pytest.raises(
        argparse.ArgumentTypeError, match=r"\[\^server-flag=value/\.\.\.\]\); got 'native:4\^pool'"
    ):
        gpu_ab.parse_variants("native:4^pool")
    with pytest.raises(SystemExit) as exited:
        gpu_ab.parse_args(["--levels", "1,x"])
    assert exited.value.code == 2
    assert "expected comma-separated integers >= 1; got '1,x'" in capsys.readouterr().err


def test_render_puts_each_variant_against_the_engine_it_serves() -> None:
    row = {"in_flight": 64, "samples_per_s": 12000.0, "p50_ms": 5.0, "p99_ms": 9.0, "avg_batch": 40.0,
           "padded_share": 0.02, "queue_us": 900.0, "compute_input_us": 300.0, "compute_infer_us": 150.0,
           "compute_output_us": 10.0, "gpu_util": 90.0, "server_cpu_share": 0.2, "errors": 0}  # fmt: skip
    data = {
        "model": "bert_fp16", "seconds": 3.0, "in_process": {"64": 15000.0, "96": 16000.0},
        "variants": [
            {"label": "python runner, 2 instances", "runner": "python", "instances": 2, "rows": [row]},
            {"label": "python runner, 4 instances", "runner": "python", "instances": 4, "error": "ModelLoadError: x"},
            {"label": "native backend, 4 instances", "runner": "native", "instances": 4,
             "rows": [row, {**row, "protocol": "grpc-stream", "samples_per_s": 6000.0}]},
        ],
        "in_process_native": {"64": 20000.0, "96": 24000.0},
    }  # fmt: skip
    text = gpu_ab.render(data)
    assert text.startswith("# Python torch runner vs native backend: `bert_fp16`")
    assert (
        "In-process peak 16,000 samples/s (batch 96; " in text
        and "24,000 (batch 96) for the traced methods" in text
    )
    assert "| python runner, 2 instances | grpc | 64 | 12,000 | 0.75 |" in text and "300 / 150 / 10 |" in text
    assert "†" not in text and "hand-over" not in text
    assert "failed: ModelLoadError: x" in text
    assert "python runner, 2 instances, grpc: 12,000 at c64 (0.75 of in-process)" in text
    # a native variant's ratio is against the program it serves, per front end
    assert "| native backend, 4 instances | grpc | 64 | 12,000 | 0.50 |" in text
    assert "| native backend, 4 instances | grpc-stream | 64 | 6,000 | 0.25 |" in text
    assert "native backend, 4 instances, grpc-stream: 6,000 at c64 (0.25 of in-process)" in text


def test_dry_run_serves_the_same_version_by_each_runner(tmp_path: Path) -> None:
    out, raw = tmp_path / "ab.md", tmp_path / "ab.json"
    try:
        rc = gpu_ab.main([
            "--dry-run", "--variants", "python:1,native:1@500+1%copy_threads=2", "--levels", "2", "--seconds", "0.3",
            "--work", str(tmp_path / "work"), "--out", str(out), "--raw", str(raw),
        ])  # fmt: skip
    finally:
        PARTS.pop(gpu_ab.DRY, None)
    assert rc == 0
    data = json.loads(raw.read_text())
    assert [(v["runner"], v["instances"], v["delay_us"], v["lone_preferred"]) for v in data["variants"]] == [
        ("python", 1, None, None),
        ("native", 1, 500, True),
    ]
    for variant in data["variants"]:
        (level,) = variant["rows"]
        assert level["errors"] == 0 and level["samples_per_s"] > 0
    # the native variant's engine timed as the backend replays it: the traced methods, per batch
    assert set(data["in_process_native"]) == set(data["in_process"])
    logs = {p.name: p.read_text() for p in (tmp_path / "work").glob("server-*.log")}
    assert "torch_runner ready: ab_dry_fp16" in logs["server-python-1-0-None-None-grpc.log"]
    assert (
        "libtriton_tritonkit_torch.so" in logs["server-native-1-0-500-True-copy_threads=2-grpc.log"]
    )  # the native backend served it
    (config_path,) = (tmp_path / "work" / "repo").glob("*/config.pbtxt")  # as the last variant set it
    config = load(config_path)
    batching = config.dynamic_batching
    assert config.parameters["copy_threads"] == "2" and "pipeline" not in config.parameters
    assert batching is not None and batching.max_queue_delay_microseconds == 500
    assert batching.preferred_batch_size[0] == 1 and len(batching.preferred_batch_size) > 1
    assert "(dry run, CPU)" in out.read_text()
