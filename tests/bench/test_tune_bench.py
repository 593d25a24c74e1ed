"""The synthetic parts of the tune benchmark section (pure: no server): quick search against brute force on the
exact surface, and each search's crowned winner on the noisy one."""

from __future__ import annotations

from tritonkit.bench.tune import _noisy, _synthetic


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
