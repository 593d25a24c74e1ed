"""Re-measure two tune winners side by side: brute force's and quick search's, in alternating rounds.

    python scripts/tune/head_to_head.py OUT MODEL_DIR [ROUNDS]

OUT holds brute/tune.json and quick/tune.json (scripts/tune/quick_vs_brute.sh). Each winner's config is
written into a copy of MODEL_DIR under its own name (``brute_winner``, ``quick_winner``), both served by
one embedded Triton and measured over the same concurrency levels (tune's measurement core), round after
round in alternating order; a config's figure in a round is its highest throughput at a level within the
budget (``LevelResult.within``: p99, no failures, generator not limited). A search's
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

from tritonkit.config import from_dict, save
from tritonkit.measure.levels import MeasureOptions, Measurer, sweep
from tritonkit.measure.loadgen import Level, Target, WindowSpec
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

LEVELS = (4, 8, 12, 16, 24, 32)


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
        loads = [f"--load-model={search}_winner" for search in runs]
        options = MeasureOptions(window=WindowSpec(1.0))
        with EmbeddedServer(
            repo, ServerOptions(model_control_mode="explicit", extra_args=loads, exit_timeout=1)
        ) as server:
            for r in range(rounds):
                for search in ("brute", "quick") if r % 2 == 0 else ("quick", "brute"):
                    target = Target(server.http_url, f"{search}_winner", "http", headers=server.admin_headers)
                    with Measurer(target, options) as measurer:
                        results = list(sweep(measurer, [Level("concurrency", c) for c in LEVELS]))
                    fits = [x.throughput for x in results if x.within(budget, require_stable=False)]
                    figures[search].append(max(fits, default=0.0))
                    print(f"round {r + 1} {search}: {figures[search][-1]:.1f} req/s", flush=True)
    ratios = [q / b for q, b in zip(figures["quick"], figures["brute"], strict=True) if b]
    data = {"levels": LEVELS, "budget_ms": budget, "figures": figures, "ratio_per_round": ratios}
    (out / "head_to_head.json").write_text(json.dumps(data, indent=2) + "\n")
    text = (
        f"\nHead to head, {rounds} alternating rounds (concurrency {','.join(map(str, LEVELS))}, best level within p99 {budget:g} ms): "
        f"brute force's winner {statistics.median(figures['brute']):.1f} req/s, quick's "
        f"{statistics.median(figures['quick']):.1f} (medians); quick/brute per round "
        f"{', '.join(f'{r:.3f}' for r in ratios)}, median {statistics.median(ratios):.3f}.\n"
    )
    with (out / "summary.md").open("a", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 4)
