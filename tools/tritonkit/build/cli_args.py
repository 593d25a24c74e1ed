"""The conversion flags of ``tritonkit build`` and the build they run.

``tritonkit build SPEC.yaml [--target ...] [--precision ...] [--gpu ...]`` builds from a spec;
``tritonkit build --onnx FILE --precision fp16,int8 --calibration-data cal.npz --eval-data ev.npz``
builds an ONNX file without one. Precedence, highest first: these flags, ``TRITONKIT_*``
environment variables (:data:`tritonkit.build.spec.ENV_OVERRIDES`), the spec, the defaults.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tritonkit.build.precision import CALIBRATION_METHODS
from tritonkit.build.spec import PRECISIONS, TARGETS, BuildSpec, apply_overrides, load_spec, parse_spec
from tritonkit.errors import SpecError

__all__ = ["add_arguments", "run", "spec_from_args"]

# Defaults of the shared build flags (commands/build.py); a flag equal to its default counts as
# "not given" so that it does not override the spec or the environment.
_SHARED_DEFAULTS = {"instances": 1, "instance_kind": "KIND_CPU", "max_queue_delay_us": 500}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("conversion (build specs; flags > TRITONKIT_* variables > spec)")
    group.add_argument(
        "--target", choices=TARGETS, help="portable (default, embedded server) | onnxruntime | tensorrt"
    )
    group.add_argument(
        "--precision", metavar="LIST", help=f"comma-separated precisions to build ({', '.join(PRECISIONS)})"
    )
    group.add_argument(
        "--gpu", metavar="PROFILE", help="GPU profile: T4, L4, A10, A100, H100 (default: detected, else T4)"
    )
    group.add_argument("--calibration-method", choices=CALIBRATION_METHODS, help="INT8 calibration method")
    group.add_argument(
        "--calibration-data", metavar="PATH", help="calibration data: pydoc, synthetic, .txt or .npz"
    )
    group.add_argument("--calibration-samples", type=int, metavar="N", help="calibration samples to use")
    group.add_argument(
        "--eval-data", metavar="PATH", help="held-out evaluation data (same kinds as calibration)"
    )
    group.add_argument("--eval-samples", type=int, metavar="N", help="held-out samples for the accuracy gate")


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for dest in (
        "target",
        "precision",
        "gpu",
        "max_batch_size",
        "calibration_method",
        "calibration_data",
        "calibration_samples",
        "eval_data",
        "eval_samples",
    ):
        flags[dest] = getattr(args, dest, None)
    for dest in _SHARED_DEFAULTS:
        # commands/build.py leaves these None when not given, so an explicit default still overrides.
        flags[dest] = getattr(args, dest, None)
    return flags


def spec_from_args(args: argparse.Namespace) -> BuildSpec:
    """The effective spec: the SPEC file (or one made for ``--onnx``) with env and flags applied."""
    if getattr(args, "spec", None):
        spec = load_spec(args.spec)
        if getattr(args, "name", None):
            spec.name = args.name
    else:
        onnx = Path(args.onnx)
        data: dict[str, Any] = {"name": args.name or onnx.stem, "source": {"onnx": str(onnx.resolve())}}
        if not (getattr(args, "calibration_data", None) or getattr(args, "eval_data", None)):
            precisions = (getattr(args, "precision", None) or "fp32").split(",")
            if set(p.strip() for p in precisions) - {"fp32"}:
                raise SpecError(
                    "fp16/int8 builds of an ONNX file need held-out data: give --eval-data (and, for int8, "
                    "--calibration-data) as .npz files of input arrays"
                )
        spec = parse_spec(data, base_dir=Path.cwd())
    return apply_overrides(spec, _flags(args))


def run(args: argparse.Namespace) -> int:
    from tritonkit.build.pipeline import build_from_spec

    spec = spec_from_args(args)
    results = build_from_spec(
        spec,
        args.repo,
        version=getattr(args, "version", None),
        force=bool(getattr(args, "force", False)),
        log=print,
    )
    for result in results:
        acc = result.accuracy
        note = "reference" if acc is None else f"{acc['metric']} mean {acc['mean']:.6f} min {acc['min']:.6f}"
        print(f"built `{result.name}` version {result.path.name} ({result.precision}, {note}): {result.path}")
    return 0
