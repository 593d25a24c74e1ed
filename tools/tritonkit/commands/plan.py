"""``tritonkit plan``: replicas, cost per million inferences and the HPA target from a ``tritonkit tune`` report,
or, with ``--fleet FLEET.yaml``, the plan of a fleet of many models (:mod:`tritonkit.fleet`).

One model: reads ``tune.json`` from ``--tune-report``, writes ``plan.md``, ``plan.json`` and
``capacity-plan.yaml`` (a kustomize patch of the t4 overlay) next to it; prices ``--gpu`` replicas (T4) only
from a tune measured on that GPU, unless ``--capacity-ratio`` says how one such replica compares with what
was measured (the first line of ``plan.md`` then says so); a KIND_CPU config's replicas are CPU pods at
``--pod-hour-price``, never GPUs; ``--p99-ms`` re-plans for another budget from the tune's curve, refused
when no measured level fits it, and every figure read outside what the tune measured is said (stderr and
``plan.md``); ``--k8s-dir`` also adds the patch to that tree's
t4 overlay and renders and validates it; ``--check-knee`` measures the priced config again with the tune's
own method and exits 3 when it is not within ``--knee-tolerance`` of the figure the tune measured.

A fleet: writes ``--out`` (the packing, placement, overlays per group, report and pictures) or nothing;
every error of the fleet file is one line; ``--verify`` load-tests each group apart and exits 3 when one
misses a budget or its planned throughput by more than ``--verify-tolerance``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

from tritonkit import __version__
from tritonkit.atomic import write_text
from tritonkit.commands.plan_fleet import fleet_arguments, run_fleet_command
from tritonkit.commands.shared_args import add_repo, options_from
from tritonkit.errors import TritonKitError, read_json
from tritonkit.loadtest.scenarios import SCENARIOS
from tritonkit.machine import host_name
from tritonkit.tune.plan import (
    PATCH_FILE,
    apply_patch,
    check_knee,
    check_patch,
    kustomize_patch,
    make_plan,
)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tune-report", type=Path, help="folder holding tune.json (one model)")
    parser.add_argument("--target-rps", type=float, help="traffic to serve (req/s; one model)")
    parser.add_argument(
        "--gpu-hour-price", type=float, help="price per GPU-hour (default T4 on-demand 0.526; GPU configs)"
    )
    parser.add_argument("--gpu", help="the GPU type the price is for (default T4; GPU configs)")
    parser.add_argument(
        "--pod-hour-price",
        type=float,
        help="price per CPU pod-hour: required when the priced config runs KIND_CPU instances (its replicas "
        "are CPU pods, never GPUs)",
    )
    parser.add_argument(
        "--p99-ms",
        type=float,
        help="re-plan for this p99 budget from the tune's measured curve (refused when no measured level fits "
        "it; flagged when the tune never reached its limit)",
    )
    parser.add_argument(
        "--capacity-ratio",
        type=float,
        help="one --gpu replica serves R x the throughput the tune measured; required when the tune ran on "
        "another device (a CPU, another GPU): 1 assumes the same capacity",
    )
    parser.add_argument("--headroom", type=float, default=0.3, help="spare capacity share (default 0.3)")
    parser.add_argument(
        "--peak-factor", type=float, default=2.0, help="HPA max = replicas x this (default 2)"
    )
    parser.add_argument(
        "--k8s-dir",
        type=Path,
        help="one model: add the patch to this kustomize tree's t4 overlay and validate; "
        "--fleet: the tree the group overlays are built on (default ./k8s)",
    )
    parser.add_argument(
        "--check-knee",
        action="store_true",
        help="measure the priced config again as the tune did and compare",
    )
    add_repo(parser, "for --check-knee without --url")
    parser.add_argument("--url", help="for --check-knee: the server to measure (default: embedded on --repo)")
    parser.add_argument(
        "--admin-key",
        default=os.environ.get("TRITONKIT_ADMIN_KEY") or None,
        help="for --check-knee with --url: the statistics key (default $TRITONKIT_ADMIN_KEY)",
    )
    parser.add_argument("--knee-tolerance", type=float, default=0.15)
    fleet_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.fleet is not None:
        return run_fleet_command(args)
    if args.tune_report is None or args.target_rps is None:
        raise TritonKitError(
            "expected --tune-report DIR and --target-rps N (one model), or --fleet FLEET.yaml"
        )

    source = args.tune_report / "tune.json"
    missing = f"{source} not found; expected the --report folder of `tritonkit tune`"
    data = read_json(source, TritonKitError, missing=missing, invalid=f"{source} is not valid JSON")
    plan = options_from(
        make_plan,
        args,
        tune_result=data,
        price_per_gpu_hour=args.gpu_hour_price,
        price_per_pod_hour=args.pod_hour_price,
    )
    patch = kustomize_patch(plan)
    made = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": host_name(),
        "tritonkit_version": __version__,
    }
    write_text(args.tune_report / PATCH_FILE, patch)
    write_text(args.tune_report / "plan.json", json.dumps({**plan.as_dict(), "made": made}, indent=2) + "\n")
    text = (
        plan.markdown() + f"\nPlan made {made['date']} on host `{made['host']}` by tritonkit {__version__}.\n"
    )
    write_text(args.tune_report / "plan.md", text)
    sys.stdout.write(text)
    for line in plan.outside_measured:
        print(f"tritonkit plan: outside what the tune measured: {line}", file=sys.stderr)
    code = 0
    if args.k8s_dir is not None:
        written = apply_patch(args.k8s_dir, patch)
        objects, problems = check_patch(args.k8s_dir, SCENARIOS)
        for line in problems:
            print(f"PROBLEM {line}")
        print(f"wrote {written}; t4 overlay: {len(objects)} objects, {len(problems)} problems")
        code = 1 if problems else 0
    if args.check_knee:
        result = check_knee(
            plan,
            method=data.get("method") or {},
            repo=args.repo,
            url=args.url,
            report_dir=args.tune_report / "knee",
            tolerance=args.knee_tolerance,
            admin_key=args.admin_key,
        )
        verdict = "within" if result["ok"] else "NOT within"
        print(
            f"knee (measured as the tune did): {result['knee_rps']:.1f} req/s at concurrency "
            f"{result['knee_concurrency']}; the tune measured {result['planned_rps']:.1f} req/s: ratio "
            f"{result['ratio']:.3f}, {verdict} ±{args.knee_tolerance:.0%}"
        )
        code = code or (0 if result["ok"] else 3)
    return code
