"""The precision-compare section of ``make bench``: it compares exactly the flagships ``make demo`` builds, and
refuses in one line, naming what is missing, when they are not built."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit.demo import SPECS
from tritonkit.errors import TritonKitError
from tritonkit_bench import compare as bench_compare


def test_families_are_the_demo_flagships_fp32_first() -> None:
    assert sorted(m for models, _, _ in bench_compare.FAMILIES.values() for m in models) == sorted(
        m for models in SPECS.values() for m in models
    )
    assert all(models[0].endswith("_fp32") for models, _, _ in bench_compare.FAMILIES.values())


def test_unbuilt_flagships_are_refused_with_their_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "model_repository"
    (repo / "minilm_fp32").mkdir(parents=True)
    (repo / "minilm_fp32" / "config.pbtxt").write_text('name: "minilm_fp32"\n')  # a config, no version
    monkeypatch.setattr(bench_compare, "REPO", repo)
    with pytest.raises(
        TritonKitError, match=r"minilm_fp32, minilm_fp16, .* not built; expected the flagships"
    ):
        bench_compare.run(quick=True)
