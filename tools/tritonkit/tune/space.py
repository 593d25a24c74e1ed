"""What ``tritonkit tune`` may change in a model's config, and how a point of that grid becomes a config.

Owns the axes (:func:`axes_for`): max batch size (powers of two up to the model's own, never above a
TensorRT engine's profile range, read from the config's optimization profiles and the versions'
``build.json``), dynamic-batching delay (``off`` = no dynamic batcher) and preferred sizes, instance
count and kind (``KIND_GPU`` only where a GPU is present and the model can use it), and the queue policy
(``unbounded``, or ``bounded``: at most two full batches per instance waiting); and :func:`apply_point`,
which returns a new :class:`~tritonkit.config.ModelConfig` (the base is never changed) that
:func:`~tritonkit.config.problems` accepts.

A version that runs on GPUs (its first instance group ``KIND_GPU``, as every GPU version ``tritonkit
build`` writes) keeps its kind and its GPUs (the ``gpus`` axis holds the one placement, so trials are
labelled with it), ``instances`` counts instances per GPU (Triton's meaning of a group's ``count``), and
its default grid is the GPU one: 2-4 instances per GPU, max batch from a quarter of the model's to its
own, delays 0/100/500 µs, no queue-policy axis (a native-backend version: 2 or 4 instances per GPU). A
torch-runner version (a ``batch_buckets`` parameter) gets the ``buckets`` axis (``pow2`` or ``fine`` ladders, see :func:`~tritonkit.convert.spec.execution.bucket_ladder`)
instead of ``preferred``: each trial's buckets follow its max batch and are the batcher's preferred sizes,
so the runner and the batcher agree on sizes whatever the trial. A native-backend GPU version also gets
the late ``jit_optimize`` axis (``off``/``on``: its graphs capture TorchScript's plain or optimised
plan, config parameter ``jit_optimize``): the optimised plan compiles its fused kernels at every load
(a slow load on a large model) and gains on some models only, so the quick search tries it once, on the
best point the other axes reached (:class:`~tritonkit.tune.search.Axis` ``late``). A version with shape
buckets (the config parameter ``shape_buckets``) tuned on a traffic file (``input_data``) gets one
``edges.<axis>`` axis per dynamic axis: the edge sets :func:`~tritonkit.tune.traffic.edge_candidates`
draws from the file's length histogram, every one ending at the model's longest length; a trial's
config carries its edges in the parameter, which the server's runner reads at load.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.backends.native import BACKEND as NATIVE_BACKEND
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, QueuePolicy, problems, to_pbtxt
from tritonkit.convert.spec.execution import BUCKET_STYLES, bucket_ladder, bucket_style, preferred_sizes
from tritonkit.errors import TritonKitError
from tritonkit.tune.search import Axis
from tritonkit.tune.traffic import (
    EDGES,
    buckets_in,
    edge_candidates,
    edges_text,
    point_edges,
    traffic_of,
    with_edges,
)

__all__ = [
    "DEFAULT_DELAYS_US",
    "DEFAULT_GPU_DELAYS_US",
    "DEFAULT_GPU_INSTANCES",
    "DEFAULT_NATIVE_GPU_INSTANCES",
    "JIT_PARAMETER",
    "apply_point",
    "axes_for",
    "base_point",
    "buckets_of",
    "jit_on",
    "on_gpu",
    "padded_share",
    "profile_batch_range",
    "same_config",
]

DEFAULT_DELAYS_US: tuple[int | str, ...] = ("off", 0, 500, 2000)
#: On a GPU no batcher at all is never competitive and long delays only add latency: with the buckets
#: as preferred sizes a batch leaves as soon as one can be formed.
DEFAULT_GPU_DELAYS_US: tuple[int | str, ...] = (0, 100, 500)
DEFAULT_INSTANCES: tuple[int, ...] = (1, 2, 3)
#: Per GPU. One instance alternates its host work (the python backend's per-request copies and
#: answers, measured at about 0.1 ms a request on the H100 host) with its GPU work; two or more overlap
#: them, and requests of one row need more host work in flight than two instances give.
DEFAULT_GPU_INSTANCES: tuple[int, ...] = (2, 3, 4)
#: Per GPU, for the native backend (no stub: an instance is a thread of Triton's). Measured on an H200
#: host (16 cores, requests of one row): ResNet-50 gained 21 % from 2 to 4 instances at its peak, BERT-base
#: and MiniLM stayed within 3 %; 6 gained only at ResNet-50's peak (c512, far past a latency budget) and
#: lost 5-12 % in BERT-base's tune while its loads made the search run past 5 minutes. Its GPU versions
#: are pipelined (``answer_thread``: two batches in flight per instance) and built with two.
DEFAULT_NATIVE_GPU_INSTANCES: tuple[int, ...] = (2, 4)
BUCKETS_PARAMETER = "batch_buckets"
JIT_PARAMETER = "jit_optimize"


def on_gpu(cfg: ModelConfig) -> bool:
    """True for a version whose (first) instance group runs on GPUs."""
    return bool(cfg.instance_groups) and cfg.instance_groups[0].kind == "KIND_GPU"


def _bucketed(cfg: ModelConfig) -> bool:
    """True for a runner that pads to batch buckets (the torch runner's ``batch_buckets`` parameter; the
    native backend pads to the same buckets)."""
    return (
        cfg.backend in ("python", NATIVE_BACKEND)
        and BUCKETS_PARAMETER in cfg.parameters
        and cfg.max_batch_size > 0
    )


def buckets_of(cfg: ModelConfig) -> list[int]:
    """The batch buckets the torch runner pads to under ``cfg`` (its own rule: listed sizes above the
    max batch dropped, the max batch last; none listed: powers of two); [] for other models."""
    if not _bucketed(cfg):
        return []
    text = str(cfg.parameters.get(BUCKETS_PARAMETER, ""))
    sizes = sorted({int(p) for p in text.split(",") if p.strip().isdigit() and int(p) >= 1})
    if not sizes:
        return list(bucket_ladder(cfg.max_batch_size, "pow2"))
    return [b for b in sizes if b < cfg.max_batch_size] + [cfg.max_batch_size]


def jit_on(cfg: ModelConfig) -> bool:
    """True for a native-backend version whose graphs capture the optimised plan (``jit_optimize``)."""
    return cfg.parameters.get(JIT_PARAMETER) == "true"  # the backend's own rule: exactly "true"


def _placement(group: InstanceGroup) -> str:
    return ",".join(str(g) for g in group.gpus) if group.gpus else "all"


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


def _kinds(cfg: ModelConfig, gpu: bool) -> tuple[str, ...]:
    """The instance kinds a trial may use: a GPU version (or a TensorRT plan) stays on GPUs; with
    ``gpu`` a CPU version of a backend that can use one may move there."""
    if _is_tensorrt(cfg) or on_gpu(cfg):  # a GPU version stays where it was built to run
        return ("KIND_GPU",)
    if gpu and cfg.backend in ("onnxruntime", "python", "pytorch"):
        return ("KIND_CPU", "KIND_GPU")
    return ("KIND_CPU",)


def _placement_axes(
    cfg: ModelConfig, *, gpu: bool, instances: Sequence[int] | None, jit_optimize: bool
) -> list[Axis]:
    """The instance count and kind axes, a GPU version's one placement and a native GPU version's
    late ``jit_optimize`` axis."""
    gpu_counts = DEFAULT_NATIVE_GPU_INSTANCES if cfg.backend == NATIVE_BACKEND else DEFAULT_GPU_INSTANCES
    counts = tuple(instances or (gpu_counts if on_gpu(cfg) else DEFAULT_INSTANCES))
    if any(c < 1 for c in counts):
        raise TritonKitError(f"instance counts {list(counts)}: expected whole numbers >= 1")
    axes = [Axis("instances", counts), Axis("kind", _kinds(cfg, gpu))]
    if on_gpu(cfg):
        axes.append(Axis("gpus", (_placement(cfg.instance_groups[0]),)))
        if jit_optimize and cfg.backend == NATIVE_BACKEND:
            axes.append(Axis(JIT_PARAMETER, ("off", "on"), late=True))
    return axes


def _max_batch_sizes(
    cfg: ModelConfig, model_dir: str | os.PathLike[str] | None, asked: Sequence[int] | None
) -> tuple[int, ...]:
    """The max batch sizes asked for, or powers of two up to the model's (from a quarter of it on a
    GPU); a one-line error for sizes outside the model's range."""
    low, high = profile_batch_range(cfg, model_dir)
    start = max(low, high // 4) if on_gpu(cfg) else low
    sizes = tuple(sorted(set(asked))) if asked else _powers(start, high)
    outside = [s for s in sizes if not low <= s <= high]
    if outside:
        raise TritonKitError(
            f"max batch sizes {outside} are outside the model's range {low}..{high}"
            + (" (its TensorRT profiles)" if _is_tensorrt(cfg) else " (its max_batch_size)")
        )
    return sizes


def _delays(asked: Sequence[int | str] | None, gpu_base: bool) -> tuple[int | str, ...]:
    """The batching delays asked for, or the defaults (GPU or CPU); a one-line error for a bad one."""
    delays = tuple(asked if asked is not None else DEFAULT_GPU_DELAYS_US if gpu_base else DEFAULT_DELAYS_US)
    for d in delays:
        if d != "off" and (not isinstance(d, int) or d < 0):
            raise TritonKitError(f"batching delay {d!r}: expected `off` or whole microseconds >= 0")
    return delays


def axes_for(
    cfg: ModelConfig,
    *,
    model_dir: str | os.PathLike[str] | None = None,
    gpu: bool = False,
    max_batch_sizes: Sequence[int] | None = None,
    delays_us: Sequence[int | str] | None = None,
    instances: Sequence[int] | None = None,
    queue: bool = True,
    jit_optimize: bool = True,
    input_data: str | os.PathLike[str] | None = None,
) -> list[Axis]:
    """The grid for ``cfg``. A model that does not batch (``max_batch_size`` 0) tunes instances only;
    ``jit_optimize`` False: no plan axis for a native-backend GPU version (it keeps its own);
    ``input_data`` (a traffic file): shape-bucket edges from its lengths for a version that has them."""
    if cfg.ensemble_steps or cfg.platform == "ensemble":
        raise TritonKitError(
            f"model `{cfg.name}` is an ensemble; expected a model that runs (tune its steps)"
        )
    axes = _placement_axes(cfg, gpu=gpu, instances=instances, jit_optimize=jit_optimize)
    if cfg.max_batch_size <= 0:
        return axes
    gpu_base = on_gpu(cfg)
    axes += [
        Axis("max_batch_size", _max_batch_sizes(cfg, model_dir, max_batch_sizes)),
        Axis("delay_us", _delays(delays_us, gpu_base)),
    ]
    buckets, traffic = buckets_in(cfg), traffic_of(cfg, input_data) if input_data is not None else None
    if buckets is not None and traffic is not None:
        traced = cfg.backend == NATIVE_BACKEND  # its model.ts has a method per current edge only
        axes += [Axis(name, values) for name, values in edge_candidates(buckets, traffic, traced).items()]
    axes.append(Axis("buckets", BUCKET_STYLES) if _bucketed(cfg) else Axis("preferred", ("none", "max")))
    if queue and not gpu_base:
        axes.append(Axis("queue", ("unbounded", "bounded")))
    return axes


def base_point(cfg: ModelConfig) -> dict[str, Any]:
    """The model's own config as a point (the quick search starts there)."""
    groups = cfg.instance_groups or [InstanceGroup()]
    point: dict[str, Any] = {
        # On GPUs a group's count is per GPU, and that is what the axis varies.
        "instances": groups[0].count if on_gpu(cfg) else sum(g.count for g in groups),
        "kind": groups[0].kind if groups[0].kind in ("KIND_CPU", "KIND_GPU") else "KIND_CPU",
    }
    if on_gpu(cfg):
        point["gpus"] = _placement(groups[0])
    if on_gpu(cfg) and cfg.backend == NATIVE_BACKEND:
        point[JIT_PARAMETER] = "on" if jit_on(cfg) else "off"
    if cfg.max_batch_size > 0:
        b = cfg.dynamic_batching
        point["max_batch_size"] = cfg.max_batch_size
        point["delay_us"] = "off" if b is None else b.max_queue_delay_microseconds
        if _bucketed(cfg):
            point["buckets"] = bucket_style(buckets_of(cfg), cfg.max_batch_size) or "custom"
        else:
            point["preferred"] = "max" if b is not None and b.preferred_batch_size else "none"
        policy = b.default_queue_policy if b is not None else None
        point["queue"] = "bounded" if policy is not None and policy.max_queue_size > 0 else "unbounded"
        buckets = buckets_in(cfg)
        for axis, edges in (buckets.axes if buckets is not None else {}).items():
            point[EDGES + axis] = edges_text(edges)
    return point


def apply_point(base: ModelConfig, point: Mapping[str, Any]) -> ModelConfig:
    """A copy of ``base`` with the point's settings; a one-line error when the result is not valid."""
    cfg = copy.deepcopy(base)
    count = int(point.get("instances", 1))
    kind = str(point.get("kind", "KIND_CPU"))
    groups = cfg.instance_groups or [InstanceGroup()]
    group = dataclass_replace_group(groups[0], kind=kind, count=count)
    if kind == "KIND_GPU" and point.get("gpus") not in (None, "all"):
        group.gpus = [int(g) for g in str(point["gpus"]).split(",")]
    cfg.instance_groups = [group]
    if JIT_PARAMETER in point:  # "off": the base's own "false" kept, else no parameter (as the build writes)
        if point[JIT_PARAMETER] == "on":
            cfg.parameters[JIT_PARAMETER] = "true"
        elif jit_on(cfg):
            cfg.parameters.pop(JIT_PARAMETER)
    if cfg.max_batch_size > 0 and "max_batch_size" in point:
        _apply_batching(base, cfg, point, count)
    if point_edges(point):  # the shape buckets' edges (the runner reads them at load)
        with_edges(cfg, point_edges(point))
    found = problems(cfg)
    if found:
        raise TritonKitError(f"config for {describe(point)} is not valid: {found[0]}")
    return cfg


def _apply_batching(base: ModelConfig, cfg: ModelConfig, point: Mapping[str, Any], count: int) -> None:
    """The point's max batch, the runner's buckets (following it), the dynamic batcher (delay,
    preferred sizes, queue policy) and the warmups' batch sizes, set in ``cfg`` (a copy of ``base``)."""
    mbs = int(point["max_batch_size"])
    cfg.max_batch_size = mbs
    buckets: list[int] = []
    if _bucketed(base):  # the runner's buckets follow the trial's max batch
        style = str(point.get("buckets", "custom"))
        buckets = list(bucket_ladder(mbs, style)) if style in BUCKET_STYLES else buckets_of(cfg)
        cfg.parameters[BUCKETS_PARAMETER] = ",".join(str(b) for b in buckets)
    delay = point.get("delay_us", "off")
    if delay == "off" or (mbs == 1 and point.get("queue") != "bounded"):
        cfg.dynamic_batching = None
    else:
        keep = base.dynamic_batching or DynamicBatching()
        preferred = [mbs] if point.get("preferred") == "max" and mbs > 1 else []
        if buckets:  # the batcher forms bucket-sized batches (nothing to pad); one leaves at once
            preferred = preferred_sizes(buckets, mbs)
        policy = QueuePolicy(max_queue_size=2 * mbs * count) if point.get("queue") == "bounded" else None
        cfg.dynamic_batching = DynamicBatching(
            max_queue_delay_microseconds=int(delay),
            preferred_batch_size=preferred,
            preserve_ordering=keep.preserve_ordering,
            default_queue_policy=policy,
            extra=dict(keep.extra),
        )
    for warmup in cfg.model_warmup:
        warmup.batch_size = min(warmup.batch_size, mbs)


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


def same_config(base: ModelConfig, point: Mapping[str, Any]) -> str:
    """The config ``point`` makes of ``base`` as text: points with equal text are one trial (the ``fine``
    and ``pow2`` ladders of a max batch of 16 are both 1, 2, 4, 8, 16). A point that makes no valid
    config keys by its own description (measuring it reports why)."""
    try:
        return to_pbtxt(apply_point(base, point))
    except TritonKitError:
        return describe(point)


def padded_share(batches: Mapping[Any, int], buckets: Sequence[int]) -> float | None:
    """Share of the rows a bucketed runner computed that were padding, for executions of the given
    sizes (batch size -> count: Triton's ``batch_stats``): each batch padded up to the smallest bucket
    that holds it, batches over the largest in chunks of it (the torch runner's own rule,
    ``backends/runners/torch_runner.py``). None without buckets or executions."""
    if not buckets:
        return None
    top, real, padded = buckets[-1], 0, 0
    for size, count in batches.items():
        rows = int(size)
        rest = rows % top
        pad = (next(b for b in buckets if b >= rest) - rest) if rest else 0
        real += rows * int(count)
        padded += pad * int(count)
    return padded / (real + padded) if real + padded else None
