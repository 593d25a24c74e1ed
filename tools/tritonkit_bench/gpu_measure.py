"""What the GPU benchmark measures (:mod:`tritonkit_bench.gpu`): engines in-process, accuracy against
the FP32 reference, and versions served by the embedded tritonserver, level by level.

In-process figures run the torch runner's own engine (``backends/runners/torch_runner.py``; for a native
version, the same engine replaying its ``model.ts`` methods) on the GPU with the server stopped, inputs already on the GPU (the engine alone, as the issue's baseline was
measured). Served figures are requests of one row kept in flight by the product's generator of record
(:mod:`tritonkit.measure.generators`: NVIDIA's perf_analyzer where it is installed, else tritonkit's own,
:mod:`tritonkit.measure.levels`; the requests are the product's generated data for the model's inputs),
each level measured in windows until 3 agree as ``tritonkit profile`` measures it, next to Triton's own
statistics over the level (queue, compute input / infer / output, the batches formed and so the padded
share, from ``batch_stats``), the server's CPU time and the GPU's utilisation sampled by nvidia-smi.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tritonkit.backends.native import BACKEND as NATIVE_BACKEND
from tritonkit.backends.native import PROGRAM as NATIVE_PROGRAM
from tritonkit.client.protocol import grpc_headers
from tritonkit.config import load
from tritonkit.measure.generators import choose, label, measurer_of
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import Level, Target, WindowSpec
from tritonkit.measure.perf_analyzer import Binary, locate
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit.tune.space import buckets_of, padded_share
from tritonkit_bench.gpu_models import PARTS, examples, reference, runner, served_examples

__all__ = ["HTTP_MAX_IN_FLIGHT", "PROTOCOLS", "accuracy", "alone", "in_process", "server_stats", "sweep"]

#: the front ends a served level goes through (Triton's gRPC and HTTP/REST endpoints)
PROTOCOLS = ("grpc", "http")
#: the most requests in flight a level sends over HTTP (one keep-alive connection per request in flight)
HTTP_MAX_IN_FLIGHT = 1024

SERVER_ARGS = (
    "--backend-config=python,shm-default-byte-size=67108864",
    "--backend-config=python,shm-growth-byte-size=67108864",
)


def _engine(root: Path, part: str, device: str = "cuda:0") -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    spec = PARTS[part]
    tr = runner("torch_runner")
    config = load(root / spec.model / "config.pbtxt")
    # what the version answers in (FP16 where its outputs travel as FP16): no cast the server lacks
    answer = [torch.float16 if config.outputs[0].data_type.removeprefix("TYPE_") == "FP16" else torch.float32]
    if config.backend == NATIVE_BACKEND:  # the traced methods the native backend replays, one per bucket
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's deprecation note
            traced = torch.jit.load(str(root / spec.model / "1" / NATIVE_PROGRAM), map_location=device)  # type: ignore[no-untyped-call]

        def by_bucket(*xs: Any) -> Any:
            return getattr(traced, f"b{xs[0].shape[0]}")(*xs)

        return tr.GraphEngine(by_bucket, device, [None] * len(config.inputs), answer, buckets_of(config))
    module, dtypes = tr.load_program(str(root / spec.model / "1" / "model.pt2"), device)
    return tr.GraphEngine(module, device, dtypes, answer, buckets_of(config))


def in_process(root: Path, part: str, seconds: float = 0.8, device: str = "cuda:0") -> dict[str, float]:
    """Samples/s of the part's served engine at each of its batches, inputs on the GPU (CUDA events
    would time the same: every timed loop ends in a device sync). ``device`` cpu: a dry run."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    engine = _engine(root, part, device)
    rates: dict[str, float] = {}
    for batch in PARTS[part].batches:
        feeds = [t.to(device) for t in served_examples(part, batch)]
        for _ in range(5):
            engine.run(feeds)
        engine.wait()
        start, runs = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            for _ in range(5):
                engine.run(feeds)
            runs += 5
            engine.wait()
        rates[str(batch)] = runs * batch / (time.perf_counter() - start)
    del engine
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rates


