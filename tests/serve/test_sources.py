"""Links tritonkit's own views make (the fleet's per-group repositories) are trusted only where it says so."""

from __future__ import annotations

from pathlib import Path

from tritonkit.serve.sources import foreign_files, trusting


def test_a_view_s_links_are_trusted_only_inside_its_block(tmp_path: Path) -> None:
    source = tmp_path / "models" / "m"
    (source / "1").mkdir(parents=True)
    view = tmp_path / "view"
    view.mkdir()
    (view / "m").symlink_to(source, target_is_directory=True)
    assert foreign_files(view) and "symlink leaving the repository" in foreign_files(view)[0]
    with trusting([source]):
        assert foreign_files(view) == []
    assert foreign_files(view)  # the trust ends with the block
    with trusting([tmp_path / "elsewhere"]):
        assert foreign_files(view)
