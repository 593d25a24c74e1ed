"""Locust's CSV files read back: ``locust_failures.csv`` and the ``Aggregated`` rows of
``locust_stats_history.csv``.

Owns the column names Locust writes (``--csv PREFIX --csv-full-history``), so the summary
(:mod:`.summary`) and the progress line (:mod:`tritonkit.loadtest.supervise`) read the same way.
"""

from __future__ import annotations

import contextlib
import csv
from pathlib import Path
from typing import Any

__all__ = ["aggregated_rows", "as_float", "last_aggregated", "read_failures"]


def read_failures(path: Path) -> dict[str, dict[str, int]]:
    """``locust_failures.csv`` → request name → error text → occurrences; empty when absent."""
    out: dict[str, dict[str, int]] = {}
    if path.exists():
        with open(path, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                out.setdefault(row["Name"], {})[row["Error"]] = int(row["Occurrences"])
    return out


def last_aggregated(path: Path) -> dict[str, str] | None:
    """The newest ``Aggregated`` row of ``locust_stats_history.csv``, or ``None`` before there is one.

    Read while Locust is still appending to the file: a half-written or missing file is ``None``,
    never an error.
    """
    rows = aggregated_rows(path)
    return rows[-1] if rows else None


def aggregated_rows(path: Path) -> list[dict[str, str]]:
    """Every complete ``Aggregated`` row of ``locust_stats_history.csv``, oldest first."""
    if not path.exists():
        return []
    rows: list[dict[str, str]] = []
    with contextlib.suppress(OSError):
        with open(path, newline="", encoding="utf-8") as handle:
            lines = handle.readlines()
        if len(lines) < 2:
            return []
        header = next(csv.reader([lines[0]]))
        for line in lines[1:]:
            if not line.endswith("\n"):
                continue  # Locust is still writing it
            row = dict(zip(header, next(csv.reader([line])), strict=False))
            if row.get("Name") == "Aggregated":
                rows.append(row)
    return rows


def as_float(value: Any) -> float:
    """A CSV cell as a number; 0.0 for Locust's ``N/A`` and empty cells."""
    return _number(value) or 0.0


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
