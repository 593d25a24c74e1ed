"""Two trees' Locust users against ONE embedded server, interleaved: is a change to the users as fast as before?

Runs ``tritonkit loadtest`` of tree A and tree B alternately (ABBA, round by round) on the same server and the
probe model, so a busy neighbour on a shared machine hurts both alike, and prints each run and the medians:
req/s, the per-round B/A ratio, and the load generator's CPU µs per request (less disturbed by other load
than req/s). For example, the old code from ``git worktree add --detach /tmp/old main``::

    PYTHONPATH=tools .venv/bin/python scripts/loadtest/ab_users.py /tmp/old/tools tools --protocol grpc --rounds 12
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tritonkit.serve.endpoint import Endpoint, endpoint
from tritonkit_bench.probe_model import write_probe_model


def _one(tools: str, protocol: str, server: Endpoint, seconds: str, report: Path) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "tritonkit", "loadtest", "--url", server.url(protocol), "--http-url", server.http,
        "--metrics-url", server.metrics, "--protocol", protocol, "--model", "probe", "--users", "16",
        "--duration", seconds, "--no-plots", "--report", str(report),
    ]  # fmt: skip
    done = subprocess.run(
        command, env=dict(os.environ, PYTHONPATH=tools), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{tools}: loadtest failed: {done.stderr[-2000:]}")
    summary = json.loads((report / "summary.json").read_text())
    return {
        "rps": summary["rps"],
        "cpu_us": summary["client_cpu_us_per_request"],
        "failures": summary["failures"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="tools folder of tree A (the baseline)")
    parser.add_argument("b", help="tools folder of tree B")
    parser.add_argument("--protocol", default="grpc", choices=("http", "grpc"))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seconds", default="5s", help="length of each run (default 5s)")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ab-users-") as tmp:
        repo = Path(tmp) / "repo"
        write_probe_model(repo, "probe")
        with endpoint(repo=repo, exit_timeout=1) as server:
            _one(args.b, args.protocol, server, "2s", Path(tmp) / "warm-up")
            for index in range(args.rounds):
                for side in ("a", "b") if index % 2 == 0 else ("b", "a"):
                    row = {"round": index, "side": side}
                    row |= _one(
                        getattr(args, side), args.protocol, server, args.seconds, Path(tmp) / f"{side}{index}"
                    )
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    by = {(r["round"], r["side"]): r for r in runs}
    ratios = [by[i, "b"]["rps"] / by[i, "a"]["rps"] for i in range(args.rounds)]
    cpu = [by[i, "b"]["cpu_us"] / by[i, "a"]["cpu_us"] for i in range(args.rounds)]
    med = {s: statistics.median(r["rps"] for r in runs if r["side"] == s) for s in "ab"}
    print(
        f"{args.protocol}, {args.rounds} rounds: median req/s A {med['a']:.0f}, B {med['b']:.0f}; per-round B/A "
        f"median {statistics.median(ratios):.3f}; CPU µs/request B/A median {statistics.median(cpu):.3f}"
    )


if __name__ == "__main__":
    main()
