"""What ``tritonkit tune`` may change in a model's config, and how a point of that grid becomes a config.

Owns the axes (:func:`axes_for`): max batch size (powers of two up to the model's own, never above a
TensorRT engine's profile range, read from the config's optimization profiles and the versions'
``build.json``), dynamic-batching delay (``off`` = no dynamic batcher) and preferred sizes, instance
count and kind (``KIND_GPU`` only where a GPU is present and the model can use it), and the queue policy
(``unbounded``, or ``bounded``: at most two full batches per instance waiting); and :func:`apply_point`,
which returns a new :class:`~tritonkit.config.ModelConfig` (the base is never changed) that
:func:`~tritonkit.config.problems` accepts.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, QueuePolicy, problems
from tritonkit.errors import TritonKitError
from tritonkit.tune.search import Axis

__all__ = ["DEFAULT_DELAYS_US", "apply_point", "axes_for", "base_point", "profile_batch_range"]

DEFAULT_DELAYS_US: tuple[int | str, ...] = ("off", 0, 500, 2000)
DEFAULT_INSTANCES: tuple[int, ...] = (1, 2, 3)


def _is_tensorrt(cfg: ModelConfig) -> bool:
    return cfg.platform == "tensorrt_plan" or cfg.backend == "tensorrt"


def profile_batch_range(cfg: ModelConfig, model_dir: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """(min, max) batch a model can take: a TensorRT plan's optimization-profile range (from its
    versions' ``build.json`` when recorded there), else 1..``max_batch_size``."""
    low, high = 1, max(cfg.max_batch_size, 1)
    if not _is_tensorrt(cfg) or model_dir is None:
        return low, high
    for manifest in sorted(Path(model_dir).glob("*/build.json")):
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        profiles = _find_profiles(data)
        batches: list[list[Any]] = [
            p["batch"]
            for p in profiles
            if isinstance(p, dict) and isinstance(p.get("batch"), list) and p["batch"]
        ]
        if batches:
            low = max(low, min(int(b[0]) for b in batches))
            high = min(high, *(int(b[-1]) for b in batches))
    return low, high


def _find_profiles(data: Any) -> list[Any]:
    """The first ``profiles`` list found anywhere in a ``build.json`` (where the engine record keeps it)."""
    if isinstance(data, dict):
        found = data.get("profiles")
        if isinstance(found, list):
            return found
        for value in data.values():
            inner = _find_profiles(value)
            if inner:
                return inner
    return []


def _powers(low: int, high: int) -> tuple[int, ...]:
    values = {v for v in (1 << i for i in range(0, 16)) if low <= v <= high}
    return tuple(sorted(values | {high}))


def axes_for(
    cfg: ModelConfig,
    *,
    model_dir: str | os.PathLike[str] | None = None,
    gpu: bool = False,
    max_batch_sizes: Sequence[int] | None = None,
    delays_us: Sequence[int | str] | None = None,
    instances: Sequence[int] | None = None,
    queue: bool = True,
) -> list[Axis]:
    """The grid for ``cfg``. A model that does not batch (``max_batch_size`` 0) tunes instances only."""
    if cfg.ensemble_steps or cfg.platform == "ensemble":
        raise TritonKitError(
            f"model `{cfg.name}` is an ensemble; expected a model that runs (tune its steps)"
        )
    counts = tuple(instances or DEFAULT_INSTANCES)
    if any(c < 1 for c in counts):
        raise TritonKitError(f"instance counts {list(counts)}: expected whole numbers >= 1")
    axes = [Axis("instances", counts)]
    kinds = ["KIND_CPU"]
    if gpu and (_is_tensorrt(cfg) or cfg.backend in ("onnxruntime", "python", "pytorch")):
        kinds = ["KIND_GPU"] if _is_tensorrt(cfg) else ["KIND_CPU", "KIND_GPU"]
    if _is_tensorrt(cfg):
        kinds = ["KIND_GPU"]
    axes.append(Axis("kind", tuple(kinds)))
    if cfg.max_batch_size <= 0:
        return axes
    low, high = profile_batch_range(cfg, model_dir)
    sizes = tuple(sorted(set(max_batch_sizes))) if max_batch_sizes else _powers(low, high)
    outside = [s for s in sizes if not low <= s <= high]
    if outside:
        raise TritonKitError(
            f"max batch sizes {outside} are outside the model's range {low}..{high}"
            + (" (its TensorRT profiles)" if _is_tensorrt(cfg) else " (its max_batch_size)")
        )
    delays = tuple(delays_us if delays_us is not None else DEFAULT_DELAYS_US)
    for d in delays:
        if d != "off" and (not isinstance(d, int) or d < 0):
            raise TritonKitError(f"batching delay {d!r}: expected `off` or whole microseconds >= 0")
    axes += [
        Axis("max_batch_size", sizes),
        Axis("delay_us", delays),
        Axis("preferred", ("none", "max")),
    ]
    if queue:
        axes.append(Axis("queue", ("unbounded", "bounded")))
    return axes


