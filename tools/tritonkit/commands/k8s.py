"""``tritonkit k8s render|check|package``: print an overlay's manifests, validate every overlay, or pack a
user's build inputs for the cluster's build Job.

The rendering, schemas, checklist, checkov run and packing live in :mod:`tritonkit.deploy`; this module
parses arguments, hands the checklist the load-test scenario names, writes files atomically and prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tritonkit import deploy
from tritonkit.atomic import write_text
from tritonkit.errors import DeployError
from tritonkit.loadtest.scenarios import SCENARIOS  # stdlib-only module, no Locust

__all__ = ["register", "run_check", "run_package", "run_render"]


def register(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="k8s_command", metavar="ACTION")
    overlays = ", ".join(deploy.OVERLAYS)

    render = actions.add_parser("render", help="print an overlay's manifests (kubectl kustomize)")
    render.add_argument("--overlay", required=True, help=f"one of: {overlays}")
    render.add_argument("--output", "-o", type=Path, help="write to FILE (atomically) instead of stdout")
    render.add_argument("--k8s-dir", type=Path, help="the kustomize tree (default: ./k8s)")
    render.set_defaults(func=run_render)

    check = actions.add_parser(
        "check", help="render every overlay, validate schemas strictly, assert the checklist, run checkov"
    )
    check.add_argument(
        "--overlay", action="append", help=f"only these overlays (repeatable; default all: {overlays})"
    )
    check.add_argument(
        "--kubernetes-version",
        default=deploy.KUBERNETES_VERSION,
        help=f"Kubernetes version of the schemas (default {deploy.KUBERNETES_VERSION})",
    )
    check.add_argument(
        "--checkov",
        default="auto",
        help="auto: run it when installed; require: fail without it; off: skip it (default auto)",
    )
    check.add_argument("--k8s-dir", type=Path, help="the kustomize tree (default: ./k8s)")
    check.set_defaults(func=run_check)

    package = actions.add_parser(
        "package",
        help="pack a build spec (and the files it names) or an ONNX file for the cluster's build Job",
        description="Writes OUTPUT/inputs/<model>/ (spec.yaml, modules/, data/, model.onnx); copy "
        "OUTPUT/inputs onto the build workspace volume and run the build Job (docs/deploy.md).",
    )
    package.add_argument(
        "spec", nargs="?", type=Path, help="build spec (YAML); paths in it relative to its folder"
    )
    package.add_argument("--onnx", type=Path, metavar="FILE", help="an ONNX file instead of a spec")
    package.add_argument("--name", help="model name for --onnx (default: the file's stem)")
    package.add_argument(
        "--precision", default="fp32", metavar="LIST", help="--onnx: precisions (default fp32)"
    )
    package.add_argument("--calibration-data", type=Path, metavar="NPZ", help="--onnx: INT8 calibration data")
    package.add_argument("--eval-data", type=Path, metavar="NPZ", help="--onnx: held-out data for fp16/int8")
    package.add_argument(
        "--dynamic-batch",
        action="store_true",
        help="--onnx: rewrite a fixed first axis to a dynamic batch at build time (source.dynamic_batch)",
    )
    package.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="spec: another file or folder (relative to the spec's folder) the torch module reads (repeatable)",
    )
    package.add_argument(
        "--output", "-o", type=Path, required=True, help="folder to write inputs/<model>/ into"
    )
    package.add_argument("--force", action="store_true", help="replace an already packed model of that name")
    package.add_argument(
        "--target",
        choices=deploy.package.TARGETS,
        default="tensorrt",
        help="what the build Job builds, whose checks run before packing: tensorrt (the t4 overlay's, "
        "default) or onnxruntime (the dev overlay's)",
    )
    package.set_defaults(func=run_package)

    parser.set_defaults(func=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_render(args: argparse.Namespace) -> int:
    text = deploy.render_text(args.overlay, root=args.k8s_dir)
    deploy.parse_objects(text, source=f"overlay `{args.overlay}`")  # refuse to write what does not parse
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text(args.output, text, error=DeployError)
        print(f"wrote {args.output} (overlay {args.overlay})", file=sys.stderr)
    return 0


def run_check(args: argparse.Namespace) -> int:
    report = deploy.check(
        args.overlay,
        scenarios=SCENARIOS,
        root=args.k8s_dir,
        kubernetes_version=args.kubernetes_version,
        checkov=args.checkov,
    )
    for line in report.lines:
        print(line)
    for line in report.problems:
        print(f"PROBLEM {line}")
    if report.problems:
        count = len(report.problems)
        print(f"{count} problem{'' if count == 1 else 's'}", file=sys.stderr)
        return 1
    print(f"{len(report.rendered)} overlays OK")
    return 0


def run_package(args: argparse.Namespace) -> int:
    if (args.spec is None) == (args.onnx is None):
        raise DeployError("tritonkit k8s package: expected a build spec or --onnx FILE, exactly one of them")
    if args.spec is not None:
        given = [
            flag
            for flag, value in (
                ("--name", args.name),
                ("--calibration-data", args.calibration_data),
                ("--eval-data", args.eval_data),
                ("--dynamic-batch", args.dynamic_batch or None),
            )
            if value is not None
        ]
        if args.precision != "fp32":
            given.append("--precision")
        if given:
            raise DeployError(
                f"tritonkit k8s package: {', '.join(given)} go with --onnx; a spec names its own"
            )
        folder = deploy.package_spec(
            args.spec, args.output, include=args.include, force=args.force, target=args.target
        )
    else:
        if args.include:
            raise DeployError("tritonkit k8s package: --include goes with a spec (for its torch module)")
        folder = deploy.package_onnx(
            args.onnx,
            args.output,
            name=args.name,
            precisions=[p.strip() for p in args.precision.split(",") if p.strip()],
            calibration_data=args.calibration_data,
            eval_data=args.eval_data,
            force=args.force,
            dynamic_batch=args.dynamic_batch,
            target=args.target,
        )
    files = sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
    print(f"packed {folder} ({len(files)} files: {', '.join(files)})")
    print(f"next: copy {args.output / deploy.INPUTS_DIR} onto the build workspace volume (docs/deploy.md)")
    return 0
