"""The flagship models and :func:`build_all`, which ``make demo`` calls.

- ``minilm``: the real all-MiniLM-L6-v2 (``model_repository/minilm.yaml``);
- ``resnet50``: the ResNet-50 architecture with seeded synthetic weights (``model_repository/resnet50.yaml``).
"""

from __future__ import annotations

from pathlib import Path

from tritonkit.build.pipeline import BuildResult, Log, build_from_spec, with_overrides
from tritonkit.build.spec import BuildSpec, load_spec

__all__ = ["FLAGSHIP_SPECS", "SPEC_DIR", "build_all", "flagship_spec"]

#: The committed specs (files at the repository root; Triton only treats directories as models).
SPEC_DIR = Path(__file__).resolve().parents[4] / "model_repository"
FLAGSHIP_SPECS = ("minilm", "resnet50")


def flagship_spec(name: str, *, reduced: bool = False, spec_dir: Path | None = None) -> BuildSpec:
    """The committed spec of flagship ``name``; ``reduced`` shrinks data and images for tests."""
    spec = load_spec((spec_dir or SPEC_DIR) / f"{name}.yaml")
    if reduced:
        spec = with_overrides(
            spec,
            calibration={"samples": 64, "batch_size": 16},
            evaluation={"samples": 64},
            preprocessing={"image_size": 64},
        )
    return spec


def build_all(
    repo: str | Path = "model_repository",
    *,
    reduced: bool = False,
    version: int | None = 1,
    force: bool = True,
    names: tuple[str, ...] = FLAGSHIP_SPECS,
    spec_dir: Path | None = None,
    log: Log = print,
) -> list[BuildResult]:
    """Build every flagship model (all precisions, portable target) into ``repo``.

    By default each model is (re)built as version 1, replacing an earlier build atomically, so
    ``make demo`` run twice serves the same thing. ``version=None`` adds a new version instead.
    """
    results: list[BuildResult] = []
    for name in names:
        results.extend(
            build_from_spec(
                flagship_spec(name, reduced=reduced, spec_dir=spec_dir),
                repo,
                version=version,
                force=force,
                log=log,
            )
        )
    return results
