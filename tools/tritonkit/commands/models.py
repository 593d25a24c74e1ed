"""``tritonkit models``: list a server's models with their versions, state, inputs and outputs.

Uses the repository index (a restricted API on the embedded server: pass its admin key with
``--admin-key`` or ``$TRITONKIT_ADMIN_KEY``, as ``tritonkit serve`` prints it, or any header with
``--header``); when the index is refused, falls back to the models named with ``--model``, whose
metadata and readiness are public, and says in one line on stderr that the index was restricted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

from tritonkit.client import Client, ClientError, ModelNotFoundError, RestrictedApiError, TensorSpec
from tritonkit.commands.client_args import CLI_RETRIES, add_client_arguments, headers_of
from tritonkit.serve.options import ADMIN_HEADER

#: where ``--admin-key`` is read from when not given
ADMIN_KEY_ENV = "TRITONKIT_ADMIN_KEY"
RESTRICTED_HINT = (
    "pass the admin key with --admin-key KEY or TRITONKIT_ADMIN_KEY (`tritonkit serve` prints it), "
    "or name models with --model"
)

HEADINGS = ("MODEL", "VERSIONS", "STATE", "INPUTS", "OUTPUTS")


def register(parser: argparse.ArgumentParser) -> None:
    add_client_arguments(parser)
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="list this model when the index is restricted (repeatable)",
    )
    parser.add_argument(
        "--admin-key",
        help=f"key of the server's restricted APIs, sent as header {ADMIN_HEADER} (default ${ADMIN_KEY_ENV})",
    )
    parser.set_defaults(func=run)


def _io(tensors: tuple[TensorSpec, ...]) -> str:
    return ", ".join(f"{t.name}:{t.datatype}[{','.join(str(d) for d in t.shape)}]" for t in tensors) or "-"


def rows(client: Client, names: list[str]) -> list[tuple[str, str, str, str, str]]:
    try:
        index = client.models()
    except RestrictedApiError as err:
        if not names:
            raise ClientError(f"{err}; {RESTRICTED_HINT}") from None
        print(
            "tritonkit models: the repository index is restricted; listing the --model names only "
            "(for every model: --admin-key KEY or TRITONKIT_ADMIN_KEY)",
            file=sys.stderr,
        )
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
    headers = headers_of(args)
    key = args.admin_key or os.environ.get(ADMIN_KEY_ENV)
    if key:
        headers.setdefault(ADMIN_HEADER, key)
    with Client(
        args.url, args.protocol, timeout=args.timeout, retries=CLI_RETRIES, headers=headers
    ) as client:
        table = rows(client, args.model)
    print(format_table(table) if table else "no models")
    return 0
