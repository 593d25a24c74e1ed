"""Level results as files: CSV (one row per level) and JSON (every level with its windows), written atomically.

Owns the column order of ``tritonkit profile --csv`` and the JSON layout of ``--json``; the batch-size
histogram (Triton's ``batch_stats``) is a ``size:executions`` list in the CSV cell.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.atomic import write_text
from tritonkit.measure.levels import LevelResult

__all__ = ["COLUMNS", "table", "write_csv", "write_json"]

COLUMNS: tuple[str, ...] = (
    "mode", "level", "stable", "throughput", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99_samples", "p99_ci_ms",
    "successes", "failures",
    "failure_ratio", "windows", "generator_cpu", "late_share", "generator_limited", "queue_us",
    "compute_input_us", "compute_infer_us", "compute_output_us", "server_total_us", "average_batch", "batches",
)  # fmt: skip


def _cell(value: Any) -> Any:
    if isinstance(value, Mapping):
        return " ".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join("-" if v is None else str(v) for v in value)
    return value


def _ci(ci: Sequence[float | None]) -> str:
    low, high = ci
    return f"[{'<min' if low is None else f'{low:.3f}'}, {'>max' if high is None else f'{high:.3f}'}]"


def write_csv(
    path: str | os.PathLike[str],
    results: Sequence[LevelResult],
    extra: Sequence[Mapping[str, Any]] | None = None,
) -> Path:
    """One row per level; ``extra``: more cells per level (``profile``'s perf_analyzer cross-check),
    appended as columns in the order they first appear."""
    more = list(extra or [])
    added = list(dict.fromkeys(k for cells in more for k in cells))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow((*COLUMNS, *added))
    for i, r in enumerate(results):
        row = {**r.summary(), **(more[i] if i < len(more) else {})}
        writer.writerow([_cell(row.get(c, "")) for c in (*COLUMNS, *added)])
    write_text(path, buffer.getvalue())
    return Path(path)


def write_json(
    path: str | os.PathLike[str], results: Sequence[LevelResult], extra: Mapping[str, Any] | None = None
) -> Path:
    data = {
        **dict(extra or {}),
        "levels": [{**r.summary(), "window_results": [w.as_dict() for w in r.windows]} for r in results],
    }
    write_text(path, json.dumps(data, indent=2) + "\n")
    return Path(path)


def table(results: Sequence[LevelResult]) -> str:
    """A plain-text table of levels for the terminal."""
    lines = [
        f"{'level':>10} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'p99 95% CI (n)':>24} {'fail':>6} "
        f"{'queue µs':>9} {'infer µs':>9} {'batch':>6}  verdict"
    ]
    for r in results:
        verdict = "stable" if r.stable else "UNSTABLE"
        if r.generator_limited:
            verdict += f", GENERATOR-LIMITED (cpu {r.generator_cpu:.0%}, late {r.late_share:.0%})"
        ci = f"{_ci(r.p99_ci_ms)} ({r.successes})"
        lines.append(
            f"{r.level.label():>10} {r.throughput:>10.1f} {r.p50_ms:>9.3f} {r.p99_ms:>9.3f} {ci:>24} {r.failures:>6} "
            f"{r.server.queue_us:>9.0f} {r.server.compute_infer_us:>9.0f} {r.server.average_batch:>6.2f}  {verdict}"
        )
    return "\n".join(lines)
