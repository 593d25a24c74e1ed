"""Fixtures for the fleet tests: small python-backend models of different cost, tune reports, fleet files.

Models (X FP32 [4] -> Y = X + 1, dynamic batching up to 8, one CPU instance):
- ``light``  sleeps 1 ms per execution;
- ``heavy``  sleeps 4 ms per execution.
``tune_report`` writes a ``tune.json`` as ``tritonkit tune --report`` does (winner, its config and
levels), so a fleet can be planned from it without a search.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.python_models import SLOW_ADD_ONE, write_python_model

from tritonkit.config import load, to_dict

MODELS = {"light": 0.001, "heavy": 0.004}


def build_repository(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    for name, seconds in MODELS.items():
        write_python_model(repo, name, SLOW_ADD_ONE.replace("SECONDS", str(seconds)))
    return repo


def tune_report(
    folder: Path,
    repo: Path,
    model: str,
    *,
    budget_ms: float,
    throughput: float,
    p99_ms: float,
    device: str | None = None,  # a GPU's name, or "cpu"
    levels: list[dict[str, Any]] | None = None,
    confirmed: float | None = None,
) -> Path:
    """A ``tune.json`` whose winner is the model's own config, at ``throughput`` within ``budget_ms``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = to_dict(load(repo / model))
    levels = levels or [
        {
            "throughput": throughput / 2,
            "p99_ms": p99_ms / 2,
            "queue_us": 100.0,
            "stable": True,
            "failures": 0,
        },
        {"throughput": throughput, "p99_ms": p99_ms, "queue_us": 900.0, "stable": True, "failures": 0},
    ]
    winner = {
        "key": "as built", "point": {"instances": 1}, "config": config, "throughput": throughput,
        "p99_ms": p99_ms, "concurrency": 4, "feasible": True, "levels": levels,
        **({"confirmed_throughput": confirmed} if confirmed else {}),
    }  # fmt: skip
    data: dict[str, Any] = {
        "model": model, "latency_budget_ms": budget_ms, "search": "quick", "measurements": len(levels),
        "winner": winner, "baseline": winner, "trials": [winner], "finals": [],
    }  # fmt: skip
    if device is not None:  # as `tritonkit tune` records it (measure.provenance)
        gpu = device != "cpu"
        data["provenance"] = {
            "tritonkit_version": "0.1.0", "date": "2026-11-25T00:00:00+00:00", "host": "h", "triton_version": "2.51.0",
            "server": "127.0.0.1:8000", "device": {"gpus": [device] if gpu else [], "cpu": "AMD EPYC", "cores": 16},
            "models": [{"name": model, "version": "1", "engine": "torch" if gpu else "onnxruntime",
                        "precision": "fp16" if gpu else "fp32", "instance_kind": "KIND_GPU" if gpu else "KIND_CPU",
                        "instances": 1}],
        }  # fmt: skip
    (folder / "tune.json").write_text(json.dumps(data))
    return folder


def write_fleet(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("fleet"))


@pytest.fixture
def tuned(tmp_path: Path, repo: Path) -> dict[str, Path]:
    """Tune reports of both models on the CPU (light ~400 req/s, heavy ~150 req/s within 50 ms)."""
    return {
        "light": tune_report(tmp_path / "tune-light", repo, "light", budget_ms=50, throughput=400, p99_ms=20),
        "heavy": tune_report(tmp_path / "tune-heavy", repo, "heavy", budget_ms=50, throughput=150, p99_ms=30),
    }
