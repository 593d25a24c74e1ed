"""Packing (unit): partitions, replicas, memory, measured against predicted shares, cost per type, cheapest fleet."""

from __future__ import annotations

import math

import pytest

from tritonkit.fleet.colocate import find_share
from tritonkit.fleet.openloop import GroupLevel
from tritonkit.fleet.packing import (
    EXHAUSTIVE_UP_TO,
    Demand,
    Device,
    Share,
    pack,
    predicted_share,
    replicas_for,
    set_partitions,
)

BELL = [1, 1, 2, 5, 15, 52, 203]


@pytest.mark.parametrize("n", range(1, 7))
def test_set_partitions_are_every_partition_once(n: int) -> None:
    items = [f"m{i}" for i in range(n)]
    found = [tuple(sorted(tuple(sorted(g)) for g in p)) for p in set_partitions(items)]
    assert len(found) == BELL[n] == len(set(found))
    assert all(sorted(m for g in p for m in g) == items for p in found)
    capped = list(set_partitions(items, max_group=2))
    assert all(len(g) <= 2 for p in capped for g in p)


def test_replicas_and_predicted_share() -> None:
    assert replicas_for(1.0, 0.3, 2) == 2  # min replicas
    assert replicas_for(0.25, 0.3, 2) == 6  # ceil(1.3 / 0.25) = ceil(5.2)
    assert replicas_for(0.5, 0.0, 1) == 2  # exactly two pods' worth: no rounding up past it
    # 20 req/s of a model doing 100 alone + 30 of one doing 60: one pod takes 1 / (0.2 + 0.5) of both
    assert predicted_share([Demand("a", 20, 1, 100), Demand("b", 30, 1, 60)]) == pytest.approx(1 / 0.7)
    with pytest.raises(ValueError):
        replicas_for(0.0, 0.3, 2)


def _device(
    name: str = "cpu",
    *,
    price: float | None = 1.0,
    capacity_mb: float = 10_000,
    colocate: bool = True,
    **caps: float,
) -> Device:
    demands = {m: Demand(m, 10.0, 1_000.0, c) for m, c in caps.items()}
    return Device(name, demands, capacity_mb, 500.0, price, colocate)


def test_small_models_share_pods_when_measured_shares_allow() -> None:
    cpu = _device(a=40, b=40, c=40)  # each alone: 10 of 40 req/s, 2 pods (the minimum)
    result = pack([cpu], lambda t, g: None, headroom=0.3, min_replicas=2)
    single, packed = result.single["cpu"], result.packed["cpu"]
    assert single is not None and packed is not None
    assert single.gpus == 6 and packed.gpus == 2
    assert [g.models for g in packed.groups] == [("a", "b", "c")] and not packed.groups[0].measured
    assert packed.groups[0].per_pod_rps == {"a": 5.0, "b": 5.0, "c": 5.0}
    assert packed.unmeasured == list(packed.groups)
    # measured: the three together hold the budget only at a share of 0.5 of their targets -> 3 pods; a+b
    # measured at 1.5 -> 2 pods, c alone 2 pods: 4 > 3, so the trio wins with 3
    shares = {("a", "b", "c"): Share(0.5, True), ("a", "b"): Share(1.5, True)}
    result = pack([cpu], lambda t, g: shares.get(tuple(sorted(g))), headroom=0.3, min_replicas=2)
    packed = result.packed["cpu"]
    assert packed is not None and packed.gpus == 3 and packed.groups[0].measured
    # a group measured as failing every level (share 0) is never used
    shares[("a", "b", "c")] = Share(0.0, True)
    packed = pack([cpu], lambda t, g: shares.get(tuple(sorted(g))), headroom=0.3, min_replicas=2).packed[
        "cpu"
    ]
    assert packed is not None and all(g.models != ("a", "b", "c") for g in packed.groups)


def test_memory_limits_groups_and_a_model_too_big_excludes_the_type() -> None:
    tight = _device(capacity_mb=2_600, a=40, b=40, c=40)  # 500 MB server + 2 models of 1,000 MB each
    packed = pack([tight], lambda t, g: None, headroom=0.3, min_replicas=2).packed["cpu"]
    assert packed is not None and max(len(g.models) for g in packed.groups) == 2
    tiny = _device(capacity_mb=1_200, a=40)
    result = pack([tiny], lambda t, g: None, headroom=0.3, min_replicas=2)
    assert result.packed["cpu"] is None and result.excluded["cpu"] == "a does not fit its memory"


def test_cost_per_type_and_the_cheapest_fleet_across_types() -> None:
    t4 = _device("T4", price=0.5, colocate=False, a=20, b=20)  # not measurable here: one model per pod
    l4 = _device("L4", price=0.8, a=40, b=40)
    result = pack([t4, l4], lambda t, g: None, headroom=0.3, min_replicas=2)
    t4p, l4p = result.packed["T4"], result.packed["L4"]
    assert t4p is not None and l4p is not None
    assert all(len(g.models) == 1 for g in t4p.groups) and t4p.gpus == 4  # ceil(1.3 / 2) -> min 2 each
    assert t4p.cost_per_hour == pytest.approx(2.0)
    # 20 req/s for 4 T4 at $0.5/h: $2/h over 72,000 inferences/h
    assert t4p.cost_per_million == pytest.approx(2.0 / (20 * 3600) * 1e6)
    assert l4p.gpus == 2 and l4p.cost_per_hour == pytest.approx(1.6)
    cheapest = result.cheapest
    assert (
        cheapest is not None
        and cheapest.gpus_per_type == {"L4": 2}
        and cheapest.cost_per_hour == pytest.approx(1.6)
    )
    by_gpus = pack([t4, l4], lambda t, g: None, headroom=0.3, min_replicas=2, objective="gpus").cheapest
    assert by_gpus is not None and by_gpus.gpus == 2
    unpriced = pack([_device("cpu", price=None, a=40)], lambda t, g: None, headroom=0.3, min_replicas=2)
    assert unpriced.cheapest is not None and unpriced.cheapest.cost_per_hour is None


def test_many_models_are_packed_greedily() -> None:
    n = EXHAUSTIVE_UP_TO + 3
    cpu = _device(**{f"m{i:02d}": 400.0 for i in range(n)})
    packed = pack([cpu], lambda t, g: None, headroom=0.3, min_replicas=2, max_group=4).packed["cpu"]
    assert packed is not None
    assert sorted(m for g in packed.groups for m in g.models) == sorted(cpu.demands)
    assert all(len(g.models) <= 4 for g in packed.groups) and packed.gpus == 2 * math.ceil(n / 4)


class _Fake(GroupLevel):
    def __init__(self, share: float, limit: float) -> None:
        super().__init__(share, {}, 1.0)
        self.limit = limit

    @property
    def ok(self) -> bool:
        return self.share <= self.limit


def test_find_share_grows_shrinks_and_bisects() -> None:
    best, levels = find_share(lambda s: _Fake(s, 2.0), 1.0, growth=1.5, max_levels=7, refine=2)
    assert (
        best is not None
        and best.share <= 2.0
        and [round(lv.share, 3) for lv in levels][:3] == [1.0, 1.5, 2.25]
    )
    assert best.share > 1.5  # the bisection moved past the last doubling that held
    best, levels = find_share(lambda s: _Fake(s, 0.3), 1.0, growth=2.0, max_levels=6, refine=1)
    assert best is not None and 0.25 <= best.share <= 0.3
    best, levels = find_share(lambda s: _Fake(s, 0.0), 1.0, growth=2.0, max_levels=5, refine=1)
    assert best is None and len(levels) == 4  # the last slot is the bisection's, which needs a good level
