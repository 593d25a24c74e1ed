"""Two trees' Locust users against ONE embedded server, interleaved: is a change to the users as fast as before?

Runs ``tritonkit loadtest`` of tree A and tree B alternately (ABBA, round by round) on the same server and the
probe model, so a busy neighbour on a shared machine hurts both alike, and prints each run and the medians:
req/s, the per-round B/A ratio, and the load generator's CPU µs per request (less disturbed by other load
than req/s). ``tritonkit bench --only users-ab --base REV`` runs the same comparison (``tritonkit_bench.users_ab``)
against a commit and writes it into docs/benchmarks.md; this script compares any two ``tools`` folders, e.g.
the old code from ``git worktree add --detach /tmp/old main``::

    PYTHONPATH=tools .venv/bin/python scripts/loadtest/ab_users.py /tmp/old/tools tools --protocol grpc --rounds 12
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tritonkit_bench.users_ab import interleaved, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="tools folder of tree A (the baseline)")
    parser.add_argument("b", type=Path, help="tools folder of tree B")
    parser.add_argument("--protocol", default="grpc", choices=("http", "grpc"))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="length of each run in seconds (default 5)"
    )
    args = parser.parse_args()
    s = summary(interleaved(args.a, args.b, args.protocol, args.rounds, args.seconds, echo=True))
    print(
        f"{args.protocol}, {args.rounds} rounds: median req/s A {s['rps_a']:.0f}, B {s['rps_b']:.0f}; per-round B/A "
        f"median {s['ratio']:.3f}; CPU µs/request B/A median {s['cpu_ratio']:.3f}"
    )


if __name__ == "__main__":
    main()
