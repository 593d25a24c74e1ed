"""The fleet file: which models, at what load and p99 budget, on which GPU types at what price.

Owns :class:`Fleet` (and :class:`ModelSpec`, :class:`GpuSpec`, :class:`Node`) and :func:`load_fleet`,
a strict reader: unknown keys, wrong types, duplicate names or keys, a model that is not in its
repository, a batch mix its config cannot take, a tune report filed under a GPU type the fleet does not
list, and an ``objective: cost`` with a price missing are each one line naming the place, what was
expected and what was given; every line is collected before :class:`FleetFileError` is raised, and
nothing is measured or written. Paths in the file are relative to its folder. Prices are the user's:
none is assumed, and a type without one is planned for capacity only.

Example::

    headroom: 0.3            # spare capacity share per group (default 0.3)
    min_replicas: 2          # pods per group at least (default 2: one may be disrupted)
    node: {gpus_per_node: 4, memory_fraction: 0.9}
    gpus:
      - {type: T4, price_per_hour: 0.526}
      - {type: cpu}          # no price: capacity without cost
    models:
      - name: minilm_int8
        repository: model_repository
        rate: 40             # requests/s to serve
        p99_ms: 250          # client-side p99 budget
        batch_mix: "1:0.8,8:0.2"
        tune: {cpu: reports/tune-minilm}   # tune.json of a `tritonkit tune` run per GPU type
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tritonkit.config import ModelConfig, from_pbtxt
from tritonkit.convert.spec.spec_parse import BoundedLoader
from tritonkit.deploy.checks.context import Problems
from tritonkit.errors import ConfigError, LoadTestError, TritonKitError
from tritonkit.fleet.devices import TYPES, canonical, memory_gib
from tritonkit.measure.payloads import parse_batch_mix

__all__ = ["OBJECTIVES", "Fleet", "FleetFileError", "GpuSpec", "ModelSpec", "Node", "load_fleet"]

OBJECTIVES = ("cost", "gpus")
_TOP = ("models", "gpus", "node", "headroom", "min_replicas", "objective", "peak_factor")
_MODEL = ("name", "repository", "rate", "p99_ms", "batch_mix", "tune", "memory_mb")
_GPU = ("type", "price_per_hour", "memory_gb")
_NODE = ("gpus_per_node", "memory_fraction")


class FleetFileError(TritonKitError):
    """A fleet file broke its schema; ``problems`` holds one line per error."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems[0] if problems else "the fleet file is not valid")
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class Node:
    gpus_per_node: int = 1
    #: share of a GPU's (or the host's, for ``cpu``) memory the models of one pod may use
    memory_fraction: float = 0.9


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    type: str
    price_per_hour: float | None
    memory_gb: float


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    repository: Path
    rate: float
    p99_ms: float
    batch_mix: dict[int, float]
    #: GPU type -> folder holding that type's ``tune.json``
    tune: dict[str, Path]
    #: GPU type -> the user's memory per instance (MB) where it cannot be measured here
    memory_mb: dict[str, float]
    config: ModelConfig

    @property
    def dominant_batch(self) -> int:
        """The batch size most requests carry (what a tune run sends)."""
        return max(self.batch_mix.items(), key=lambda kv: (kv[1], -kv[0]))[0]


@dataclasses.dataclass(frozen=True)
class Fleet:
    path: Path
    models: tuple[ModelSpec, ...]
    gpus: tuple[GpuSpec, ...]
    node: Node
    headroom: float
    min_replicas: int
    objective: str
    peak_factor: float

    def gpu(self, name: str) -> GpuSpec:
        return next(g for g in self.gpus if g.type == name)

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)


