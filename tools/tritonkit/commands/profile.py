"""``tritonkit profile``: a concurrency or request-rate sweep of one model, or the highest load within a budget.

Each level is measured in windows until ``--stability-windows`` of them agree within ``--stability-pct``
(throughput and p99); an unstable or generator-limited level is printed and exported as such. For a
runner that pads batches to buckets (the torch GPU runner) each level also says what share of the rows it
computed were padding, from the batches Triton formed; for a version with shape buckets (a dynamic
sequence axis), tokens/s beside req/s and the padded share of the tokens sent, from the traffic's
lengths (``--input-data``, else the generated length) and the config's edges. Without ``--input-data``
it says which length generated requests give a variable (-1) dim. Exit code 0, or 3 with ``--find-max``
when no level met the budget.

``--generator perf_analyzer`` measures every level with NVIDIA's perf_analyzer instead
(:mod:`tritonkit.measure.perf_analyzer`: one process per level, the same window and stability flags; chosen
by :func:`tritonkit.measure.generators.choose`, as compare and tune choose), read
into the same table, CSV and JSON. With tritonkit's generator, every report carries perf_analyzer's
figure beside each level's (each level of a sweep, the best of ``--find-max``: a ``perf_analyzer`` line,
``pa_*`` CSV columns, ``cross_check`` by level in the JSON) when the binary is installed, and says
``perf_analyzer: not installed`` (with the reason) when it is not; ``--no-cross-check`` leaves it out.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonkit.backends.runners.shape_buckets import Buckets
from tritonkit.client import Client
from tritonkit.commands.measure_args import (
    add_generator_arg,
    add_measure_args,
    connect,
    generator_problem,
    measure_options,
    parse_levels,
    target,
)
from tritonkit.config import ModelConfig, from_proto
from tritonkit.errors import TritonKitError
from tritonkit.measure.generators import LevelMeasurer, choose, measurer_of
from tritonkit.measure.levels import LevelResult, MeasureOptions, find_max, generator_line, refuse_limited
from tritonkit.measure.loadgen import Level, Target
from tritonkit.measure.perf_analyzer import (
    Binary,
    PerfAnalyzerMeasurer,
    cross_check,
    cross_check_line,
    locate,
)
from tritonkit.measure.provenance import Provenance, collect, markdown_lines
from tritonkit.serve.endpoint import Endpoint
from tritonkit.tune.export import table, write_csv, write_json
from tritonkit.tune.space import buckets_of, padded_share
from tritonkit.tune.traffic import Traffic, buckets_in, generated_line, token_figures, token_line, traffic_of


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="NAME[:VERSION]")
    add_measure_args(parser)
    add_generator_arg(parser)
    parser.add_argument(
        "--no-cross-check", action="store_true", help="leave out perf_analyzer's figure beside tritonkit's"
    )
    parser.add_argument(
        "--concurrency", help="closed-loop levels: 1,2,4 or 1:32 (powers of two; default 1:16)"
    )
    parser.add_argument("--request-rate", help="open-loop levels in requests/s: 50,100,200 or 50:800")
    parser.add_argument("--poisson", action="store_true", help="with --request-rate: Poisson arrivals")
    parser.add_argument("--find-max", action="store_true", help="search the highest level within the budget")
    parser.add_argument("--latency-budget-ms", type=float, help="p99 budget for --find-max (ms)")
    parser.add_argument("--max-level", type=float, default=256, help="--find-max stops there (default 256)")
    parser.add_argument("--csv", type=Path, help="write one row per level")
    parser.add_argument("--json", type=Path, help="write every level with its windows")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``tritonkit profile``: measure the levels (or search the highest within the budget), then export."""
    options = measure_options(args)
    of_record = choose(args.generator, options, args.shared_memory)  # one line when it cannot measure
    binary: Binary | str | None = of_record or (None if args.no_cross_check else locate())
    mode, levels = _levels(args)
    model, _, version = args.model.partition(":")
    best: LevelResult | None = None
    with (
        connect(args, [model]) as conn,
        measurer_of(of_record, target(conn, model, args, version), options) as measurer,
    ):
        provenance = collect(
            conn.url(args.protocol), args.protocol, [(model, version)],
            repo=args.repo if conn.server is not None else None,
        )  # fmt: skip
        print(markdown_lines(provenance)[0], flush=True)
        cross = _cross_checker(args, binary, target(conn, model, args, version), options)
        print(_generator_line(args, binary), flush=True)
        served_config = _served_config(args, conn, model)
        buckets = buckets_of(served_config)
        _print_notes(args, served_config)
        shape_buckets = buckets_in(served_config)
        traffic = traffic_of(served_config, args.input_data, args.batch_size)
        figures = _Figures(args.find_max, cross, buckets, shape_buckets, traffic)
        print(table([]), flush=True)
        if args.find_max:
            best, results = _find_max(args, measurer, mode, levels, figures.show)
        else:
            results = _sweep(measurer, levels, figures.show)
        if args.find_max and best is not None:
            figures.cross_check(best)
    extra = _extra(args, provenance, binary, figures, best)
    _export(args, results, figures.checks, extra)
    return _verdict(args, best)


