"""Arguments shared by ``tritonkit profile``, ``tune``, ``compare`` and ``plan --fleet``, and the server they measure.

Owns the measurement flags (server, windows, stability, generator workers: ``auto`` or N, transport, shared memory)
and their checks (one line, expected vs given), ``--generator`` (its choice is
:func:`tritonkit.measure.generators.choose`'s, shared by every command that measures), and :func:`connect`: the server of ``--url`` or the
embedded one on ``--repo`` with only the named models loaded (:func:`tritonkit.serve.endpoint.endpoint`),
and the :class:`~tritonkit.measure.loadgen.Target` of a model on it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence

from tritonkit.commands.shared_args import add_protocol, add_repo
from tritonkit.errors import TritonKitError
from tritonkit.measure import generators
from tritonkit.measure.capacity import AUTO, parse_workers
from tritonkit.measure.input_data import read_entries
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import Level, Target, WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.endpoint import Endpoint, endpoint
from tritonkit.serve.options import ADMIN_HEADER

__all__ = [
    "GENERATORS",
    "add_generator_arg",
    "add_measure_args",
    "connect",
    "cuda_missing",
    "generator_problem",
    "measure_options",
    "parse_levels",
    "target",
]

SHARED_MEMORY = ("none", "system", "cuda")


def add_measure_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", help="Triton endpoint HOST:PORT of --protocol (default: start the embedded server)"
    )
    parser.add_argument("--http-url", help="with --url over gRPC: the HTTP endpoint (model-repository API)")
    parser.add_argument(
        "--admin-key",
        default=os.environ.get("TRITONKIT_ADMIN_KEY") or None,
        help=f"with --url: the value of the `{ADMIN_HEADER}` header (default: $TRITONKIT_ADMIN_KEY)",
    )
    add_repo(parser, "repository the embedded server serves")
    add_protocol(parser)
    parser.add_argument("--shared-memory", default="none", choices=SHARED_MEMORY, help="tensor transport")
    parser.add_argument("--batch-size", type=int, default=1, help="rows per request (default 1)")
    parser.add_argument(
        "--input-data",
        help='perf_analyzer\'s JSON file of real requests ({"data": [{INPUT: [...]}, ...]}; default: generated)',
    )
    parser.add_argument("--window-s", type=float, default=1.0, help="window length in seconds (default 1)")
    parser.add_argument("--window-count", type=int, help="end a window after this many completions instead")
    parser.add_argument("--stability-pct", type=float, default=10.0, help="agreement of windows (default 10)")
    parser.add_argument(
        "--stability-windows", type=int, default=3, help="windows that must agree (default 3)"
    )
    parser.add_argument("--max-windows", type=int, default=10, help="give up on stability after (default 10)")
    parser.add_argument(
        "--workers",
        type=_workers,
        default=AUTO,
        help="generator processes: auto (default: sized per level to this host's cores, leaving cores for "
        "a server on it, and to the request; grown when a level limits the generator) or N for every level",
    )
    parser.add_argument(
        "--max-generator-cpu",
        type=float,
        default=90.0,
        help="a level whose generator process used more than this %% of a core measured the generator "
        "(default 90): it is measured again with more processes, or refused",
    )
    parser.add_argument(
        "--max-late-pct",
        type=float,
        default=5.0,
        help="an open-loop level that sent more than this %% of its requests late or dropped them "
        "measured the generator (default 5; 100: never)",
    )
    parser.add_argument(
        "--accept-unstable", action="store_true", help="let an unstable level be the best (noisy hosts)"
    )
    parser.add_argument("--timeout-s", type=float, default=30.0, help="per-request timeout (default 30)")


def _workers(text: str) -> int:
    """``--workers`` for argparse: its error as argparse's usage line."""
    try:
        return parse_workers(text)
    except TritonKitError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--workers {text}: ")) from None


