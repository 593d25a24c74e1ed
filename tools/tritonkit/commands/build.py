"""``tritonkit build``: a versioned model from an ONNX file (``--onnx``) or a build spec (``SPEC``).

The flags and the build are :mod:`tritonkit.convert.cli_args`'s; this module only registers them.
"""

from __future__ import annotations

import argparse
from typing import Any

from tritonkit.convert.cli_args import add_arguments, run

__all__ = ["register"]


def register(subparsers: Any, *, name: str, help: str) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=help)
    add_arguments(parser)
    parser.set_defaults(func=run)
