"""Whether a tune's winner beats the model's own config by more than the noise, so that it may be written.

Owns :func:`decide` (pure): the winner and the baseline (the model's own config as it stood) each have
repeated figures of the same method (the finals' rounds, measured alternately; without finals, the
windows of each one's best load level), and the winner is written only when it beats the baseline
beyond their spread: its lowest figure is above the baseline's highest (no overlap). A median gain
inside the spread is what two measurements of one config also show. The same medians make the gain
figure, so the headline and the decision never use different numbers.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["Verdict", "decide", "spread"]


def spread(figures: Sequence[float]) -> dict[str, Any]:
    """``{"median", "min", "max", "n", "figures"}`` of repeated throughput figures (empty: zeros)."""
    values = [float(x) for x in figures]
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "n": 0, "figures": []}
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "n": len(values),
        "figures": [round(v, 3) for v in values],
    }


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The decision and the numbers it stands on (``method``: ``finals`` rounds or ``windows``)."""

    write: bool
    reason: str
    method: str
    winner: dict[str, Any]
    baseline: dict[str, Any]

    @property
    def gain(self) -> float | None:
        """The winner's median over the baseline's, minus one (None when the baseline served nothing)."""
        base = self.baseline["median"]
        return self.winner["median"] / base - 1.0 if base > 0 else None

    def as_dict(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**fields, "gain": None if self.gain is None else round(self.gain, 4)}


def decide(
    winner_figures: Sequence[float],
    baseline_figures: Sequence[float],
    *,
    same: bool,
    method: str,
    baseline_feasible: bool = True,
) -> Verdict:
    """Write the winner only when it is not the model's own config (``same``) and every repeated figure of
    it beats every one of the baseline's; ``baseline_feasible`` False: the own config met the budget at no
    load level, so any winner is better."""
    w, b = spread(winner_figures), spread(baseline_figures)
    if same:
        return Verdict(False, "the winner is the model's own config: nothing to change", method, w, b)
    if not baseline_feasible:
        reason = "the model's own config met the latency budget at no load level"
        return Verdict(True, reason, method, w, b)
    if w["n"] < 2 or b["n"] < 2:
        reason = (
            f"the winner ({w['n']} figure(s)) and the model's own config ({b['n']} figure(s)) were not measured "
            "repeatedly: their spread is unknown"
        )
        return Verdict(False, reason, method, w, b)
    if w["min"] > b["max"]:
        reason = (
            f"every {method} figure of the winner ({w['min']:.1f}-{w['max']:.1f} req/s) beat every one of the "
            f"model's own config ({b['min']:.1f}-{b['max']:.1f} req/s)"
        )
        return Verdict(True, reason, method, w, b)
    reason = (
        f"the winner ({w['median']:.1f} req/s, {method} {w['min']:.1f}-{w['max']:.1f}) does not beat the model's "
        f"own config ({b['median']:.1f} req/s, {b['min']:.1f}-{b['max']:.1f}) beyond the spread of their "
        "repeated measurements"
    )
    return Verdict(False, reason, method, w, b)
