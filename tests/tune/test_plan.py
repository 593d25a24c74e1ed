"""The capacity plan: arithmetic (unit), the t4 overlay's kustomize patch rendered and validated, and the knee
check by a ``tritonkit loadtest`` ramp on a tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tritonkit.cli import main
from tritonkit.errors import TritonKitError
from tritonkit.loadtest.scenarios import SCENARIOS
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit.tune.plan import (
    PATCH_FILE,
    apply_patch,
    check_knee,
    check_patch,
    kustomize_patch,
    make_plan,
    queue_at,
)

K8S = Path(__file__).resolve().parents[2] / "k8s"


def _provenance(gpus: list[str], kind: str) -> dict[str, object]:
    return {
        "tritonkit_version": "0.1.0",
        "date": "2026-11-25T10:00:00+00:00",
        "host": "bench",
        "device": {"cpu": "AMD EPYC 7B13", "cores": 2, "gpus": gpus},
        "triton_version": "2.51.0",
        "server": "127.0.0.1:8000",
        "models": [
            {"name": "minilm_int8", "version": "1", "engine": "tensorrt", "precision": "int8",
             "instance_kind": kind, "instances": 2, "target": "tensorrt"}
        ],
    }  # fmt: skip


T4_PROVENANCE = _provenance(["Tesla T4"], "KIND_GPU")
CPU_PROVENANCE = _provenance([], "KIND_CPU")

TUNE = {
    "model": "minilm_int8",
    "latency_budget_ms": 50.0,
    "provenance": T4_PROVENANCE,
    "winner": {
        "key": "instances=2 kind=KIND_GPU",
        "throughput": 124.5,
        "concurrency": 16,
        "point": {"instances": 2, "kind": "KIND_GPU"},
        "levels": [
            {"throughput": 60.0, "queue_us": 100.0},
            {"throughput": 110.0, "queue_us": 3000.0},
            {"throughput": 124.5, "queue_us": 9000.0},
        ],
    },
}


def test_plan_arithmetic() -> None:
    plan = make_plan(TUNE, target_rps=1000.0, price_per_gpu_hour=0.526, headroom=0.3, peak_factor=2.0)
    assert plan.replicas == 11  # ceil(1000 * 1.3 / 124.5) = ceil(10.44)
    assert plan.load_per_replica_rps == pytest.approx(1000 / 11, abs=1e-3)
    assert (plan.min_replicas, plan.max_replicas) == (11, 22)
    # 90.9 req/s lies between the 60 and 110 req/s levels: 100 + (3000 - 100) * (30.9 / 50) µs
    assert plan.hpa_queue_us == round(100 + 2900 * ((1000 / 11 - 60) / 50))
    # 11 GPUs for 1000 req/s: 11 * 0.526 $/h / (1000 * 3600) inferences/h * 1e6
    assert plan.cost_per_million == pytest.approx(11 * 0.526 / 3.6, rel=1e-4)
    assert plan.cost_per_million_at_capacity == pytest.approx(0.526 / 3600 / 124.5 * 1e6, rel=1e-4)
    assert plan.instances == 2
    small = make_plan(TUNE, target_rps=10.0, price_per_gpu_hour=1.0)
    assert small.replicas == 2  # never fewer than two: one pod may be disrupted
    assert queue_at([(10.0, 5.0), (20.0, 15.0)], 100.0) == 15.0 and queue_at([], 1.0) == 0.0
    with pytest.raises(TritonKitError, match="no winner"):
        make_plan({"winner": None}, target_rps=1.0, price_per_gpu_hour=1.0)
    with pytest.raises(TritonKitError, match="expected requests/s > 0"):
        make_plan(TUNE, target_rps=0.0, price_per_gpu_hour=1.0)


def test_a_plan_from_a_cpu_measured_tune_refuses_a_t4_price_without_a_translation() -> None:
    cpu = {
        **TUNE,
        "provenance": CPU_PROVENANCE,
        "winner": {**TUNE["winner"], "point": {"instances": 2, "kind": "KIND_CPU"}},
    }  # type: ignore[dict-item]
    with pytest.raises(
        TritonKitError, match=r"on CPU AMD EPYC 7B13, 2 cores, not on a T4; .*--capacity-ratio"
    ):
        make_plan(cpu, target_rps=1000.0, price_per_gpu_hour=0.526)
    old = {k: v for k, v in TUNE.items() if k != "provenance"}  # a tune.json from before provenance
    with pytest.raises(TritonKitError, match="did not record"):
        make_plan(old, target_rps=1000.0, price_per_gpu_hour=0.526)
    with pytest.raises(TritonKitError, match="not on a L4"):  # measured on a T4, priced as L4s
        make_plan(TUNE, target_rps=1000.0, price_per_gpu_hour=0.7, gpu="L4")
    translated = make_plan(cpu, target_rps=1000.0, price_per_gpu_hour=0.526, capacity_ratio=0.5)
    assert translated.per_replica_rps == pytest.approx(124.5 * 0.5) and translated.measured_rps == 124.5
    assert translated.replicas == 21  # ceil(1300 / 62.25)
    first = translated.markdown().splitlines()[0]
    assert first.startswith("> **Translated, not measured**") and "0.5 x the 124.5 req/s" in first
    assert "CPU AMD EPYC 7B13, 2 cores" in first
    assert (
        make_plan(TUNE, target_rps=1000.0, price_per_gpu_hour=0.526).markdown().startswith("# Capacity plan")
    )


def test_a_tune_that_kept_the_model_s_own_config_plans_with_that_config() -> None:
    own = {
        **TUNE,
        "baseline": {"key": "own", "feasible": True, "throughput": 90.0, "confirmed_throughput": 88.0,
                     "concurrency": 8, "point": {"instances": 1, "kind": "KIND_GPU"}, "levels": []},
        "chosen": {"key": "own", "own_config": True},
    }  # fmt: skip
    plan = make_plan(own, target_rps=1000.0, price_per_gpu_hour=0.526)
    assert plan.per_replica_rps == 88.0 and plan.own_config and plan.instances == 1 and plan.concurrency == 8
    assert "the model's own config `own`" in plan.markdown()


def test_a_tune_with_finals_plans_with_the_finals_median() -> None:
    # the search measured 124.5 once; the finals measured it again at 100, 104, 98 (median 100)
    confirmed = {**TUNE, "winner": {**TUNE["winner"], "confirmed_throughput": 100.0}}  # type: ignore[dict-item]
    plan = make_plan(confirmed, target_rps=1000.0, price_per_gpu_hour=0.526, headroom=0.3)
    assert plan.per_replica_rps == 100.0 and plan.replicas == 13  # ceil(1300 / 100), not ceil(1300 / 124.5)


@pytest.fixture
def k8s_copy(tmp_path: Path) -> Path:
    if shutil.which("kubectl") is None:
        pytest.skip("needs `kubectl` (v1.27+, with kustomize v5) on PATH to render the overlay")
    return Path(shutil.copytree(K8S, tmp_path / "k8s"))


def test_the_patch_renders_into_a_t4_overlay_that_still_validates(k8s_copy: Path) -> None:

    plan = make_plan(TUNE, target_rps=1000.0, price_per_gpu_hour=0.526)
    apply_patch(k8s_copy, kustomize_patch(plan))
    apply_patch(k8s_copy, kustomize_patch(plan))  # twice: listed once
    assert (k8s_copy / "overlays/t4/kustomization.yaml").read_text().count(PATCH_FILE) == 1
    objects, problems = check_patch(k8s_copy, SCENARIOS)
    assert problems == []
    hpa = next(o for o in objects if o["kind"] == "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (11, 22)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == "triton_queue_time_us_per_request"
    assert metric["pods"]["target"]["averageValue"] == str(plan.hpa_queue_us)
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "triton")
    assert (
        deployment["spec"]["template"]["metadata"]["annotations"]["tritonkit.io/instances-minilm-int8"] == "2"
    )
    assert deployment["spec"].get("replicas") is None  # still owned by the HPA


def test_plan_command_writes_the_plan_and_patch(
    k8s_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "tune"
    report.mkdir()
    (report / "tune.json").write_text(json.dumps(TUNE))
    code = main(
        ["plan", "--tune-report", str(report), "--target-rps", "500", "--gpu-hour-price", "0.5",
         "--k8s-dir", str(k8s_copy)]
    )  # fmt: skip
    assert code == 0
    assert json.loads((report / "plan.json").read_text())["replicas"] == 6  # ceil(500 * 1.3 / 124.5)
    assert "HorizontalPodAutoscaler" in (report / PATCH_FILE).read_text()
    assert "0 problems" in capsys.readouterr().out
    assert main(["plan", "--tune-report", str(tmp_path), "--target-rps", "5"]) == 1


def test_the_knee_check_measures_the_planned_config_as_the_tune_did(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    method = {"protocol": "http", "window_s": 0.3, "window_count": None, "stability_windows": 3,
              "stability_pct": 30.0, "max_windows": 4, "workers": 1, "require_stable": False,
              "batch_size": 1, "shared_memory": "none"}  # fmt: skip
    tune_json = {
        "model": "work",
        "latency_budget_ms": 10.0,
        "provenance": {**CPU_PROVENANCE, "models": []},
        "method": method,
        "winner": {
            "key": "w",
            "throughput": 300.0,
            "concurrency": 2,
            "point": {"instances": 1},
            "levels": [],
        },
    }
    plan = make_plan(tune_json, target_rps=1000.0, price_per_gpu_hour=0.5, capacity_ratio=1.0)
    result = check_knee(
        plan, method=method, repo=None, url=server.http_url, admin_key=server.admin_key,
        report_dir=tmp_path / "knee",
    )  # fmt: skip
    assert json.loads((tmp_path / "knee" / "knee_check.json").read_text()) == result
    # what the check computed from the levels it measured, the way the tune measures (never how fast the
    # machine was): its best level within the budget, the ratio to the tune's figure, the verdict
    assert result["method"] == method and result["planned_rps"] == 300.0
    within = [
        lv for lv in result["levels"] if lv["p99_ms"] <= 10.0 and lv["successes"] > 0 and not lv["failures"]
    ]
    assert result["levels"][0]["level"] == 2 and all(lv["windows"] <= 4 for lv in result["levels"])
    if result["knee_concurrency"] is not None:
        best = next(lv for lv in result["levels"] if lv["level"] == result["knee_concurrency"])
        assert best in within and result["knee_rps"] == pytest.approx(best["throughput"], abs=1e-3)
    assert result["ratio"] == pytest.approx(result["knee_rps"] / 300.0, abs=1e-4)
    assert result["ok"] == (result["knee_concurrency"] is not None and abs(result["ratio"] - 1) <= 0.15)


def test_plan_command_refuses_a_t4_price_from_cpu_measurements_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cpu = {
        **TUNE,
        "provenance": CPU_PROVENANCE,
        "winner": {**TUNE["winner"], "point": {"instances": 2, "kind": "KIND_CPU"}},
    }  # type: ignore[dict-item]
    (tmp_path / "tune.json").write_text(json.dumps(cpu))
    args = ["plan", "--tune-report", str(tmp_path), "--target-rps", "500"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not on a T4" in err and "Traceback" not in err
    assert not (tmp_path / "plan.md").exists() and not (tmp_path / "plan.json").exists()
    assert main([*args, "--capacity-ratio", "0.25"]) == 0
    text = (tmp_path / "plan.md").read_text()
    assert text.splitlines()[0].startswith("> **Translated, not measured**: one T4 replica")
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved["capacity_ratio"] == 0.25 and saved["provenance"] == CPU_PROVENANCE
    assert saved["made"]["tritonkit_version"] and "Measured on: CPU AMD EPYC 7B13 (2 cores), no GPU" in text
