"""``tritonkit build``: a versioned model from an ONNX file (``--onnx``) or a build spec (``SPEC``);
every flag of the command and the build they run.

``tritonkit build SPEC.yaml [--target ...] [--precision ...] [--gpu ...]`` builds from a spec;
``tritonkit build --onnx FILE`` is the as-is import preset (:func:`tritonkit.convert.onnx_import.import_spec`):
one portable FP32 version named after the file; asking it for another target or precision
(``--precision fp16,int8 --calibration-data cal.npz --eval-data ev.npz``) builds the file like a
spec does. Paths given as flags (or variables) resolve against the working directory, paths in a
spec against the spec's folder. Precedence, highest first: these flags, ``TRITONKIT_*`` environment variables
(:data:`tritonkit.convert.spec.buildspec.ENV_OVERRIDES`), the spec, the defaults. Every flag defaults to None,
"not given", so that only a flag the user typed overrides the layers below it. The build itself is
:func:`tritonkit.convert.pipeline.build_from_spec`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from tritonkit.commands.shared_args import add_repo
from tritonkit.convert.graph.export import EXPORTERS
from tritonkit.convert.onnx_import import import_spec
from tritonkit.convert.pipeline import BuildResult, build_from_spec
from tritonkit.convert.precisions.accuracy import describe
from tritonkit.convert.spec.buildspec import (
    ENV_OVERRIDES,
    PRECISIONS,
    TARGETS,
    BuildSpec,
    apply_overrides,
    load_spec,
)
from tritonkit.convert.spec.options import CALIBRATION_METHODS
from tritonkit.convert.targets.portable_target import DEFAULT_MAX_QUEUE_DELAY_US, INSTANCE_KINDS
from tritonkit.errors import BuildError, RepositoryError, SpecError
from tritonkit.repository.store import ModelRepository, validate_model_name

__all__ = ["BuildUsageError", "add_arguments", "register", "run", "spec_from_args"]


class BuildUsageError(BuildError):
    """The arguments of ``tritonkit build`` contradict each other (exit 2, like argparse)."""

    exit_code = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every ``tritonkit build`` argument to ``parser``."""
    parser.add_argument("spec", nargs="?", help="build spec (YAML) for the conversion pipeline")
    parser.add_argument("--onnx", type=Path, metavar="FILE", help="ONNX file to import as a portable version")
    parser.add_argument("--name", help="model name ([A-Za-z0-9_.-]; default: the ONNX file's stem)")
    add_repo(parser)
    parser.add_argument("--version", type=int, help="version number (default: the next free one)")
    parser.add_argument("--force", action="store_true", help="replace an existing version or model signature")
    parser.add_argument(
        "--max-batch-size",
        type=int,
        metavar="N",
        help="0 disables batching (default: 64 when the graph's first axis is dynamic, else 0)",
    )
    parser.add_argument("--instances", type=int, metavar="N", help="model instances (default 1)")
    parser.add_argument(
        "--instance-kind",
        choices=INSTANCE_KINDS,
        help="instance kind (default: KIND_CPU for portable, KIND_GPU for onnxruntime and tensorrt)",
    )
    parser.add_argument(
        "--max-queue-delay-us",
        type=int,
        metavar="US",
        help=f"dynamic batching delay in microseconds (default {DEFAULT_MAX_QUEUE_DELAY_US})",
    )
    _queue_arguments(parser)
    _conversion_arguments(parser)


def _queue_arguments(parser: argparse.ArgumentParser) -> None:
    """The dynamic batcher's queue policy flags."""
    queue = parser.add_argument_group("dynamic batcher queue (needs max_batch_size >= 1)")
    queue.add_argument(
        "--max-queue-size",
        type=int,
        metavar="N",
        help="requests waiting beyond N are rejected at once with UNAVAILABLE (default 0: unbounded)",
    )
    queue.add_argument(
        "--queue-timeout-us",
        type=int,
        metavar="US",
        help="a request waiting longer is rejected (default 0: no timeout)",
    )
    queue.add_argument(
        "--priority-levels", type=int, metavar="N", help="request priorities 1..N (default 0: one)"
    )
    queue.add_argument(
        "--default-priority-level", type=int, metavar="N", help="priority of a request that gives none (1..N)"
    )


