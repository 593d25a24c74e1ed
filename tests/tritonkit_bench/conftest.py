"""Fixtures of the benchmark tests: the tiny part's version, served on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.bench_tiny import build_tiny


@pytest.fixture
def tiny_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository holding the tiny part's version (``tiny_fp16``), the part registered for the test."""
    return build_tiny(tmp_path / "repo", monkeypatch)
