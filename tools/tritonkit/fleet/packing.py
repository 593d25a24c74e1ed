"""Packing models into server groups and groups onto GPUs: pure arithmetic over measured shares.

A *group* is a set of models one Triton server loads; each of its pods runs on one GPU. A group's
*share* is the fraction of the group's total target load (every model at its target rate, in the same
proportions) one pod carries with every model within its p99 budget: measured by serving the group
together (:mod:`tritonkit.fleet.colocate`), or, before that, predicted from each model's capacity
alone as ``1 / sum(rate / capacity)`` (time-sharing without interference). A group on a type needs
``max(min_replicas, ceil((1 + headroom) / share))`` pods, each carrying ``rate / replicas`` of each
model, and fits when its models' memory (instances x memory per instance, plus the server's own) is
within the type's memory x the node's memory fraction.

:func:`pack` tries every partition of the models into groups (Bell numbers: exhaustive up to
:data:`EXHAUSTIVE_UP_TO` models, greedy pairwise merging above) on every type, and returns the best
packing per type, the one-model-per-pod packing per type, and the cheapest fleet (each group on the
type where it costs least). Multi-model groups are allowed only on types where co-location can be
measured (this machine's); a packing that leans on a group not measured yet says so, and the planner
measures it and packs again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "EXHAUSTIVE_UP_TO",
    "Demand",
    "Device",
    "Group",
    "PackResult",
    "Packing",
    "Share",
    "cost_key",
    "pack",
    "predicted_share",
    "replicas_for",
    "set_partitions",
]

EXHAUSTIVE_UP_TO = 9


@dataclasses.dataclass(frozen=True)
class Demand:
    """One model on one type: its target rate, its memory per pod, and what one pod sustains alone."""

    model: str
    rate: float
    memory_mb: float
    capacity_rps: float


@dataclasses.dataclass(frozen=True)
class Share:
    """A group's share on a type: measured (accepted or not) or predicted."""

    value: float
    measured: bool


@dataclasses.dataclass(frozen=True)
class Group:
    models: tuple[str, ...]
    gpu_type: str
    share: float
    measured: bool
    replicas: int
    memory_mb: float
    per_pod_rps: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "models": list(self.models),
            "gpu_type": self.gpu_type,
            "share": round(self.share, 4),
            "measured": self.measured,
            "replicas": self.replicas,
            "memory_mb": round(self.memory_mb, 1),
            "per_pod_rps": {k: round(v, 3) for k, v in self.per_pod_rps.items()},
        }


@dataclasses.dataclass(frozen=True)
class Packing:
    """Groups and what they cost; ``cost_per_hour`` None where a type has no price."""

    name: str
    groups: tuple[Group, ...]
    gpus: int
    gpus_per_type: dict[str, int]
    cost_per_hour: float | None
    cost_per_million: float | None

    @property
    def unmeasured(self) -> list[Group]:
        return [g for g in self.groups if len(g.models) > 1 and not g.measured]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "gpus_per_type": self.gpus_per_type,
            "cost_per_hour": None if self.cost_per_hour is None else round(self.cost_per_hour, 4),
            "cost_per_million": None if self.cost_per_million is None else round(self.cost_per_million, 6),
            "groups": [g.as_dict() for g in self.groups],
        }


@dataclasses.dataclass
class PackResult:
    #: per type: the best packing, and one model per pod (None where a model fits no pod of the type)
    packed: dict[str, Packing | None]
    single: dict[str, Packing | None]
    #: each group on its cheapest type (or fewest GPUs for ``objective: gpus``)
    cheapest: Packing | None
    #: why a type cannot serve the whole fleet, per type
    excluded: dict[str, str]


def predicted_share(demands: Sequence[Demand]) -> float:
    """Share of the group's targets one pod carries if the models shared it without interference."""
    load = sum(d.rate / d.capacity_rps for d in demands)
    return 1.0 / load if load > 0 else 0.0


