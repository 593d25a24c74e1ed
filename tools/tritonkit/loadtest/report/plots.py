"""PNG plots of a run (matplotlib, Agg backend): latency percentiles and throughput over time, throughput
vs p99 across the ramp's steps, and Triton's queue vs compute time per request over time.

The SLO's latency gates are drawn as lines; every over-time plot counts seconds from Locust's first
history row, so the client and server plots share one time axis; the users axis has whole ticks.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

__all__ = ["draw_all"]


def _figure() -> Any:
    import matplotlib  # noqa: PLC0415 (matplotlib is heavy; only report writing needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib is heavy; only report writing needs it)

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


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 (matplotlib is heavy; only report writing needs it)

    axis.yaxis.set_major_locator(MaxNLocator(integer=True))


def _slo_lines(ax: Any, slo: dict[str, Any], keys: tuple[str, ...] = ("p95_ms", "p99_ms")) -> None:
    """A horizontal line per latency gate of the SLO, labelled with its limit."""
    for key, style in zip(keys, ("-.", "-"), strict=False):
        limit = slo.get(key)
        if limit is not None:
            ax.axhline(limit, color="red", linestyle=style, alpha=0.7, label=f"SLO {key[:3]} {limit:g} ms")


def _t0(report: Path) -> float | None:
    """The time axis origin every over-time plot shares: Locust's first history row (wall clock)."""
    rows = _history(report)
    return float(rows[0]["Timestamp"]) if rows else None


#: Locust's history percentiles are over its last 10 s of requests, failures included
_WINDOW_S = 10.0


def _without_failures(rows: list[dict[str, str]]) -> list[bool]:
    """Per history row: True when no request failed in the window its percentiles cover (Locust mixes
    a failure's time into them: a dead server's 1 ms refusals would draw a fast server)."""
    out = []
    for i, row in enumerate(rows):
        now, failures = float(row["Timestamp"]), _float(row.get("Total Failure Count")) or 0.0
        earlier = [r for r in rows[:i] if float(r["Timestamp"]) <= now - _WINDOW_S]
        before = (_float(earlier[-1].get("Total Failure Count")) or 0.0) if earlier else 0.0
        out.append(failures == before)
    return out


def latency_over_time(report: Path, slo: dict[str, Any] | None = None) -> Any:
    """Client view over time: percentiles (Locust's window) with the SLO lines and users above,
    throughput (requests between history rows over the seconds between them) below."""
    rows = _history(report)
    t0 = _t0(report)
    if not rows or t0 is None:
        return None
    t = [float(r["Timestamp"]) - t0 for r in rows]
    clean = _without_failures(rows)
    plt = _figure()
    fig, (ax, rate) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, height_ratios=(3, 2))
    for column, style in (("50%", "-"), ("95%", "--"), ("99%", ":")):
        ax.plot(t, [_float(r.get(column)) if ok else None for r, ok in zip(rows, clean, strict=True)], style,
                label=f"p{column[:-1]}")  # fmt: skip
    _slo_lines(ax, slo or {})
    gaps = " (gaps: windows holding failures, whose times are no latency)" if not all(clean) else ""
    ax.set_ylabel(f"latency (ms, Locust's 10 s window){gaps}", fontsize=8 if gaps else None)
    ax.grid(alpha=0.3)
    users = ax.twinx()
    users.plot(t, [_float(r.get("User Count")) for r in rows], color="grey", alpha=0.5, label="users")
    users.set_ylabel("users")
    _integer_ticks(users)
    ax.legend(loc="upper left")
    ax.set_title("Latency percentiles and throughput over time")
    counts = [_float(r.get("Total Request Count")) or 0.0 for r in rows]
    pairs = [
        (t[i], (counts[i] - counts[i - 1]) / (t[i] - t[i - 1]))
        for i in range(1, len(rows))
        if t[i] > t[i - 1]
    ]
    rate.plot([p[0] for p in pairs], [p[1] for p in pairs], "-", color="tab:green")
    rate.set_ylabel("throughput (req/s)")
    rate.set_xlabel("seconds since the load started")
    rate.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def ramp_throughput_p99(steps: list[dict[str, Any]], slo: dict[str, Any] | None = None) -> Any:
    points = [s for s in steps if s.get("p99_ms") is not None]
    if not points:
        return None
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [s["rps"] for s in points]
    y = [s["p99_ms"] for s in points]
    ax.plot(x, y, "o-")
    middle = (min(x) + max(x)) / 2
    for s in points:
        marker = " x" if s["breaches"] else ""
        right = (
            s["rps"] > middle and len(points) > 1
        )  # labels right of the middle grow leftwards: none is cut off
        ax.annotate(
            f"{s['users']} users{marker}",
            (s["rps"], s["p99_ms"]),
            textcoords="offset points",
            xytext=(-4, 4) if right else (4, 4),
            ha="right" if right else "left",
        )
    ax.margins(x=0.1, y=0.15)
    _slo_lines(ax, slo or {}, ("p99_ms",))
    if (slo or {}).get("p99_ms") is not None:
        ax.legend(loc="upper left")
    ax.set_xlabel("throughput (req/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.grid(alpha=0.3)
    ax.set_title("Throughput vs p99 across the ramp's steps")
    fig.tight_layout()
    return fig


def server_queue_compute(report: Path) -> Any:
    path = report / "server_metrics.json"
    if not path.exists():
        return None
    series: dict[str, list[dict[str, Any]]] = json.loads(path.read_text())
    if not any(series.values()):
        return None
    plt = _figure()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    t0 = _t0(report)
    for model, records in series.items():
        # same origin as the client plots (Locust's first row), so a spike lines up in both
        t = [r["unix"] - t0 if t0 is not None and "unix" in r else r["t"] for r in records]
        ax.plot(t, [r["queue_us_per_request"] for r in records], "--", label=f"{model} queue")
        ax.plot(t, [r["compute_us_per_request"] for r in records], "-", label=f"{model} compute")
    ax.set_xlabel("seconds since the load started" if t0 is not None else "seconds")
    ax.set_ylabel("µs per request (Triton)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Server view: queue vs compute time per request")
    fig.tight_layout()
    return fig


def draw_all(report: Path, data: dict[str, Any]) -> list[str]:
    """Draw what the run has data for; returns the file names written."""
    slo = data.get("slo") or {}
    written = []
    for name, fig in (
        ("latency_over_time.png", latency_over_time(report, slo)),
        ("ramp_throughput_p99.png", ramp_throughput_p99(data.get("ramp_steps") or [], slo)),
        ("server_queue_compute.png", server_queue_compute(report)),
    ):
        if fig is not None:
            fig.savefig(report / name, dpi=100)
            _figure().close(fig)
            written.append(name)
    return written
