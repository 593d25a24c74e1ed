"""``tritonkit loadtest``: drive a Triton server with Locust and write a capacity report.

Parses and checks the options (bad ones stop the command before any load is sent), then hands
over to :func:`tritonkit.loadtest.run.run`. Exit code 0 when every SLO gate passed, 3 when one
broke (the breaches are printed and written in ``summary.md``), 1 for errors; a run stopped early
writes the report of what it measured and exits 4 (the server died) or 130 (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from tritonkit.commands.shared_args import add_repo, options_from
from tritonkit.errors import LoadTestError
from tritonkit.loadtest.options import LoadTestOptions, parse_model
from tritonkit.loadtest.run import run as run_loadtest
from tritonkit.loadtest.slo import SLO
from tritonkit.measure.input_data import read_entries
from tritonkit.measure.payloads import INPUT_DATA, SOURCES


def _number(name: str) -> Callable[[str], float]:
    """An argparse type for a number; its range is checked by :class:`~tritonkit.loadtest.slo.SLO`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number for {name}, got {text!r}") from None
        return value

    return parse


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", help="Triton endpoint HOST:PORT of --protocol (default: start the embedded server)"
    )
    add_repo(parser, "repository the embedded server serves")
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        help="NAME[:VERSION][@WEIGHT]; repeat for a mixed-model run weighted by WEIGHT",
    )
    parser.add_argument("--protocol", default="http", help="http or grpc (default %(default)s)")
    parser.add_argument(
        "--scenario", default="steady", help="steady, ramp, spike or soak (default %(default)s)"
    )
    parser.add_argument("--users", type=int, default=16, help="users (the peak for ramp/spike; default 16)")
    parser.add_argument("--duration", default="60s", help="run length, e.g. 60s, 5m (default %(default)s)")
    parser.add_argument("--workers", type=int, default=0, help="Locust worker processes (0: one process)")
    parser.add_argument(
        "--http-transport",
        default="lean",
        help="lean (pre-encoded bodies on geventhttpclient, default) or tritonclient (InferenceServerClient.infer)",
    )
    parser.add_argument("--ramp-steps", type=int, default=5, help="steps of the ramp scenario (default 5)")
    parser.add_argument("--batch-mix", help="BATCH[:WEIGHT],... e.g. 1:0.8,8:0.2 (default 1)")
    parser.add_argument(
        "--payload",
        default="auto",
        help="auto (default: sentences for BYTES inputs, image-like data for N,C,H,W inputs), random, text or image",
    )
    parser.add_argument(
        "--input-data",
        help='perf_analyzer\'s JSON file of real requests ({"data": [{INPUT: [...]}, ...]}) instead of --payload',
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo-p95-ms", type=_number("--slo-p95-ms"), help="p95 latency budget (ms)")
    parser.add_argument("--slo-p99-ms", type=_number("--slo-p99-ms"), help="p99 latency budget (ms)")
    parser.add_argument(
        "--max-failure-ratio", type=_number("--max-failure-ratio"), default=0.0, help="default 0"
    )
    parser.add_argument("--min-rps", type=_number("--min-rps"), help="minimum throughput (req/s)")
    parser.add_argument("--http-url", help="with --url over gRPC: Triton's HTTP endpoint (default port 8000)")
    parser.add_argument(
        "--metrics-url",
        help="Triton's /metrics URL (default http://HOST:8002/metrics; `tritonkit serve` prints its own)",
    )
    parser.add_argument(
        "--admin-key",
        help="with --url: key of the restricted statistics API, for the batch sizes formed "
        "(default $TRITONKIT_ADMIN_KEY; `tritonkit serve` prints it)",
    )
    parser.add_argument("--wrk", action="store_true", help="also run wrk on the HTTP endpoint and compare")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--report", required=True, help="directory for the CSV, HTML, JSON, Markdown and PNGs"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    if args.payload not in SOURCES:
        raise LoadTestError(f"--payload {args.payload!r}: expected one of {', '.join(SOURCES)}")
    source = args.payload
    if args.input_data is not None:
        if args.payload != "auto":
            raise LoadTestError(f"--input-data and --payload {args.payload}: expected one of them")
        read_entries(args.input_data)  # a bad file is one line, before any server starts
        source = INPUT_DATA + str(Path(args.input_data).resolve())
    options = options_from(
        LoadTestOptions,
        args,
        models=[parse_model(m, args.batch_mix, source) for m in args.model],
        report_dir=args.report,
        slo=SLO(
            p95_ms=args.slo_p95_ms,
            p99_ms=args.slo_p99_ms,
            max_failure_ratio=args.max_failure_ratio,
            min_rps=args.min_rps,
        ),
        plots=not args.no_plots,
    )
    summary = run_loadtest(options)
    with open(f"{options.report_dir}/summary.md", encoding="utf-8") as handle:
        sys.stdout.write(handle.read())
    stopped = summary.stopped_line()
    if stopped is not None:
        print(f"tritonkit loadtest: {stopped}", file=sys.stderr)
    if not summary.slo_passed:
        for breach in summary.breaches:
            print(f"tritonkit loadtest: SLO breached: {breach}", file=sys.stderr)
    print(f"tritonkit loadtest: report in {Path(options.report_dir).resolve()}/summary.md", file=sys.stderr)
    return int(summary.exit_code)
