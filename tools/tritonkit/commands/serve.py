"""``tritonkit serve``: run the embedded Triton server in the foreground until SIGINT/SIGTERM.

While it runs it watches what Triton does not: the server process, and the python stub of every
model (Triton keeps answering ready after a stub died while every call to that model fails).
On either failure it restarts the server on the same ports (``--max-restarts``; readiness is
false meanwhile as nothing listens), or stops with exit code 1 so that a supervisor (systemd,
Kubernetes) restarts it. HTTP goes through tritonkit's guard (``serve/guard.py``) unless
``--no-guard``, gRPC through its gRPC guard (``serve/grpc_guard.py``) unless ``--no-grpc-guard``.
Before the start it removes what writers killed mid-write left in the repository
(:meth:`tritonkit.repository.ModelRepository.remove_stale_staging`; Triton would try to load each
as a model), waiting for a write in progress to finish.

In NVIDIA's image under Kubernetes there is no such watcher, and ``/v2/health/ready`` stays 200
with a dead stub: the readiness *and* liveness probes should then be an exec probe that runs one
tiny infer per python-backend model (e.g. ``curl -fsS -m 4 -d @probe.json
localhost:8000/v2/models/<m>/infer`` for each), ``timeoutSeconds`` 5, ``failureThreshold`` 3, so
the kubelet restarts the container; the startup probe stays on ``/v2/health/ready``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from tritonkit.commands.shared_args import options_from
from tritonkit.errors import RepositoryError
from tritonkit.repository import ModelRepository
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit.serve.options import (
    DEFAULT_LOG_MAX_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_RESTRICTED_APIS,
    ServerOptionError,
    ServerOptions,
)

MIB = 2**20
#: the size flags, in MiB (the server takes bytes): (flag, default in bytes or None, help)
_SIZES_MIB: tuple[tuple[str, int | None, str], ...] = (
    (
        "--max-body-mb",
        DEFAULT_MAX_BODY_BYTES,
        "largest HTTP request body (and gRPC message) the guards forward, in MiB (default %(default)g)",
    ),
    (
        "--max-inflight-mb",
        None,
        "request bodies the guard holds at once, all connections together, in MiB; past it new bodies are "
        "answered 503 (default 4 x --max-body-mb)",
    ),
    (
        "--log-max-mb",
        DEFAULT_LOG_MAX_BYTES,
        "the server log rotates to <log>.1 past this many MiB (default %(default)g)",
    ),
)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="model repository folder")
    parser.add_argument("--http-port", type=int, help="HTTP port (default: a free one)")
    parser.add_argument("--grpc-port", type=int, help="gRPC port (default: a free one)")
    parser.add_argument("--metrics-port", type=int, help="Prometheus metrics port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address the listeners bind (default 127.0.0.1)")
    parser.add_argument("--log-file", help="server log (default: a temporary file, printed at start)")
    parser.add_argument("--startup-timeout", type=float, default=120.0, help="seconds to wait for readiness")
    parser.add_argument("--exit-timeout", type=int, default=30, help="seconds in-flight requests get on stop")
    parser.add_argument("--log-verbose", type=int, default=0)
    parser.add_argument(
        "--model-control-mode",
        choices=("none", "poll", "explicit"),
        default="none",
        help="`none` (default) never loads models at run time: dynamic loading can run arbitrary code",
    )
    parser.add_argument("--no-strict-readiness", action="store_true", help="ready even if a model is not")
    parser.add_argument(
        "--skip-bad-models",
        action="store_true",
        help="serve the models that load; name each that does not (one line) instead of exiting",
    )
    parser.add_argument(
        "--restricted-apis",
        default=",".join(DEFAULT_RESTRICTED_APIS),
        help="comma-separated API groups behind the admin key ('' for none; default %(default)s)",
    )
    parser.add_argument("--admin-key", help="key for restricted APIs (default: random, printed at start)")
    parser.add_argument(
        "--guard",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="put tritonkit's HTTP guard in front of Triton: default-deny routes, body, shape and memory limits, "
        "a drain that serves nothing new, readiness false on a dead or stopped model stub (default on; its "
        "cost in HTTP req/s: docs/reliability.md)",
    )
    parser.add_argument(
        "--grpc-guard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="put tritonkit's gRPC guard in front of Triton's gRPC port: message caps by their declared size, "
        "bounded inflation, each ModelInferRequest checked (shapes, data, batch), memory budgets "
        "(default: as --guard; its cost: docs/reliability.md)",
    )
    for flag, default, text in _SIZES_MIB:
        parser.add_argument(flag, type=float, default=None if default is None else default / MIB, help=text)
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restart a crashed server or one with a dead model stub up to N times (default 0: exit 1)",
    )
    parser.add_argument("--triton-arg", action="append", default=[], help="extra tritonserver argument")
    parser.set_defaults(func=run)


#: How long ``serve`` waits for a repository write in progress before starting anyway.
WRITE_WAIT_S = 60.0


def _remove_leftovers(repo: str) -> None:
    """Remove the staging folders of killed writers, saying so (a missing repository is the server's
    to report)."""
    try:
        removed = ModelRepository(repo).remove_stale_staging(wait_s=WRITE_WAIT_S)
    except RepositoryError:
        return
    for path in removed:
        print(f"tritonkit serve: removed {path.name}, left in the repository by a killed writer", flush=True)


def run(args: argparse.Namespace) -> int:
    if args.max_restarts < 0:
        raise ServerOptionError(f"--max-restarts must be 0 or more, given {args.max_restarts}")
    _remove_leftovers(args.repo)
    options = options_from(
        ServerOptions,
        args,
        strict_readiness=not (args.no_strict_readiness or args.skip_bad_models),
        exit_on_error=not args.skip_bad_models,
        restricted_apis=[api for api in args.restricted_apis.split(",") if api],
        extra_args=args.triton_arg,
        max_body_bytes=int(args.max_body_mb * MIB),
        max_inflight_bytes=int(args.max_inflight_mb * MIB) if args.max_inflight_mb else None,
        log_max_bytes=int(args.log_max_mb * MIB),
    )
    server = EmbeddedServer(args.repo, options)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        print(
            f"tritonkit serve: ready  http={server.http_url}  grpc={server.grpc_url}  "
            f"metrics={server.metrics_url}  log={server.log_file}",
            flush=True,
        )
        if args.skip_bad_models:
            for failure in server.load_failures():
                print(f"tritonkit serve: not serving: {failure}", file=sys.stderr, flush=True)
        if server.http_reply_problem:
            print(
                "tritonkit serve: warning: tritonserver 2.51 drops HTTP answers past ~278 in flight; its reply "
                f"queues could not be widened: {server.http_reply_problem}",
                file=sys.stderr,
                flush=True,
            )
        if options.restricted_apis and not server.key_hidden:
            # Triton 2.51 takes the key only on its command line; hiding it needs ptrace rights.
            print(
                "tritonkit serve: warning: the admin key stays readable in tritonserver's command line (ps)",
                file=sys.stderr,
                flush=True,
            )
        if options.restricted_apis and args.admin_key is None:
            print(
                f"tritonkit serve: restricted APIs need header tritonkit-admin-key={server.admin_key}  "
                f"(for tritonkit models/loadtest: export TRITONKIT_ADMIN_KEY={server.admin_key})",
                flush=True,
            )
        restarts = 0
        while not stop.wait(0.5):
            problems = server.problems()
            if not problems:
                continue
            detail = "; ".join(problems) if server.is_running() else server.exit_reason()
            if restarts >= args.max_restarts:
                print(f"tritonkit serve: error: {detail}", file=sys.stderr, flush=True)
                return 1
            restarts += 1
            print(
                f"tritonkit serve: restarting ({restarts}/{args.max_restarts}): {detail}",
                file=sys.stderr,
                flush=True,
            )
            server.restart()  # the guard stays up and answers 503 meanwhile
            print(f"tritonkit serve: ready again  http={server.http_url}", flush=True)
        print("tritonkit serve: stopping (in-flight requests may finish)", flush=True)
        code = server.stop()
        return 0 if code in (0, None, -signal.SIGTERM) else 1
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
