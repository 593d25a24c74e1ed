"""What the GPU benchmark measures (:mod:`tritonkit_bench.gpu`): engines in-process, accuracy against
the FP32 reference, and versions served by the embedded tritonserver under gRPC load.

In-process figures run the runners' own engines (``serve/runners``) on the GPU with the server
stopped; served figures combine the load generator's counts (:mod:`tritonkit_bench.gpu_load`) with
Triton's own counters (``/metrics`` differences over the run), the server's CPU time and the GPU's
utilisation sampled by nvidia-smi.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonkit.loadtest.report.metrics import scrape
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit_bench.gpu_load import run_load
from tritonkit_bench.gpu_models import ORT_VERSIONS, PARTS, examples, reference, runner

__all__ = ["accuracy", "in_process", "served"]


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


def _compare(out: Any, ref: Any) -> dict[str, float]:
    """Cosine (min, mean over rows) of ``out`` against ``ref``, and top-1 agreement (argmax)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    cos = torch.nn.functional.cosine_similarity(out.double(), ref.double(), dim=1)
    top1 = (out.argmax(dim=1) == ref.argmax(dim=1)).double().mean()
    return {"min": float(cos.min()), "mean": float(cos.mean()), "top1": float(top1)}


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


def _torch_engine(root: Path, name: str, buckets: list[int], graphs: bool = True) -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch_runner = runner("torch_runner")
    module, dtypes = torch_runner.load_program(str(root / name / "1" / "model.pt2"), "cuda:0")
    return torch_runner.GraphEngine(module, "cuda:0", dtypes, [torch.float32], buckets, cuda_graphs=graphs)


def in_process(
    root: Path, part: str, have_ort: bool, extra: dict[str, set[int]] | None = None
) -> dict[str, dict[int, float]]:
    """Samples/s of each engine of ``part`` at the part's batches and, for an engine named in
    ``extra``, at those batches too (the batches Triton formed for the versions compared with it),
    inputs already on the GPU. Buckets are the served versions' (powers of two up to the max
    batch), so padding is the same as served."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    spec = PARTS[part]
    buckets = runner("torch_runner").parse_buckets("", spec.max_batch)
    rates: dict[str, dict[int, float]] = {}
    for name, _precision, label, graphs in spec.engines:
        if not (root / name).is_dir():
            continue
        engine = _torch_engine(root, name, buckets, graphs)
        rates[label] = {}
        for b in sorted({*spec.batches, *(extra or {}).get(label, set())}):
            feeds = [t.cuda() for t in examples(part, b).values()]
            rates[label][b] = _rate(_call(engine, feeds), b)
        del engine
        torch.cuda.empty_cache()
    for name in ORT_VERSIONS if have_ort and part == "minilm" else ():
        if (root / name).is_dir():
            ort = runner("onnx_cuda_runner").OrtCudaEngine(str(root / name / "1" / "model.onnx"), "cuda:0")
            label = spec.engine_of[name]
            rates[label] = {
                b: _rate(_call(ort, [t.cuda() for t in examples(part, b).values()]), b)
                for b in sorted({*spec.batches, *(extra or {}).get(label, set())})
            }
    return rates


def accuracy(root: Path, part: str, have_ort: bool) -> dict[str, dict[str, float]]:
    """Each served engine's outputs against the FP32 module run eagerly on the GPU with TF32 off, on
    held-out inputs (another seed than the export's; ragged text for MiniLM): cosine min and mean
    over rows, and top-1 agreement (meaningful for ResNet's logits). The engines run under torch's
    defaults, as in the served stubs (TF32 convolutions on), so in-process rates match them too."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    spec = PARTS[part]
    rows = 256 if part == "minilm" else spec.max_batch
    feeds = [t.cuda() for t in examples(part, rows, seed=7, held_out=True).values()]
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.inference_mode():
            ref = reference(part).cuda()(*feeds).float()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    result = {}
    for name, _precision, _label, graphs in spec.engines:
        if graphs and (root / name).is_dir():
            (out,) = _torch_engine(root, name, sorted({1, 16, 64, rows})).run(feeds)
            result[name] = _compare(out, ref)
    for name in ORT_VERSIONS if have_ort and part == "minilm" else ():
        if (root / name).is_dir():
            ort = runner("onnx_cuda_runner").OrtCudaEngine(str(root / name / "1" / "model.onnx"), "cuda:0")
            (out,) = ort.run(feeds)
            result[name] = _compare(out.float(), ref)
    del ref
    torch.cuda.empty_cache()
    return result


def served(
    root: Path, versions: dict[str, str], seconds: float, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Every scenario of every part whose version is in ``versions``, on one embedded server."""
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

        def cpu() -> float:
            total = 0.0
            for p in [server_proc, *server_proc.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                    total += t.user + t.system
                except psutil.Error:
                    pass
            return total

        for spec in PARTS.values():
            for model, batch, in_flight in spec.scenarios:
                if model not in versions:
                    continue
                before, cpu0, t0 = scrape(metrics), cpu(), time.perf_counter()
                with _GpuSampler() as gpu:
                    load = run_load(
                        server.grpc_url,
                        model,
                        payload=spec.payload,
                        batch=batch,
                        in_flight=in_flight,
                        seconds=seconds,
                    )
                after, cpu1, wall = scrape(metrics), cpu(), time.perf_counter() - t0
                key = f"{model}:1"
                delta = {
                    k: after.get(key, {}).get(k, 0.0) - before.get(key, {}).get(k, 0.0)
                    for k in after.get(key, {})
                }
                success = delta.get("success", 0.0) or 1.0
                cores = os.cpu_count() or 1
                row = {
                    "part": spec.name,
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
                    "client_cpu_share": load.client_cpu_s / (load.seconds * cores),
                    "server_cpu_share": (cpu1 - cpu0) / (wall * cores),
                    "gpu_util": gpu.mean,
                }
                rows.append(row)
                log(
                    f"{model} batch {batch} x{in_flight}: {row['samples_per_s']:,.0f} samples/s, "
                    f"avg batch {row['avg_batch']:.1f}, p99 {row['p99_ms']:.1f} ms, "
                    f"errors {load.errors} {load.first_error}"
                )
    return rows
