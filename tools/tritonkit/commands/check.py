"""``tritonkit check --repo DIR [--target embedded|triton-image]``: print one line per repository
problem, including what the target server cannot load (default: the embedded server), then where
each version executes as its build.json records it; exit 1 if any problem.

The rules live in :mod:`tritonkit.repository.check`; this module only parses arguments and prints.
"""

from __future__ import annotations

import argparse

from tritonkit.commands.shared_args import add_repo
from tritonkit.repository.check import CHECK_TARGETS, check_repository, executions
from tritonkit.repository.store import ModelRepository

__all__ = ["register", "run"]


def register(parser: argparse.ArgumentParser) -> None:
    add_repo(parser)
    parser.add_argument(
        "--target",
        choices=CHECK_TARGETS,
        default="embedded",
        help="server that will load the repository: embedded (default; python backend and ensembles, "
        "GPU only if one is here) or triton-image (NVIDIA's Triton container, every backend)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    repo = ModelRepository(args.repo)
    target = getattr(args, "target", "embedded")
    problems = check_repository(repo, target)
    for line in [*problems, *executions(repo)]:
        print(line)
    if problems:
        return 1
    count = len(repo.models())
    if count == 0:
        print(f"no models in {args.repo}")
        return 1
    print(f"{count} models OK")
    return 0