def _levels(args: argparse.Namespace) -> tuple[str, list[Level]]:
    """The load mode (concurrency, rate or poisson) and the levels the flags ask for, checked."""
    if args.concurrency and args.request_rate:
        raise TritonKitError("--concurrency and --request-rate: expected one of them")
    mode = ("poisson" if args.poisson else "rate") if args.request_rate else "concurrency"
    levels = parse_levels(args.request_rate or args.concurrency or ("" if args.find_max else "1:16"), mode)
    if args.find_max and (args.latency_budget_ms is None or args.latency_budget_ms <= 0):
        raise TritonKitError("--find-max: expected --latency-budget-ms with a positive budget")
    return mode, levels


def _served_config(args: argparse.Namespace, conn: Endpoint, model: str) -> ModelConfig:
    """The config Triton serves ``model`` with."""
    with Client(conn.url(args.protocol), args.protocol, timeout=30, headers=conn.headers or None) as client:
        return from_proto(client.config(model))


def _print_notes(args: argparse.Namespace, served_config: ModelConfig) -> None:
    """Which length generated requests give a variable dim."""
    if args.input_data is None and args.generator == "tritonkit" and (line := generated_line(served_config)):
        print(line, flush=True)


@dataclasses.dataclass
class _Figures:
    """What each level prints and records beside its table row: perf_analyzer's figure, tokens/s, padding."""

    find_max: bool
    cross: Callable[[LevelResult], dict[str, Any]] | None
    buckets: list[int]
    shape_buckets: Buckets | None
    traffic: Traffic | None
    padding: dict[str, float] = dataclasses.field(default_factory=dict)
    tokens: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def show(self, result: LevelResult) -> None:
        """Print a measured level's row and figures (a sweep's levels also get perf_analyzer's)."""
        print(table([result]).splitlines()[-1], flush=True)
        if line := generator_line(result):
            print(line, flush=True)
        if not self.find_max:
            self.cross_check(result)
        if self.traffic is not None and self.shape_buckets is not None:
            self.tokens[result.level.label()] = figures = token_figures(
                self.traffic, self.shape_buckets, result.throughput
            )
            print(f"  {result.level.label()}: {token_line(figures)}", flush=True)
        share = padded_share(result.server.batches, self.buckets)
        if share is not None:
            self.padding[result.level.label()] = round(share, 4)
            print(
                f"  {result.level.label()}: padded rows {share:.1%} of the rows the runner computed",
                flush=True,
            )

    def cross_check(self, result: LevelResult) -> None:
        """perf_analyzer at ``result``'s level, recorded and printed (nothing without a cross-check)."""
        if self.cross is not None:
            self.checks[result.level.label()] = record = self.cross(result)
            print(cross_check_line(record), flush=True)


def _find_max(
    args: argparse.Namespace,
    measurer: LevelMeasurer,
    mode: str,
    levels: list[Level],
    show: Callable[[LevelResult], None],
) -> tuple[LevelResult | None, list[LevelResult]]:
    """``--find-max``: the highest level within the budget, from the first level asked for."""
    start = levels[0].value if levels else (1.0 if mode == "concurrency" else 10.0)
    return find_max(
        measurer.measure,
        args.latency_budget_ms,
        mode=mode,
        start=start,
        limit=args.max_level,
        on_result=show,
    )


def _sweep(
    measurer: LevelMeasurer, levels: list[Level], show: Callable[[LevelResult], None]
) -> list[LevelResult]:
    """Every level in turn; one the generator limited ends the sweep (one line)."""
    results: list[LevelResult] = []
    for level in levels:
        result = measurer.measure(level)
        show(result)
        results.append(result)
        refuse_limited(result)  # a level the generator limited ends the sweep: one line
    return results