def _conversion_arguments(parser: argparse.ArgumentParser) -> None:
    """The conversion flags (each also a ``TRITONKIT_*`` variable and a spec key)."""
    group = parser.add_argument_group("conversion (every flag: flag > TRITONKIT_* variable > spec > default)")
    group.add_argument(
        "--target", choices=TARGETS, help="portable (default, embedded server) | onnxruntime | tensorrt"
    )
    group.add_argument(
        "--precision", metavar="LIST", help=f"comma-separated precisions to build ({', '.join(PRECISIONS)})"
    )
    group.add_argument(
        "--gpu",
        metavar="PROFILE",
        help="GPU profile: T4, L4, A10, A100, A100-40GB, H100 or a GPU listed here (default: the local GPU, else T4)",
    )
    group.add_argument(
        "--exporter",
        choices=EXPORTERS,
        help="torch sources: auto (default: dynamo, then torchscript) | dynamo | torchscript",
    )
    group.add_argument(
        "--dynamic-batch",
        action="store_true",
        default=None,
        help="ONNX sources with a fixed first axis: rewrite it to a dynamic batch axis (verified by running it)",
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
    group.add_argument(
        "--timing-cache",
        metavar="FILE",
        help="TensorRT timing cache (default: $XDG_CACHE_HOME/tritonkit/tensorrt/<gpu>-trt<version>/timing.cache)",
    )


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The override flags by argparse dest; None where the user did not give the flag."""
    return {dest: getattr(args, dest, None) for dest, *_ in ENV_OVERRIDES}


def _onnx_spec(args: argparse.Namespace) -> BuildSpec:
    """The as-is import preset for ``--onnx``, then flags and variables; a spec asked for another
    target or precision builds the file like any ONNX source (clean-up, names with precision)."""
    onnx = Path(args.onnx)
    name = args.name if args.name is not None else onnx.stem
    try:
        validate_model_name(name)
    except RepositoryError as exc:
        if args.name is None:
            raise RepositoryError(f"{exc} (derived from the file name; pass --name)") from None
        raise
    spec = apply_overrides(dataclasses.replace(import_spec(onnx, name), as_is=False), _flags(args))
    if spec.target == "portable" and spec.precisions == ["fp32"] and not spec.source.dynamic_batch:
        return dataclasses.replace(spec, as_is=True)
    if set(spec.precisions) - {"fp32"} and {"auto", "pydoc"} & {spec.calibration.data, spec.evaluation.data}:
        raise SpecError(
            "fp16/int8 builds of an ONNX file need held-out data: give --eval-data (and, for int8, "
            "--calibration-data) as .npz files of input arrays"
        )
    return spec


def spec_from_args(args: argparse.Namespace) -> BuildSpec:
    """The effective spec: the SPEC file (or the ``--onnx`` preset) with env and flags applied."""
    if (args.spec is None) == (args.onnx is None):
        raise BuildUsageError(
            "give exactly one of SPEC or --onnx FILE; got " + ("both" if args.spec else "neither")
        )
    if args.onnx is not None:
        return _onnx_spec(args)
    spec = load_spec(args.spec)
    if args.name:
        spec.name = args.name
    return apply_overrides(spec, _flags(args))


def _summary(result: BuildResult, spec: BuildSpec, repo: str) -> str:
    if spec.as_is:
        config = ModelRepository(repo).read_config(result.name)
        batching = f"max_batch_size {config.max_batch_size}" if config.max_batch_size else "no batching"
        return (
            f"built `{result.name}` version {result.path.name}: {result.path} "
            f"({len(config.inputs)} inputs, {len(config.outputs)} outputs, {batching})"
        )
    acc = result.accuracy
    note = "reference" if acc is None else describe(acc)
    return f"built `{result.name}` version {result.path.name} ({result.precision}, {note}): {result.path}"


def run(args: argparse.Namespace) -> int:
    """``tritonkit build``: build the effective spec into ``--repo`` and print one line per version."""
    spec = spec_from_args(args)
    results = build_from_spec(
        spec,
        args.repo,
        version=args.version,
        force=bool(args.force),
        log=(lambda _: None) if spec.as_is else print,  # an import prints only its one summary line
    )
    for result in results:
        print(_summary(result, spec, args.repo))
    for result in results:  # a gate that passed only trivially is said, not hidden in build.json
        if result.accuracy is not None and result.accuracy.get("warning"):
            print(f"warning: {result.accuracy['warning']}", file=sys.stderr)
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(func=run)
