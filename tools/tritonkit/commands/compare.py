"""``tritonkit compare``: two or more models or versions under identical load, in interleaved rounds.

Prints (and with ``--json``/``--markdown`` writes) each target's median throughput and p99 and the
median and interquartile range of its per-round ratios to the first target. ``--generator
perf_analyzer`` measures every round with NVIDIA's perf_analyzer (:mod:`tritonkit.measure.perf_analyzer`:
one process per round and target, the same window and stability flags; chosen by
:func:`tritonkit.measure.generators.choose`, as profile and tune choose); the summary names the generator.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tritonkit.atomic import write_text
from tritonkit.commands.measure_args import (
    add_generator_arg,
    add_measure_args,
    connect,
    measure_options,
    target,
)
from tritonkit.errors import TritonKitError
from tritonkit.measure.generators import choose, label, measurer_of
from tritonkit.measure.levels import LevelResult, refuse_limited
from tritonkit.measure.loadgen import Level
from tritonkit.measure.provenance import collect
from tritonkit.tune.compare import compare, markdown, summarize


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="+", help="NAME[:VERSION], at least two; the first is the reference")
    add_measure_args(parser)
    add_generator_arg(parser)
    parser.add_argument("--concurrency", type=int, help="closed-loop level (default 4)")
    parser.add_argument("--request-rate", type=float, help="open-loop level in requests/s instead")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    for flag, form in (("--json", "JSON"), ("--markdown", "Markdown")):
        parser.add_argument(flag, type=Path, help=f"write the summary as {form}")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    if len(args.models) < 2 or len(set(args.models)) != len(args.models):
        raise TritonKitError(f"models {args.models}: expected at least two different NAME[:VERSION]")
    if args.rounds < 1:
        raise TritonKitError(f"--rounds {args.rounds}: expected a whole number >= 1")
    if args.concurrency is not None and args.request_rate is not None:
        raise TritonKitError("--concurrency and --request-rate: expected one of them")
    level = (
        Level("rate", args.request_rate) if args.request_rate else Level("concurrency", args.concurrency or 4)
    )
    options = measure_options(args)
    binary = choose(args.generator, options, args.shared_memory)  # one line when it cannot measure
    with connect(args, [m.partition(":")[0] for m in args.models]) as conn:
        provenance = collect(
            conn.url(args.protocol),
            args.protocol,
            [(m.partition(":")[0], m.partition(":")[2]) for m in args.models],
            repo=args.repo if conn.server is not None else None,
        )

        def measure(name: str, lvl: Level) -> LevelResult:
            model, _, version = name.partition(":")
            where = target(conn, model, args, version)
            with measurer_of(binary, where, options) as measurer:
                result = measurer.measure(lvl)
            print(
                f"{name}: {result.throughput:.1f} req/s, p99 {result.p99_ms:.3f} ms"
                f" (generator: {label(binary) if binary else result.capacity.describe()})",
                file=sys.stderr,
                flush=True,
            )
            return refuse_limited(result)  # a round the generator limited compares clients: one line

        summary = summarize(compare(args.models, measure, level, args.rounds))
    summary["provenance"] = provenance.as_dict()
    summary["generator"] = label(binary)
    text = markdown(summary) + f"\nGenerator: {summary['generator']}.\n"
    sys.stdout.write(text)
    if args.json:
        write_text(args.json, json.dumps(summary, indent=2) + "\n")
    if args.markdown:
        write_text(args.markdown, text)
    return 0
