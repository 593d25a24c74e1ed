"""``tritonkit accuracy``: print the accuracy table of a repository's converted versions and,
with ``--report``, write it as Markdown (``make accuracy`` writes ``docs/accuracy.md``).
``--build`` first builds the flagship models (MiniLM, synthetic ResNet-50) into the repository."""

from __future__ import annotations

import argparse
from pathlib import Path

from tritonkit.atomic import write_text
from tritonkit.commands.shared_args import add_repo
from tritonkit.convert import report
from tritonkit.convert.pipeline import build_all
from tritonkit.errors import RepositoryError

__all__ = ["register", "run"]


def register(parser: argparse.ArgumentParser) -> None:
    add_repo(parser)
    parser.add_argument(
        "--report", type=Path, metavar="FILE", help="also write the table as Markdown to FILE"
    )
    parser.add_argument(
        "--all-versions", action="store_true", help="every version, not only each model's latest"
    )
    parser.add_argument(
        "--build", action="store_true", help="build the flagship models (full size) into --repo first"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.build:
        build_all(args.repo)
    rows = report.collect(args.repo, all_versions=args.all_versions)
    if not rows:
        raise RepositoryError(
            f"no converted (fp16/int8) versions with accuracy results in {args.repo!r}; "
            "build some first: `tritonkit accuracy --build` or `tritonkit build model_repository/minilm.yaml`"
        )
    print(report.text_table(rows))
    if args.report is not None:
        text = report.markdown(rows, repo=args.repo)
        args.report.parent.mkdir(parents=True, exist_ok=True)
        write_text(args.report, text)
        print(f"wrote {args.report}")
    return 0 if all(r.passed for r in rows) else 1
