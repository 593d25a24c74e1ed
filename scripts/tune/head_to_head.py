"""Re-measure two tune winners side by side: brute force's and quick search's, in alternating rounds.

    python scripts/tune/head_to_head.py OUT MODEL_DIR [ROUNDS]

OUT holds brute/tune.json and quick/tune.json (scripts/tune/quick_vs_brute.sh). Each winner's config is
written into a copy of MODEL_DIR under its own name (``brute_winner``, ``quick_winner``) and profiled with
``tritonkit profile`` over the same concurrency levels, round after round in alternating order; a
config's figure in a round is its highest throughput at a level whose p99 fits the budget. A search's
best is the maximum of many noisy measurements (the more configs it measures, the higher that maximum
lies by chance alone), so the two winners are compared on fresh measurements taken the same way.
Writes OUT/head_to_head.json and appends to OUT/summary.md.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from tritonkit.cli import main as cli
from tritonkit.config import from_dict, save

LEVELS = "4,8,12,16,24,32"


def main(out: Path, model_dir: Path, rounds: int) -> None:
    runs = {s: json.loads((out / s / "tune.json").read_text()) for s in ("brute", "quick")}
    budget = float(runs["brute"]["latency_budget_ms"])
    figures: dict[str, list[float]] = {"brute": [], "quick": []}
    with tempfile.TemporaryDirectory(prefix="tritonkit-h2h-") as tmp:
        repo = Path(tmp)
        for search, run in runs.items():
            name = f"{search}_winner"
            shutil.copytree(model_dir, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
            cfg = from_dict(run["winner"]["config"])  # the config tune applied for that trial
            cfg.name = name
            save(cfg, repo / name / "config.pbtxt")
        for r in range(rounds):
            for search in ("brute", "quick") if r % 2 == 0 else ("quick", "brute"):
                result = repo / f"{search}-{r}.json"
                cli(["profile", "--model", f"{search}_winner", "--repo", str(repo), "--concurrency", LEVELS,
                     "--window-s", "1", "--json", str(result)])  # fmt: skip
                levels = json.loads(result.read_text())["levels"]
                fits = [
                    lv["throughput"]
                    for lv in levels
                    if lv["p99_ms"] <= budget and not lv["failures"] and not lv["generator_limited"]
                ]
                figures[search].append(max(fits, default=0.0))
                print(f"round {r + 1} {search}: {figures[search][-1]:.1f} req/s", flush=True)
    ratios = [q / b for q, b in zip(figures["quick"], figures["brute"], strict=True) if b]
    data = {"levels": LEVELS, "budget_ms": budget, "figures": figures, "ratio_per_round": ratios}
    (out / "head_to_head.json").write_text(json.dumps(data, indent=2) + "\n")
    text = (
        f"\nHead to head, {rounds} alternating rounds (concurrency {LEVELS}, best level within p99 {budget:g} ms): "
        f"brute force's winner {statistics.median(figures['brute']):.1f} req/s, quick's "
        f"{statistics.median(figures['quick']):.1f} (medians); quick/brute per round "
        f"{', '.join(f'{r:.3f}' for r in ratios)}, median {statistics.median(ratios):.3f}.\n"
    )
    with (out / "summary.md").open("a", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 4)
