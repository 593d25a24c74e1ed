"""The flagship models and their committed specs.

- ``minilm``: the real all-MiniLM-L6-v2 (``model_repository/minilm.yaml``);
- ``resnet50``: the ResNet-50 architecture with seeded synthetic weights (``model_repository/resnet50.yaml``).

:func:`tritonkit.convert.pipeline.build_all` builds them (``make demo``); this package only exports the
graphs and reads the specs, so the pipeline may import it without a cycle.
"""

from __future__ import annotations

from pathlib import Path

from tritonkit.convert.spec.buildspec import BuildSpec, load_spec, with_overrides

__all__ = ["FLAGSHIP_SPECS", "SPEC_DIR", "flagship_spec"]

#: The committed specs (files at the repository root; Triton only treats directories as models).
SPEC_DIR = Path(__file__).resolve().parents[5] / "model_repository"
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
