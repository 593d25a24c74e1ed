"""``tritonkit bench --only``: a run of some sections replaces only theirs in the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit.cli import main
from tritonkit.commands.bench import SECTIONS, merge_sections

PAGE = """# Benchmarks

Written by hand.

## Client overhead

client figures

## Tune

tune figures
### a subsection

more tune
"""


def test_a_section_is_replaced_in_place_and_a_new_one_appended() -> None:
    merged = merge_sections(PAGE, ["## Tune\n\nnew tune", "## Users\n\nnew users"])
    assert merged == (
        "# Benchmarks\n\nWritten by hand.\n\n## Client overhead\n\nclient figures\n\n"
        "## Tune\n\nnew tune\n\n## Users\n\nnew users\n"
    )
    assert merge_sections(PAGE, []) == PAGE


def test_users_ab_is_a_section_and_a_bad_base_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ("users-ab", "tritonkit_bench.users_ab") in SECTIONS
    page = tmp_path / "bench.md"
    page.write_text(PAGE)
    assert main(["bench", "--only", "users-ab", "--base", "no-such-rev", "--output", str(page)]) == 1
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(
        "tritonkit bench: error: --base 'no-such-rev': expected a commit of this repository ("
    )
    assert page.read_text() == PAGE
