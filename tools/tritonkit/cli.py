"""The ``tritonkit`` command line: argument parsing, dispatch, and error-to-exit-code mapping.

Each subcommand lives in :mod:`tritonkit.commands.<name>` and exposes ``register(parser)``, which
adds its arguments to the parser made here (with the command's help from :data:`COMMANDS`) and sets
``func`` to a callable ``(argparse.Namespace) -> int``. Only the module of the command being run is
imported, so that ``tritonkit --help`` and ``tritonkit serve`` do not pay for torch or locust imports.
A command module that cannot be imported is an error, never a command quietly left out.

User errors (:class:`~tritonkit.TritonKitError`) become one line on stderr and a non-zero exit;
only unexpected exceptions show a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from tritonkit import __version__
from tritonkit.errors import TritonKitError

#: (command name, module, one-line help) in the order ``--help`` lists them.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("build", "tritonkit.commands.build", "build a versioned model from an ONNX file or a build spec"),
    ("check", "tritonkit.commands.check", "verify every model of a repository against its artifacts"),
    ("serve", "tritonkit.commands.serve", "serve a model repository with the embedded Triton server"),
    ("infer", "tritonkit.commands.infer", "send one inference request and print the outputs"),
    ("models", "tritonkit.commands.models", "list a server's models with state, versions and I/O"),
    ("accuracy", "tritonkit.commands.accuracy", "print the accuracy table of a repository"),
    ("loadtest", "tritonkit.commands.loadtest", "run a Locust load test and write a capacity report"),
    ("bench", "tritonkit.commands.bench", "run the benchmarks and write docs/benchmarks.md"),
    ("k8s", "tritonkit.commands.k8s", "render and validate the Kubernetes manifests"),
    (
        "profile",
        "tritonkit.commands.profile",
        "measure a model at load levels until stable",
    ),
    ("tune", "tritonkit.commands.tune", "find the best config under a latency budget and write it back"),
    ("compare", "tritonkit.commands.compare", "compare models or versions under identical load, interleaved"),
    ("plan", "tritonkit.commands.plan", "capacity plan (replicas, cost, HPA patch) from a tune report"),
)


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors keep argparse's exit code 2 but stay one line plus usage."""


class CommandUnavailableError(TritonKitError):
    """A command's module (or a library it needs) is not importable in this environment."""


def _load(name: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CommandUnavailableError(
            f"`tritonkit {name}` cannot start: module {exc.name!r} is not installed (needed by {module_name})"
        ) from exc


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first word that is not an option), if any."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command listed; only ``command``'s module is imported and registered
    (``None``: none of them, enough for ``--help``). CommandUnavailableError if it cannot be imported."""
    parser = _Parser(prog="tritonkit", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"tritonkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name, help_text in COMMANDS:
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _load(name, module_name).register(command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(words)
    try:
        parser = build_parser(command)
    except CommandUnavailableError as err:
        print(f"tritonkit {command}: error: {err}", file=sys.stderr)
        return err.exit_code
    args = parser.parse_args(words)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except TritonKitError as err:
        message = " ".join(str(err).split("\n")[0].split()) or type(err).__name__
        print(f"tritonkit {args.command}: error: {message}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"tritonkit {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
