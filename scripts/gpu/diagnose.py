"""Where a served execute's time goes on a GPU host (run by hand; CI never runs this).

Builds the benchmark's FP16 versions (BERT-base, MiniLM, ResNet-50) with the torch runner, plus BERT
served by the runner of an earlier commit (``--old-runner FILE``, its buckets and preferred sizes as that
commit built them) and BERT with torch.profiler on, then: each engine in-process (inputs on the GPU,
and from pinned host memory), each version served at 1 and 64 requests of one row in flight (Triton's
statistics per execution beside the runner's own host-time split from its log; the load is the product's
generator, :class:`tritonkit.measure.levels.Measurer`, windows of a third of ``--seconds`` until 3 agree),
and how long a reload through the model-repository API takes (what a tune trial waits for). Writes
``diagnose.json``, the server logs and the profiler files under ``--out``.

Usage: python scripts/gpu/diagnose.py --out DIR [--old-runner FILE] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient

from tritonkit.client.protocol import grpc_headers
from tritonkit.config import load, save
from tritonkit.measure.levels import LevelResult, MeasureOptions, Measurer
from tritonkit.measure.loadgen import Level, Target, WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit.tune.apply import RepositoryApi
from tritonkit_bench.gpu_models import PARTS, build_part, examples, runner


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def stats(client: Any, model: str, headers: dict[str, str]) -> dict[str, Any]:
    s = client.get_inference_statistics(model_name=model, headers=headers, as_json=True)["model_stats"][0]
    inf = s["inference_stats"]
    return {
        "requests": int(inf["success"].get("count", 0)),
        "queue_ns": int(inf["queue"].get("ns", 0)),
        "infer_ns": int(inf["compute_infer"].get("ns", 0)),
        "input_ns": int(inf["compute_input"].get("ns", 0)),
        "output_ns": int(inf["compute_output"].get("ns", 0)),
        "executions": int(s.get("execution_count", 0)),
        "rows": int(s.get("inference_count", 0)),
        "batches": {
            int(b["batch_size"]): int(b["compute_infer"].get("count", 0)) for b in s.get("batch_stats", [])
        },
    }


def delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {k: b[k] - a[k] for k in a if k != "batches"}
    out["batches"] = {
        k: v - a["batches"].get(k, 0) for k, v in b["batches"].items() if v - a["batches"].get(k, 0)
    }
    ex = max(out["executions"], 1)
    req = max(out["requests"], 1)
    out["us_infer_per_execution"] = out["infer_ns"] / ex / 1000
    out["us_queue_per_request"] = out["queue_ns"] / req / 1000
    out["avg_batch"] = out["rows"] / ex
    return out


def measurer(server: EmbeddedServer, model: str, seconds: float) -> Measurer:
    """The product's generator on ``model``: requests of one row over gRPC, at most 8 processes, windows
    of ``seconds / 3`` until 3 agree within 10 % (at most 6)."""
    target = Target(server.grpc_url, model, "grpc", headers=dict(server.admin_headers), batch_size=1)
    options = MeasureOptions(
        window=WindowSpec(max(seconds / 3, 0.1)), stability=StabilityRule(3, 0.10), max_windows=6,
        max_processes=8,
    )  # fmt: skip
    return Measurer(target, options)


def row_of(model: str, result: LevelResult, split: dict[str, Any]) -> dict[str, Any]:
    """One served level's figures: the generator's and Triton's over the level (``split``)."""
    r = result
    return {"model": model, "in_flight": int(r.level.value), "req_s": r.throughput, "p50_ms": r.p50_ms,
            "p99_ms": r.p99_ms, "stable": r.stable, "errors": r.failures, "first_error": r.error,
            "generator_cpu": r.generator_cpu, "generator_limited": r.generator_limited, **split}  # fmt: skip


