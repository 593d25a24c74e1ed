"""Arguments shared by the client commands (`tritonkit infer`, `tritonkit models`): server address,
protocol, timeout and extra headers, and building a :class:`~tritonkit.client.Client` from them."""

from __future__ import annotations

import argparse

from tritonkit.client import Client, RetryPolicy
from tritonkit.commands.shared_args import add_protocol
from tritonkit.errors import ClientError

#: Commands are interactive: a few quick retries, then a one-line error.
CLI_RETRIES = RetryPolicy(max_attempts=3, initial_backoff=0.1, max_backoff=0.5)


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="server address host:port (HTTP or gRPC port)")
    add_protocol(parser)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call, retries included")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra request header, e.g. the admin key of restricted APIs (repeatable)",
    )


def headers_of(args: argparse.Namespace) -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClientError(f"--header expects KEY=VALUE, given {item!r}")
        headers[key.strip()] = value
    return headers


def client_of(args: argparse.Namespace) -> Client:
    return Client(
        args.url, args.protocol, timeout=args.timeout, retries=CLI_RETRIES, headers=headers_of(args)
    )
