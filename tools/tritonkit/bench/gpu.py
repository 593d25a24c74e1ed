"""GPU benchmark (``python -m tritonkit.bench.gpu``): writes ``docs/benchmarks-gpu.md`` on a GPU host.

Model: the MiniLM architecture (BERT, 6 layers, hidden 384, 12 heads; seeded weights, mean-pooled
embedding), sequence 128. Versions are built by :mod:`tritonkit.build.torch_program` exactly as a
build would (torch.export program + torch runner; ONNX graph + ONNX Runtime CUDA runner when an
``onnxruntime`` with the CUDA provider imports) and served by the embedded tritonserver; load comes
from gRPC clients in several processes (:mod:`tritonkit.bench.gpu_load`). In-process figures run
the runners' own engines on the same GPU with the server stopped.

Figures: engines in-process (samples/s by batch), FP16 accuracy against the FP32 reference
(cosine), served throughput with and without dynamic batching, serving efficiency (served /
in-process at the batch Triton formed), and the load generator's headroom (client CPU share,
server queue time).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from tritonkit.bench.gpu_load import run_load
from tritonkit.build.gpu_serving import Placement, ServingSpec, plan_execution
from tritonkit.build.torch_program import write_onnx_gpu_version, write_torch_version
from tritonkit.loadtest.report.metrics import scrape
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit.serve.runners import runner_path

SEQ = 128
HIDDEN = 384


def _runner(name: str) -> ModuleType:

    spec = importlib.util.spec_from_file_location(f"bench_{name}", runner_path(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def minilm(seed: int = 0) -> Any:
    """MiniLM-architecture embedder: (input_ids, attention_mask) -> mean-pooled [batch, 384]."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from transformers import BertConfig, BertModel  # noqa: PLC0415 (optional (models extra))

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=HIDDEN,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
    )
    bert: Any = BertModel(config, add_pooling_layer=False)
    bert.eval()

    class Embedder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled: torch.Tensor = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
            return pooled

    return Embedder().eval()


