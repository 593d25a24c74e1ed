"""The GPU benchmark's tune section (:mod:`tritonkit_bench.gpu`): ``tritonkit tune`` on the GPU.

Owns the version tuned (MiniLM FP16, torch runner, built like the benchmark's ``minilm_fp16`` except
that its batch buckets are left to the runner: powers of two up to whatever max batch the config being
tried sets, since a fixed bucket list above a smaller max batch is refused at load), the small grid and
short windows that keep the search to about two minutes, and the figures kept for the page (read back
from the search's own ``tune.json``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonkit.convert.execution import ServingSpec, plan_execution
from tritonkit.convert.torch_program import write_torch_version
from tritonkit.errors import TritonKitError
from tritonkit.tune.loadgen import WindowSpec
from tritonkit.tune.measure import MeasureOptions
from tritonkit.tune.stats import StabilityRule
from tritonkit.tune.tuner import TuneOptions, tune
from tritonkit_bench.gpu_models import MINILM_MAX_BATCH, minilm, text_examples

__all__ = ["MODEL", "TuneSettings", "parse_grid", "run", "write_tune_version"]

MODEL = "minilm_fp16"


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """The search: grid, budget, transport and measurement windows."""

    # HTTP: with gRPC, tune's generator printed grpc.aio "Event loop is closed" and, on a loaded
    # host, a trial sometimes ended with no level measured; being fixed in tune itself.
    protocol: str = "http"
    budget_ms: float = 20.0
    window_s: float = 0.25
    instances: tuple[int, ...] = (1, 2)
    max_batch_sizes: tuple[int, ...] = (16, 256)
    delays_us: tuple[int | str, ...] = ("off", 500)
    max_concurrency: int = 64
    workers: int = 4
    search: str = "quick"


def parse_grid(text: str, what: str, allow_off: bool = False) -> tuple[Any, ...]:
    """``"1,2"`` -> (1, 2); ``off`` kept where ``allow_off``; a one-line error otherwise."""
    values: list[int | str] = []
    for part in (p.strip() for p in text.split(",")):
        if allow_off and part == "off":
            values.append("off")
        elif part.isdigit():
            values.append(int(part))
        else:
            raise TritonKitError(
                f"{what} {text!r}: expected comma-separated whole numbers" + (" or off" if allow_off else "")
            )
    return tuple(values)


def write_tune_version(repo: Path, gpus: list[int] | None = None) -> Path:
    """The tuned version (2 instances, max batch 256, 500 µs delay, as the benchmark's ``minilm_fp16``)."""
    plan = plan_execution(
        ServingSpec(engine="torch", precision="fp16"), max_batch_size=MINILM_MAX_BATCH, gpus=gpus
    )
    plan = dataclasses.replace(plan, batch_buckets=())  # the runner's default: follows the max batch
    return write_torch_version(
        repo,
        MODEL,
        minilm(),
        text_examples(2),
        ["EMBEDDING"],
        plan,
        max_batch_size=MINILM_MAX_BATCH,
        max_queue_delay_us=500,
    )


def run(work: Path, settings: TuneSettings, log: Callable[[str], None]) -> dict[str, Any]:
    """Build the version, tune it, and return the section's figures (``error`` set when it failed)."""
    about = (
        "FP16 torch program + `torch_runner`, CUDA graphs for buckets 1, 2, 4, ... up to the config's max "
        "batch; built with 2 KIND_GPU instances, max batch 256, 500 µs delay"
    )
    figures: dict[str, Any] = {
        "settings": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(settings).items()},
            "model": MODEL,
            "about": about,
        }
    }
    repo, report = work / "tune-repo", work / "tune-report"
    started = time.monotonic()
    try:
        write_tune_version(repo)
        log(f"tune: built {MODEL}; searching")
        tune(
            TuneOptions(
                MODEL,
                settings.budget_ms,
                report,
                repo=repo,
                protocol=settings.protocol,
                search=settings.search,
                max_concurrency=settings.max_concurrency,
                refine=1,
                max_batch_sizes=list(settings.max_batch_sizes),
                delays_us=list(settings.delays_us),
                instances=list(settings.instances),
                preferred=False,
                queue=False,
                measure=MeasureOptions(
                    window=WindowSpec(settings.window_s),
                    stability=StabilityRule(3, 0.15),
                    max_windows=3,  # the stability rule's count: each level costs 3 windows
                    workers=settings.workers,
                ),
                write="none",
                plots=False,
                require_stable=False,  # short windows on a busy host: an unstable best is still reported
                stream=sys.stdout,
            )
        )
        summary = json.loads((report / "tune.json").read_text(encoding="utf-8"))
    except Exception as exc:  # the rest of the page is still written; the section says why it is empty
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        log(f"tune failed: {type(exc).__name__}: {message}")
        return {**figures, "error": f"{type(exc).__name__}: {message}", "seconds": time.monotonic() - started}
    trials = summary.get("trials", [])
    return {
        **figures,
        "seconds": time.monotonic() - started,
        "evaluations": len(trials),
        "measurements": summary.get("measurements", 0),
        "winner": summary.get("winner"),
        "baseline": summary.get("baseline"),
        "trials": trials,
        "report_dir": str(report),
    }
