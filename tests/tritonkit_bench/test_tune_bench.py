"""The synthetic parts of the tune benchmark section (pure: no server): quick search against brute force on the
exact surface, and each search's crowned winner on the noisy one."""

from __future__ import annotations

from pathlib import Path

from tritonkit.config import load, to_dict
from tritonkit_bench.tune import _noisy, _synthetic, _write_model


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_exact_table_holds_the_acceptance_line() -> None:
    rows = [_cells(line) for line in _synthetic()[2:]]
    assert len(rows) == 6
    for row in rows:
        worst = float(row[2].split(",")[0])
        share = int(row[3].split("(")[1].split("%")[0])
        assert worst >= 0.95 and share <= 33, row  # within 5 % of brute force with at most a third


def test_the_noisy_table_gives_true_throughput_of_crowned_winners() -> None:
    rows = [_cells(line) for line in _noisy(seeds=4)[2:]]
    assert [r[0] for r in rows] == ["10 ms", "20 ms", "30 ms"]
    for row in rows:
        for cell in row[1:4]:
            worst, median = (float(x) for x in cell.split(","))
            assert 0.5 < worst <= median <= 1.0, row  # a true share of the true best, never above it
        assert float(row[4]) > 0


def test_a_winner_is_written_as_its_own_model_for_the_head_to_head(tmp_path: Path) -> None:
    _write_model(tmp_path)
    built = load(tmp_path / "batchy" / "config.pbtxt")
    built.instance_groups[0].count = 3
    built.max_batch_size = 8
    _write_model(tmp_path, "quick_winner", {"config": to_dict(built)})
    written = load(tmp_path / "quick_winner" / "config.pbtxt")
    assert written.name == "quick_winner"
    assert (written.max_batch_size, written.instance_groups[0].count) == (8, 3)
    assert (tmp_path / "quick_winner" / "1" / "model.py").read_text().startswith("import time")
