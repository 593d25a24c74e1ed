"""The files of a tune: ``tune.json``, ``report.md`` (ranked table, server split per config) and ``pareto.png``.

Owns the ranking (feasible configs by throughput within the budget, then the rest by p99), the
throughput/p99 Pareto front (configs no other config beats on both), and the plot of every trial with
the front and the latency budget drawn in. Every file is written through a temporary file and a rename.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.atomic import write_text, write_with

__all__ = ["pareto_front", "ranked", "write_report"]


def ranked(trials: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(trials, key=lambda t: (not t["feasible"], -t["throughput"], t["p99_ms"] or 0.0))


def pareto_front(trials: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials with a measured level that no other trial beats on both throughput (higher) and p99 (lower)."""
    points = [t for t in trials if t.get("best")]
    front = [
        t
        for t in points
        if not any(
            o["throughput"] >= t["throughput"]
            and o["p99_ms"] <= t["p99_ms"]
            and (o["throughput"] > t["throughput"] or o["p99_ms"] < t["p99_ms"])
            for o in points
        )
    ]
    return sorted(front, key=lambda t: t["p99_ms"])


def _split(t: dict[str, Any]) -> str:
    b = t.get("best") or {}
    if not b:
        return "–"
    return (
        f"{b['queue_us']:.0f} / {b['compute_input_us']:.0f} / {b['compute_infer_us']:.0f} / "
        f"{b['compute_output_us']:.0f} (batch {b['average_batch']:.2f})"
    )


def markdown(data: Mapping[str, Any]) -> str:
    """``report.md`` of a tune run, from the same fields ``tune.json`` holds."""
    model, budget_ms, search = data["model"], data["latency_budget_ms"], data["search"]
    trials, winner, baseline = data["trials"], data["winner"], data["baseline"]
    measurements = data["measurements"]
    lines = [
        f"# tritonkit tune: `{model}`",
        "",
        f"Latency budget p99 {budget_ms:g} ms; search `{search}`: {len(trials)} configs, {measurements} load levels "
        "measured. Throughput counts successes only, at the highest concurrency whose p99 fits the budget "
        "(stable over 3 windows).",
        "",
    ]
    if winner is not None:
        gain = ""
        if baseline is not None and baseline["throughput"] > 0:
            gain = (
                f" ({winner['throughput'] / baseline['throughput'] - 1:+.1%} against the model's own config: "
                f"{baseline['throughput']:.1f} req/s)"
            )
        lines += [
            f"**Winner**: `{winner['key']}`: {winner['throughput']:.1f} req/s at concurrency "
            f"{winner['concurrency']}, p50 {winner['p50_ms']:.2f} ms, p99 {winner['p99_ms']:.2f} ms{gain}.",
            "",
        ]
        lines += _finals(data.get("finals") or [], winner)
    else:
        lines += ["**No config met the budget.**", ""]
    lines += [
        "| rank | config | within budget | req/s | concurrency | p50 ms | p99 ms | stable | "
        "server µs/request: queue / in / infer / out | batches (size: executions) |",
        "|---:|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for i, t in enumerate(ranked(trials), 1):
        b = t.get("best") or {}
        batches = ", ".join(f"{k}: {v}" for k, v in b.get("batches", {}).items()) or "–"
        p50 = "–" if t["p50_ms"] is None else f"{t['p50_ms']:.2f}"
        lines.append(
            f"| {i} | `{t['key']}` | {'yes' if t['feasible'] else 'no'} | {t['throughput']:.1f} | "
            f"{t['concurrency'] or '–'} | {p50} | "
            f"{(t['p99_ms'] or 0):.2f} | {'yes' if t['stable'] else 'no'} | {_split(t)} | {batches} |"
        )
    lines += [
        "",
        "Pareto front (throughput vs p99): " + ", ".join(f"`{t['key']}`" for t in pareto_front(trials)),
        "",
    ]
    return "\n".join(lines)


def _finals(finals: Sequence[Mapping[str, Any]], winner: Mapping[str, Any]) -> list[str]:
    """The finals table: each finalist's search figure and its re-measurements, winner first."""
    if not any(f["figures"] for f in finals):
        return []
    rounds = max(len(f["figures"]) for f in finals)
    lines = [
        f"Finals: the {len(finals)} configs the search measured within reach of the best, measured again in "
        f"{rounds} alternating rounds at the concurrency the search found (a lower level when that broke the "
        "budget); the winner has the highest median of the fresh figures.",
        "",
        "| config | search req/s | " + " | ".join(f"round {r + 1}" for r in range(rounds)) + " | median |",
        "|---|---:|" + "---:|" * rounds + "---:|",
    ]
    for f in sorted(finals, key=lambda f: f["key"] != winner["key"]):
        cells = " | ".join(
            f"{x:.1f} (c={c})" for x, c in zip(f["figures"], f.get("concurrencies") or [], strict=False)
        )
        lines.append(f"| `{f['key']}` | {f['searched']:.1f} | {cells} | {f['median']:.1f} |")
    return [*lines, ""]


def plot(path: Path, trials: Sequence[dict[str, Any]], budget_ms: float, model: str) -> None:
    import matplotlib  # noqa: PLC0415 (matplotlib is heavy; only report writing needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib is heavy; only report writing needs it)

    measured = [t for t in trials if t.get("best")]
    front = pareto_front(trials)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter([t["p99_ms"] for t in measured], [t["throughput"] for t in measured], s=18, label="configs")
    ax.plot(
        [t["p99_ms"] for t in front], [t["throughput"] for t in front], "o-", color="C3", label="Pareto front"
    )
    ax.axvline(budget_ms, color="grey", linestyle="--", label=f"budget p99 {budget_ms:g} ms")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (req/s, successes)")
    ax.set_title(f"tritonkit tune: {model}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    try:
        write_with(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    finally:
        plt.close(fig)


def write_report(report_dir: Path, data: Mapping[str, Any], *, plots: bool = True) -> list[Path]:
    """Write ``tune.json`` (``data``: model, latency_budget_ms, search, measurements, winner, baseline,
    trials), ``report.md`` and (with ``plots``) ``pareto.png``; return their paths."""
    report_dir.mkdir(parents=True, exist_ok=True)
    written = [report_dir / "tune.json", report_dir / "report.md"]
    write_text(written[0], json.dumps(data, indent=2, sort_keys=True) + "\n")
    write_text(written[1], markdown(data))
    if plots:
        written.append(report_dir / "pareto.png")
        plot(written[-1], data["trials"], data["latency_budget_ms"], data["model"])
    return written