def alone(
    root: Path, part: str, seconds: float = 0.5, device: str = "cuda:0", pauses: Sequence[float] = (0.0,)
) -> list[float]:
    """Milliseconds (median) of one row through the part's served engine as a lone served request
    takes it: from host memory (pinned, as the runners stage it) to the answer back in host memory,
    waited for before the next call starts, each of ``pauses`` (seconds) later in turn (a lone
    request's GPU idles between requests); one figure per pause, from one engine. ``in_process`` times
    batches back to back on the GPU, which hides each call's launch and wait; a request alone pays them."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    engine = _engine(root, part, device)
    pinned = device.startswith("cuda")
    feeds = [t.pin_memory() if pinned else t for t in served_examples(part, 1)]
    medians = []
    for pause_s in pauses:
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < 20 or time.perf_counter() - start < seconds:
            began = time.perf_counter()
            engine.launch(feeds, 1)
            engine.wait()
            times.append(time.perf_counter() - began)
            if pause_s:
                time.sleep(pause_s)
        medians.append(1000.0 * statistics.median(times[5:]))
    del engine
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return medians


def accuracy(root: Path, part: str) -> dict[str, float]:
    """The served FP16 engine against the FP32 module run eagerly on the GPU with TF32 off, on
    held-out inputs (ragged text): cosine min and mean over rows, top-1 agreement."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    feeds = [t.cuda() for t in examples(part, PARTS[part].max_batch, seed=7, held_out=True).values()]
    served = [t.cuda() for t in served_examples(part, PARTS[part].max_batch, seed=7, held_out=True)]
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.inference_mode():
            ref = reference(part).cuda()(*feeds).float()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    (out,) = _engine(root, part).run(served)
    cos = torch.nn.functional.cosine_similarity(out.double(), ref.double(), dim=1)
    top1 = (out.argmax(dim=1) == ref.argmax(dim=1)).double().mean()
    torch.cuda.empty_cache()
    return {"min": float(cos.min()), "mean": float(cos.mean()), "top1": float(top1)}


