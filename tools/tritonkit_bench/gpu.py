"""GPU benchmark (``python -m tritonkit_bench.gpu``): writes ``docs/benchmarks-gpu.md`` on a GPU host.

Parts (``--only``, default all, in the order given): ``bert`` (a BERT-base encoder at sequence 128),
``minilm`` (the MiniLM architecture) and ``resnet`` (ResNet-50), each an FP16 version built by
:mod:`tritonkit.convert.targets.torch_program` as ``tritonkit build`` writes it (:mod:`tritonkit_bench.gpu_models`).
For each part: the engine in-process (samples/s by batch, the peak), FP16 accuracy against the FP32
module, the version served as built at rising numbers of requests of one row in flight
(:mod:`tritonkit_bench.gpu_measure`), then (``--tune``) ``tritonkit tune`` and ``tritonkit profile`` as a
user runs them (:mod:`tritonkit_bench.gpu_tune`) and the same levels served with the tuned config; those levels again through Triton's HTTP front end
(``--protocols``, default grpc,http; every served level is measured by the product's generator of record:
perf_analyzer where installed, else tritonkit's, :func:`tritonkit_bench.gpu_measure.sweep`).
``--malloc-ab`` serves one level again without tritonkit's malloc settings (the stub's input copies).

Figures go to ``--raw`` after every part (a cut-off run keeps what it measured); ``--merge`` keeps the
parts not run from an earlier run's JSON, ``--render-from`` writes the page from JSON alone (no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tritonkit.config import load
from tritonkit.errors import TritonKitError
from tritonkit.machine import cpu_model
from tritonkit.serve.embedded import MALLOC_TUNING_ENV
from tritonkit.tune.space import buckets_of, jit_on
from tritonkit_bench import gpu_tune
from tritonkit_bench.gpu_measure import HTTP_MAX_IN_FLIGHT, PROTOCOLS, accuracy, alone, in_process, sweep
from tritonkit_bench.gpu_models import PARTS, build_part
from tritonkit_bench.gpu_render import render

#: tritonserver's --http-thread-count when not given (2.51)
TRITON_HTTP_THREADS = 8

__all__ = ["main", "parse_args"]


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def _parts(text: str) -> list[str]:
    picked = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in picked if p not in PARTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(PARTS)}; got {text!r}"
        )
    return picked


def _protocols(text: str) -> list[str]:
    picked = [p.strip() for p in text.split(",") if p.strip()]
    if "grpc" not in picked or any(p not in PROTOCOLS for p in picked):
        raise argparse.ArgumentTypeError(f"expected grpc or grpc,http; got {text!r}")
    return picked


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tritonkit_bench.gpu", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", default="docs/benchmarks-gpu.md")
    parser.add_argument("--raw", default=None, help="also write every figure as JSON here (after each part)")
    parser.add_argument(
        "--only", type=_parts, default=list(PARTS), help="parts to run, in order (default all)"
    )
    parser.add_argument("--tune", type=_parts, default=None, help="parts to tune (default: every part run)")
    parser.add_argument("--no-tune", action="store_true", help="tune no part")
    parser.add_argument(
        "--malloc-ab", action="store_true", help="serve one level without the malloc settings"
    )
    parser.add_argument("--merge", default=None, help="an earlier run's --raw JSON: its other parts are kept")
    parser.add_argument("--render-from", nargs="+", default=None, metavar="JSON",
                        help="no measuring (no GPU needed): the page from these runs' JSON, later over earlier")  # fmt: skip
    parser.add_argument("--notes", default=None, help="a markdown file: its text ends the page")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per served level")
    parser.add_argument("--work", default="/tmp/tritonkit-gpu-bench", help="folder for versions and reports")
    parser.add_argument("--runner", choices=("python", "native"), default="native",
                        help="serving.runner of the versions built (default native)")  # fmt: skip
    parser.add_argument(
        "--client-processes", type=int, default=8, help="load-generator processes (default 8)"
    )
    parser.add_argument("--protocols", type=_protocols, default=["grpc", "http"],
                        help="front ends served through: grpc (every level) and http (the final config's "
                        "levels again through Triton's HTTP front end); default grpc,http")  # fmt: skip
    parser.add_argument("--http-threads", type=int, default=None,
                        help="tritonserver's --http-thread-count for the HTTP levels (default: Triton's own, 8)")  # fmt: skip
    parser.add_argument("--tune-window-s", type=float, default=gpu_tune.TuneSettings().window_s)
    parser.add_argument("--tune-workers", type=int, default=gpu_tune.TuneSettings().workers)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.tune_window_s <= 0 or args.tune_workers < 1 or args.client_processes < 1:
        parser.error("--seconds and --tune-window-s must be > 0, --tune-workers and --client-processes >= 1")
    if args.http_threads is not None and args.http_threads < 1:
        parser.error(f"--http-threads must be >= 1; got {args.http_threads}")
    for path in [
        *([args.merge] if args.merge else []),
        *(args.render_from or []),
        *([args.notes] if args.notes else []),
    ]:
        if not Path(path).is_file():
            parser.error(f"{path}: file not found; expected an earlier run's --raw JSON")
    args.tune = [] if args.no_tune else (args.tune if args.tune is not None else list(args.only))
    return args


def _merged(paths: list[str]) -> dict[str, Any]:
    """The runs' figures in one, later parts over earlier; machine and time of the last."""
    data: dict[str, Any] = {"parts": {}}
    for path in paths:
        try:
            earlier = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TritonKitError(f"{path}: expected a --raw JSON of this benchmark; {exc}") from None
        if not isinstance(earlier, dict) or not isinstance(earlier.get("machine"), dict):
            raise TritonKitError(f"{path}: expected a --raw JSON of this benchmark (no `machine` in it)")
        for part in (earlier.get("parts") or {}).values():
            if isinstance(part, dict) and earlier.get("when"):
                part.setdefault("when", earlier["when"])  # each part keeps the time of its own run
        data["parts"].update(earlier.get("parts") or {})
        data.update({k: earlier[k] for k in ("machine", "when", "client_processes") if earlier.get(k)})
    return data


