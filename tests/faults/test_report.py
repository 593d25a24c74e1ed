"""The reliability report keeps failing cases with their numbers and names the machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit import machine
from tritonkit_bench import faults

pytestmark = pytest.mark.faults


def test_report_keeps_failing_rows_and_names_the_machine(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    rows = [faults.Result("bad-input", f"HTTP: case {i}", True, {"status": 400}) for i in range(40)]
    rows.append(faults.Result("bad-input", "HTTP: broken", False, {"status": 500, "message": "a|b"}))
    results.write_text("".join(r.to_json() + "\n" for r in rows))
    text = faults.write(results, tmp_path / "reliability.md", form="reduced", duration_s=1.0).read_text()
    assert machine.description() in text
    assert "| HTTP: broken | **FAIL** | 500 | a\\|b |" in text
    assert "rejected cleanly with the server still ready: **NOT MET** (40 of 41 kinds" in text
    assert "reduced form" in text
