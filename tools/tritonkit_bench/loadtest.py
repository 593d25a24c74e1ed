"""Benchmark section of ``docs/benchmarks.md``: how much load the Locust users generate, against wrk.

One embedded Triton serving the probe model (python backend, ``x + 1`` on FP32 [16], dynamic
batching: cheap for the server, so the load generators are what is measured), the same users and
the same request for every generator, runs interleaved round by round (the order rotates) so that
a busy neighbour on the shared machine hurts all of them alike. Ratios are taken per round, then
the median. ``quick``: one short round (< 60 s); full: three rounds (< 5 min).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonkit.loadtest.run import LoadTestOptions, parse_model
from tritonkit.loadtest.run import run as run_loadtest
from tritonkit.loadtest.wrk import cross_check, wrk_available
from tritonkit.machine import description
from tritonkit.measure.payloads import fetch_model_spec
from tritonkit.serve.endpoint import Endpoint, endpoint
from tritonkit_bench.probe_model import write_probe_model

__all__ = ["run"]

USERS = 16


def _locust(
    server: Endpoint, report: Path, protocol: str, seconds: float, workers: int = 0, transport: str = ""
) -> dict[str, Any]:

    options = LoadTestOptions(
        models=[parse_model("probe")],
        report_dir=report,
        url=server.url(protocol),
        http_url=server.http,
        metrics_url=server.metrics,
        protocol=protocol,
        users=USERS,
        duration=seconds,
        workers=workers,
        http_transport=transport if protocol == "http" and transport else "lean",
        plots=False,
        progress=False,
    )
    summary = run_loadtest(options)
    return {
        "rps": summary["rps"],
        "p50_ms": summary["p50_ms"],
        "p99_ms": summary["p99_ms"],
        "failures": summary["failures"],
        "matched": summary["accounting"]["matched"],
        "cpu_us": summary["client_cpu_us_per_request"],
    }


def _measure(
    protocol: str, transport: str, workers: int, seconds: float
) -> Callable[[Endpoint, Path], dict[str, Any]]:
    return lambda server, report: _locust(server, report, protocol, seconds, workers, transport)


def _wrk(server: Endpoint, report: Path, seconds: float) -> dict[str, Any]:

    report.mkdir(parents=True, exist_ok=True)
    spec = fetch_model_spec(server.http, "probe")
    result = cross_check(server.http, spec, connections=USERS, duration=seconds, report_dir=report)
    return {
        "rps": result["rps"],
        "p50_ms": result.get("p50_ms"),
        "p99_ms": result.get("p99_ms"),
        "failures": 0,
        "matched": None,
        "cpu_us": result.get("cpu_us_per_request"),
        "skipped": result.get("skipped"),
    }


def run(quick: bool = False) -> str:
    """Measure and return the Markdown section (machine named, figures from this one run)."""

    rounds, seconds = (1, 3.0) if quick else (3, 8.0)
    cores = os.cpu_count() or 1
    # (key, title, protocol, transport, workers): every Locust generator, measured the same way
    locust_runs = [
        ("http", "Locust HTTP user, 1 process, `lean` transport", "http", "", 0),
        (
            "http_tritonclient",
            "Locust HTTP user, 1 process, `tritonclient` transport",
            "http",
            "tritonclient",
            0,
        ),
        ("grpc", "Locust gRPC user, 1 process, `wire` transport", "grpc", "", 0),
        ("http_workers", f"Locust HTTP user, --workers {cores}", "http", "", cores),
    ]
    generators: list[tuple[str, str, Callable[[Endpoint, Path], dict[str, Any]]]] = [
        (key, title, _measure(protocol, transport, workers, seconds))
        for key, title, protocol, transport, workers in locust_runs
    ]
    if wrk_available():
        generators.insert(
            0, ("wrk", f"wrk (C), {USERS} connections, same request", lambda s, r: _wrk(s, r, seconds))
        )
    results: dict[str, list[dict[str, Any]]] = {key: [] for key, _, _ in generators}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="tritonkit-loadtest-bench-") as tmp:
        repo = Path(tmp) / "repo"
        write_probe_model(repo, "probe")
        with endpoint(repo=repo) as server:
            _locust(server, Path(tmp) / "warmup", "http", 2.0)  # first-run costs (imports, connections)
            for index in range(rounds):
                order = generators[index % len(generators) :] + generators[: index % len(generators)]
                for key, _, measure in order:
                    results[key].append(measure(server, Path(tmp) / f"{key}-{index}"))
    elapsed = time.time() - started
    return _markdown(generators, results, rounds, seconds, cores, elapsed, description(), quick)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ratio(results: dict[str, list[dict[str, Any]]], top: str, bottom: str) -> float | None:
    if not results.get(top) or not results.get(bottom):
        return None
    return _median(
        [a["rps"] / b["rps"] for a, b in zip(results[top], results[bottom], strict=True) if b["rps"]]
    )


def _markdown(
    generators: list[tuple[str, str, Any]],
    results: dict[str, list[dict[str, Any]]],
    rounds: int,
    seconds: float,
    cores: int,
    elapsed: float,
    machine: str,
    quick: bool,
) -> str:
    lines = [
        "## Load generators (`tritonkit.loadtest`)",
        "",
        f"Machine: {machine}. Triton (embedded, python backend) and the load generator share it. Model: the probe "
        "model (`x + 1`, FP32 [16], dynamic batching), batch 1, "
        f"{USERS} users/connections, steady, {seconds:g} s per run, {rounds} round(s) interleaved"
        f"{' (quick smoke run: do not publish)' if quick else ''}; {elapsed:.0f} s in all.",
        "",
        "| generator | "
        + " | ".join(f"round {i + 1} req/s" for i in range(rounds))
        + " | median req/s | p50 ms | p99 ms | client CPU µs/request |",
        "|---|" + "---:|" * (rounds + 4),
    ]
    for key, title, _ in generators:
        runs = results[key]
        cells = " | ".join(f"{r['rps']:,.0f}" for r in runs)
        lines.append(
            f"| {title} | {cells} | {_median([r['rps'] for r in runs]):,.0f} | "
            f"{_fmt(_median([r['p50_ms'] for r in runs if r['p50_ms'] is not None]))} | "
            f"{_fmt(_median([r['p99_ms'] for r in runs if r['p99_ms'] is not None]))} | "
            f"{_fmt(_median([r['cpu_us'] for r in runs if r.get('cpu_us') is not None]), 0)} |"
        )
    targets = [
        (
            "gRPC user (`wire`, the default) / HTTP user (same model, same users)",
            _ratio(results, "grpc", "http"),
            1.0,
        ),
        (
            "gRPC user (`wire`) / HTTP user (`tritonclient`)",
            _ratio(results, "grpc", "http_tritonclient"),
            1.0,
        ),
        ("HTTP user, 1 process / wrk", _ratio(results, "http", "wrk"), 0.5),
        (f"HTTP user, --workers {cores} / wrk", _ratio(results, "http_workers", "wrk"), 0.8),
    ]
    lines += ["", "| ratio (median of per-round ratios) | measured | target | met |", "|---|---:|---:|---|"]
    for title, value, target in targets:
        if value is None:
            lines.append(f"| {title} | - | >= {target:g} | not measured (wrk missing) |")
        else:
            lines.append(f"| {title} | {value:.2f} | >= {target:g} | {'yes' if value >= target else 'no'} |")
    locust_runs = [r for key in results if key != "wrk" for r in results[key]]
    matched = all(r["matched"] for r in locust_runs)
    failures = sum(r["failures"] for r in locust_runs)
    lines += [
        "",
        f"Every request accounted for: in {len(locust_runs)} Locust runs, requests sent = succeeded + failed "
        f"({failures} failed) and {'all matched' if matched else 'NOT all matched'} Triton's "
        "`nv_inference_request_success` + `nv_inference_request_failure` deltas.",
        "",
        "Client CPU µs/request: CPU time of the load generator's processes while load was on (Locust "
        "processes and workers; wrk's own), divided by the requests: the cost of a request "
        "to the generator, which a busy neighbour on a shared machine disturbs far less than req/s.",
        "",
        "gRPC transport: `wire` frames gRPC's unary calls by hand on one HTTP/2 connection per Locust process "
        "(header blocks built once per connection, header blocks received decoded by `hpack` and cached while "
        "they hold indexed fields only), driven by the gevent hub: frames queued in one loop turn leave in one "
        "send, one I/O watcher wakes the finished greenlets. It honours the server's stream limit, flow control, "
        "frame sizes and graceful GOAWAY, and sends `grpc-timeout`. Request bodies are serialized once per "
        "payload; every answer is decoded by the client's codec and validated. See `tritonkit/loadtest/transports/wire.py`.",
    ]
    return "\n".join(lines) + "\n"


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"  # NaN when nothing was measured
