"""``tritonkit plan --fleet FLEET.yaml``: the flags of a fleet plan and its run (part of ``tritonkit plan``).

Parses the fleet flags into :class:`~tritonkit.fleet.run.FleetRunOptions`, prints every error of the fleet
file on a line of its own (exit 1, nothing written), and a short summary of the plan written.
``--generator perf_analyzer`` (with ``--tune``) measures the tunes run now with perf_analyzer
(:func:`tritonkit.measure.generators.choose`, as ``tritonkit tune`` chooses: one line when it cannot);
the open-loop levels of models alone and together stay tritonkit's generator.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tritonkit.commands.shared_args import add_protocol, options_from
from tritonkit.errors import TritonKitError

__all__ = ["fleet_arguments", "run_fleet_command"]


def fleet_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fleet (many models, one fleet)")
    group.add_argument(
        "--fleet", type=Path, metavar="FLEET.yaml", help="plan a fleet of models (docs/fleet.md)"
    )
    group.add_argument(
        "--out", type=Path, default=Path("reports/fleet"), help="output folder (default reports/fleet)"
    )
    group.add_argument("--force", action="store_true", help="replace an existing output folder")
    group.add_argument(
        "--tune",
        action="store_true",
        help="tune now, on this machine, the models with no tune report for its type",
    )
    group.add_argument(
        "--verify", action="store_true", help="load-test each group apart at its planned rates (Locust)"
    )
    group.add_argument(
        "--verify-seconds", type=float, default=30.0, help="length of each group's load test (default 30)"
    )
    group.add_argument(
        "--verify-tolerance",
        type=float,
        default=0.15,
        help="throughput within this share of the plan (default 0.15)",
    )
    add_protocol(group, "protocol of the measurements")
    group.add_argument(
        "--generator",
        default="tritonkit",
        choices=("tritonkit", "perf_analyzer"),
        help="with --tune: the load generator of record of the tunes run now (perf_analyzer where installed; "
        "$TRITONKIT_PERF_ANALYZER names it); the open-loop levels are tritonkit's (default tritonkit)",
    )
    group.add_argument(
        "--min-seconds", type=float, default=5.0, help="seconds measured per level at least (default 5)"
    )
    group.add_argument(
        "--max-seconds", type=float, default=20.0, help="seconds measured per level at most (default 20)"
    )
    group.add_argument(
        "--min-samples", type=int, default=100, help="requests of the slowest model per level (default 100)"
    )
    group.add_argument("--max-group", type=int, default=4, help="models per server group at most (default 4)")
    group.add_argument("--prometheus-url", help="KEDA's Prometheus (default kube-prometheus-stack's service)")
    group.add_argument("--no-plots", action="store_true", help="skip packing.png and cost.png")


def run_fleet_command(args: argparse.Namespace) -> int:
    # imported here: the fleet stage pulls in matplotlib and the measurement core, which the one-model plan needs not
    from tritonkit.fleet.openloop import MeasureSettings  # noqa: PLC0415
    from tritonkit.fleet.overlays import DEFAULT_PROMETHEUS  # noqa: PLC0415
    from tritonkit.fleet.planner import PlanOptions  # noqa: PLC0415
    from tritonkit.fleet.run import FleetRunOptions, run_fleet  # noqa: PLC0415
    from tritonkit.fleet.spec import FleetFileError  # noqa: PLC0415

    if (
        args.min_seconds <= 0
        or args.max_seconds < args.min_seconds
        or args.min_samples < 1
        or args.max_group < 1
    ):
        print(
            f"tritonkit plan: error: --min-seconds {args.min_seconds}, --max-seconds {args.max_seconds}, "
            f"--min-samples {args.min_samples}, --max-group {args.max_group}: expected 0 < min <= max, "
            "samples >= 1 and a group size >= 1",
            file=sys.stderr,
        )
        return 1
    if args.generator != "tritonkit":
        if not args.tune:
            raise TritonKitError(
                f"--generator {args.generator}: expected --tune (it measures the tunes run now; the open-loop "
                "levels are tritonkit's)"
            )
        from tritonkit.measure.generators import choose  # noqa: PLC0415
        from tritonkit.measure.levels import MeasureOptions  # noqa: PLC0415

        choose(args.generator, MeasureOptions())  # the binary, or its one line before anything is measured
    settings = options_from(MeasureSettings, args)
    options = FleetRunOptions(
        fleet_file=args.fleet,
        out_dir=args.out,
        plan=PlanOptions(
            tune=args.tune,
            settings=settings,
            max_group=args.max_group,
            tune_overrides={"protocol": args.protocol, "generator": args.generator},
        ),
        verify=args.verify,
        verify_seconds=args.verify_seconds,
        verify_tolerance=args.verify_tolerance,
        k8s_dir=args.k8s_dir,
        prometheus_url=args.prometheus_url or DEFAULT_PROMETHEUS,
        plots=not args.no_plots,
        force=args.force,
    )
    try:
        data, code = run_fleet(options)
    except FleetFileError as exc:
        for line in exc.problems:
            print(f"tritonkit plan: error: {line}", file=sys.stderr)
        return 1
    _summary(data, args.out)
    return code


def _summary(data: dict[str, Any], out: Path) -> None:
    cheapest = data["cheapest"]
    cost = f", ${cheapest['cost_per_hour']:,.2f}/h" if cheapest["cost_per_hour"] is not None else ""
    print(f"cheapest fleet: {cheapest['gpus']} GPUs{cost}")
    for place in data["placement"]:
        print(
            f"  {place['group']} on {place['gpu_type']}: {', '.join(place['models'])} x {place['replicas']} pods"
        )
    for row in data["types"]:
        if row["packed_gpus"] is not None:
            print(
                f"  {row['type']}: packed {row['packed_gpus']} GPUs, one model per pod {row['single_gpus']} GPUs"
            )
    for check in data["verify"]:
        print(f"  load test {check['group']}: {'ok' if check['ok'] else 'FAILED'}")
    print(f"wrote {out}/fleet-plan.md, fleet-plan.json, k8s/fleet/")
