"""A tiny part of the GPU benchmark (a linear layer) that the embedded server runs on the CPU, for the
load generators' tests: its payload and its version."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit.config import load, save
from tritonkit_bench.gpu_models import PARTS, TINY, Part, build_part, tiny_inputs, tiny_module


def build_tiny(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``repo`` with ``tiny_fp16``: the part's KIND_GPU version placed on the CPU (no GPU here)."""
    part = Part("tiny", "a linear layer", TINY, 16, (1, 4), (1, 4), 500.0, tiny_module, tiny_inputs)
    monkeypatch.setitem(PARTS, "tiny", part)
    build_part(repo, "tiny", lambda _: None, gpus=[0], runner="python")
    path = repo / "tiny_fp16" / "config.pbtxt"
    config = load(path)
    config.instance_groups[0].kind, config.instance_groups[0].gpus = "KIND_CPU", []
    config.parameters["device"] = "cpu"
    save(config, path)
    return repo
