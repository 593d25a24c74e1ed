"""The trial log of a tune: ``trials.jsonl`` in the report folder, one JSON object per line.

Owns its layout: a header line (``kind: header``: the model, budget and grid), then one line per finished
measurement, appended and flushed as it finishes (``kind: trial`` for a config of the search, ``baseline``
for the model's own config when the grid does not hold it, ``final`` for one finals round of one config),
so an interrupted tune keeps every finished measurement and ``--resume`` replays them instead of
measuring again. A line cut off by an interruption is dropped when read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["LOG", "append", "load_baselines", "load_finals", "load_rows", "load_trials"]

LOG = "trials.jsonl"


def load_rows(report_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(header, every other row) of a trial log; (None, []) when there is none."""
    path = Path(report_dir) / LOG
    if not path.exists():
        return None, []
    header: dict[str, Any] | None = None
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        if row.get("kind") == "header":
            header = row
        else:
            rows.append(row)
    return header, rows


def load_trials(report_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(header, finished trials of the search) of a trial log."""
    header, rows = load_rows(report_dir)
    return header, [row for row in rows if row.get("kind") == "trial"]


def load_baselines(report_dir: Path) -> list[dict[str, Any]]:
    """The model's own config measured apart from the grid (at most one row)."""
    return [row for row in load_rows(report_dir)[1] if row.get("kind") == "baseline"]


def load_finals(report_dir: Path) -> list[dict[str, Any]]:
    """The finals' re-measurements (one row per config and round), in the order taken."""
    return [row for row in load_rows(report_dir)[1] if row.get("kind") == "final"]


def append(path: Path, row: dict[str, Any]) -> None:
    """Add one row and flush it: a finished measurement survives whatever comes next."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")
        handle.flush()
