"""Flags that several commands take with one meaning, and reading a namespace into an options dataclass.

``--repo`` (one default, ``model_repository``, for every command that reads or writes a repository;
``serve`` requires it instead), ``--protocol`` (``http`` or ``grpc``), and :func:`options_from`, which
calls an options dataclass or a library function with the flags named as its parameters.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

__all__ = ["DEFAULT_REPO", "PROTOCOLS", "add_protocol", "add_repo", "options_from"]

DEFAULT_REPO = "model_repository"
PROTOCOLS = ("http", "grpc")

R = TypeVar("R")


class _Flags(Protocol):
    """A parser or one of its argument groups."""

    def add_argument(self, *names: str, **options: Any) -> argparse.Action: ...


def add_repo(parser: _Flags, help: str = "model repository directory") -> None:
    """``--repo DIR``, default ``model_repository``; ``help`` says what the command does with it."""
    parser.add_argument("--repo", default=DEFAULT_REPO, help=f"{help} (default: {DEFAULT_REPO})")


def add_protocol(parser: _Flags, help: str = "") -> None:
    """``--protocol http|grpc``, default ``http``."""
    parser.add_argument(
        "--protocol",
        default="http",
        choices=PROTOCOLS,
        help=f"{help + ' ' if help else ''}(default %(default)s)",
    )


def options_from(make: Callable[..., R], args: argparse.Namespace, **given: Any) -> R:
    """``make`` (an options dataclass, a function) called with every keyword parameter that ``args`` has
    a flag of the same name for, ``given`` last (a flag whose value needs work, or another name)."""
    keywords = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = [n for n, p in inspect.signature(make).parameters.items() if p.kind in keywords]
    values = {name: getattr(args, name) for name in names if hasattr(args, name)}
    return make(**{**values, **given})
