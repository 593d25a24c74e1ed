"""``tritonkit models``: list a server's models with their versions, state, inputs and outputs.

Uses the repository index (a restricted API on the embedded server: pass its admin key with
``--header``); when the index is refused, falls back to the models named with ``--model``, whose
metadata and readiness are public.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from tritonkit.client import Client, ClientError, ModelNotFoundError, RestrictedApiError, TensorSpec
from tritonkit.client.cli_args import add_client_arguments, client_of

HEADINGS = ("MODEL", "VERSIONS", "STATE", "INPUTS", "OUTPUTS")


def register(subparsers: Any, *, name: str, help: str) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=help)
    add_client_arguments(parser)
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="list this model when the index is restricted (repeatable)",
    )
    parser.set_defaults(func=run)


def _io(tensors: tuple[TensorSpec, ...]) -> str:
    return ", ".join(f"{t.name}:{t.datatype}[{','.join(str(d) for d in t.shape)}]" for t in tensors) or "-"


def rows(client: Client, names: list[str]) -> list[tuple[str, str, str, str, str]]:
    try:
        index = client.models()
    except RestrictedApiError as err:
        if not names:
            raise ClientError(
                f"{err}; pass the key with --header KEY=VALUE, or name models with --model"
            ) from None
        index = None
    states: dict[str, dict[str, str]] = defaultdict(dict)
    if index is not None:
        for info in index:
            states[info.name][info.version or "-"] = info.state or "UNKNOWN"
    else:
        for name in names:
            try:
                meta = client.metadata(name)
            except ModelNotFoundError:
                states[name]["-"] = "NOT_FOUND"
                continue
            for version in meta.versions:
                states[name][version] = "READY" if client.is_ready(name, version) else "UNAVAILABLE"
    out = []
    for name in sorted(states):
        versions = states[name]
        ready = [v for v, s in versions.items() if s == "READY"]
        inputs = outputs = "-"
        if ready:
            meta = client.metadata(name)
            inputs, outputs = _io(meta.inputs), _io(meta.outputs)
        state = ",".join(sorted(set(versions.values())))
        out.append((name, ",".join(sorted(versions, key=lambda v: (len(v), v))), state, inputs, outputs))
    return out


def format_table(table: list[tuple[str, str, str, str, str]]) -> str:
    lines = [HEADINGS, *table]
    widths = [max(len(row[i]) for row in lines) for i in range(len(HEADINGS) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in lines
    )


def run(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        table = rows(client, args.model)
    print(format_table(table) if table else "no models")
    return 0
