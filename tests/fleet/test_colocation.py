"""Co-location on the real embedded server (CPU, two small models): measured alone and together, packed,
then checked by a separate Locust mixed load test at the planned rates; and the open loop's own numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fleet.conftest import tune_report, write_fleet

from tritonkit.config import load
from tritonkit.errors import TritonKitError
from tritonkit.fleet.colocate import ServerSession
from tritonkit.fleet.openloop import MeasureSettings, Stream
from tritonkit.fleet.planner import PlanOptions
from tritonkit.fleet.run import FleetRunOptions, finish, run_fleet
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import WindowSpec
from tritonkit.measure.stats import StabilityRule

SHORT = MeasureSettings(warmup_s=0.5, min_seconds=1.5, max_seconds=3.0, min_samples=30, window_s=0.5)
# The plan's search levels: what the tests check is what the planner does with its measurements (groups,
# shares, the written plan), never how exact one level is; the open loop's own rates are checked at SHORT.
SEARCH = MeasureSettings(warmup_s=0.25, min_seconds=0.75, max_seconds=1.5, min_samples=30, window_s=0.25)


def test_open_loop_sends_each_model_at_its_rate_with_its_batch_mix(repo: Path) -> None:
    configs = {m: load(repo / m) for m in ("light", "heavy")}
    with ServerSession({m: repo / m for m in configs}, configs, SHORT) as session:
        session.serve(["light", "heavy"])
        streams = [Stream("light", 40.0, {1: 0.5, 4: 0.5}, 50.0), Stream("heavy", 20.0, {1: 1.0}, 50.0)]
        level = session.level(streams, 1.0)
        assert session.server is not None
        assert {s.model for s in session.server.stubs()} == {"light", "heavy"}
    light, heavy = level.results["light"], level.results["heavy"]
    # sent on schedule whatever the answers do (open loop): the rates asked, over the measured seconds
    assert light.sent / level.seconds == pytest.approx(40.0, rel=0.15)
    assert heavy.sent / level.seconds == pytest.approx(20.0, rel=0.15)
    assert light.failures == heavy.failures == 0 and light.successes > 0 and heavy.successes > 0
    # half of light's requests carry 4 rows: Triton counted more inferences than requests
    assert light.server.inference_count > light.server.requests > 0


def test_a_packed_plan_holds_every_budget_in_a_separate_load_test(tmp_path: Path, repo: Path) -> None:
    tunes = {
        "light": tune_report(tmp_path / "tl", repo, "light", budget_ms=50, throughput=100, p99_ms=20),
        "heavy": tune_report(tmp_path / "th", repo, "heavy", budget_ms=50, throughput=60, p99_ms=30),
    }
    fleet = write_fleet(
        tmp_path / "fleet.yaml",
        {
            "gpus": [{"type": "cpu", "price_per_hour": 0.2}],
            "models": [
                {
                    "name": "light",
                    "repository": str(repo),
                    "rate": 40,
                    "p99_ms": 200,
                    "tune": {"cpu": str(tunes["light"])},
                },
                {
                    "name": "heavy",
                    "repository": str(repo),
                    "rate": 20,
                    "p99_ms": 200,
                    "tune": {"cpu": str(tunes["heavy"])},
                },
            ],
        },
    )
    out = tmp_path / "plan"
    plan = PlanOptions(settings=SEARCH, search={"max_levels": 3, "refine": 0}, local_type="cpu")
    data, code = run_fleet(FleetRunOptions(fleet, out, plan, verify=True, verify_seconds=8.0))
    assert code == 0, json.dumps(data["verify"])
    assert json.loads((out / "fleet-plan.json").read_text())["cheapest"] == data["cheapest"]
    for name in (
        "fleet-plan.md",
        "packing.png",
        "cost.png",
        "configs/light/config.pbtxt",
        "k8s/fleet/group-1-keda/scaledobject.yaml",
    ):
        assert (out / name).is_file(), name
    single = data["one_model_per_pod"]["cpu"]
    assert [g["models"] for g in data["cheapest"]["groups"]] == [["heavy", "light"]]
    assert data["cheapest"]["gpus"] == 2 < single["gpus"] == 4  # both shown, at the same budgets
    [measured] = data["groups_measured"]
    assert measured["share"] > 0 and all(lv["models"]["light"]["p99_ms"] > 0 for lv in measured["levels"])
    assert data["interference"][0]["models"]["heavy"]["alone_rps"] > 0
    assert data["memory_per_instance"]["light"]["host_rss_mb_per_instance"] > 10
    [check] = data["verify"]
    assert check["ok"]
    for name, m in check["measured"].items():
        assert m["p99_ms"] <= m["budget_ms"] and abs(m["ratio"] - 1) <= 0.15, (name, m)
    assert all(not o["problems"] for o in data["overlays"])
    assert "--load-model=heavy" in data["placement"][0]["args"]
    # a plan written where kubectl or matplotlib are missing is finished from its JSON alone
    (out / "packing.png").unlink()
    again = finish(out)
    assert (out / "packing.png").is_file() and [o["objects"] for o in again["overlays"]] == [15, 15]


def test_a_model_without_a_tune_is_tuned_now_when_asked(tmp_path: Path, repo: Path) -> None:
    fleet = write_fleet(
        tmp_path / "fleet.yaml",
        {
            "gpus": [{"type": "cpu"}],
            "models": [{"name": "light", "repository": str(repo), "rate": 20, "p99_ms": 200}],
        },
    )
    grid = {
        "instances": [1], "max_batch_sizes": [8], "delays_us": ["off"], "preferred": False, "queue": False,
        "max_concurrency": 4, "finalists": 0, "require_stable": False,
        "measure": MeasureOptions(window=WindowSpec(0.15), stability=StabilityRule(3, 0.5), max_windows=3),
    }  # fmt: skip
    plan = PlanOptions(
        tune=True,
        tune_overrides=grid,
        settings=SEARCH,
        search={"max_levels": 2, "refine": 0},
        local_type="cpu",
    )
    with pytest.raises(TritonKitError, match=r"model `light`: no tune report for any GPU type .* or --tune"):
        run_fleet(
            FleetRunOptions(
                fleet, tmp_path / "without", PlanOptions(settings=SHORT, local_type="cpu"), plots=False
            )
        )
    data, code = run_fleet(FleetRunOptions(fleet, tmp_path / "out", plan, plots=False))
    assert code == 0 and data["tuned"]["cpu"]["light"]["capacity_rps"] > 0
    assert (tmp_path / "out" / "tune" / "cpu" / "light" / "tune.json").is_file()  # the tune run now, kept
    assert not (tmp_path / "without").exists()