def _write(data: dict[str, Any], out: str, raw: str | None) -> str:
    text = render(data)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text, encoding="utf-8")
    if raw:
        Path(raw).write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    return text


def _machine() -> dict[str, Any]:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    gpu, driver = ([*smi.stdout.strip().splitlines()[0].split(", "), "?"])[:2]
    return {"gpu": gpu, "driver": driver, "cores": os.cpu_count(), "cpu": cpu_model() or platform.processor(),
            "python": platform.python_version(), "torch": torch.__version__}  # fmt: skip


def measure_part(
    name: str, work: Path, args: argparse.Namespace, save: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Build, check, time in-process, serve, and (when asked) tune one part; ``save`` gets the part's
    figures after every step (a run cut off mid-part keeps what it measured)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    spec, repo = PARTS[name], work / f"repo-{name}"
    started = time.monotonic()
    build_part(repo, name, log, runner=args.runner)
    config = load(repo / spec.model / "config.pbtxt")
    dynamic = config.dynamic_batching
    part: dict[str, Any] = {
        "about": spec.about, "model": spec.model, "max_batch": spec.max_batch, "buckets": buckets_of(config),
        "instances": config.instance_groups[0].count, "delay_us": dynamic.max_queue_delay_microseconds if dynamic else None,
        "runner": args.runner,
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }  # fmt: skip
    part["accuracy"] = accuracy(repo, name)
    part["in_process"] = in_process(repo, name)
    log(f"{name} in-process {json.dumps({k: round(v) for k, v in part['in_process'].items()})}")
    part["alone_ms"], part["alone_paused_ms"] = alone(repo, name, pauses=(0.0, 0.0005))
    log(
        f"{name} one row alone in-process, host in and out: {part['alone_ms']:.3f} ms back to back, "
        f"{part['alone_paused_ms']:.3f} ms with 0.5 ms pauses between calls"
    )
    torch.cuda.empty_cache()
    save(part)
    clients = args.client_processes
    part["served"] = sweep(
        repo, name, spec.levels, args.seconds, log, log_file=work / f"server-{name}.log", processes=clients
    )
    save(part)
    if "http" in args.protocols and name in args.tune:  # the built config through HTTP too (tune changes it)
        part["served_http_built"] = _http_levels(
            repo, name, work / f"server-{name}-http-built.log", args, part
        )
        save(part)
    if args.malloc_ab:
        os.environ[MALLOC_TUNING_ENV] = "0"
        try:
            level = max(spec.levels[:-1])
            part["malloc_off"] = sweep(repo, name, (level,), args.seconds, log, processes=clients)
        finally:
            os.environ.pop(MALLOC_TUNING_ENV, None)
    if name in args.tune:
        settings = gpu_tune.TuneSettings(window_s=args.tune_window_s, workers=args.tune_workers)
        part["tune"] = gpu_tune.run(repo, name, work, settings, log)
        save(part)
        tuned = load(repo / spec.model / "config.pbtxt")
        part["tuned_config"] = {
            "instances": tuned.instance_groups[0].count, "max_batch": tuned.max_batch_size, "buckets": buckets_of(tuned),
            "delay_us": tuned.dynamic_batching.max_queue_delay_microseconds if tuned.dynamic_batching else None,
            "jit_optimize": jit_on(tuned),
        }  # fmt: skip
        part["tuned_served"] = sweep(
            repo,
            name,
            spec.levels,
            args.seconds,
            log,
            log_file=work / f"server-{name}-tuned.log",
            processes=clients,
        )
        save(part)
    if "http" in args.protocols:  # the config as it now stands (tuned, where tuned)
        part["served_http"] = _http_levels(repo, name, work / f"server-{name}-http.log", args, part)
    part["seconds"] = round(time.monotonic() - started, 1)
    return part


def _http_levels(
    repo: Path, name: str, log_file: Path, args: argparse.Namespace, part: dict[str, Any]
) -> list[dict[str, Any]]:
    """The part's levels (up to HTTP_MAX_IN_FLIGHT) through Triton's HTTP front end, by the product's
    generator of record; notes the HTTP threads and reply room in ``part``."""
    levels = [n for n in PARTS[name].levels if n <= HTTP_MAX_IN_FLIGHT]
    threads = () if args.http_threads is None else (f"--http-thread-count={args.http_threads}",)
    part["http_threads"] = args.http_threads or TRITON_HTTP_THREADS
    part["http_connect"] = "generator"  # the product's generator of record opens its own connections
    rows = sweep(repo, name, levels, args.seconds, log, log_file=log_file, processes=args.client_processes,
                 protocol="http", server_args=threads)  # fmt: skip
    part["http_reply_room"] = rows[0]["http_reply_room"] if rows else None
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        data = _merged(args.render_from or ([args.merge] if args.merge else []))
    except TritonKitError as exc:
        print(f"tritonkit_bench.gpu: {exc}", file=sys.stderr)
        return 2
    if args.notes:
        data["notes"] = Path(args.notes).read_text(encoding="utf-8")
    if args.render_from:
        print(_write(data, args.out, args.raw))
        return 0
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if not torch.cuda.is_available():
        print("tritonkit_bench.gpu: expected a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    data["machine"] = _machine()
    data["when"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    data["client_processes"] = args.client_processes
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for name in args.only:

        def save(part: dict[str, Any], name: str = name) -> None:
            data["parts"][name] = part
            _write(data, args.out, args.raw)

        try:
            data["parts"][name] = measure_part(name, work, args, save)
        except Exception as exc:  # the other parts still run; the page says why this one is empty
            message = " ".join(str(exc).split())[:300] or type(exc).__name__
            log(f"{name} failed: {type(exc).__name__}: {message}")
            data["parts"][name] = {"error": f"{type(exc).__name__}: {message}"}
        _write(data, args.out, args.raw)
    log("done")
    print(_write(data, args.out, args.raw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
