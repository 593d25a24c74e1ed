"""The trial log of a tune: ``trials.jsonl`` in the report folder, one JSON object per line.

Owns its layout: a header line (``kind: header``: the model, budget and grid), then one line per finished
measurement, appended and flushed as it finishes (``kind: trial`` for a config of the search, ``baseline``
for the model's own config when the grid does not hold it, ``final`` for one finals round of one config),
so an interrupted tune keeps every finished measurement and ``--resume`` replays them instead of
measuring again. Every row starts on a fresh line (a cut last line never swallows the next row); a line
cut off by an interruption is set aside when the log is read (moved into ``trials.jsonl.cut``, named on
stderr), so the log holds whole rows only and the cut measurement is taken again.

The header records the model's own config as it stood when the log began (``base_config``; ``base``: its
point): a resumed tune replays the search from that config (:func:`logged_base`), not from the
``config.pbtxt`` the first run may since have replaced with its winner, so the same trials and finals
rounds are found in the log, nothing is measured again, and the finals' medians stay the headline.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonkit.atomic import write_text
from tritonkit.config import ModelConfig, from_dict, to_dict
from tritonkit.errors import TritonKitError
from tritonkit.tune.space import apply_point, base_point

__all__ = [
    "LOG",
    "append",
    "header_row",
    "load_baselines",
    "load_finals",
    "load_rows",
    "load_trials",
    "logged_base",
    "logged_figures",
]

LOG = "trials.jsonl"


def load_rows(report_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(header, every other row) of a trial log; (None, []) when there is none."""
    path = Path(report_dir) / LOG
    if not path.exists():
        return None, []
    header: dict[str, Any] | None = None
    rows = []
    kept, cut = [], []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            if line.strip():
                cut.append(line)
            continue
        kept.append(line)
        if row.get("kind") == "header":
            header = row
        else:
            rows.append(row)
    if cut:
        _set_aside(path, kept, cut)
    return header, rows


def _set_aside(path: Path, kept: list[str], cut: list[str]) -> None:
    """Move the lines of ``path`` that are not whole rows into ``<path>.cut``; the log keeps ``kept``."""
    aside = path.with_name(path.name + ".cut")
    previous = aside.read_text(encoding="utf-8", errors="replace") if aside.exists() else ""
    write_text(aside, previous + "".join(line + "\n" for line in cut))
    write_text(path, "".join(line + "\n" for line in kept))
    print(
        f"tritonkit tune: {path} held {len(cut)} cut line(s) (an interrupted write); set aside in {aside}, "
        "and the measurement they held is taken again",
        file=sys.stderr,
        flush=True,
    )


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
    with path.open("ab+") as handle:
        handle.seek(0, 2)
        fresh = handle.tell() == 0
        if not fresh:
            handle.seek(-1, 2)
            fresh = handle.read(1) == b"\n"
        # A cut last line (a write interrupted) must not swallow this row: start it on a line of its own.
        handle.write((b"" if fresh else b"\n") + json.dumps(row, sort_keys=True).encode("utf-8") + b"\n")
        handle.flush()


def header_row(wanted: Mapping[str, Any], search: str, base: ModelConfig) -> dict[str, Any]:
    """The log's first line: what was asked (model, budget, grid), the search, and the own config."""
    return {
        "kind": "header", **wanted, "search": search, "base": base_point(base),
        "base_config": json.loads(json.dumps(to_dict(base))),
    }  # fmt: skip


def logged_base(header: Mapping[str, Any] | None, current: ModelConfig) -> tuple[ModelConfig, bool]:
    """(the model's own config a resumed log was measured against, whether ``current`` differs from it).

    ``base_config`` when the header has it; a header from before it has only the point (``base``), set
    onto ``current``; no header: ``current``."""
    if header is None:
        return current, False
    logged = current
    if isinstance(header.get("base_config"), dict):
        try:
            logged = from_dict(dict(header["base_config"]))
        except (TritonKitError, ValueError, KeyError, TypeError):
            logged = current
    elif isinstance(header.get("base"), dict) and header["base"] != base_point(current):
        logged = apply_point(current, header["base"])
    return logged, to_dict(logged) != to_dict(current)


def logged_figures(rows: list[dict[str, Any]], key: str) -> list[float]:
    """One config's finals figures as the log holds them (by round; a round that broke the budget: 0)."""
    mine = sorted(
        (r for r in rows if r.get("kind") == "final" and r.get("key") == key), key=lambda r: r["round"]
    )
    return [float(r["throughput"]) if r.get("feasible") else 0.0 for r in mine]
