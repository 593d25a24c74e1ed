"""Benchmark section of ``docs/benchmarks.md``: FP32 against FP16 against INT8 of the flagships, served.

The flagships as ``make demo`` builds them into ``model_repository`` (``make bench`` builds them first;
this module refuses to run without them): MiniLM (server-side tokenization, ONNX Runtime in the python
backend) and ResNet-50, each in its three precisions. Each family is served on one embedded Triton and
``tritonkit compare``'s core (:mod:`tritonkit.tune.compare`) measures the three versions at one
closed-loop level in interleaved rounds whose order rotates, so a busy neighbour on the shared machine
hurts each precision alike; the table gives each one's per-round throughput and p99 ratio to FP32 as
the median and interquartile range. ``quick``: 2 short rounds (a smoke run, not for
publishing); full: 5 rounds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritonkit.errors import TritonKitError
from tritonkit.machine import description
from tritonkit.measure.levels import LevelResult, MeasureOptions, Measurer
from tritonkit.measure.loadgen import Level, Target, WindowSpec
from tritonkit.repository.store import ModelRepository
from tritonkit.serve.endpoint import endpoint
from tritonkit.tune.compare import compare, markdown, summarize

__all__ = ["FAMILIES", "compare_models", "run"]

REPO = Path("model_repository")

#: family -> (versions, reference first; concurrency; window seconds). ResNet-50 on CPU serves a few
#: images a second, so its windows are longer to hold enough requests for a p99.
FAMILIES: dict[str, tuple[tuple[str, ...], int, float]] = {
    "MiniLM": (("minilm_fp32", "minilm_fp16", "minilm_int8"), 4, 2.0),
    "ResNet-50": (("resnet50_fp32", "resnet50_fp16", "resnet50_int8"), 2, 4.0),
}


def _missing(repo: Path) -> list[str]:
    store = ModelRepository(repo)
    wanted = [m for models, _, _ in FAMILIES.values() for m in models]
    return [m for m in wanted if not (repo / m / "config.pbtxt").exists() or not store.versions(m)]


def compare_models(
    repo: Path, models: Sequence[str], concurrency: int, window_s: float, rounds: int
) -> dict[str, Any]:
    """``models`` of ``repo`` on one embedded Triton, compared in interleaved rounds (:func:`summarize`)."""
    options = MeasureOptions(window=WindowSpec(window_s))
    with endpoint(repo=repo, load=models, exit_timeout=1) as server:

        def measure(model: str, level: Level) -> LevelResult:
            target = Target(server.http, model, "http", headers=server.headers)
            with Measurer(target, options) as measurer:
                return measurer.measure(level)

        return summarize(compare(list(models), measure, Level("concurrency", concurrency), rounds))


def run(quick: bool = False) -> str:
    """Compare each family's precisions; return the Markdown section (the flagships must be built)."""
    missing = _missing(REPO)
    if missing:
        raise TritonKitError(
            f"{REPO}: {', '.join(missing)} not built; expected the flagships built first "
            "(`make bench` does it; by hand: python -m tritonkit.demo --build-only)"
        )
    rounds = 2 if quick else 5
    parts = [
        "## Precisions of the flagships compared (`tritonkit compare`)",
        "",
        f"Machine: {description()}. Models: `make demo`'s flagships from `model_repository` (CPU instances as "
        "built: ONNX Runtime in the python backend, one intra-op thread, dynamic batching), one embedded "
        f"tritonserver per family, HTTP. {rounds} interleaved rounds, the order rotating each round; each "
        "measurement is a closed-loop level measured in windows until 3 agree within 10 % (or 10 windows: then "
        "counted as unstable). Ratios are to FP32, per round: median [Q1, Q3]. On a CPU, ONNX Runtime runs the FP16 "
        "nodes its CPU kernels lack in FP32 behind inserted casts, and INT8 through its integer kernels (MiniLM's "
        "INT8 version leaves the feed-forward MatMuls unquantized: about a third of its weight FLOPs are INT8); on a T4 the "
        "same three versions ship as TensorRT engines, whose figures are not measured here.",
        "",
    ]
    for family, (models, concurrency, window_s) in FAMILIES.items():
        started = time.monotonic()
        summary = compare_models(REPO, models, concurrency, window_s, rounds)
        parts += [
            f"### {family}, concurrency {concurrency}, windows of {window_s:g} s "
            f"({(time.monotonic() - started) / 60:.1f} minutes)",
            "",
            markdown(summary).rstrip(),
            "",
        ]
    if quick:
        parts.append("(quick smoke run: do not publish)")
    return "\n".join(parts)
