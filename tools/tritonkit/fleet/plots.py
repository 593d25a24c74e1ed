"""The pictures of a fleet plan: models as blocks on GPUs (``packing.png``) and GPUs and cost per type (``cost.png``).

Owns the two figures (matplotlib, Agg). In the packing picture each column is one GPU (one pod) and
each block one model, as tall as the share of that pod's measured capacity the model uses at its
planned rate; the packed fleet is drawn beside one model per pod, with the headroom line (the load a
pod may carry so that the fleet keeps its spare share).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.fleet.devices import replicas_word

__all__ = ["cost_figure", "from_json", "packing_figure"]


def _blocks(group: Mapping[str, Any], weights: Mapping[str, float]) -> list[tuple[str, float]]:
    """(model, height) per model of one pod of ``group``: the pod's used share split by each model's cost."""
    used = 1.0 / (group["replicas"] * group["share"])
    total = sum(weights[m] for m in group["models"]) or 1.0
    return [(m, used * weights[m] / total) for m in group["models"]]


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415 (matplotlib is heavy; only the report's pictures need it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib is heavy; only the report's pictures need it)

    return plt


def _panel(
    ax: Any,
    packing: Mapping[str, Any],
    weights: Mapping[str, float],
    colors: Mapping[str, Any],
    headroom: float,
) -> None:
    x = 0
    for group in packing["groups"]:
        for _ in range(group["replicas"]):
            bottom = 0.0
            for model, height in _blocks(group, weights):
                ax.bar(
                    x, height, bottom=bottom, color=colors[model], edgecolor="black", linewidth=0.6, width=0.8
                )
                if height > 0.08:
                    ax.text(x, bottom + height / 2, model, ha="center", va="center", fontsize=7, rotation=90)
                bottom += height
            x += 1
        ax.axvline(x - 0.5, color="grey", linewidth=0.5)
    ax.axhline(1 / (1 + headroom), color="red", linestyle="--", linewidth=0.8)
    ax.set_xlim(-0.6, max(x, 1) - 0.4)
    ax.set_ylim(0, 1.05)
    ax.set_xticks(range(x))
    ax.set_xticklabels([g["gpu_type"] for g in packing["groups"] for _ in range(g["replicas"])], fontsize=7)
    ax.set_title(
        f"{packing['name']}: {replicas_word([g['gpu_type'] for g in packing['groups']], packing['gpus'])}",
        fontsize=9,
    )


def packing_figure(
    path: Path,
    packed: Mapping[str, Any],
    single: Mapping[str, Any] | None,
    weights: Mapping[str, float],
    headroom: float,
) -> None:
    """``packing.png``: the packed fleet beside one model per pod, as ``fleet-plan.json`` holds them
    (``weights``: each model's target over its capacity alone)."""
    plt = _pyplot()
    models = sorted(weights)
    palette = plt.get_cmap("tab10")
    colors = {m: palette(i % 10) for i, m in enumerate(models)}
    panels = [packed] + ([single] if single is not None else [])
    width = max(6.0, 0.45 * sum(int(p["gpus"]) for p in panels) + 2)
    fig, axes = plt.subplots(1, len(panels), figsize=(width, 4), sharey=True, squeeze=False)
    for ax, packing in zip(axes[0], panels, strict=True):
        _panel(ax, packing, weights, colors, headroom)
    word = replicas_word([g["gpu_type"] for p in panels for g in p["groups"]])
    axes[0][0].set_ylabel("share of one pod's measured capacity used")
    fig.suptitle(f"Models as blocks on {word} (dashed: headroom {headroom:.0%} kept)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def from_json(folder: Path) -> None:
    """Draw both pictures of a written plan from its ``fleet-plan.json`` (a GPU host without matplotlib
    leaves them to be drawn where the plan is copied)."""
    import json  # noqa: PLC0415

    data = json.loads((folder / "fleet-plan.json").read_text(encoding="utf-8"))
    cheapest = data["cheapest"]
    single = data["one_model_per_pod"].get(cheapest["groups"][0]["gpu_type"]) if cheapest["groups"] else None
    packing_figure(folder / "packing.png", cheapest, single, data["packing_weights"], data["headroom"])
    cost_figure(folder / "cost.png", data["types"])


def cost_figure(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """``cost.png``: GPUs per type packed and one model per pod, and cost per million inferences where priced."""
    plt = _pyplot()
    names = [str(r["type"]) for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(6.0, 1.6 * len(names) + 3), 3.6))
    xs = range(len(names))
    packed = [float(r.get("packed_gpus") or 0) for r in rows]
    single = [float(r.get("single_gpus") or 0) for r in rows]
    left.bar([x - 0.2 for x in xs], packed, width=0.4, label="packed")
    left.bar([x + 0.2 for x in xs], single, width=0.4, label="one model per pod")
    left.set_xticks(list(xs))
    left.set_xticklabels(names)
    left.set_ylabel(replicas_word(names))
    left.legend(fontsize=8)
    costs = [r.get("packed_per_million") for r in rows]
    priced = [(n, float(c)) for n, c in zip(names, costs, strict=True) if isinstance(c, int | float)]
    if priced:
        right.bar([n for n, _ in priced], [c for _, c in priced], color="tab:green")
        right.set_ylabel("$ per million inferences (packed)")
    else:
        right.text(0.5, 0.5, "no prices given:\ncapacity without cost", ha="center", va="center")
        right.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
