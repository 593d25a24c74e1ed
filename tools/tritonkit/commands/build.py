"""``tritonkit build``: a versioned model from an ONNX file (``--onnx``) or a build spec (``SPEC``).

The flags and the build are :mod:`tritonkit.convert.cli_args`'s; this module only registers them.
"""

from __future__ import annotations

import argparse

from tritonkit.convert.cli_args import add_arguments, run

__all__ = ["register"]


def register(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(func=run)