def _examples(batch: int, seed: int = 1, ragged: bool = False) -> dict[str, Any]:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 30000, (batch, SEQ), generator=g)
    mask = torch.ones(batch, SEQ, dtype=torch.int64)
    if ragged:  # real text: lengths vary, padding masked
        for row, length in enumerate(torch.randint(8, SEQ + 1, (batch,), generator=g).tolist()):
            mask[row, length:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _rate(run: Callable[[], Any], batch: int, seconds: float = 1.5) -> float:
    """Samples/s of ``run`` (one batch) timed with device syncs after a warm-up."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    for _ in range(5):
        run()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while True:
        run()
        n += 1
        if n % 10 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - t0 > seconds:
                break
    torch.cuda.synchronize()
    return n * batch / (time.perf_counter() - t0)


def _call(engine: Any, feeds: list[Any]) -> Callable[[], Any]:
    return lambda: engine.run(feeds)


def _cosine(a: Any, b: Any) -> tuple[float, float]:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    cos = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=1)
    return float(cos.min()), float(cos.mean())


class _GpuSampler:
    """nvidia-smi utilisation sampled every 0.5 s while a run is on."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", "0"],
                capture_output=True,
                text=True,
                check=False,
            )
            with contextlib.suppress(ValueError, IndexError):
                self.samples.append(float(out.stdout.strip().splitlines()[0]))
            self._stop.wait(0.5)

    def __enter__(self) -> _GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def build_repository(root: Path, have_ort: bool, log: Callable[[str], None]) -> dict[str, str]:
    """The versions served: name -> what it is."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    module = minilm()
    examples = _examples(2)
    versions: dict[str, str] = {}
    for name, precision, batching, count in (
        ("minilm_fp16", "fp16", True, None),  # the default placement: 2 instances on the GPU
        ("minilm_fp16_nodb", "fp16", False, None),
        ("minilm_fp16_x1", "fp16", True, 1),
        ("minilm_fp16_nodb_x1", "fp16", False, 1),
        ("minilm_fp32", "fp32", True, None),
    ):
        spec = ServingSpec(engine="torch", precision=precision, placement=Placement(count=count))
        plan = plan_execution(spec, max_batch_size=256)
        write_torch_version(
            root,
            name,
            minilm(),
            examples,
            ["EMBEDDING"],
            plan,
            max_batch_size=256,
            max_queue_delay_us=500,
            dynamic_batching=batching,
        )
        versions[name] = (
            f"torch {precision}, CUDA graphs, {count or 'default'} instance(s), "
            f"{'dynamic batching' if batching else 'no dynamic batching'}"
        )
        log(f"built {name}")
    for name, precision in ORT_VERSIONS.items() if have_ort else ():
        onnx_path = root.parent / f"{name}.onnx"
        half = precision == "fp16"
        try:  # the TorchScript exporter (no onnxscript needed); FP16 traced from the half module
            torch.onnx.export(
                minilm().half() if half else module,
                (examples["input_ids"], examples["attention_mask"]),
                str(onnx_path),
                input_names=["input_ids", "attention_mask"],
                output_names=["EMBEDDING"],
                dynamic_axes={k: {0: "batch"} for k in ("input_ids", "attention_mask", "EMBEDDING")},
                opset_version=17,
                dynamo=False,
            )
        except Exception as exc:
            log(f"ONNX export for {name} failed, left out: {' '.join(str(exc).split())[:200]}")
            continue
        plan = plan_execution(ServingSpec(engine="onnxruntime", precision=precision), max_batch_size=256)
        write_onnx_gpu_version(onnx_path, root, name, plan, max_batch_size=256, max_queue_delay_us=500)
        versions[name] = f"ONNX Runtime CUDA {precision}, I/O binding, default instances, dynamic batching"
        log(f"built {name}")
    return versions


def in_process(root: Path, have_ort: bool, batches: list[int]) -> dict[str, dict[int, float]]:
    """Samples/s of each engine at each batch, inputs already on the GPU (the runners' engines)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch_runner = _runner("torch_runner")
    rates: dict[str, dict[int, float]] = {}
    for name, precision in (("minilm_fp16", "fp16"), ("minilm_fp32", "fp32")):
        module, dtypes = torch_runner.load_program(str(root / name / "1" / "model.pt2"), "cuda:0")
        buckets = torch_runner.parse_buckets("", 256)  # the served versions' buckets: same padding
        graphs = torch_runner.GraphEngine(module, "cuda:0", dtypes, [torch.float32], buckets)
        eager = torch_runner.GraphEngine(
            module, "cuda:0", dtypes, [torch.float32], buckets, cuda_graphs=False
        )
        for label, engine in (
            (f"torch {precision} CUDA graphs", graphs),
            (f"torch {precision} eager", eager),
        ):
            rates[label] = {}
            for b in batches:
                feeds = [t.cuda() for t in _examples(b).values()]
                rates[label][b] = _rate(_call(engine, feeds), b)
    for name in ORT_VERSIONS if have_ort else ():
        if (root / name).is_dir():
            engine = _runner("onnx_cuda_runner").OrtCudaEngine(
                str(root / name / "1" / "model.onnx"), "cuda:0"
            )
            label = ENGINE_OF[name]
            rates[label] = {
                b: _rate(_call(engine, [t.cuda() for t in _examples(b).values()]), b) for b in batches
            }
    return rates


def accuracy(root: Path, have_ort: bool) -> dict[str, tuple[float, float]]:
    """Cosine (min, mean) of each served engine's embeddings against FP32 eager on the GPU, TF32 off."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    feeds = _examples(256, seed=7, ragged=True)
    with torch.inference_mode():
        reference = minilm().cuda()(*(t.cuda() for t in feeds.values())).float()
    torch_runner = _runner("torch_runner")
    result = {}
    for name in ("minilm_fp16", "minilm_fp32"):
        module, dtypes = torch_runner.load_program(str(root / name / "1" / "model.pt2"), "cuda:0")
        engine = torch_runner.GraphEngine(module, "cuda:0", dtypes, [torch.float32], [1, 16, 64, 256])
        (out,) = engine.run([t.cuda() for t in feeds.values()])
        result[name] = _cosine(out, reference)
    for name in ORT_VERSIONS if have_ort else ():
        if (root / name).is_dir():
            engine = _runner("onnx_cuda_runner").OrtCudaEngine(
                str(root / name / "1" / "model.onnx"), "cuda:0"
            )
            (out,) = engine.run([t.cuda() for t in feeds.values()])
            result[name] = _cosine(out.float(), reference)
    return result


SCENARIOS: list[tuple[str, int, int]] = [
    # (model, request batch, in flight)
    ("minilm_fp16", 1, 64),
    ("minilm_fp16_nodb", 1, 64),
    ("minilm_fp16", 16, 16),
    ("minilm_fp16_nodb", 16, 16),
    ("minilm_fp16", 64, 8),
    ("minilm_fp16_x1", 1, 64),
    ("minilm_fp16_nodb_x1", 1, 64),
    ("minilm_fp16_x1", 16, 16),
    ("minilm_fp16_nodb_x1", 16, 16),
    ("minilm_fp16_x1", 64, 8),
    ("minilm_fp32", 16, 16),
    ("minilm_fp32", 64, 8),
    ("minilm_ort_fp32", 16, 16),
    ("minilm_ort_fp32", 64, 8),
    ("minilm_ort_fp16", 16, 16),
    ("minilm_ort_fp16", 64, 8),
]
#: Served version -> the in-process engine it is compared with.
ENGINE_OF = {
    "minilm_fp16": "torch fp16 CUDA graphs",
    "minilm_fp16_x1": "torch fp16 CUDA graphs",
    "minilm_fp32": "torch fp32 CUDA graphs",
    "minilm_ort_fp32": "onnxruntime fp32 CUDA I/O binding",
    "minilm_ort_fp16": "onnxruntime fp16 CUDA I/O binding",
}
# No FP16: the TorchScript export of the half module is ONNX that ONNX Runtime refuses
# (LayerNormalization bound to float and float16).
ORT_VERSIONS = {"minilm_ort_fp32": "fp32"}


def served(
    root: Path, versions: dict[str, str], seconds: float, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    import psutil  # noqa: PLC0415 (optional (dev extra))

    rows = []
    extra = [
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=python,shm-growth-byte-size=16777216",
    ]
    with EmbeddedServer(
        root, startup_timeout=600.0, extra_args=extra, log_file=root.parent / "server.log"
    ) as server:
        metrics = server.metrics_url
        for _ in range(100):  # the metrics listener starts a moment after readiness
            try:
                scrape(metrics)
                break
            except Exception:
                time.sleep(0.1)
        server_proc = psutil.Process(server.pid)
        for model, batch, in_flight in SCENARIOS:
            if model not in versions:
                continue

            def cpu() -> float:
                total = 0.0
                for p in [server_proc, *server_proc.children(recursive=True)]:
                    try:
                        t = p.cpu_times()
                        total += t.user + t.system
                    except psutil.Error:
                        pass
                return total

            before, cpu0, t0 = scrape(metrics), cpu(), time.perf_counter()
            with _GpuSampler() as gpu:
                load = run_load(
                    server.grpc_url, model, seq=SEQ, batch=batch, in_flight=in_flight, seconds=seconds
                )
            after, cpu1, wall = scrape(metrics), cpu(), time.perf_counter() - t0
            key = f"{model}:1"
            delta = {
                k: after.get(key, {}).get(k, 0.0) - before.get(key, {}).get(k, 0.0)
                for k in after.get(key, {})
            }
            success = delta.get("success", 0.0) or 1.0
            row = {
                "model": model,
                "batch": batch,
                "in_flight": in_flight,
                "samples_per_s": load.requests * batch / load.seconds,
                "requests": load.requests,
                "errors": load.errors,
                "first_error": load.first_error,
                "p50_ms": load.percentile(50),
                "p99_ms": load.percentile(99),
                "avg_batch": delta.get("inferences", 0.0) / max(delta.get("executions", 0.0), 1.0),
                "queue_us": delta.get("queue_us", 0.0) / success,
                "compute_us": delta.get("compute_infer_us", 0.0) / success,
                "client_cpu_share": load.client_cpu_s / (load.seconds * (os.cpu_count() or 1)),
                "server_cpu_share": (cpu1 - cpu0) / (wall * (os.cpu_count() or 1)),
                "gpu_util": gpu.mean,
            }
            rows.append(row)
            log(
                f"{model} batch {batch} x{in_flight}: {row['samples_per_s']:,.0f} samples/s, avg batch {row['avg_batch']:.1f}, "
                f"p99 {row['p99_ms']:.1f} ms, errors {load.errors} {load.first_error}"
            )
    return rows


def _f(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    rates: dict[str, dict[str, float]] = data["in_process"]
    lines = [
        "# GPU benchmarks",
        "",
        f"GPU: **{m['gpu']}** (driver {m['driver']}), {m['cores']} CPU cores, Python {m['python']}, torch {m['torch']}, "
        f"onnxruntime {m['onnxruntime']}, tritonserver 2.51 (nvidia-pytriton 0.7.0, python backend). Run {data['when']}.",
        "Re-run on a GPU host: `scripts/gpu/pack.sh` on a networked machine, then `scripts/gpu/bench.sh` there "
        "(it calls `python -m tritonkit.bench.gpu`).",
        "",
        f"Model: MiniLM architecture (BERT, 6 layers, hidden {HIDDEN}, 12 heads, seeded weights, mean pooling), "
        f"sequence {SEQ}, inputs INT64 `input_ids`/`attention_mask`, output FP32 `EMBEDDING` [{HIDDEN}]. "
        "Versions built by `tritonkit.build.torch_program` (torch.export program + `torch_runner`, CUDA graphs for "
        "batch buckets 1, 2, 4, ..., 256; ONNX graph + `onnx_cuda_runner`), KIND_GPU instances on GPU 0 "
        "(the default placement, 2 per GPU, unless the name ends in `_x1`), dynamic batching with 500 µs queue "
        "delay and the buckets as preferred batch sizes (`_nodb`: none), max batch 256.",
        "",
        "Versions: " + "; ".join(f"`{k}` {v}" for k, v in data["versions"].items()) + ".",
        "",
        "How to read: samples/s = rows answered per second. Served runs: closed loop, each client process "
        "keeps its share of the requests in flight, 2 s warm-up then the measured window; latencies are "
        "client-side. Avg batch formed, queue and compute per request come from Triton's own counters "
        "(`/metrics`, differences over the run; compute = the execute call each request rode in). Client / "
        "server CPU % = CPU time of the load generator's processes / of tritonserver and its stubs over wall "
        "time x cores (16 = 100 %). Serving efficiency = served samples/s / the same engine in-process at "
        "the batch Triton formed (padded to the same bucket); for 2-instance versions that engine is one "
        "instance, so above 1 is possible.",
        "",
        "## Engines in-process (samples/s, inputs on the GPU)",
        "",
        "| engine | " + " | ".join(f"batch {b}" for b in data["batches"]) + " |",
        "|---|" + "---:|" * len(data["batches"]),
    ]
    for label, by_batch in rates.items():
        lines.append(f"| {label} | " + " | ".join(_f(by_batch.get(str(b))) for b in data["batches"]) + " |")
    lines += [
        "",
        "## Accuracy against FP32 (eager torch on the GPU, TF32 off; 256 ragged rows)",
        "",
        "| version | cosine min | cosine mean | target | met |",
        "|---|---:|---:|---|---|",
    ]
    for name, (low, mean) in data["accuracy"].items():
        target = 0.999 if "fp16" in name else 0.9999
        lines.append(
            f"| {name} | {low:.7f} | {mean:.7f} | >= {target} | {'yes' if low >= target else 'no'} |"
        )
    lines += [
        "",
        "## Served by the embedded tritonserver (gRPC, 8 client processes)",
        "",
        "| version | request batch | in flight | samples/s | p50 ms | p99 ms | avg batch formed | queue µs/req | "
        "compute µs/req | GPU util % | client CPU % | server CPU % | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["served"]:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['in_flight']} | {_f(r['samples_per_s'])} | {_f(r['p50_ms'], 2)} | "
            f"{_f(r['p99_ms'], 2)} | {_f(r['avg_batch'], 1)} | {_f(r['queue_us'])} | {_f(r['compute_us'])} | "
            f"{_f(r['gpu_util'])} | {_f(100 * r['client_cpu_share'], 1)} | {_f(100 * r['server_cpu_share'], 1)} | {r['errors']} |"
        )
    lines += ["", "## Targets", "", "| figure | measured | target | met |", "|---|---:|---|---|"]
    for t in data["targets"]:
        lines.append(f"| {t['name']} | {t['measured']} | {t['target']} | {t['met']} |")
    lines += ["", *data.get("notes", [])]
    return "\n".join(lines) + "\n"


def targets(data: dict[str, Any]) -> list[dict[str, str]]:
    served_rows = {(r["model"], r["batch"], r["in_flight"]): r for r in data["served"]}
    out = []

    def ratio(name: str, a: tuple[str, int, int], b: tuple[str, int, int], target: float) -> None:
        if a in served_rows and b in served_rows and served_rows[b]["samples_per_s"]:
            value = served_rows[a]["samples_per_s"] / served_rows[b]["samples_per_s"]
            out.append(
                {
                    "name": name,
                    "measured": f"{value:.1f}x",
                    "target": f">= {target:g}x",
                    "met": "yes" if value >= target else "no",
                }
            )

    # Dynamic batching gain: the same fp16 model with and without a batcher, on 1 and on 2 instances.
    for suffix, instances in (("_x1", "1 instance"), ("", "2 instances")):
        for batch, flight, target in ((1, 64, 12), (16, 16, 4)):
            ratio(
                f"dynamic batching gain, {instances}, requests of {batch}, {flight} in flight (fp16)",
                (f"minilm_fp16{suffix}", batch, flight),
                (f"minilm_fp16_nodb{suffix}", batch, flight),
                target,
            )
    for (model, batch, flight), row in served_rows.items():
        label = ENGINE_OF.get(model)
        eff = row.get("effective_in_process")
        if label and eff:
            value = row["samples_per_s"] / eff
            out.append(
                {
                    "name": f"serving efficiency {model}, requests of {batch}, {flight} in flight "
                    f"(in-process at batch {row['effective_batch']}: {eff:,.0f}/s)",
                    "measured": f"{value:.2f}",
                    "target": ">= 0.85",
                    "met": "yes" if value >= 0.85 else "no",
                }
            )
    for name, (low, _) in data["accuracy"].items():
        if "fp16" in name:
            out.append(
                {
                    "name": f"FP16 cosine vs FP32 ({name}, min over rows)",
                    "measured": f"{low:.7f}",
                    "target": ">= 0.999",
                    "met": "yes" if low >= 0.999 else "no",
                }
            )
    return out


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonkit.bench.gpu", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", default="docs/benchmarks-gpu.md")
    parser.add_argument("--raw", default=None, help="also write every figure as JSON here")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per served scenario")
    parser.add_argument("--skip-served", action="store_true")
    args = parser.parse_args(argv)
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if not torch.cuda.is_available():
        print("tritonkit.bench.gpu: expected a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    try:
        import onnxruntime as ort  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)

        have_ort = "CUDAExecutionProvider" in ort.get_available_providers()
        ort_version = ort.__version__
    except ImportError:
        have_ort, ort_version = False, "absent"
    smi = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[0]
        .split(", ")
    )
    data: dict[str, Any] = {
        "machine": {
            "gpu": smi[0],
            "driver": smi[1],
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnxruntime": f"{ort_version}{' (CUDA)' if have_ort else ' (no CUDA provider)'}",
        },
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "batches": [1, 16, 64, 256],
    }
    work = Path(tempfile.mkdtemp(prefix="tritonkit-gpu-bench-"))
    root = work / "repo"
    versions = build_repository(root, have_ort, log)
    data["versions"] = versions
    data["accuracy"] = accuracy(root, have_ort)
    log(f"accuracy {data['accuracy']}")
    data["served"] = [] if args.skip_served else served(root, versions, args.seconds, log)
    torch.cuda.empty_cache()
    effective = sorted({max(1, round(r["avg_batch"])) for r in data["served"]})
    rates = in_process(root, have_ort, sorted({*data["batches"], *effective}))
    data["in_process"] = {label: {str(b): v for b, v in by.items()} for label, by in rates.items()}
    for row in data["served"]:
        label = ENGINE_OF.get(row["model"])
        if label in rates:
            row["effective_batch"] = max(1, round(row["avg_batch"]))
            row["effective_in_process"] = rates[label][row["effective_batch"]]
    data["targets"] = targets(data)
    log(json.dumps(data["in_process"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(render(data))
    if args.raw:
        Path(args.raw).write_text(json.dumps(data, indent=1, default=str))
    print(render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
