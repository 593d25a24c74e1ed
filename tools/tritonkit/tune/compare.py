"""Two or more models (or versions) under identical load: interleaved rounds, ratios and their spread.

Owns :func:`compare`: every round measures each target once at the same load level, in an order that
rotates from round to round (so a busy neighbour or a warming cache hurts every target alike), and
:func:`summarize`: per target, the per-round ratio of its throughput and p99 to the first target's, as the
median with the interquartile range (a difference smaller than its spread is no difference).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from tritonkit.measure.levels import LevelResult
from tritonkit.measure.loadgen import Level
from tritonkit.measure.provenance import markdown_lines

__all__ = ["Comparison", "compare", "markdown", "summarize"]


@dataclasses.dataclass
class Comparison:
    """Rounds of results: ``rounds[i][name]`` is target ``name``'s result in round ``i``."""

    names: list[str]
    level: Level
    rounds: list[dict[str, LevelResult]]


def compare(
    names: Sequence[str], measure: Callable[[str, Level], LevelResult], level: Level, rounds: int = 3
) -> Comparison:
    """Measure every target ``rounds`` times at ``level``, interleaved, the order rotating each round."""
    out: list[dict[str, LevelResult]] = []
    for r in range(rounds):
        order = list(names[r % len(names) :]) + list(names[: r % len(names)])
        out.append({name: measure(name, level) for name in order})
    return Comparison(list(names), level, out)


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def summarize(comparison: Comparison) -> dict[str, Any]:
    """Per target: median throughput/p99, and the median and IQR of per-round ratios to the first target."""
    ref = comparison.names[0]
    rows: dict[str, Any] = {}
    for name in comparison.names:
        tps = [r[name].throughput for r in comparison.rounds]
        p99s = [r[name].p99_ms for r in comparison.rounds]
        tp_ratio = [
            r[name].throughput / r[ref].throughput for r in comparison.rounds if r[ref].throughput > 0
        ]
        p99_ratio = [r[name].p99_ms / r[ref].p99_ms for r in comparison.rounds if r[ref].p99_ms > 0]
        row: dict[str, Any] = {
            "throughput_median": round(statistics.median(tps), 3),
            "p99_ms_median": round(statistics.median(p99s), 4),
            "failures": sum(r[name].failures for r in comparison.rounds),
            "unstable_rounds": sum(not r[name].stable for r in comparison.rounds),
        }
        for key, ratios in (("throughput_ratio", tp_ratio), ("p99_ratio", p99_ratio)):
            if ratios:
                q1, median, q3 = _quartiles(ratios)
                row[key] = {
                    "median": round(median, 4),
                    "q1": round(q1, 4),
                    "q3": round(q3, 4),
                    "iqr": round(q3 - q1, 4),
                }
        rows[name] = row
    return {
        "reference": ref,
        "level": {"mode": comparison.level.mode, "value": comparison.level.value},
        "rounds": len(comparison.rounds),
        "targets": rows,
        # what every figure above is computed from: each round's result per target
        "per_round": [
            {
                name: {
                    "throughput": r[name].throughput,
                    "p99_ms": r[name].p99_ms,
                    "p99_samples": r[name].successes,
                    "failures": r[name].failures,
                    "stable": r[name].stable,
                    "generator": r[name].capacity.as_dict(),
                }
                for name in comparison.names
            }
            for r in comparison.rounds
        ],
    }


def markdown(summary: dict[str, Any]) -> str:
    ref = summary["reference"]
    lines = [
        *(markdown_lines(summary["provenance"]) if "provenance" in summary else []),
        f"Compared at {summary['level']['mode']} {summary['level']['value']:g}, {summary['rounds']} interleaved rounds; "
        f"ratios to `{ref}` per round: median [Q1, Q3].",
        "",
        "| target | req/s (median) | p99 ms (median) | throughput ratio | p99 ratio | failures | unstable rounds |",
        "|---|---:|---:|---|---|---:|---:|",
    ]
    for name, row in summary["targets"].items():

        def ratio(key: str, row: dict[str, Any] = row) -> str:
            r = row.get(key)
            return "–" if r is None else f"{r['median']:.3f} [{r['q1']:.3f}, {r['q3']:.3f}]"

        lines.append(
            f"| `{name}` | {row['throughput_median']:.1f} | {row['p99_ms_median']:.3f} | {ratio('throughput_ratio')} | "
            f"{ratio('p99_ratio')} | {row['failures']} | {row['unstable_rounds']} |"
        )
    return "\n".join(lines) + "\n"