def _extra(
    args: argparse.Namespace,
    provenance: Provenance,
    binary: Binary | str | None,
    figures: _Figures,
    best: LevelResult | None,
) -> dict[str, Any]:
    """The JSON export's fields beside the levels."""
    extra: dict[str, Any] = {
        "model": args.model,
        "protocol": args.protocol,
        "shared_memory": args.shared_memory,
        "provenance": provenance.as_dict(),
        "generator": args.generator,
        "perf_analyzer": (
            {"installed": True, "path": binary.path, "version": binary.version}
            if isinstance(binary, Binary)
            else {"installed": False, "reason": binary or "cross-check left out"}
        ),
    }
    if figures.buckets:
        extra.update(buckets=figures.buckets, padded_share=figures.padding)
    if figures.traffic is not None and figures.shape_buckets is not None:
        axes = {axis: list(edges) for axis, edges in figures.shape_buckets.axes.items()}
        extra["tokens"] = {"lengths": figures.traffic.source, "edges": axes, "by_level": figures.tokens}
    if args.find_max:
        extra["latency_budget_ms"] = args.latency_budget_ms
        extra["best"] = best.summary() if best is not None else None
    if args.generator == "tritonkit" and figures.checks:
        extra["cross_check"] = figures.checks
    return extra


def _export(
    args: argparse.Namespace,
    results: list[LevelResult],
    checks: dict[str, dict[str, Any]],
    extra: dict[str, Any],
) -> None:
    """``--csv`` (with perf_analyzer's cells) and ``--json``, where asked for."""
    if args.csv:
        write_csv(args.csv, results, [_pa_cells(checks.get(r.level.label())) for r in results])
    if args.json:
        write_json(args.json, results, extra)


def _verdict(args: argparse.Namespace, best: LevelResult | None) -> int:
    """The exit code; ``--find-max`` also prints its best level, or that none met the budget."""
    if args.find_max:
        if best is None:
            print(f"tritonkit profile: no level met p99 <= {args.latency_budget_ms:g} ms", file=sys.stderr)
            return 3
        print(
            f"highest load within p99 {args.latency_budget_ms:g} ms: {best.level.label()}, "
            f"{best.throughput:.1f} req/s, p99 {best.p99_ms:.3f} ms"
        )
    return 0


def _generator_line(args: argparse.Namespace, binary: Binary | str | None) -> str:
    if args.generator == "perf_analyzer":
        return f"generator: perf_analyzer ({binary.version if isinstance(binary, Binary) else binary})"
    if binary is None:
        return "generator: tritonkit (perf_analyzer cross-check left out)"
    if isinstance(binary, Binary):
        return f"generator: tritonkit; cross-check: perf_analyzer ({binary.version})"
    return f"generator: tritonkit; perf_analyzer: {binary}"  # "not installed (...)" or why it does not run


def _cross_checker(
    args: argparse.Namespace, binary: Binary | str | None, where: Target, options: MeasureOptions
) -> Callable[[LevelResult], dict[str, Any]] | None:
    """perf_analyzer at a level tritonkit just measured, as a record (None: no cross-check)."""
    if args.generator != "tritonkit" or not isinstance(binary, Binary):
        return None
    as_pa = argparse.Namespace(**{**vars(args), "generator": "perf_analyzer", "workers": 1})
    if problem := generator_problem(as_pa):  # perf_analyzer sizes its own threads: --workers is tritonkit's
        return lambda result: cross_check(result, f"left out: {problem}")

    def check(result: LevelResult) -> dict[str, Any]:
        try:
            with PerfAnalyzerMeasurer(where, options, binary, export=False) as pa:
                return cross_check(result, pa.measure(result.level))
        except TritonKitError as exc:
            return cross_check(result, str(exc))

    return check


def _pa_cells(record: dict[str, Any] | None) -> dict[str, Any]:
    if record is None:
        return {}
    return {
        "pa_throughput": record.get("throughput", ""),
        "pa_p50_ms": record.get("p50_ms", ""),
        "pa_p99_ms": record.get("p99_ms", ""),
        "pa_stable": record.get("stable", ""),
        "tritonkit_over_pa": record.get("tritonkit_over_pa", ""),
        **({"pa_error": record["error"]} if record.get("error") else {}),
    }
