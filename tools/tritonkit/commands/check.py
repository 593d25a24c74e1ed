"""``tritonkit check --repo DIR``: print one line per repository problem; exit 1 if any.

The rules live in :mod:`tritonkit.repository.check`; this module only parses arguments and prints.
"""

from __future__ import annotations

import argparse
from typing import Any

from tritonkit.repository.check import check_repository
from tritonkit.repository.store import ModelRepository

__all__ = ["register", "run"]


def register(subparsers: Any, *, name: str, help: str) -> None:
    parser = subparsers.add_parser(name, help=help, description=help)
    parser.add_argument(
        "--repo", default="model_repository", help="model repository directory (default: model_repository)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    repo = ModelRepository(args.repo)
    problems = check_repository(repo)
    for line in problems:
        print(line)
    if problems:
        return 1
    count = len(repo.models())
    print(f"{count} models OK")
    return 0
