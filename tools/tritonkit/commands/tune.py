"""``tritonkit tune``: the best config of one model under a p99 budget, applied live, written back, reported.

Each config is put into service through Triton's model-repository API (explicit model control, admin
key), never by restarting the server; its highest concurrency within the budget is measured; brute
force tries the whole grid, quick search a fraction of it; then the configs within 10 % of the best
are measured again in alternating rounds and the best median wins (``--finalists``). ``--report DIR`` gets ``trials.jsonl`` (one
line per finished trial: ``--resume`` goes on from it), ``tune.json``, ``report.md`` and ``pareto.png``;
the model's own config is measured as the baseline (in the finals rounds too) and the winner replaces the
model's ``config.pbtxt`` atomically only when it beats the baseline beyond the spread of their repeated
measurements (``--write none`` keeps it, ``--write model:NAME`` writes a new model beside it, ``--write
spec[:PATH]`` also writes the build spec) and the diff is printed. ``--time-budget SECONDS`` bounds the whole
tune: once spent nothing more is measured and the tune is partial (said on stderr, in ``tune.json`` and the
report; nothing written). ``--resume`` replays the log from the config it began with, so ``--resume
--write spec:FILE`` after a tune that wrote ``config.pbtxt`` measures nothing and writes the same winner
into the spec. A model with shape buckets tuned with ``--input-data FILE`` also searches the bucket
edges (candidates from the file's length histogram, every set ending at the model's longest length), and
its figures carry tokens/s beside req/s with the padded share of the tokens sent. ``--generator
perf_analyzer`` measures every level (trials, baseline, finals) with NVIDIA's perf_analyzer, the same
windows and stability flags (:func:`tritonkit.measure.generators.choose`, as profile and compare choose;
one line and a non-zero exit when the binary is absent); its CSV and output per level are kept in
``--report``'s ``perf_analyzer/`` folder and each level of ``trials.jsonl`` names its CSV (``source``).
Exit code 0, 3 when no config met the budget.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tritonkit.commands.measure_args import add_generator_arg, add_measure_args, measure_options
from tritonkit.commands.shared_args import options_from
from tritonkit.errors import OptionError, TritonKitError
from tritonkit.tune.tuner import TuneOptions, TuneResult, tune


def _list(text: str | None, what: str, allow_off: bool = False) -> list[Any] | None:
    if not text:
        return None
    out: list[Any] = []
    for raw in text.split(","):
        part = raw.strip()
        if allow_off and part == "off":
            out.append("off")
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise TritonKitError(f"{what} {text!r}: expected whole numbers separated by commas") from None
    return out


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True)
    parser.add_argument("--latency-budget-ms", type=float, required=True, help="p99 budget (ms)")
    parser.add_argument("--min-throughput", type=float, default=0.0, help="req/s a winner must reach")
    parser.add_argument("--search", default="quick", choices=("quick", "brute"), help="default %(default)s")
    parser.add_argument("--report", type=Path, required=True, help="folder for the trial log and report")
    parser.add_argument("--resume", action="store_true", help="go on from the trial log in --report")
    parser.add_argument("--max-batch-sizes", help="e.g. 8,16,32 (default: powers of two up to the model's)")
    parser.add_argument("--delays-us", help="batching delays, e.g. off,0,500,2000 (default)")
    parser.add_argument("--instances", help="instance counts, e.g. 1,2,3 (default)")
    parser.add_argument("--no-preferred", action="store_true", help="do not tune preferred batch sizes")
    parser.add_argument("--no-queue-policy", action="store_true", help="do not tune the queue policy")
    parser.add_argument(
        "--no-jit-optimize",
        action="store_true",
        help="native-backend GPU version: keep its plan (default: also try TorchScript's optimised plan; "
        "the quick search once, at the best config found, brute force on every point; it compiles fused "
        "kernels at every load)",
    )
    parser.add_argument("--gpu", action="store_true", help="also try KIND_GPU instances")
    parser.add_argument(
        "--max-concurrency", type=int, default=64, help="highest concurrency tried (default 64)"
    )
    parser.add_argument(
        "--no-warm-start",
        action="store_true",
        help="quick search: measure every config from concurrency 1 (default: from the best config's level)",
    )
    parser.add_argument(
        "--finalists",
        type=int,
        default=4,
        help="configs within 10%% of the best measured again in rounds; the best median wins (default 4; 0: off)",
    )
    parser.add_argument("--final-rounds", type=int, default=3, help="rounds of the finals (default 3)")
    parser.add_argument(
        "--write",
        default="config",
        help="config (default), none, model:NAME, or spec / spec:PATH (config.pbtxt and the build spec's "
        "batching and instances); only a winner that beats the model's own config beyond the spread is written",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="wall-clock seconds for the whole tune: once spent nothing more is measured, the report says "
        "what was (a partial tune, nothing written); --resume goes on from the log",
    )
    parser.add_argument("--no-plots", action="store_true")
    add_measure_args(parser)
    add_generator_arg(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    options = options_from(
        TuneOptions,
        args,
        report_dir=args.report,
        repo=Path(args.repo),
        measure=measure_options(args),
        max_batch_sizes=_list(args.max_batch_sizes, "--max-batch-sizes"),
        delays_us=_list(args.delays_us, "--delays-us", allow_off=True),
        instances=_list(args.instances, "--instances"),
        preferred=not args.no_preferred,
        queue=not args.no_queue_policy,
        jit_optimize=not args.no_jit_optimize,
        plots=not args.no_plots,
        require_stable=not args.accept_unstable,
        warm_start=not args.no_warm_start,
        time_budget_s=args.time_budget,
    )
    try:
        result = tune(options)
    except OptionError as exc:  # the library names the option; the user typed its flag
        flag = {"time_budget_s": "time_budget"}.get(exc.option, exc.option)
        raise TritonKitError(exc.naming("--" + flag.replace("_", "-"))) from None
    print(
        f"tritonkit tune: {result.evaluations} configs, {result.measurements} load levels; report in {args.report}"
    )
    if result.partial is not None:
        p = result.partial
        print(
            f"tritonkit tune: PARTIAL: the time budget ({p['time_budget_s']:g} s) ended the tune in its "
            f"{p['stopped']} after {p['configs_measured']} config(s) measured"
            + ("" if p["baseline_measured"] else " (the model's own config not measured)")
            + "; nothing written",
            file=sys.stderr,
        )
    if result.winner is None:
        print(f"tritonkit tune: no config met p99 <= {args.latency_budget_ms:g} ms", file=sys.stderr)
        return 3
    _print_result(result)
    return 0


def _figure(row: dict[str, Any]) -> str:
    if "confirmed_throughput" in row:
        figures = row["final_figures"]
        return (
            f"{row['confirmed_throughput']:.1f} req/s{_tokens(row, row['confirmed_throughput'])} (finals "
            f"median of {len(figures)} rounds, {min(figures):.1f}-{max(figures):.1f})"
        )
    return f"{row['throughput']:.1f} req/s{_tokens(row, row['throughput'])} (one search measurement)"


def _tokens(row: dict[str, Any], throughput: float) -> str:
    """`` = 4,210 tokens/s, 12.0 % of the tokens sent padding`` for a version with shape buckets."""
    tokens = row.get("tokens")
    if not tokens:
        return ""
    return (
        f" = {throughput * tokens['tokens_per_request']:,.0f} tokens/s, "
        f"{tokens['token_padded_share']:.1%} of the tokens sent padding"
    )


def _print_result(result: TuneResult) -> None:
    """The headline (finals medians), the baseline, the verdict and what was written."""
    w, base, verdict = result.winner or {}, result.baseline, result.verdict or {}
    print(f"winner: {w['key']}: {_figure(w)} at concurrency {w['concurrency']}, p99 {w['p99_ms']:.2f} ms")
    if base is not None:
        own = _figure(base) if base.get("feasible") else "no load level within the budget"
        print(f"the model's own config ({base['key']}): {own}")
    gain = verdict.get("gain")
    ahead = f"{gain:+.1%} against the model's own config; " if gain is not None else ""
    if verdict.get("write"):
        where = result.written_to or "not written (--write none)"
        print(f"{ahead}written to {where}: {verdict['reason']}")
    else:
        print(f"{ahead}NOT written, config.pbtxt unchanged: {verdict.get('reason', '')}")
    for note in result.notes:
        print(f"note: {note}")
    if result.diff:
        sys.stdout.write(result.diff)
    if result.spec_diff:
        sys.stdout.write(result.spec_diff)
