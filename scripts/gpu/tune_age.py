"""Why a tune's figures read below a fresh `tritonkit profile` of the same config (3-16 % on every GPU
part): the tune's server has been through a tune's worth of reloads and its load generator through a
tune's worth of levels. This measures one config (a point of tune's grid, applied as tune applies it)
the way tune's finals do (reload, one window not kept, windows until stable) in five phases:

  A  fresh server, fresh generator
  B  a tune's worth of reloads of other points on the same server and generator (not reported)
  C  the config again: aged server, aged generator
  D  a new generator on the aged server
  E  a new server and a new generator (as the profile after a tune)

Usage (a GPU host, after scripts/gpu/setup.sh): python3 scripts/gpu/tune_age.py --part minilm
    --level 512 [--protocol grpc --workers 12 --reloads 20 --rounds 3] [--point key=value ...]
Prints one line per measurement and a JSON summary (each phase's figures and median).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tritonkit.config import load as load_config
from tritonkit.measure.levels import MeasureOptions, Measurer, wait_ready
from tritonkit.measure.loadgen import Level, Target, WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.endpoint import endpoint
from tritonkit.tune.apply import RepositoryApi
from tritonkit.tune.space import apply_point, base_point
from tritonkit_bench.gpu import log
from tritonkit_bench.gpu_models import PARTS, build_part

#: other points a tune walks through (applied in turn during phase B; and half the max batch)
VARIANTS = ({"instances": 4}, {"delay_us": 100}, {"buckets": "fine"}, {"delay_us": 0})


def _value(text: str) -> Any:
    return int(text) if text.lstrip("-").isdigit() else text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", default="minilm", choices=sorted(PARTS))
    parser.add_argument("--level", type=int, default=512)
    parser.add_argument("--protocol", default="grpc")
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=0.3)
    parser.add_argument("--point", nargs="*", default=["buckets=pow2", "max_batch_size=64"],
                        help="key=value settings over the built config's point (default: MiniLM's tune winner)")  # fmt: skip
    parser.add_argument(
        "--repo", default=None, help="measure MODEL of this repository instead of building the part"
    )
    parser.add_argument("--model", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    if bool(args.repo) != bool(args.model):
        parser.error("--repo and --model go together")
    if args.repo:
        repo, model = Path(args.repo), args.model
    else:
        repo, model = Path(tempfile.mkdtemp(prefix="tune-age-")) / "repo", PARTS[args.part].model
        build_part(repo, args.part, log, runner="native")
    base = load_config(repo / model / "config.pbtxt")
    point = {**base_point(base), **{k: _value(v) for k, v in (p.split("=", 1) for p in args.point)}}
    chosen = apply_point(base, point)
    half = {"max_batch_size": max(1, int(point["max_batch_size"]) // 2)}
    others = [apply_point(base, {**point, **v}) for v in (*VARIANTS, half)]
    options = MeasureOptions(
        window=WindowSpec(args.window_s),
        stability=StabilityRule(3, 0.15),
        max_windows=4,
        workers=args.workers,
    )
    level = Level("concurrency", args.level)
    phases: dict[str, list[float]] = {}

    def measure(phase: str, api: RepositoryApi, target: Target, measurer: Measurer, cfg: Any) -> float:
        api.load(model, cfg)
        wait_ready(target.url, args.protocol, model, dict(target.headers))
        measurer.loaded()
        result = measurer.measure(level)
        windows = [round(w.throughput) for w in result.windows]
        print(f"{phase} {time.strftime('%H:%M:%S')} {result.throughput:,.0f}/s windows {windows}", flush=True)
        return result.throughput

    def rounds(phase: str, api: RepositoryApi, target: Target, measurer: Measurer) -> None:
        phases[phase] = [measure(phase, api, target, measurer, chosen) for _ in range(args.rounds)]

    @contextlib.contextmanager
    def served() -> Iterator[tuple[RepositoryApi, Target]]:
        """A new embedded server on the repository (nothing loaded), its repository API and target."""
        with endpoint(repo=repo, load=(), exit_timeout=1) as where:
            api = RepositoryApi(where.http, where.headers)
            try:
                yield api, Target(where.url(args.protocol), model, args.protocol, headers=where.headers)
            finally:
                api.close()

    with served() as (api, target):
        with Measurer(target, options) as aged:
            rounds("A", api, target, aged)
            for i in range(args.reloads):
                measure("B", api, target, aged, others[i % len(others)])
            rounds("C", api, target, aged)
        with Measurer(target, options) as fresh:
            rounds("D", api, target, fresh)
    with served() as (api, target), Measurer(target, options) as fresh:
        rounds("E", api, target, fresh)
    summary = {
        p: {"figures": [round(f) for f in fs], "median": round(statistics.median(fs))}
        for p, fs in phases.items()
    }
    record = {"part": args.part, "model": model, "level": args.level, "point": point, "phases": summary}
    print(json.dumps(record))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
