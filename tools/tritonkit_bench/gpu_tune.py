"""The GPU benchmark's tune step (:mod:`tritonkit_bench.gpu`): ``tritonkit tune`` on a part's built
version as a user runs it, then ``tritonkit profile`` of the config it left.

Both run as the command (``python -m tritonkit``) in a child process, on the version exactly as the
build wrote it, with tune's default grid for a GPU version (``tritonkit.tune.space``) and the quick
search; the step keeps the command lines, the wall time, where the trials' seconds went (loading the
config vs measuring it, from ``trials.jsonl``), the winner against the built config, and the profile's
figure for the config tune left (its winner, or the built config it kept) against the tune's own (the
reproduction check).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonkit.errors import TritonKitError
from tritonkit_bench.gpu_models import PARTS

__all__ = ["TuneSettings", "parse_grid", "run"]


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """Measurement flags of the tune and profile commands (the grid is tune's default)."""

    window_s: float = 0.3
    max_windows: int = 4
    stability_pct: float = 15.0
    #: generator processes: 8 drew ~30k requests/s through gRPC on the 16-core H100 host and were marked
    #: at their limit in MiniLM's finals; 12, as many as the served levels' client processes
    workers: int = 12
    max_concurrency: int = 512
    finalists: int = 2
    #: three rounds, so the finals median is one round's figure, not the mean of two
    final_rounds: int = 3
    #: the profile's windows: the reference tune's figure is checked against. Through gRPC near
    #: tritonserver 2.51's limit (MiniLM at ~40k requests/s), twelve figures of one config, each over
    #: three 0.3 s windows, scattered by 5.4 % (coefficient of variation; H100, 2026-11-27,
    #: `scripts/gpu/tune_age.py`): one such figure against another misses 10 % about one time in five
    profile_window_s: float = 1.0
    #: the tune command is stopped after this many seconds (its finished trials stay in trials.jsonl)
    timeout_s: float = 320.0
    #: more tune flags (tests narrow the grid with them; the benchmark passes none)
    extra: tuple[str, ...] = ()

    def flags(self, window_s: float | None = None, max_windows: int | None = None) -> list[str]:
        """The measurement flags (tune's windows, or those given: the profile's)."""
        window, windows = window_s or self.window_s, max_windows or self.max_windows
        return [
            "--protocol", "grpc", "--workers", str(self.workers), "--window-s", str(window),
            "--max-windows", str(windows), "--stability-pct", str(self.stability_pct),
        ]  # fmt: skip


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


def _command(args: list[str], log: Callable[[str], None], out: Path, timeout: float) -> tuple[int, float]:
    """Run ``python -m tritonkit ARGS`` with its output in ``out``; (exit code, seconds). Stopped
    (SIGINT, as a user would, then killed) after ``timeout`` seconds: exit code -2."""
    line = [sys.executable, "-m", "tritonkit", *args]
    log("$ " + " ".join(line[1:]))
    started = time.monotonic()
    with out.open("w", encoding="utf-8") as handle:
        child = subprocess.Popen(line, stdout=handle, stderr=subprocess.STDOUT)
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            code = -2
    return code, time.monotonic() - started


def _trials(report: Path) -> list[dict[str, Any]]:
    path = report / "trials.jsonl"
    rows = (
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    )
    return [r for r in rows if r.get("kind") in ("trial", "final")]


def run(
    repo: Path, part: str, work: Path, settings: TuneSettings, log: Callable[[str], None]
) -> dict[str, Any]:
    """Tune ``part``'s version in ``repo`` (its config.pbtxt becomes the winner), then profile it."""
    spec = PARTS[part]
    work.mkdir(parents=True, exist_ok=True)
    report = work / f"tune-{part}"
    tune_args = [
        "tune", "--model", spec.model, "--repo", str(repo), "--latency-budget-ms", f"{spec.budget_ms:g}",
        "--report", str(report), "--max-concurrency", str(settings.max_concurrency), "--accept-unstable",
        "--finalists", str(settings.finalists), "--final-rounds", str(settings.final_rounds), "--no-plots",
        *settings.flags(), *settings.extra,
    ]  # fmt: skip
    figures: dict[str, Any] = {"command": "tritonkit " + " ".join(tune_args), "budget_ms": spec.budget_ms}
    rc, seconds = _command(tune_args, log, work / f"tune-{part}.log", settings.timeout_s)
    figures.update(rc=rc, seconds=round(seconds, 1), log_tail=_tail(work / f"tune-{part}.log"))
    summary_path = report / "tune.json"
    if not summary_path.exists():
        rows = _trials(report)
        return {**figures, "error": f"tune wrote no tune.json (exit {rc}) after {len(rows)} config loads",
                "trials": [_trial(t) for t in rows if t.get("kind") == "trial"], "runs": len(rows),
                "load_s": round(sum(r.get("load_s", 0.0) for r in rows), 1),
                "measure_s": round(sum(r.get("measure_s", 0.0) for r in rows), 1)}  # fmt: skip
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    rows = _trials(report)
    figures.update(
        trials=[_trial(t) for t in summary.get("trials", [])],
        finals=summary.get("finals", []),
        winner=_trial(summary["winner"]) if summary.get("winner") else None,
        baseline=_trial(summary["baseline"]) if summary.get("baseline") else None,
        measurements=summary.get("measurements"),
        load_s=round(sum(r.get("load_s", 0.0) for r in rows), 1),
        measure_s=round(sum(r.get("measure_s", 0.0) for r in rows), 1),
        refused=[r["key"] for r in rows if r.get("error")],
        runs=len(rows),
        written=bool((summary.get("verdict") or {}).get("write", True)),
    )
    # profile measures the config tune left: its winner when written, else the built config
    chosen = summary.get("winner") if figures["written"] else summary.get("baseline")
    if chosen and chosen.get("concurrency"):
        figures["profile"] = _profile(repo, part, work, settings, chosen, log)
    return figures


def _trial(t: dict[str, Any]) -> dict[str, Any]:
    keep = ("key", "point", "throughput", "concurrency", "p50_ms", "p99_ms", "padded_share", "load_s", "measure_s",
            "confirmed_throughput", "error", "feasible")  # fmt: skip
    out = {k: t[k] for k in keep if k in t}
    best = t.get("best") or {}
    out["average_batch"] = best.get("average_batch")
    return out


def _profile(
    repo: Path,
    part: str,
    work: Path,
    settings: TuneSettings,
    chosen: dict[str, Any],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """``tritonkit profile`` of the config tune left (``chosen``: the trial it stands for) at that trial's
    concurrency, against tune's figure for it (its finals median where measured)."""
    spec = PARTS[part]
    out = work / f"profile-{part}.json"
    args = [
        "profile", "--model", spec.model, "--repo", str(repo), "--concurrency", str(chosen["concurrency"]),
        "--json", str(out), *settings.flags(settings.profile_window_s, 6),
    ]  # fmt: skip
    rc, seconds = _command(args, log, work / f"profile-{part}.log", 120.0)
    result: dict[str, Any] = {
        "command": "tritonkit " + " ".join(args),
        "rc": rc,
        "seconds": round(seconds, 1),
    }
    if not out.exists():
        return {
            **result,
            "error": f"profile wrote no JSON (exit {rc})",
            "log_tail": _tail(work / f"profile-{part}.log"),
        }
    data = json.loads(out.read_text(encoding="utf-8"))
    level = (data.get("levels") or [{}])[-1]
    figure = float(chosen.get("confirmed_throughput") or chosen["throughput"])
    throughput = float(level.get("throughput", 0.0))
    result.update(
        concurrency=chosen["concurrency"],
        throughput=throughput,
        p99_ms=level.get("p99_ms"),
        padded_share=(data.get("padded_share") or {}).get(f"c{chosen['concurrency']}"),
        tune_figure=figure,
        ratio=throughput / figure if figure else None,
    )
    return result


def _tail(path: Path, lines: int = 40) -> str:
    return (
        "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        if path.exists()
        else ""
    )
