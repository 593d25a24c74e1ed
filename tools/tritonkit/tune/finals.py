"""What tune's finals leave: the crowned winner (:func:`crowned`: its fresh figures, their median, and
the level every round held the budget at) and the per-finalist summary of the report
(:func:`finals_summary`). The rounds themselves are :func:`tritonkit.tune.search.finals`."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from tritonkit.tune.search import Final
from tritonkit.tune.space import describe

__all__ = ["crowned", "finals_summary"]


def crowned(
    trial: dict[str, Any], final_list: Sequence[Final], rows: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The winner's trial, with its finals figures (``confirmed_throughput``: their median) when it had any.

    A finals round measures at a lower level where the search's broke the budget that time; the winner's
    ``concurrency`` (what tune reports and a profile reproduces) is then the lowest level a round used,
    where every round held the budget, with that round's latencies (``search_concurrency``: the search's)."""
    mine = next((f for f in final_list if describe(f.point) == trial["key"] and f.figures), None)
    if mine is None:
        return trial
    winner = {**trial, "final_figures": list(mine.figures), "confirmed_throughput": round(mine.median, 3)}
    rounds = [r for r in rows if r.get("key") == trial["key"] and r.get("concurrency")]
    lowest = min(rounds, key=lambda r: int(r["concurrency"]), default=None)
    if lowest is not None and int(lowest["concurrency"]) < int(trial["concurrency"] or 0):
        winner.update(
            search_concurrency=trial["concurrency"],
            concurrency=int(lowest["concurrency"]),
            p50_ms=lowest["p50_ms"],
            p99_ms=lowest["p99_ms"],
        )
    return winner


def finals_summary(
    final_list: Sequence[Final], rows: Sequence[dict[str, Any]], baseline: dict[str, Any]
) -> list[dict[str, Any]]:
    """Per finalist (and the model's own config when it was measured beside them): the search's figure,
    each round's figure and concurrency, their median and spread. No figure is the generator's: a round
    the generator limited ended the tune (:class:`~tritonkit.measure.levels.GeneratorLimitedError`)."""
    out = []
    entries = [(describe(f.point), f.searched.throughput, list(f.figures), False) for f in final_list]
    if not baseline["on_grid"] and baseline.get("final_figures"):
        own = "own: " + baseline["key"]
        entries.append((own, baseline["throughput"], list(baseline["final_figures"]), True))
    elif (
        baseline["on_grid"]
        and baseline.get("final_figures")
        and baseline["key"] not in {e[0] for e in entries}
    ):
        entries.append((baseline["key"], baseline["throughput"], list(baseline["final_figures"]), True))
    for key, searched, figures, own_only in entries:
        mine = sorted((r for r in rows if r["key"] == key), key=lambda r: r["round"])
        out.append({
            "key": key.removeprefix("own: "), "searched": searched, "figures": figures,
            "concurrencies": [r["concurrency"] for r in mine],
            "median": round(statistics.median(figures), 3) if figures else searched,
            "min": min(figures, default=searched), "max": max(figures, default=searched),
            "own_config": own_only or key.removeprefix("own: ") == baseline["key"],
            "finalist": not own_only,
        })  # fmt: skip
    return out