def in_process(root: Path, part: str) -> dict[str, Any]:
    """Engine rates with inputs on the GPU and from pinned host memory, and a profiler table at batch 1."""
    import torch  # noqa: PLC0415

    tr = runner("torch_runner")
    spec = PARTS[part]
    cfg = load(root / spec.model / "config.pbtxt")
    buckets = tr.parse_buckets(cfg.parameters.get("batch_buckets", ""), spec.max_batch)
    module, dtypes = tr.load_program(str(root / spec.model / "1" / "model.pt2"), "cuda:0")
    engine = tr.GraphEngine(module, "cuda:0", dtypes, [torch.float32], buckets)
    out: dict[str, Any] = {"device_ms": {}, "host_ms": {}}
    for b in (1, 8, 32, 64, spec.max_batch):
        feeds = [t.cuda() for t in examples(part, b).values()]
        host = [t.pin_memory() for t in examples(part, b).values()]
        for label, fn, fargs in (
            ("device_ms", engine.run, (feeds,)),
            ("host_ms", engine.launch, (host, b)),
        ):
            for _ in range(5):
                fn(*fargs)
            engine.wait()
            t0, n = time.perf_counter(), 0
            while time.perf_counter() - t0 < 0.7:
                fn(*fargs)
                engine.wait()
                n += 1
            out[label][b] = round(1000 * (time.perf_counter() - t0) / n, 4)
    feeds = [t.cuda() for t in examples(part, 1).values()]
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(100):
            engine.run(feeds)
            engine.wait()
    out["profile_batch1"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    del engine, module
    torch.cuda.empty_cache()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--old-runner", type=Path)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--parts", default="bert,minilm,resnet")
    parser.add_argument("--cpu-check", action="store_true", help="no GPU: skip the in-process part")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    root = Path("/tmp/diag-repo")
    shutil.rmtree(root, ignore_errors=True)
    parts = args.parts.split(",")
    report: dict[str, Any] = {"in_process": {}, "served": [], "reload": {}}
    t0 = time.monotonic()
    for part in parts:
        if args.cpu_check:  # a KIND_GPU version turned into a CPU one, to run this script's paths here
            build_part(root, part, log, gpus=[0], parameters={"stats_interval_s": "1", "device": "cpu"})
            cfg = load(root / PARTS[part].model / "config.pbtxt")
            cfg.instance_groups[0].kind, cfg.instance_groups[0].gpus = "KIND_CPU", []
            save(cfg, root / PARTS[part].model / "config.pbtxt")
        else:
            build_part(root, part, log, parameters={"stats_interval_s": "1"})
        log(f"{part} built at {time.monotonic() - t0:.0f} s")
    versions = [PARTS[p].model for p in parts]
    if "bert" in parts:
        prof = root / "bert_prof"
        shutil.copytree(root / "bert_fp16", prof)
        cfg = load(prof / "config.pbtxt")
        cfg.name = "bert_prof"
        cfg.instance_groups[0].count = 1
        cfg.parameters.update(profile_dir=str(out / "profile"), profile_skip="100", profile_executes="300")
        save(cfg, prof / "config.pbtxt")
        versions.append("bert_prof")
        if args.old_runner:
            old = root / "bert_old"
            shutil.copytree(root / "bert_fp16", old)
            shutil.copy(args.old_runner, old / "1" / "model.py")
            cfg = load(old / "config.pbtxt")
            cfg.name = "bert_old"
            pow2 = [1, 2, 4, 8, 16, 32, 64, 128]
            cfg.parameters["batch_buckets"] = ",".join(map(str, pow2))
            assert cfg.dynamic_batching is not None
            cfg.dynamic_batching.preferred_batch_size = pow2[1:]
            save(cfg, old / "config.pbtxt")
            versions.append("bert_old")
    for part in [] if args.cpu_check else parts:
        report["in_process"][part] = in_process(root, part)
        log(
            f"{part} in-process {json.dumps({k: v for k, v in report['in_process'][part].items() if k != 'profile_batch1'})}"
        )
    extra = [
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=python,shm-growth-byte-size=16777216",
    ]
    started = time.monotonic()
    with EmbeddedServer(
        root, ServerOptions(startup_timeout=600.0, extra_args=extra, log_file=out / "server.log")
    ) as server:
        report["server_start_s"] = round(time.monotonic() - started, 2)
        client = grpcclient.InferenceServerClient(server.grpc_url)
        headers = grpc_headers(server.admin_headers) or {}
        for model in versions:
            with measurer(server, model, args.seconds) as levels:
                levels.loaded()  # the first window after the server's start warms it up, not kept
                for c in (1,) if model == "bert_prof" else (1, 64):
                    before = stats(client, model, headers)
                    result = levels.measure(Level("concurrency", c))
                    row = row_of(model, result, delta(before, stats(client, model, headers)))
                    report["served"].append(row)
                    log(f"{model} c{c}: {row['req_s']:,.0f} req/s p50 {row['p50_ms']:.3f} ms, infer/exec "
                        f"{row['us_infer_per_execution']:.0f} us, queue {row['us_queue_per_request']:.0f} us, "
                        f"avg batch {row['avg_batch']:.1f}, errors {row['errors']} {row['first_error']}")  # fmt: skip
    started = time.monotonic()
    with EmbeddedServer(
        root,
        ServerOptions(
            model_control_mode="explicit", startup_timeout=600.0, log_file=out / "server-explicit.log"
        ),
    ) as server:
        api = RepositoryApi(server.http_url, server.admin_headers)
        for n in range(3):
            cfg = load(root / versions[0] / "config.pbtxt")
            if n == 2:
                cfg.instance_groups[0].count = 3
            t = time.monotonic()
            api.load(versions[0], cfg if n else None)
            report["reload"][f"load{n}"] = round(time.monotonic() - t, 2)
        api.close()
    log(f"reload {report['reload']}")
    (out / "diagnose.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