def measure_options(args: argparse.Namespace) -> MeasureOptions:
    if not args.window_s > 0:
        raise TritonKitError(f"--window-s {args.window_s}: expected seconds > 0")
    if args.window_count is not None and args.window_count < 1:
        raise TritonKitError(f"--window-count {args.window_count}: expected a whole number >= 1")
    if args.stability_pct < 0 or args.stability_windows < 1 or args.max_windows < args.stability_windows:
        raise TritonKitError(
            f"stability {args.stability_pct}% over {args.stability_windows} of at most {args.max_windows} windows: "
            "expected pct >= 0, windows >= 1 and --max-windows >= --stability-windows"
        )
    if not 0 < args.max_generator_cpu <= 100:
        raise TritonKitError(
            f"--max-generator-cpu {args.max_generator_cpu:g}: expected a percentage in (0, 100]"
        )
    if not 0 <= args.max_late_pct <= 100:
        raise TritonKitError(f"--max-late-pct {args.max_late_pct:g}: expected a percentage in [0, 100]")
    if args.batch_size < 1:
        raise TritonKitError(f"--batch-size {args.batch_size}: expected a whole number >= 1")
    if args.input_data is not None:
        read_entries(args.input_data)  # a bad file is one line, before any server starts
    if args.shared_memory == "cuda" and (reason := cuda_missing()):
        raise TritonKitError(
            f"--shared-memory cuda: {reason}; expected a GPU host (or --shared-memory system)"
        )
    return MeasureOptions(
        window=WindowSpec(args.window_s, args.window_count),
        stability=StabilityRule(args.stability_windows, args.stability_pct / 100.0),
        max_windows=args.max_windows,
        workers=args.workers,
        max_generator_cpu=args.max_generator_cpu / 100.0,
        max_late_share=args.max_late_pct / 100.0,
    )


def cuda_missing() -> str | None:
    """Why CUDA shared memory cannot work here (None when a GPU is present)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no NVIDIA GPU here (`nvidia-smi` is not on PATH)"
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    if result.returncode != 0 or "GPU" not in result.stdout:
        return "no NVIDIA GPU here (`nvidia-smi -L` lists none)"
    return None


def parse_levels(text: str | None, mode: str) -> list[Level]:
    """``1,2,4,8`` (or ``1:16`` = powers of two from 1 to 16) as levels of ``mode``."""
    if not text:
        return []
    values: list[float] = []
    try:
        for part in text.split(","):
            if ":" in part:
                low, high = (float(x) for x in part.split(":", 1))
                v = low
                while v <= high:
                    values.append(v)
                    v *= 2
            else:
                values.append(float(part))
    except ValueError:
        raise TritonKitError(f"levels {text!r}: expected numbers like 1,2,4 or a range 1:16") from None
    return [Level(mode, int(v) if mode == "concurrency" else v) for v in values]


def connect(args: argparse.Namespace, models: Sequence[str]) -> contextlib.AbstractContextManager[Endpoint]:
    """``--url``'s server, or the embedded one on ``--repo`` with only ``models`` loaded."""
    return endpoint(
        args.url, protocol=args.protocol, repo=args.repo, http_url=args.http_url, admin_key=args.admin_key,
        load=models, exit_timeout=1,
    )  # fmt: skip


def target(where: Endpoint, model: str, args: argparse.Namespace, version: str = "") -> Target:
    """The generator's target: ``model`` (at ``version``) on ``where``, as the flags ask."""
    return Target(
        where.url(args.protocol), model, args.protocol, version=version, headers=where.headers,
        shared_memory=args.shared_memory, batch_size=args.batch_size, timeout_s=args.timeout_s,
        input_data=args.input_data,
    )  # fmt: skip


# --generator: whose load measures a level (tritonkit.measure.generators chooses; .perf_analyzer runs the other)
GENERATORS = generators.GENERATORS


def add_generator_arg(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--generator",
        default="tritonkit",
        choices=GENERATORS,
        help="load generator of record: tritonkit's own, or NVIDIA's perf_analyzer binary where installed "
        "(same windows and stability flags; $TRITONKIT_PERF_ANALYZER names it; default tritonkit)",
    )


def generator_problem(args: argparse.Namespace) -> str | None:
    """Why ``--generator perf_analyzer`` cannot measure as the other flags ask (None: it can)."""
    return generators.generator_problem(
        args.generator, stability_windows=args.stability_windows, shared_memory=args.shared_memory,
        workers=args.workers,
    )  # fmt: skip
