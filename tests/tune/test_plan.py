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


CPU_TUNE = {
    **TUNE,
    "provenance": CPU_PROVENANCE,
    "winner": {**TUNE["winner"], "point": {"instances": 2, "kind": "KIND_CPU"}},  # type: ignore[dict-item]
}


def test_a_kind_cpu_config_is_priced_as_cpu_pods_never_as_gpu_replicas() -> None:
    # a GPU type or GPU price for a KIND_CPU config is refused, translated or not
    for extra in ({"price_per_gpu_hour": 0.526}, {"gpu": "T4", "capacity_ratio": 0.5}, {}):
        with pytest.raises(TritonKitError, match=r"runs KIND_CPU instances: its replicas are CPU pods"):
            make_plan(CPU_TUNE, target_rps=1000.0, **extra)  # type: ignore[arg-type]
    pods = make_plan(CPU_TUNE, target_rps=1000.0, price_per_pod_hour=0.2)
    assert (pods.unit, pods.gpu, pods.per_replica_rps, pods.replicas) == ("pod", "", 124.5, 11)
    text = pods.markdown()
    assert "**11 CPU pods**" in text and "$0.2/pod-hour" in text and "One replica (CPU pod)" in text
    assert "GPU-hour" not in text and "T4" not in text
    assert pods.cost_per_million == pytest.approx(11 * 0.2 / 3.6, rel=1e-4)
    translated = make_plan(CPU_TUNE, target_rps=1000.0, price_per_pod_hour=0.2, capacity_ratio=0.5)
    assert translated.per_replica_rps == pytest.approx(124.5 * 0.5) and translated.measured_rps == 124.5
    assert translated.replicas == 21  # ceil(1300 / 62.25)
    first = translated.markdown().splitlines()[0]
    assert (
        first.startswith("> **Translated, not measured**: one CPU pod replica") and "0.5 x the 124.5" in first
    )
    assert "CPU AMD EPYC 7B13, 2 cores" in first
    with pytest.raises(TritonKitError, match=r"--pod-hour-price: the priced config .* runs KIND_GPU"):
        make_plan(TUNE, target_rps=1000.0, price_per_pod_hour=0.2)


def test_gpu_plans_refuse_a_device_the_tune_did_not_measure() -> None:
    old = {k: v for k, v in TUNE.items() if k != "provenance"}  # a tune.json from before provenance
    with pytest.raises(TritonKitError, match="did not record"):
        make_plan(old, target_rps=1000.0, price_per_gpu_hour=0.526)
    with pytest.raises(TritonKitError, match="not on a L4"):  # measured on a T4, priced as L4s
        make_plan(TUNE, target_rps=1000.0, price_per_gpu_hour=0.7, gpu="L4")
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


def test_plan_command_prices_a_cpu_config_as_pods_and_names_the_priced_config_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the tune began with the model's own config (1 instance); the config it chose has 2
    began = _provenance([], "KIND_CPU")
    began["models"][0]["instances"] = 1  # type: ignore[index]
    (tmp_path / "tune.json").write_text(json.dumps({**CPU_TUNE, "provenance": began}))
    args = ["plan", "--tune-report", str(tmp_path), "--target-rps", "500"]
    for extra in ([], ["--gpu", "T4", "--capacity-ratio", "0.25"], ["--gpu-hour-price", "0.5"]):
        assert main([*args, *extra]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "its replicas are CPU pods" in err and "Traceback" not in err
    assert not (tmp_path / "plan.md").exists() and not (tmp_path / "plan.json").exists()
    assert main([*args, "--pod-hour-price", "0.1", "--capacity-ratio", "0.25"]) == 0
    text = (tmp_path / "plan.md").read_text()
    assert text.splitlines()[0].startswith("> **Translated, not measured**: one CPU pod replica")
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved["capacity_ratio"] == 0.25 and saved["unit"] == "pod"
    assert saved["made"]["tritonkit_version"] and "Measured on: CPU AMD EPYC 7B13 (2 cores), no GPU" in text
    # the header describes the config priced: 2 instances, not the 1 the tune began with
    assert "2 x CPU instance(s)" in text and "1 x CPU instance(s)" not in text
    assert saved["provenance"]["models"][0]["instances"] == 2


CURVE_TUNE = {
    **TUNE,
    "winner": {
        **TUNE["winner"],  # type: ignore[dict-item]
        "confirmed_throughput": 120.0,
        "levels": [
            {"level": 4, "throughput": 60.0, "p99_ms": 8.0, "queue_us": 100.0, "failures": 0},
            {"level": 8, "throughput": 110.0, "p99_ms": 20.0, "queue_us": 3000.0, "failures": 0},
            {"level": 16, "throughput": 124.5, "p99_ms": 45.0, "queue_us": 9000.0, "failures": 0},
            {"level": 32, "throughput": 130.0, "p99_ms": 90.0, "queue_us": 20000.0, "failures": 0},
        ],
    },
}


def test_p99_ms_re_plans_from_the_tuned_curve_and_says_what_lies_outside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = make_plan(CURVE_TUNE, target_rps=1000.0, p99_ms=50.0)  # the tune's own budget: the finals median
    assert same.per_replica_rps == 120.0 and same.figure_source == "the finals median"
    tight = make_plan(CURVE_TUNE, target_rps=1000.0, p99_ms=25.0)
    assert (tight.per_replica_rps, tight.concurrency, tight.budget_ms) == (110.0, 8, 25.0)
    assert "single search measurement at concurrency 8" in tight.figure_source
    assert tight.replicas == 12 and "p99 <= 25 ms" in tight.markdown()  # ceil(1300 / 110)
    # the HPA target at 83 req/s per replica lies between the measured 60 and 110 req/s: not flagged
    assert tight.outside_measured == ()
    with pytest.raises(
        TritonKitError, match=r"--p99-ms 5: no level the tune measured .* lowest measured p99"
    ):
        make_plan(CURVE_TUNE, target_rps=1000.0, p99_ms=5.0)
    loose = make_plan(CURVE_TUNE, target_rps=1000.0, p99_ms=200.0)  # every measured level fits
    assert loose.per_replica_rps == 130.0 and any("lower bound" in line for line in loose.outside_measured)
    # a small target: each of the two replicas carries 10 req/s, below the lowest level measured
    small = make_plan(CURVE_TUNE, target_rps=20.0)
    assert any("outside the 60.0-124.5 req/s" in line for line in small.outside_measured)
    assert "**Outside what the tune measured**" in small.markdown()
    (tmp_path / "tune.json").write_text(json.dumps(CURVE_TUNE))
    args = ["plan", "--tune-report", str(tmp_path), "--target-rps", "20"]
    assert main([*args, "--p99-ms", "5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected a budget the tune's curve reaches" in err[0]
    assert main(args) == 0
    assert "outside what the tune measured: the HPA target is read off" in capsys.readouterr().err