class _GpuSampler:
    """nvidia-smi utilisation sampled every 0.5 s while a level runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while shutil.which("nvidia-smi") and not self._stop.is_set():
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


def server_stats(client: Any, model: str, headers: dict[str, str]) -> dict[str, Any]:
    """Triton's cumulative statistics of ``model``'s version (tritonclient gRPC, admin headers)."""
    s = client.get_inference_statistics(model_name=model, headers=headers, as_json=True)["model_stats"][0]
    inf = s["inference_stats"]
    return {
        "requests": int(inf["success"].get("count", 0)),
        **{
            f"{k}_ns": int(inf[k].get("ns", 0))
            for k in ("queue", "compute_input", "compute_infer", "compute_output")
        },
        "executions": int(s.get("execution_count", 0)),
        "rows": int(s.get("inference_count", 0)),
        "batches": {
            int(b["batch_size"]): int(b["compute_infer"].get("count", 0)) for b in s.get("batch_stats", [])
        },
    }


def _level(before: dict[str, Any], after: dict[str, Any], buckets: Sequence[int]) -> dict[str, Any]:
    """A level's server figures from two snapshots: µs per request in the queue, µs per execution in
    compute input / infer / output (Triton adds each execution's span once per request it carried),
    the average batch formed, the batch histogram and the share of padded rows."""
    d = {k: after[k] - before[k] for k in after if k != "batches"}
    batches = {
        b: n - before["batches"].get(b, 0)
        for b, n in after["batches"].items()
        if n - before["batches"].get(b, 0)
    }
    requests = max(d["requests"], 1)
    share = padded_share(batches, buckets)
    return {
        "queue_us": d["queue_ns"] / requests / 1000,
        **{
            f"{k}_us": d[f"{k}_ns"] / requests / 1000
            for k in ("compute_input", "compute_infer", "compute_output")
        },
        "avg_batch": d["rows"] / max(d["executions"], 1),
        "batches": {str(k): v for k, v in sorted(batches.items())},
        "padded_share": share,
    }


def _generator(name: str | None) -> Binary | None:
    """The generator of record: ``name`` (``tritonkit`` or ``perf_analyzer``), or (None) perf_analyzer
    where it is installed, else tritonkit's own."""
    if name is None:
        return found if isinstance(found := locate(), Binary) else None
    return choose(name, MeasureOptions())


def sweep(
    root: Path,
    part: str,
    levels: Sequence[int],
    seconds: float,
    log: Callable[[str], None],
    *,
    log_file: Path | None = None,
    processes: int = 8,
    protocol: str = "grpc",
    server_args: Sequence[str] = (),
    generator: str | None = None,
) -> list[dict[str, Any]]:
    """Requests of one row at each number in flight in ``levels``, on a server of ``root`` as its
    configs are now (started with ``server_args`` too), over ``protocol`` (``grpc`` or ``http``), by the
    product's generator (``generator``; None: perf_analyzer where installed, else tritonkit's with at
    most ``processes`` processes): windows of ``seconds / 3`` until 3 agree within 10 % (at most 6, the
    first after the server starts not kept); one row of figures per level."""
    import psutil  # noqa: PLC0415 (optional (dev extra))
    import tritonclient.grpc as grpcclient  # noqa: PLC0415 (the statistics API through tritonclient)

    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}; got {protocol!r}")
    spec = PARTS[part]
    buckets = buckets_of(load(root / spec.model / "config.pbtxt"))
    binary = _generator(generator)
    options = MeasureOptions(
        window=WindowSpec(max(seconds / 3, 0.1)), stability=StabilityRule(3, 0.10), max_windows=6,
        max_processes=processes,
    )  # fmt: skip
    rows = []
    with EmbeddedServer(
        root, ServerOptions(startup_timeout=600.0, extra_args=(*SERVER_ARGS, *server_args), log_file=log_file)
    ) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        headers = grpc_headers(server.admin_headers) or {}
        procs = [psutil.Process(server.pid)]
        url = server.http_url if protocol == "http" else server.grpc_url
        target = Target(url, spec.model, protocol, headers=dict(server.admin_headers), batch_size=1)

        def cpu() -> float:
            total = 0.0
            for p in [*procs, *procs[0].children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    total += t.user + t.system
            return total

        with measurer_of(binary, target, options) as measurer:
            measurer.loaded()  # the server just started: the first window warms it up, not kept
            for in_flight in levels:
                before, cpu0, t0 = server_stats(client, spec.model, headers), cpu(), time.perf_counter()
                with _GpuSampler() as gpu:
                    result = measurer.measure(Level("concurrency", in_flight))
                after, wall = server_stats(client, spec.model, headers), time.perf_counter() - t0
                cores = os.cpu_count() or 1
                row = {
                    "protocol": protocol,
                    "in_flight": in_flight,
                    "generator": label(binary),
                    "stable": result.stable,
                    "samples_per_s": result.throughput,
                    "p50_ms": result.p50_ms,
                    "p99_ms": result.p99_ms,
                    "errors": result.failures,
                    "first_error": result.error,
                    # the generator's CPU over the host's cores (perf_analyzer: its client overhead share)
                    "client_cpu_share": result.generator_cpu * result.capacity.processes / cores,
                    "generator_limited": result.generator_limited,
                    "server_cpu_share": (cpu() - cpu0) / (wall * cores),
                    "gpu_util": gpu.mean,
                    "http_reply_room": server.http_reply_room,
                    **_level(before, after, buckets),
                }
                rows.append(row)
                log(
                    f"{spec.model} {protocol} c{in_flight} ({row['generator']}): {row['samples_per_s']:,.0f}/s "
                    f"p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms batch {row['avg_batch']:.1f} padded "
                    f"{(row['padded_share'] or 0):.1%} errors {row['errors']} {row['first_error']}"
                    + ("" if result.stable else " UNSTABLE")
                )
        client.close()
    return rows
