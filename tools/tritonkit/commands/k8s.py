"""``tritonkit k8s render|check``: print an overlay's manifests, or validate every overlay.

The rendering, schemas, checklist and checkov run live in :mod:`tritonkit.deploy`; this module parses
arguments, hands the checklist the load-test scenario names, writes files atomically and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tritonkit import deploy
from tritonkit.errors import DeployError
from tritonkit.loadtest.scenarios import SCENARIOS  # stdlib-only module, no Locust

__all__ = ["register", "run_check", "run_render"]


def register(subparsers: Any, *, name: str, help: str) -> None:
    parser = subparsers.add_parser(name, help=help, description=help)
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

    parser.set_defaults(func=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder: never a half-written file."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise DeployError(f"cannot write {path}: folder {folder} does not exist; expected an existing folder")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise DeployError(f"cannot write {path}: {exc.strerror or exc}") from None


def run_render(args: argparse.Namespace) -> int:
    text = deploy.render_text(args.overlay, root=args.k8s_dir)
    deploy.parse_objects(text, source=f"overlay `{args.overlay}`")  # refuse to write what does not parse
    if args.output is None:
        sys.stdout.write(text)
    else:
        _write_atomically(args.output, text)
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
