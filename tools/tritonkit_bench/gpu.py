"""GPU benchmark (``python -m tritonkit_bench.gpu``): writes ``docs/benchmarks-gpu.md`` on a GPU host.

Parts (``--only``, default all): ``minilm`` (the MiniLM architecture, sequence 128: FP16/FP32 torch,
with and without dynamic batching, 1 and 2 instances, ONNX Runtime CUDA when it imports), ``resnet``
(ResNet-50 FP16 and FP32, 224 x 224 FP32 images from clients) and ``tune`` (``tritonkit tune`` on MiniLM
FP16, a small grid). Versions are built by :mod:`tritonkit.convert.torch_program` exactly as a build
would (:mod:`tritonkit_bench.gpu_models`) and served by the embedded tritonserver; load comes from
gRPC clients in several processes (:mod:`tritonkit_bench.gpu_load`). In-process figures run the
runners' own engines on the same GPU with the server stopped (:mod:`tritonkit_bench.gpu_measure`).

Figures: engines in-process (samples/s by batch), FP16 accuracy against the FP32 reference (cosine),
served throughput with and without dynamic batching, serving efficiency (served / in-process at the
batch Triton formed), the load generator's headroom, and the tune's ranked configs
(:mod:`tritonkit_bench.gpu_render` writes the page). ``--merge`` keeps the parts not run from an
earlier run's ``--raw`` JSON, so parts can be measured separately into one page; ``--render-from``
writes the page from several runs' JSON without measuring (no GPU needed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tritonkit.errors import TritonKitError
from tritonkit_bench import gpu_tune
from tritonkit_bench.gpu_measure import accuracy, in_process, served
from tritonkit_bench.gpu_models import PARTS, build_part
from tritonkit_bench.gpu_render import render, targets

__all__ = ["main", "parse_args"]

CHOICES = (*PARTS, "tune")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def _only(text: str) -> list[str]:
    picked = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in picked if p not in CHOICES]
    if unknown or not picked:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(CHOICES)}; got {text!r}"
        )
    return picked


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tritonkit_bench.gpu", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", default="docs/benchmarks-gpu.md")
    parser.add_argument("--raw", default=None, help="also write every figure as JSON here")
    parser.add_argument(
        "--only", type=_only, default=list(CHOICES), help=f"parts to run (default all: {','.join(CHOICES)})"
    )
    parser.add_argument(
        "--merge",
        default=None,
        help="an earlier run's --raw JSON: its parts not run now are kept on the page",
    )
    parser.add_argument(
        "--render-from",
        nargs="+",
        default=None,
        metavar="JSON",
        help="no measuring (no GPU needed): write the page from these runs' --raw JSON, later parts over earlier",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per served scenario")
    parser.add_argument("--skip-served", action="store_true")
    tune = parser.add_argument_group("tune part")
    defaults = gpu_tune.TuneSettings()
    tune.add_argument("--tune-protocol", choices=("grpc", "http"), default=defaults.protocol)
    tune.add_argument("--tune-budget-ms", type=float, default=defaults.budget_ms)
    tune.add_argument("--tune-window-s", type=float, default=defaults.window_s)
    tune.add_argument("--tune-workers", type=int, default=defaults.workers, help="generator processes")
    tune.add_argument("--tune-max-concurrency", type=int, default=defaults.max_concurrency)
    tune.add_argument("--tune-instances", default=",".join(map(str, defaults.instances)))
    tune.add_argument("--tune-max-batch-sizes", default=",".join(map(str, defaults.max_batch_sizes)))
    tune.add_argument("--tune-delays-us", default=",".join(map(str, defaults.delays_us)))
    tune.add_argument("--tune-search", choices=("quick", "brute"), default=defaults.search)
    args = parser.parse_args(argv)
    try:
        args.tune = gpu_tune.TuneSettings(
            protocol=args.tune_protocol,
            budget_ms=args.tune_budget_ms,
            window_s=args.tune_window_s,
            instances=gpu_tune.parse_grid(args.tune_instances, "--tune-instances"),
            max_batch_sizes=gpu_tune.parse_grid(args.tune_max_batch_sizes, "--tune-max-batch-sizes"),
            delays_us=gpu_tune.parse_grid(args.tune_delays_us, "--tune-delays-us", allow_off=True),
            max_concurrency=args.tune_max_concurrency,
            workers=args.tune_workers,
            search=args.tune_search,
        )
    except TritonKitError as exc:
        parser.error(str(exc))
    for path in [*([args.merge] if args.merge else []), *(args.render_from or [])]:
        if not Path(path).is_file():
            parser.error(f"{path}: file not found; expected an earlier run's --raw JSON")
    return args


def _merged(paths: list[str]) -> dict[str, Any]:
    """The runs' figures in this layout, later parts (and tune) over earlier; machine and time of the last."""
    data: dict[str, Any] = {"parts": {}}
    for path in paths:
        try:
            earlier = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TritonKitError(f"{path}: expected a --raw JSON of this benchmark; {exc}") from None
        if not isinstance(earlier, dict) or not isinstance(earlier.get("machine"), dict):
            raise TritonKitError(f"{path}: expected a --raw JSON of this benchmark (no `machine` in it)")
        data["parts"].update(earlier.get("parts") or {})
        data.update({k: earlier[k] for k in ("tune", "machine", "when") if earlier.get(k)})
    return data