class _UniqueKeyLoader(BoundedLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML keeps the last silently), within
    the bounds of :class:`~tritonkit.convert.spec.spec_parse.BoundedLoader` (aliases, nesting)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key `{key}` given twice (expected each key once)", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=deep))


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _number(
    p: Problems, where: str, value: Any, *, low: float, strict: bool, high: float | None = None
) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        p.add(where, f"expected a number, got {value!r}")
        return None
    ok = (value > low if strict else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"{'>' if strict else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        p.add(where, f"expected a number {bound}, got {value!r}")
        return None
    return float(value)


def _keys(p: Problems, where: str, data: Any, allowed: tuple[str, ...], required: tuple[str, ...]) -> bool:
    if not isinstance(data, dict):
        p.add(where, f"expected a mapping with keys {', '.join(allowed)}, got {type(data).__name__}")
        return False
    for key in data:
        if key not in allowed:
            p.add(where, f"unknown key `{key}` (expected one of: {', '.join(allowed)})")
    for key in required:
        if key not in data:
            p.add(where, f"missing key `{key}`")
    return True


def _gpus(p: Problems, data: Any) -> list[GpuSpec]:
    if not isinstance(data, list) or not data:
        p.add("gpus", f"expected a non-empty list of GPU types, got {data!r}")
        return []
    out: list[GpuSpec] = []
    for i, item in enumerate(data):
        where = f"gpus[{i}]"
        if not _keys(p, where, item, _GPU, ("type",)) or "type" not in item:
            continue
        name = str(item["type"])
        known = canonical(name)
        memory = item.get("memory_gb")
        size: float | None = None
        if memory is not None:
            size = _number(p, f"{where}.memory_gb", memory, low=0, strict=True)
        elif known is None:
            p.add(
                where,
                f"unknown GPU type `{name}` (expected one of: {', '.join(TYPES)}, "
                "or give `memory_gb` for a type of your own)",
            )
            continue
        else:
            size = memory_gib(known)
        price = item.get("price_per_hour")
        if price is not None:
            price = _number(p, f"{where}.price_per_hour", price, low=0, strict=False)
        label = known or name
        if any(g.type == label for g in out):
            p.add(where, f"GPU type `{label}` listed twice (expected each type once)")
            continue
        if size is not None:
            out.append(GpuSpec(label, price, size))
    return out


def _config(p: Problems, where: str, name: str, repo: Path) -> ModelConfig | None:
    folder = repo / name
    if not (folder / "config.pbtxt").is_file():
        served = (
            sorted(d.name for d in repo.iterdir() if (d / "config.pbtxt").is_file()) if repo.is_dir() else []
        )
        what = f"expected one of: {', '.join(served)}" if served else "the repository has no models"
        if not repo.is_dir():
            what = "the repository folder does not exist"
        p.add(where, f"unknown model `{name}`: no {folder}/config.pbtxt ({what})")
        return None
    try:
        return from_pbtxt((folder / "config.pbtxt").read_text(encoding="utf-8"))
    except (ConfigError, OSError) as exc:
        p.add(where, f"model `{name}`: {folder}/config.pbtxt does not parse ({' '.join(str(exc).split())})")
        return None


def _batch_mix(p: Problems, where: str, value: Any, cfg: ModelConfig | None) -> dict[int, float]:
    if value is None:
        return {1: 1.0}
    try:
        if isinstance(value, dict):
            mix = parse_batch_mix(",".join(f"{k}:{v}" for k, v in value.items()))
        else:
            mix = parse_batch_mix(str(value))
    except LoadTestError as exc:
        p.add(where, str(exc))
        return {1: 1.0}
    if cfg is not None:
        top = max(mix)
        if cfg.max_batch_size == 0 and top != 1:
            p.add(
                where,
                f"batch {top}: model `{cfg.name}` does not batch (max_batch_size 0); expected batch 1 only",
            )
        elif cfg.max_batch_size and top > cfg.max_batch_size:
            p.add(where, f"batch {top} exceeds `{cfg.name}`'s max_batch_size {cfg.max_batch_size}")
    return mix


def _per_type(p: Problems, where: str, value: Any, types: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        p.add(where, f"expected a mapping GPU type -> value, got {value!r}")
        return {}
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = canonical(str(key)) or str(key)
        if name not in types:
            p.add(
                f"{where}.{key}", f"GPU type `{key}` is not in `gpus` (expected one of: {', '.join(types)})"
            )
            continue
        out[name] = item
    return out


def _model(p: Problems, i: int, item: Any, base: Path, types: list[str]) -> ModelSpec | None:
    where = f"models[{i}]" + (f" ({item['name']})" if isinstance(item, dict) and "name" in item else "")
    if not _keys(p, where, item, _MODEL, ("name", "rate", "p99_ms")) or "name" not in item:
        return None
    name = str(item["name"])
    repo = base / str(item.get("repository", "model_repository"))
    cfg = _config(p, where, name, repo)
    rate = _number(p, f"{where}.rate", item.get("rate"), low=0, strict=True) if "rate" in item else None
    budget = (
        _number(p, f"{where}.p99_ms", item.get("p99_ms"), low=0, strict=True) if "p99_ms" in item else None
    )
    mix = _batch_mix(p, f"{where}.batch_mix", item.get("batch_mix"), cfg)
    tune = {k: base / str(v) for k, v in _per_type(p, f"{where}.tune", item.get("tune"), types).items()}
    memory: dict[str, float] = {}
    for key, value in _per_type(p, f"{where}.memory_mb", item.get("memory_mb"), types).items():
        number = _number(p, f"{where}.memory_mb.{key}", value, low=0, strict=True)
        if number is not None:
            memory[key] = number
    if cfg is None or rate is None or budget is None:
        return None
    return ModelSpec(name, repo, rate, budget, mix, tune, memory, cfg)


def _node(p: Problems, data: Any) -> Node:
    if data is None:
        return Node()
    if not _keys(p, "node", data, _NODE, ()):
        return Node()
    gpus = data.get("gpus_per_node", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        p.add("node.gpus_per_node", f"expected a whole number >= 1, got {gpus!r}")
        gpus = 1
    fraction = _number(
        p, "node.memory_fraction", data.get("memory_fraction", 0.9), low=0, strict=True, high=1
    )
    return Node(gpus, fraction if fraction is not None else 0.9)


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FleetFileError([f"{path}: not found; expected a fleet file (YAML)"]) from None
    except OSError as exc:
        raise FleetFileError([f"{path}: cannot be read ({exc.strerror or exc})"]) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise FleetFileError([f"{path}: not valid YAML ({' '.join(str(exc).split())})"]) from None


def _settings(p: Problems, data: Mapping[str, Any]) -> tuple[float, int, float]:
    headroom = _number(p, "headroom", data.get("headroom", 0.3), low=0, strict=False, high=10)
    min_replicas = data.get("min_replicas", 2)
    if isinstance(min_replicas, bool) or not isinstance(min_replicas, int) or min_replicas < 1:
        p.add("min_replicas", f"expected a whole number >= 1, got {min_replicas!r}")
        min_replicas = 2
    peak = _number(p, "peak_factor", data.get("peak_factor", 2.0), low=1, strict=False)
    return (headroom if headroom is not None else 0.3), min_replicas, (peak if peak is not None else 2.0)


def load_fleet(path: str | Path) -> Fleet:
    """Read and check a fleet file; :class:`FleetFileError` with every problem found, one line each."""
    path = Path(path)
    data = _read(path)
    p = Problems(str(path))
    if not _keys(p, "(root)", data, _TOP, ("models", "gpus")):
        raise FleetFileError(p.lines)
    gpus = _gpus(p, data.get("gpus"))
    types = [g.type for g in gpus]
    raw_models = data.get("models")
    models: list[ModelSpec] = []
    if not isinstance(raw_models, list) or not raw_models:
        p.add("models", f"expected a non-empty list of models, got {raw_models!r}")
    else:
        for i, item in enumerate(raw_models):
            model = _model(p, i, item, path.parent, types)
            if model is None:
                continue
            if any(m.name == model.name for m in models):
                p.add(f"models[{i}]", f"model `{model.name}` listed twice (expected each model once)")
                continue
            models.append(model)
    headroom, min_replicas, peak = _settings(p, data)
    objective = data.get("objective")
    unpriced = [g.type for g in gpus if g.price_per_hour is None]
    if objective is not None and objective not in OBJECTIVES:
        p.add("objective", f"expected one of: {', '.join(OBJECTIVES)}, got {objective!r}")
    elif objective == "cost" and unpriced:
        for name in unpriced:
            p.add(
                f"gpus ({name})",
                "price_per_hour missing: `objective: cost` needs your price per hour for every GPU type "
                "(tritonkit assumes none); give one or set `objective: gpus`",
            )
    node = _node(p, data.get("node"))
    if p.lines:
        raise FleetFileError(p.lines)
    chosen = str(objective or ("cost" if not unpriced else "gpus"))
    return Fleet(path, tuple(models), tuple(gpus), node, headroom, min_replicas, chosen, peak)
