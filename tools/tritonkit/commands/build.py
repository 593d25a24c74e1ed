"""``tritonkit build``: a versioned model from an ONNX file (``--onnx``) or a build spec (``SPEC``).

This module owns the shared parser: ``spec``, ``--onnx``, ``--name``, ``--repo``, ``--version``,
``--force``, ``--max-batch-size``, ``--instances``, ``--instance-kind``, ``--max-queue-delay-us``.
When :mod:`tritonkit.build.cli_args` is importable it adds its own flags (``--target``,
``--precision``, ``--gpu``...) through ``add_arguments(parser)`` and handles build specs, and ONNX
files asked for a target or precision other than the portable FP32 import, via ``run(args)``.
A plain ``--onnx`` build goes to :func:`tritonkit.build.portable.import_onnx`.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from tritonkit.build.portable import DEFAULT_MAX_QUEUE_DELAY_US, INSTANCE_KINDS, import_onnx
from tritonkit.errors import BuildError, RepositoryError
from tritonkit.repository.store import ModelRepository, validate_model_name

__all__ = ["BuildUsageError", "register", "run"]

_CONVERT_CLI = "tritonkit.build.cli_args"
#: Values of the convert flags that mean "the portable FP32 import" (None: the flag is absent).
_PORTABLE_TARGETS = (None, "portable")
_PORTABLE_PRECISIONS = (None, "fp32")


class BuildUsageError(BuildError):
    """The arguments of ``tritonkit build`` contradict each other (exit 2, like argparse)."""

    exit_code = 2


def _convert_cli() -> ModuleType | None:
    try:
        return importlib.import_module(_CONVERT_CLI)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (exc.name == _CONVERT_CLI or _CONVERT_CLI.startswith(exc.name + ".")):
            return None  # the conversion package is not there (yet): --onnx builds still work
        raise


def register(subparsers: Any, *, name: str, help: str) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=help)
    parser.add_argument("spec", nargs="?", help="build spec (YAML) for the conversion pipeline")
    parser.add_argument("--onnx", type=Path, metavar="FILE", help="ONNX file to import as a portable version")
    parser.add_argument("--name", help="model name ([A-Za-z0-9_.-]; default: the ONNX file's stem)")
    parser.add_argument(
        "--repo", default="model_repository", help="model repository directory (default: model_repository)"
    )
    parser.add_argument("--version", type=int, help="version number (default: the next free one)")
    parser.add_argument("--force", action="store_true", help="replace an existing version or model signature")
    parser.add_argument(
        "--max-batch-size",
        type=int,
        metavar="N",
        help="0 disables batching (default: 64 when the graph's first axis is dynamic, else 0)",
    )
    parser.add_argument("--instances", type=int, metavar="N", help="model instances (default 1)")
    parser.add_argument("--instance-kind", choices=INSTANCE_KINDS, help="instance kind (default KIND_CPU)")
    parser.add_argument(
        "--max-queue-delay-us",
        type=int,
        metavar="US",
        help=f"dynamic batching delay in microseconds (default {DEFAULT_MAX_QUEUE_DELAY_US})",
    )
    convert_cli = _convert_cli()
    if convert_cli is not None:
        convert_cli.add_arguments(parser)
    parser.set_defaults(func=run)


def _wants_conversion(args: argparse.Namespace) -> bool:
    return (
        getattr(args, "target", None) not in _PORTABLE_TARGETS
        or getattr(args, "precision", None) not in _PORTABLE_PRECISIONS
    )


def run(args: argparse.Namespace) -> int:
    if (args.spec is None) == (args.onnx is None):
        raise BuildUsageError(
            "give exactly one of SPEC or --onnx FILE; got " + ("both" if args.spec else "neither")
        )
    if args.spec is not None or _wants_conversion(args):
        convert_cli = _convert_cli()
        if convert_cli is None:
            raise BuildUsageError(
                "build specs and non-portable targets need `tritonkit.build`, which is not installed here; "
                "use --onnx FILE for a portable FP32 import"
            )
        return int(convert_cli.run(args))
    name = args.name if args.name is not None else args.onnx.stem
    try:
        validate_model_name(name)
    except RepositoryError as exc:
        if args.name is None:
            raise RepositoryError(f"{exc} (derived from the file name; pass --name)") from None
        raise
    path = import_onnx(
        args.onnx,
        args.repo,
        name,
        version=args.version,
        force=args.force,
        max_batch_size=args.max_batch_size,
        # None means "not given": specs and TRITONKIT_* variables may then decide (convert.cli).
        instance_count=1 if args.instances is None else args.instances,
        instance_kind=args.instance_kind or "KIND_CPU",
        max_queue_delay_us=DEFAULT_MAX_QUEUE_DELAY_US
        if args.max_queue_delay_us is None
        else args.max_queue_delay_us,
    )
    config = ModelRepository(args.repo).read_config(name)
    batching = f"max_batch_size {config.max_batch_size}" if config.max_batch_size else "no batching"
    print(
        f"built `{name}` version {path.name}: {path} "
        f"({len(config.inputs)} inputs, {len(config.outputs)} outputs, {batching})"
    )
    return 0
