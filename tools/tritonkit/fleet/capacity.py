"""What one pod of one GPU type sustains for one model alone: the tuned config and its capacity, from a tune.

Owns :class:`Tuned` and :func:`read_tuned`: a ``tune.json`` (``tritonkit tune --report``) read back for
a model's budget. When the tune's budget is the fleet's or tighter, the config the tune chose (its winner,
or the model's own config when the winner did not beat it beyond the spread: ``chosen.own_config``) is
the config and its finals' median (``confirmed_throughput``) the capacity, as ``tritonkit plan`` takes it;
when the tune ran at a looser budget, the config is the trial whose highest measured level within the
fleet's budget (stable, no failures, generator not limiting) carries the most, and that level is the
capacity. No such level is the fleet-file error "a budget no config meets". The device the tune's
``provenance`` says the config was measured on (:func:`tritonkit.tune.plan.measured_device`) must be of
the GPU type the report is filed under (``cpu``: a CPU instance); a report that recorded none is accepted
and said to be unchecked.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonkit.config import ModelConfig, from_dict
from tritonkit.errors import ConfigError, TritonKitError
from tritonkit.fleet.devices import CPU, device_matches
from tritonkit.tune.plan import measured_device

__all__ = ["TUNE_FILE", "Tuned", "instance_count", "read_tuned", "recorded_device"]

TUNE_FILE = "tune.json"


@dataclasses.dataclass(frozen=True)
class Tuned:
    """A model's tuned config on one GPU type and what one pod sustains with it alone."""

    model: str
    gpu_type: str
    source: str
    tune_budget_ms: float
    config: ModelConfig
    point: dict[str, Any]
    instances: int
    capacity_rps: float
    p99_ms: float
    concurrency: int
    #: "confirmed" (the finals' median), "searched" (one measurement) or "level" (a level within a looser tune)
    basis: str
    device: str | None
    #: (throughput, Triton's queue µs per request) of the chosen config's measured levels, by throughput
    curve: tuple[tuple[float, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Every field but the config and the curve, the capacity and p99 rounded."""
        fields = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("config", "curve")
        }
        return fields | {"capacity_rps": round(self.capacity_rps, 3), "p99_ms": round(self.p99_ms, 3)}


def recorded_device(data: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(cpu | gpu, the device's name) the tune says ``row``'s config was measured on; None: not recorded."""
    kind, name = measured_device(data, row)
    return None if kind == "unknown" else (kind, name)


def _check_device(
    where: str, path: Path, gpu_type: str, data: Mapping[str, Any], row: Mapping[str, Any]
) -> str | None:
    try:
        found = recorded_device(data, row)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise TritonKitError(
            f"{where}: the provenance of {path} does not parse ({exc}); expected a tune.json written by `tritonkit tune`"
        ) from None
    if found is None:
        return None
    kind, name = found
    ok = kind == "cpu" if gpu_type == CPU else kind == "gpu" and device_matches(gpu_type, name)
    if not ok:
        raise TritonKitError(f"{where}: {path} was measured on {name}; expected a tune run on {gpu_type}")
    return name


def _load(path: Path, where: str) -> dict[str, Any]:
    source = path / TUNE_FILE if path.is_dir() else path
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TritonKitError(
            f"{where}: {source} not found; expected the --report folder of a `tritonkit tune` run "
            "(or pass --tune to tune it now)"
        ) from None
    except ValueError as exc:
        raise TritonKitError(f"{where}: {source} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TritonKitError(f"{where}: {source} is not a tune report (expected a JSON object)")
    return data


def _curve(trial: Mapping[str, Any]) -> tuple[tuple[float, float], ...]:
    points = [
        (float(lv["throughput"]), float(lv.get("queue_us") or 0.0))
        for lv in trial.get("levels") or []
        if float(lv.get("throughput") or 0) > 0
    ]
    return tuple(sorted(points))


def _fits(level: Mapping[str, Any], budget_ms: float) -> bool:
    return (
        bool(level.get("stable", True))
        and not level.get("generator_limited")
        and not level.get("failures")
        and float(level.get("throughput") or 0) > 0
        and float(level.get("p99_ms") or float("inf")) <= budget_ms
    )


def instance_count(cfg: ModelConfig) -> int:
    """Model instances one pod (one GPU) runs with ``cfg``: the counts of its instance groups (1 without any)."""
    return sum(max(1, g.count) for g in cfg.instance_groups) or 1


def _config(trial: Mapping[str, Any], where: str) -> ModelConfig:
    try:
        return from_dict(dict(trial["config"]))
    except (KeyError, TypeError, ConfigError) as exc:
        raise TritonKitError(
            f"{where}: the tuned config does not parse ({exc}); expected a tune.json trial"
        ) from None


def read_tuned(model: str, gpu_type: str, path: Path, budget_ms: float) -> Tuned:
    """The config and capacity of ``model`` on ``gpu_type`` within ``budget_ms`` from the tune at ``path``."""
    where = f"model `{model}` on {gpu_type}"
    data = _load(path, where)
    if data.get("model") not in (None, model):
        raise TritonKitError(f"{where}: {path} is a tune of `{data.get('model')}`; expected one of `{model}`")
    tune_budget = float(data.get("latency_budget_ms") or 0.0)
    winner = data.get("winner")
    if (
        winner
        and (data.get("chosen") or {}).get("own_config")
        and (data.get("baseline") or {}).get("feasible")
    ):
        winner = data["baseline"]  # the tune kept the model's own config: its winner did not beat it
    source = str(path)
    if winner and tune_budget and tune_budget <= budget_ms and winner.get("throughput"):
        confirmed = winner.get("confirmed_throughput")
        device = _check_device(where, path, gpu_type, data, winner)
        return Tuned(
            model, gpu_type, source, tune_budget, (cfg := _config(winner, where)), dict(winner.get("point") or {}),
            instance_count(cfg),
            float(confirmed or winner["throughput"]), float(winner.get("p99_ms") or 0.0),
            int(winner.get("concurrency") or 0), "confirmed" if confirmed else "searched", device, _curve(winner),
        )  # fmt: skip
    best: tuple[float, Mapping[str, Any], Mapping[str, Any]] | None = None
    for trial in data.get("trials") or []:
        for level in trial.get("levels") or []:
            if _fits(level, budget_ms) and (best is None or float(level["throughput"]) > best[0]):
                best = (float(level["throughput"]), trial, level)
    if best is None:
        lowest = min(
            (
                float(level.get("p99_ms") or 0)
                for t in data.get("trials") or []
                for level in t.get("levels") or []
            ),
            default=None,
        )
        seen = f"the lowest p99 measured is {lowest:.2f} ms" if lowest else "it measured no level"
        raise TritonKitError(
            f"{where}: no config of {path} meets p99 <= {budget_ms:g} ms ({seen}); expected a budget some "
            "config meets, or a tune at this budget"
        )
    rps, trial, level = best
    device = _check_device(where, path, gpu_type, data, trial)
    cfg = _config(trial, where)
    return Tuned(
        model, gpu_type, source, tune_budget, cfg, dict(trial.get("point") or {}), instance_count(cfg),
        rps, float(level.get("p99_ms") or 0.0), int(level.get("level") or 0), "level", device, _curve(trial),
    )  # fmt: skip