def replicas_for(share: float, headroom: float, min_replicas: int) -> int:
    """Pods a group needs: its whole target with headroom, at ``share`` of it per pod."""
    if share <= 0:
        raise ValueError("a group with share 0 cannot be served")
    return max(min_replicas, math.ceil((1 + headroom) / share - 1e-9))


def set_partitions(items: Sequence[str], max_group: int | None = None) -> Iterator[list[tuple[str, ...]]]:
    """Every partition of ``items`` into non-empty groups (of at most ``max_group`` items)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest, max_group):
        yield [(first,), *partition]
        for i, group in enumerate(partition):
            if max_group is None or len(group) < max_group:
                yield [*partition[:i], (first, *group), *partition[i + 1 :]]


def cost_key(objective: str, gpus: int, cost: float | None, groups: int) -> tuple[float, float, int]:
    """Sort key of a packing: the objective first, then the other figure, then more groups (isolation)."""
    money = cost if cost is not None else math.inf
    return (money, float(gpus), -groups) if objective == "cost" else (float(gpus), money, -groups)


@dataclasses.dataclass(frozen=True)
class Device:
    """One GPU type as the packing sees it: the models it has figures for, its memory, price, and whether
    groups of several models can be measured on it (this machine's type)."""

    name: str
    demands: dict[str, Demand]
    capacity_mb: float
    base_mb: float
    price: float | None
    colocate: bool


def _group(
    t: Device,
    models: tuple[str, ...],
    shares: Callable[[str, tuple[str, ...]], Share | None],
    headroom: float,
    min_replicas: int,
) -> Group | None:
    if any(m not in t.demands for m in models):
        return None
    if len(models) > 1 and not t.colocate:
        return None
    demands = [t.demands[m] for m in models]
    memory = sum(d.memory_mb for d in demands)
    if memory + t.base_mb > t.capacity_mb:
        return None
    share = shares(t.name, models)
    if share is None:
        share = Share(predicted_share(demands), False)
    if share.value <= 0:
        return None  # measured: no load level held every budget
    replicas = replicas_for(share.value, headroom, min_replicas)
    per_pod = {d.model: d.rate / replicas for d in demands}
    return Group(models, t.name, share.value, share.measured, replicas, memory, per_pod)


def _packing(
    name: str, groups: Sequence[Group], prices: Mapping[str, float | None], total_rate: float
) -> Packing:
    per_type: dict[str, int] = {}
    for g in groups:
        per_type[g.gpu_type] = per_type.get(g.gpu_type, 0) + g.replicas
    cost: float | None = 0.0
    for gpu_type, count in per_type.items():
        price = prices.get(gpu_type)
        cost = None if cost is None or price is None else cost + price * count
    per_million = None if cost is None or total_rate <= 0 else cost / (total_rate * 3600) * 1e6
    ordered = tuple(sorted(groups, key=lambda g: (g.gpu_type, -len(g.models), g.models)))
    return Packing(name, ordered, sum(per_type.values()), per_type, cost, per_million)


def _partitions(models: Sequence[str], max_group: int) -> Iterator[list[tuple[str, ...]]]:
    if len(models) <= EXHAUSTIVE_UP_TO:
        yield from set_partitions(list(models), max_group)
        return
    yield [(m,) for m in models]  # the greedy search starts from here (see _greedy)


def pack(
    types: Sequence[Device],
    shares: Callable[[str, tuple[str, ...]], Share | None],
    *,
    headroom: float,
    min_replicas: int,
    objective: str = "cost",
    max_group: int = 4,
) -> PackResult:
    """The best packing per type, one model per pod per type, and the cheapest fleet over all types."""
    kinds = list(types)
    prices = {t.name: t.price for t in kinds}
    models = sorted({m for t in kinds for m in t.demands})
    total = max((sum(d.rate for d in t.demands.values()) for t in kinds), default=0.0)
    packed: dict[str, Packing | None] = {}
    single: dict[str, Packing | None] = {}
    excluded: dict[str, str] = {}
    cache: dict[tuple[str, tuple[str, ...]], Group | None] = {}

    def group(t: Device, g: tuple[str, ...]) -> Group | None:
        key = (t.name, tuple(sorted(g)))
        if key not in cache:
            cache[key] = _group(t, key[1], shares, headroom, min_replicas)
        return cache[key]

    for t in kinds:
        missing = [m for m in models if m not in t.demands]
        singles = [group(t, (m,)) for m in models if m in t.demands]
        unfit = [m for m, g in zip([m for m in models if m in t.demands], singles, strict=True) if g is None]
        if missing or unfit:
            excluded[t.name] = (
                f"no capacity for {', '.join(missing)}"
                if missing
                else f"{', '.join(unfit)} does not fit its memory"
            )
            packed[t.name] = single[t.name] = None
            continue
        single[t.name] = _packing(f"{t.name}, one model per pod", [g for g in singles if g], prices, total)
        packed[t.name] = _best(t.name, models, _Search(_on(group, t), prices, total, objective, max_group))

    def any_type(g: tuple[str, ...]) -> list[Group | None]:
        return [group(t, g) for t in kinds]

    cheapest = _best("cheapest fleet", models, _Search(any_type, prices, total, objective, max_group))
    return PackResult(packed, single, cheapest, excluded)


def _on(
    group: Callable[[Device, tuple[str, ...]], Group | None], device: Device
) -> Callable[[tuple[str, ...]], list[Group | None]]:
    return lambda g: [group(device, g)]


def _choose(
    options: Sequence[Group | None], prices: Mapping[str, float | None], objective: str
) -> Group | None:
    found = [g for g in options if g is not None]
    if not found:
        return None

    def key(g: Group) -> tuple[float, float, int]:
        price = prices.get(g.gpu_type)
        return cost_key(objective, g.replicas, None if price is None else price * g.replicas, 0)

    return min(found, key=key)


@dataclasses.dataclass(frozen=True)
class _Search:
    """One search for the best partition: each group's options, the prices, the total rate, the
    objective and the largest group."""

    options: Callable[[tuple[str, ...]], Sequence[Group | None]]
    prices: Mapping[str, float | None]
    total: float
    objective: str
    max_group: int

    def key(
        self, name: str, partition: Sequence[tuple[str, ...]]
    ) -> tuple[Packing | None, tuple[float, float, int]]:
        """``partition`` packed with each group's cheapest option and its cost key; (None, inf) where a
        group has none."""
        groups = [_choose(self.options(g), self.prices, self.objective) for g in partition]
        if any(g is None for g in groups):
            return None, (math.inf, math.inf, 0)
        packing = _packing(name, [g for g in groups if g is not None], self.prices, self.total)
        return packing, cost_key(self.objective, packing.gpus, packing.cost_per_hour, len(packing.groups))


def _best(name: str, models: Sequence[str], search: _Search) -> Packing | None:
    best: Packing | None = None
    best_key: tuple[float, float, int] | None = None
    partitions = list(_partitions(models, search.max_group))
    if len(models) > EXHAUSTIVE_UP_TO:
        partitions = [_greedy(models, search)]
    for partition in partitions:
        candidate, key = search.key(name, partition)
        if candidate is not None and (best_key is None or key < best_key):
            best, best_key = candidate, key
    return best


def _greedy(models: Sequence[str], search: _Search) -> list[tuple[str, ...]]:
    """Above :data:`EXHAUSTIVE_UP_TO` models: merge the two groups whose merge saves most, while one does."""
    partition: list[tuple[str, ...]] = [(m,) for m in models]

    def key_of(p: list[tuple[str, ...]]) -> tuple[float, float, int]:
        return search.key("", p)[1]

    current = key_of(partition)
    while True:
        best: tuple[tuple[float, float, int], list[tuple[str, ...]]] | None = None
        for i in range(len(partition)):
            for j in range(i + 1, len(partition)):
                if len(partition[i]) + len(partition[j]) > search.max_group:
                    continue
                trial = [g for k, g in enumerate(partition) if k not in (i, j)] + [
                    partition[i] + partition[j]
                ]
                key = key_of(trial)
                if key < current and (best is None or key < best[0]):
                    best = (key, trial)
        if best is None:
            return partition
        current, partition = best
