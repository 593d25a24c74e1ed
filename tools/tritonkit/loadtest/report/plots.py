"""PNG plots of a run (matplotlib, Agg backend): latency percentiles over time, throughput vs
p99 across the ramp's steps, and Triton's queue vs compute time per request over time."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

__all__ = ["draw_all"]


def _figure() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _history(report: Path) -> list[dict[str, str]]:
    path = report / "locust_stats_history.csv"
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle) if row.get("Name") == "Aggregated"]


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "N/A") else None
    except ValueError:
        return None


def latency_over_time(report: Path, out: Path) -> bool:
    rows = _history(report)
    if not rows:
        return False
    t0 = float(rows[0]["Timestamp"])
    t = [float(r["Timestamp"]) - t0 for r in rows]
    plt = _figure()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for column, style in (("50%", "-"), ("95%", "--"), ("99%", ":")):
        ax.plot(t, [_float(r.get(column)) for r in rows], style, label=f"p{column[:-1]}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("latency (ms, Locust's 10 s window)")
    ax.grid(alpha=0.3)
    users = ax.twinx()
    users.plot(t, [_float(r.get("User Count")) for r in rows], color="grey", alpha=0.5, label="users")
    users.set_ylabel("users")
    ax.legend(loc="upper left")
    ax.set_title("Latency percentiles over time")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def ramp_throughput_p99(steps: list[dict[str, Any]], out: Path) -> bool:
    points = [s for s in steps if s.get("p99_ms") is not None]
    if not points:
        return False
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [s["rps"] for s in points]
    y = [s["p99_ms"] for s in points]
    ax.plot(x, y, "o-")
    for s in points:
        marker = " x" if s["breaches"] else ""
        ax.annotate(
            f"{s['users']} users{marker}", (s["rps"], s["p99_ms"]), textcoords="offset points", xytext=(4, 4)
        )
    ax.set_xlabel("throughput (req/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.grid(alpha=0.3)
    ax.set_title("Throughput vs p99 across the ramp's steps")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def server_queue_compute(report: Path, out: Path) -> bool:
    path = report / "server_metrics.json"
    if not path.exists():
        return False
    series: dict[str, list[dict[str, Any]]] = json.loads(path.read_text())
    if not any(series.values()):
        return False
    plt = _figure()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for model, records in series.items():
        t = [r["t"] for r in records]
        ax.plot(t, [r["queue_us_per_request"] for r in records], "--", label=f"{model} queue")
        ax.plot(t, [r["compute_us_per_request"] for r in records], "-", label=f"{model} compute")
    ax.set_xlabel("seconds")
    ax.set_ylabel("µs per request (Triton)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Server view: queue vs compute time per request")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def draw_all(report: Path, data: dict[str, Any]) -> list[str]:
    """Draw what the run has data for; returns the file names written."""
    written = []
    if latency_over_time(report, report / "latency_over_time.png"):
        written.append("latency_over_time.png")
    if ramp_throughput_p99(data.get("ramp_steps") or [], report / "ramp_throughput_p99.png"):
        written.append("ramp_throughput_p99.png")
    if server_queue_compute(report, report / "server_queue_compute.png"):
        written.append("server_queue_compute.png")
    return written
