"""Benchmark section of ``docs/benchmarks.md``: this tree's Locust users against an earlier commit's.

``tritonkit bench --only users-ab [--base REV]``: the tree at ``REV`` (default :data:`DEFAULT_BASE`, the
commit the restructure of the build stage was measured against) is extracted with ``git archive`` into a
temporary folder, and ``tritonkit loadtest`` of that tree (A) and of this one (B) run alternately, ABBA
round by round, against ONE embedded server serving the probe model, each in a child process importing
its own tree. A busy neighbour on a shared machine so hurts both alike; the per-round B/A ratios of
req/s and of the load generator's CPU µs per request (less disturbed by other load than req/s) are the
figures, their medians the verdict. ``quick``: 2 rounds of 3 s; full: 12 rounds of 5 s (about 4 minutes).
``scripts/loadtest/ab_users.py`` runs the same comparison between any two ``tools`` folders.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from tritonkit.errors import TritonKitError
from tritonkit.machine import description
from tritonkit.serve.endpoint import Endpoint, endpoint
from tritonkit_bench.probe_model import write_probe_model

__all__ = ["DEFAULT_BASE", "interleaved", "run", "summary"]

#: The tree issue 20 (one road from spec to version) was written against: the baseline of its
#: "gRPC Locust user's throughput within 5 %" line.
DEFAULT_BASE = "5ddc433"
#: No slower than the baseline's req/s by more than this share: the users are as fast as before.
TOLERANCE = 0.05
USERS = 16
#: The section's heading, whatever the base (``tritonkit bench --only`` replaces a section by its heading).
HEADING = "## gRPC Locust user: this tree against an earlier commit (interleaved)"
_ROOT = Path(__file__).resolve().parents[2]


def _one(tools: Path, protocol: str, server: Endpoint, seconds: float, report: Path) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "tritonkit", "loadtest", "--url", server.url(protocol), "--http-url", server.http,
        "--metrics-url", server.metrics, "--protocol", protocol, "--model", "probe", "--users", str(USERS),
        "--duration", f"{seconds:g}s", "--no-plots", "--report", str(report),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(tools))
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TritonKitError(f"tritonkit loadtest of {tools} failed: {done.stderr.strip()[-2000:]}")
    result = json.loads((report / "summary.json").read_text())
    return {
        "rps": result["rps"],
        "cpu_us": result["client_cpu_us_per_request"],
        "failures": result["failures"],
    }


def interleaved(
    a: Path, b: Path, protocol: str = "grpc", rounds: int = 12, seconds: float = 5.0, echo: bool = False
) -> list[dict[str, Any]]:
    """Rows ``{round, side, rps, cpu_us, failures}`` of ``tritonkit loadtest`` from the ``tools`` folders
    ``a`` and ``b`` run ABBA on one embedded server (after one warm-up run of ``b``)."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tritonkit-users-ab-") as tmp:
        repo = Path(tmp) / "repo"
        write_probe_model(repo, "probe")
        with endpoint(repo=repo, exit_timeout=1) as server:
            _one(b, protocol, server, 2.0, Path(tmp) / "warm-up")
            for index in range(rounds):
                for side in ("a", "b") if index % 2 == 0 else ("b", "a"):
                    tools = a if side == "a" else b
                    report = Path(tmp) / f"{side}{index}"
                    row = {"round": index, "side": side} | _one(tools, protocol, server, seconds, report)
                    runs.append(row)
                    if echo:
                        print(json.dumps(row), flush=True)
    return runs


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Medians of each side's req/s and of the per-round B/A ratios of req/s and CPU µs per request."""
    by = {(r["round"], r["side"]): r for r in runs}
    rounds = sorted({r["round"] for r in runs})
    return {
        "rps_a": statistics.median(by[i, "a"]["rps"] for i in rounds),
        "rps_b": statistics.median(by[i, "b"]["rps"] for i in rounds),
        "ratio": statistics.median(by[i, "b"]["rps"] / by[i, "a"]["rps"] for i in rounds),
        "cpu_ratio": statistics.median(by[i, "b"]["cpu_us"] / by[i, "a"]["cpu_us"] for i in rounds),
        "failures": float(sum(r["failures"] for r in runs)),
    }


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, check=False)


def _base_tools(rev: str, into: Path) -> tuple[Path, str]:
    """The ``tools`` folder of the tree at ``rev``, extracted under ``into``; (folder, full commit)."""
    found = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if found.returncode != 0:
        raise TritonKitError(f"--base {rev!r}: expected a commit of this repository ({_ROOT})")
    commit = found.stdout.decode().strip()
    archive = _git("archive", "--format=tar", commit, "tools")
    if archive.returncode != 0:
        raise TritonKitError(f"git archive {commit} failed: {archive.stderr.decode().strip()}")
    tar_path = into / "base.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into / "base", filter="data")
    return into / "base" / "tools", commit


def run(quick: bool = False, base: str | None = None) -> str:
    """Measure and return the Markdown section (machine named, figures from this one run). ``base`` None:
    :data:`DEFAULT_BASE`, and a section that says it was skipped where this clone lacks that commit (a
    shallow one); a ``base`` given that is no commit here is an error."""
    rounds, seconds = (2, 3.0) if quick else (12, 5.0)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tritonkit-base-") as tmp:
        try:
            base_tools, commit = _base_tools(base or DEFAULT_BASE, Path(tmp))
        except TritonKitError as exc:
            if base is not None:
                raise
            return f"{HEADING}\n\nSkipped on {started}: {exc}."
        base = base or DEFAULT_BASE
        runs = interleaved(base_tools, _ROOT / "tools", "grpc", rounds, seconds)
    s = summary(runs)
    head = _git("rev-parse", "--short=12", "HEAD").stdout.decode().strip() or "HEAD"
    dirty = _git("status", "--porcelain", "--untracked-files=no", "tools").stdout.strip()
    head += " with uncommitted changes" if dirty else ""
    kept = s["ratio"] >= 1 - TOLERANCE
    return "\n".join(
        [
            HEADING,
            "",
            f"Machine: {description()}. Run: {started}, {'quick' if quick else 'full'} mode, load average "
            f"{load:.2f} at the start. `tritonkit loadtest --protocol grpc` (the `wire` user, {USERS} users, "
            f"{seconds:g} s a run) of the tree at `{base}` ({commit[:12]}, A) and of this tree ({head}, B), alternately (ABBA) for "
            f"{rounds} rounds against one embedded server serving the probe model (`x + 1`, python backend), each "
            "run a child process importing its own tree (`tritonkit_bench/users_ab.py`).",
            "",
            "| median | A (base) | B (this tree) | B/A, per round |",
            "|---|---|---|---|",
            f"| req/s | {s['rps_a']:,.0f} | {s['rps_b']:,.0f} | {s['ratio']:.3f} |",
            f"| load-generator CPU µs per request | | | {s['cpu_ratio']:.3f} |",
            "",
            f"B/A req/s {s['ratio']:.3f}: this tree's gRPC user is "
            + (
                f"within {TOLERANCE:.0%} of the base's throughput or faster"
                if kept
                else f"MORE THAN {TOLERANCE:.0%} slower"
            )
            + f" ({int(s['failures'])} failed requests in all runs).",
        ]
    )