def base_point(cfg: ModelConfig) -> dict[str, Any]:
    """The model's own config as a point (the quick search starts there)."""
    groups = cfg.instance_groups or [InstanceGroup()]
    point: dict[str, Any] = {
        "instances": sum(g.count for g in groups),
        "kind": groups[0].kind if groups[0].kind in ("KIND_CPU", "KIND_GPU") else "KIND_CPU",
    }
    if cfg.max_batch_size > 0:
        b = cfg.dynamic_batching
        point["max_batch_size"] = cfg.max_batch_size
        point["delay_us"] = "off" if b is None else b.max_queue_delay_microseconds
        point["preferred"] = "max" if b is not None and b.preferred_batch_size else "none"
        policy = b.default_queue_policy if b is not None else None
        point["queue"] = "bounded" if policy is not None and policy.max_queue_size > 0 else "unbounded"
    return point


def apply_point(base: ModelConfig, point: Mapping[str, Any]) -> ModelConfig:
    """A copy of ``base`` with the point's settings; a one-line error when the result is not valid."""
    cfg = copy.deepcopy(base)
    count = int(point.get("instances", 1))
    kind = str(point.get("kind", "KIND_CPU"))
    groups = cfg.instance_groups or [InstanceGroup()]
    cfg.instance_groups = [dataclass_replace_group(groups[0], kind=kind, count=count)]
    if cfg.max_batch_size > 0 and "max_batch_size" in point:
        mbs = int(point["max_batch_size"])
        cfg.max_batch_size = mbs
        delay = point.get("delay_us", "off")
        if delay == "off" or (mbs == 1 and point.get("queue") != "bounded"):
            cfg.dynamic_batching = None
        else:
            keep = base.dynamic_batching or DynamicBatching()
            preferred = [mbs] if point.get("preferred") == "max" and mbs > 1 else []
            policy = None
            if point.get("queue") == "bounded":
                policy = QueuePolicy(max_queue_size=2 * mbs * count)
            cfg.dynamic_batching = DynamicBatching(
                max_queue_delay_microseconds=0 if delay == "off" else int(delay),
                preferred_batch_size=preferred,
                preserve_ordering=keep.preserve_ordering,
                default_queue_policy=policy,
                extra=dict(keep.extra),
            )
        for warmup in cfg.model_warmup:
            warmup.batch_size = min(warmup.batch_size, mbs)
    found = problems(cfg)
    if found:
        raise TritonKitError(f"config for {describe(point)} is not valid: {found[0]}")
    return cfg


def dataclass_replace_group(group: InstanceGroup, *, kind: str, count: int) -> InstanceGroup:
    """The first instance group with another kind and count (GPU-only fields dropped for CPU)."""
    out = copy.deepcopy(group)
    out.kind, out.count = kind, count
    if kind != "KIND_GPU":
        out.gpus, out.profile = [], []
    return out


def describe(point: Mapping[str, Any]) -> str:
    """``instances=2 kind=KIND_CPU max_batch_size=8 delay_us=500 ...`` (stable order)."""
    return " ".join(f"{k}={point[k]}" for k in sorted(point))
