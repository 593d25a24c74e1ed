"""Group overlays: rendered by kubectl kustomize, strict schemas (KEDA's bundled), the k8s check's checklist."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from tritonkit import deploy
from tritonkit.deploy.objects import find
from tritonkit.fleet.overlays import OverlaySpec, check_group, write_tree

K8S = Path(__file__).resolve().parents[2] / "k8s"
SPECS = (
    OverlaySpec("group-1", "T4", ("minilm_int8", "mlp"), {"minilm_int8": 2, "mlp": 1}, 2, 4, 4200, 3000.0),
    OverlaySpec("group-2", "H100", ("resnet50_fp16",), {"resnet50_fp16": 2}, 3, 6, 800, None),
    OverlaySpec("group-3", "cpu", ("light", "heavy"), {"light": 1, "heavy": 2}, 2, 4, 1500, 900.0),
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("kubectl") is None:
        pytest.skip("needs `kubectl` (v1.27+, with kustomize v5) on PATH to render the overlays")
    root = tmp_path_factory.mktemp("k8s") / "k8s"
    write_tree(root, K8S, SPECS)
    return root


def _objects(tree: Path, folder: str) -> list[dict[str, object]]:
    return deploy.parse_objects(deploy.kustomize(tree / "fleet" / folder))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.gpu_type}")
@pytest.mark.parametrize("keda", [False, True], ids=["hpa", "keda"])
def test_group_overlays_pass_strict_schemas_and_the_checklist(
    tree: Path, spec: OverlaySpec, keda: bool
) -> None:
    count, problems = check_group(tree, spec, keda=keda)
    assert problems == [] and count >= 15


def test_a_group_pod_loads_its_models_on_its_gpu_type_in_its_namespace(tree: Path) -> None:
    objects = _objects(tree, "group-2")
    [deployment] = find(objects, "Deployment", "triton")
    assert deployment["metadata"]["namespace"] == "tritonkit-group-2"  # type: ignore[index]
    args = deploy.triton_args(objects, secrets={"tritonkit-admin-key/key": "k"})
    assert "--model-control-mode=explicit" in args and args[-1] == "--load-model=resnet50_fp16"
    assert "--model-control-mode=none" not in args
    pod = deployment["spec"]["template"]["spec"]  # type: ignore[index]
    values = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]["values"]
    assert set(values) == deploy.GPU_PRODUCTS["H100"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    [hpa] = find(objects, "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)  # type: ignore[index]
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "800"  # type: ignore[index]
    env = [
        cm for cm in find(objects, "ConfigMap") if cm["metadata"]["name"].startswith("triton-engine-build")
    ]  # type: ignore[index]
    assert env[0]["data"]["BUILD_GPU"] == "H100"  # type: ignore[index]
    keda = _objects(tree, "group-2-keda")
    assert not find(keda, "HorizontalPodAutoscaler")
    [scaled] = find(keda, "ScaledObject")
    trigger = scaled["spec"]["triggers"][0]  # type: ignore[index]
    assert (
        trigger["metricType"] == "Value" and 'namespace="tritonkit-group-2"' in trigger["metadata"]["query"]
    )


def test_the_measured_host_memory_is_the_pod_request(tree: Path) -> None:
    [deployment] = find(_objects(tree, "group-3"), "Deployment", "triton")
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]  # type: ignore[index]
    assert resources["requests"]["memory"] == "1280Mi"  # 900 MB x 1.25, in 256 Mi steps, at least 1 GiB
    assert resources["limits"]["memory"] == "3328Mi"  # plus /dev/shm and room
    assert "replicas" not in deployment["spec"]  # type: ignore[operator]


def test_the_checks_catch_what_a_group_overlay_must_hold(tree: Path) -> None:
    objects = _objects(tree, "group-1")
    broken = copy.deepcopy(objects)
    [deployment] = find(broken, "Deployment", "triton")
    container = deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    container["args"] = [a for a in container["args"] if not str(a).startswith("--load-model")]
    assert any(
        "`explicit` with the models to load named by `--load-model`" in line
        for line in deploy.checklist(broken, "t4")
    )
    assert any(
        "nvidia.com/gpu.product In ['NVIDIA-L4'" in line for line in deploy.checklist(objects, "t4", gpu="L4")
    )
    scaled = find(_objects(tree, "group-1-keda"), "ScaledObject")[0]
    wrong = copy.deepcopy(scaled)
    wrong["spec"]["triggers"][0]["metricType"] = "Sum"  # type: ignore[index]
    wrong["spec"]["surprise"] = 1  # type: ignore[index]
    problems = deploy.validate([wrong], schemas_dir=tree / "schemas")
    assert len(problems) == 2 and any("surprise" in p for p in problems) and any("Sum" in p for p in problems)


def test_the_keda_schema_is_bundled_with_the_project() -> None:
    schema = yaml.safe_load((K8S / "schemas" / "scaledobject-keda.sh-v1alpha1.json").read_text())
    assert schema["properties"]["spec"]["required"] == ["scaleTargetRef", "triggers"]
    assert schema["properties"]["spec"]["additionalProperties"] is False
