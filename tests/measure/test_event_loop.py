"""``profile``, ``compare`` and ``tune`` over gRPC run many levels and measurers in one process, each a
``tritonkit`` subprocess here so that all of its stderr (grpc.aio's poller reports through asyncio's
logger, from any thread) is seen: no traceback, no "Event loop is closed", every result complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import tritonkit
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit.tune.apply import RepositoryApi

FAST = ["--window-s", "0.1", "--stability-pct", "80", "--max-windows", "3", "--timeout-s", "10"]


def _tritonkit(*args: str) -> subprocess.CompletedProcess[str]:
    tools = str(Path(tritonkit.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tools, os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "tritonkit", *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _clean(run: subprocess.CompletedProcess[str]) -> None:
    """Exit 0, and none of: a traceback, a closed loop, an unclosed aiohttp session, leaked shared memory."""
    assert run.returncode == 0, run.stderr[-2000:]
    for bad in ("Traceback", "Event loop is closed", "Unclosed", "leaked shared_memory"):
        assert bad not in run.stderr, run.stderr[-3000:]


def _levels(path: Path) -> list[dict[str, Any]]:
    levels: list[dict[str, Any]] = json.loads(path.read_text())["levels"]
    assert all(lv["successes"] > 0 and lv["windows"] > 0 for lv in levels)
    return levels


def test_profile_and_compare_leave_no_event_loop_errors_nor_leaks(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    grpc = ["--url", server.grpc_url, f"--admin-key={server.admin_key}", "--protocol", "grpc", *FAST]
    # a measurer (generator, clients) per target and round, every one ending with requests in flight
    compare = _tritonkit(
        "compare",
        "add",
        "work",
        "--concurrency",
        "8",
        "--rounds",
        "3",
        *grpc,
        "--json",
        str(tmp_path / "c.json"),
    )
    _clean(compare)
    summary = json.loads((tmp_path / "c.json").read_text())
    assert summary["rounds"] == 3 and set(summary["targets"]) == {"add", "work"}
    assert all(row["throughput_median"] > 0 and row["failures"] == 0 for row in summary["targets"].values())

    profile = _tritonkit(
        "profile", "--model", "add", "--concurrency", "1,4,8", "--workers", "2", *grpc,
        "--json", str(tmp_path / "p.json"),
    )  # fmt: skip
    _clean(profile)
    assert [lv["level"] for lv in _levels(tmp_path / "p.json")] == [1, 4, 8]

    # open loop: requests still in flight when a level ends are cancelled, each with its shared-memory regions
    # (late sends on 2 shared cores are this host's, not this test's subject: --max-late-pct 100)
    shm = _tritonkit(
        "profile", "--model", "work", "--request-rate", "300,1500", "--shared-memory", "system", *grpc,
        "--max-late-pct", "100",
        "--json", str(tmp_path / "s.json"),
    )  # fmt: skip
    _clean(shm)
    assert [lv["level"] for lv in _levels(tmp_path / "s.json")] == [300, 1500]

    http = _tritonkit(
        "profile", "--model", "work", "--request-rate", "300,1500", "--url", server.http_url,
        f"--admin-key={server.admin_key}", *FAST, "--max-late-pct", "100", "--json", str(tmp_path / "h.json"),
    )  # fmt: skip
    _clean(http)
    assert len(_levels(tmp_path / "h.json")) == 2


def test_grpc_tune_leaves_no_event_loop_errors(explicit_server: EmbeddedServer, tmp_path: Path) -> None:
    RepositoryApi(explicit_server.http_url, explicit_server.admin_headers).load("add")
    run = _tritonkit(
        "tune", "--model", "add", "--latency-budget-ms", "1000", "--url", explicit_server.grpc_url,
        "--http-url", explicit_server.http_url, "--protocol", "grpc", f"--admin-key={explicit_server.admin_key}",
        "--report", str(tmp_path / "r"), "--write", "none", "--search", "brute", "--instances", "1,2",
        "--delays-us", "off", "--max-batch-sizes", "8", "--no-preferred", "--no-queue-policy",
        "--max-concurrency", "8", "--accept-unstable", "--repo", str(explicit_server.repo), "--no-plots", *FAST,
    )  # fmt: skip
    _clean(run)
    assert "winner: " in run.stdout and "2 configs" in run.stdout
    trials = [json.loads(line) for line in (tmp_path / "r" / "trials.jsonl").read_text().splitlines()]
    trials = [t for t in trials if t.get("kind") == "trial"]
    assert len(trials) == 2 and all(len(t["levels"]) >= 2 and not t.get("error") for t in trials)