def _write(data: dict[str, Any], out: str, raw: str | None) -> str:
    data["targets"] = targets(data)
    text = render(data)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text, encoding="utf-8")
    if raw:
        Path(raw).write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    return text


def _machine(have_ort: bool, ort_version: str) -> dict[str, Any]:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    gpu, driver = ([*smi.stdout.strip().splitlines()[0].split(", "), "?"])[:2]
    return {
        "gpu": gpu,
        "driver": driver,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": f"{ort_version}{' (CUDA)' if have_ort else ' (no CUDA provider)'}",
    }


def _ort() -> tuple[bool, str]:
    try:
        import onnxruntime as ort  # noqa: PLC0415 (optional dependency: its absence is reported, not fatal)
    except ImportError:
        return False, "absent"
    return "CUDAExecutionProvider" in ort.get_available_providers(), str(ort.__version__)


def measure_parts(
    names: list[str], work: Path, have_ort: bool, seconds: float, skip_served: bool
) -> dict[str, dict[str, Any]]:
    """Build, check accuracy, serve, then time in-process every part in ``names``."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    root = work / "repo"
    parts: dict[str, dict[str, Any]] = {}
    for name in names:
        parts[name] = {
            "versions": build_part(root, name, have_ort, log),
            "batches": list(PARTS[name].batches),
        }
    for name in names:
        parts[name]["accuracy"] = accuracy(root, name, have_ort)
        log(f"{name} accuracy {parts[name]['accuracy']}")
    every = {k: v for part in parts.values() for k, v in part["versions"].items()}
    rows = [] if skip_served or not names else served(root, every, seconds, log)
    torch.cuda.empty_cache()
    for name in names:
        part = parts[name]
        part["served"] = [r for r in rows if r["part"] == name]
        engine_of = PARTS[name].engine_of
        compared = [r for r in part["served"] if r["model"] in engine_of]
        effective: dict[str, set[int]] = {}
        for row in compared:
            row["effective_batch"] = max(1, round(row["avg_batch"]))
            effective.setdefault(engine_of[row["model"]], set()).add(row["effective_batch"])
        rates = in_process(root, name, have_ort, effective)
        part["in_process"] = {label: {str(b): v for b, v in by.items()} for label, by in rates.items()}
        for row in compared:
            by_batch = rates.get(engine_of[row["model"]], {})
            if row["effective_batch"] in by_batch:
                row["effective_in_process"] = by_batch[row["effective_batch"]]
        log(f"{name} in-process {json.dumps(part['in_process'])}")
    return parts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        # An earlier run's parts and tune stay unless run again now.
        data = _merged(args.render_from or ([args.merge] if args.merge else []))
    except TritonKitError as exc:
        print(f"tritonkit_bench.gpu: {exc}", file=sys.stderr)
        return 2
    if args.render_from:
        print(_write(data, args.out, args.raw))
        return 0
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if not torch.cuda.is_available():
        print("tritonkit_bench.gpu: expected a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    have_ort, ort_version = _ort()
    data["machine"] = _machine(have_ort, ort_version)
    data["when"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="tritonkit-gpu-bench-"))
    names = [n for n in args.only if n in PARTS]
    data["parts"].update(measure_parts(names, work, have_ort, args.seconds, args.skip_served))
    if "tune" in args.only:
        torch.cuda.empty_cache()
        data["tune"] = gpu_tune.run(work, args.tune, log)
    data["seconds"] = round(time.monotonic() - started, 1)
    log(f"done in {data['seconds']:.0f} s")
    print(_write(data, args.out, args.raw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
