"""tritonkit.deploy on the real overlays: render with kubectl kustomize, strict schemas, the deployment
checklist, and proof that each check bites when one setting regresses."""

from __future__ import annotations

import copy
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import yaml
from tritonclient.utils import InferenceServerException

from tritonkit import deploy
from tritonkit.errors import DeployError
from tritonkit.loadtest.scenarios import SCENARIOS
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

Obj = dict[str, Any]
Rendered = Callable[[str], list[Obj]]


def find(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    """The object of ``kind`` named ``name`` (or ``name-<hash>`` for generated ConfigMaps)."""
    for obj in objects:
        obj_name = obj["metadata"]["name"]
        if obj["kind"] == kind and (name is None or obj_name == name or obj_name.startswith(name + "-")):
            return obj
    raise AssertionError(f"no {kind} {name or ''} in the rendered objects")


def pod(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Obj, name: str) -> Obj:
    for c in pod(workload)["containers"]:
        if c["name"] == name:
            return c  # type: ignore[no-any-return]
    raise AssertionError(f"no container {name}")


# --- rendering -----------------------------------------------------------------------------------
EXPECTED_KINDS = {
    "t4": {
        "Namespace", "ServiceAccount", "ConfigMap", "Service", "PersistentVolumeClaim", "Deployment",
        "PodDisruptionBudget", "HorizontalPodAutoscaler", "Job", "ServiceMonitor", "NetworkPolicy", "PriorityClass",
    },
    "dev": {
        "Namespace", "ServiceAccount", "ConfigMap", "Service", "PersistentVolumeClaim", "Deployment",
        "PodDisruptionBudget", "Job", "NetworkPolicy",
    },
    "loadtest": {"ServiceAccount", "ConfigMap", "Service", "PersistentVolumeClaim", "Deployment", "Job", "NetworkPolicy"},
}  # fmt: skip


@pytest.mark.parametrize("overlay", sorted(deploy.OVERLAYS))
def test_render_each_overlay(rendered: Rendered, overlay: str) -> None:
    objects = rendered(overlay)
    assert {obj["kind"] for obj in objects} == EXPECTED_KINDS[overlay]
    namespaced = [obj for obj in objects if obj["kind"] not in ("Namespace", "PriorityClass")]
    assert {obj["metadata"].get("namespace") for obj in namespaced} == {"tritonkit"}


def test_render_text_matches_kubectl_and_unknown_overlay_names_the_allowed_ones() -> None:
    text = deploy.render_text("dev")
    assert deploy.parse_objects(text) == deploy.render("dev")
    with pytest.raises(DeployError, match=r"unknown overlay `prod`; expected one of: dev, loadtest, t4"):
        deploy.render("prod")


def test_missing_kubectl_is_one_line_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONKIT_KUBECTL", "/nonexistent/kubectl")
    with pytest.raises(DeployError, match=r"`kubectl` not found on PATH; install kubectl"):
        deploy.render("t4")


def test_kustomize_failure_is_wrapped(tmp_path: Any) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    (tmp_path / "overlays" / "dev").mkdir(parents=True)
    (tmp_path / "overlays" / "dev" / "kustomization.yaml").write_text("resources: [../../base]\n")
    with pytest.raises(DeployError, match=r"`kubectl kustomize .*overlays/dev` failed: .*missing.yaml"):
        deploy.render("dev", root=tmp_path)


# --- schemas -------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [deploy.KUBERNETES_VERSION, "1.33"])
@pytest.mark.parametrize("overlay", sorted(deploy.OVERLAYS))
def test_schemas_strict(rendered: Rendered, overlay: str, version: str) -> None:
    # the pinned version, and a newer one so an API removal shows up before clusters upgrade
    assert deploy.validate(rendered(overlay), kubernetes_version=version) == []


def test_schema_validation_bites(rendered: Rendered) -> None:
    objects = rendered("t4")
    container(find(objects, "Deployment", "triton"), "triton")["shmSize"] = "1Gi"  # not a Kubernetes field
    find(objects, "ServiceMonitor", "triton")["spec"]["endpoints"][0]["interval"] = "15 seconds"
    objects.append({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    problems = deploy.validate(objects)
    assert len(problems) == 3, problems
    assert "Deployment/triton: spec.template.spec.containers.0: Additional properties" in problems[0]
    assert "'shmSize' was unexpected" in problems[0]
    assert problems[1].startswith(
        "ServiceMonitor/triton: spec.endpoints.0.interval: '15 seconds' does not match"
    )
    assert "(bundled schema servicemonitor-monitoring.coreos.com-v1.json)" in problems[1]
    assert problems[2].startswith("Widget/w: no schema for example.com/v1 Widget in Kubernetes 1.30 nor at ")


# --- the checklist -------------------------------------------------------------------------------
@pytest.mark.parametrize("overlay", sorted(deploy.OVERLAYS))
def test_checklist_holds(rendered: Rendered, overlay: str) -> None:
    assert deploy.checklist(rendered(overlay), overlay, scenarios=SCENARIOS) == []


def _triton(objects: list[Obj]) -> Obj:
    return container(find(objects, "Deployment", "triton"), "triton")


def _server_args(objects: list[Obj]) -> dict[str, str]:
    data: dict[str, str] = find(objects, "ConfigMap", "triton-server-args")["data"]
    return data


def _drop_gpu(o: list[Obj]) -> None:
    del _triton(o)["resources"]["limits"]["nvidia.com/gpu"]


def _root_user(o: list[Obj]) -> None:
    _triton(o)["securityContext"]["runAsUser"] = 0  # the container's setting wins over the pod's


def _short_grace(o: list[Obj]) -> None:
    pod(find(o, "Deployment", "triton"))["terminationGracePeriodSeconds"] = 30


def _long_exit_timeout(o: list[Obj]) -> None:
    _server_args(o)["TRITON_EXIT_TIMEOUT_SECS"] = "55"  # read by the args through $(VAR): 10 + 55 > 60


def _unrestricted_trace(o: list[Obj]) -> None:
    _server_args(o)["TRITON_RESTRICTED_APIS"] = "model-repository,shared-memory,logging"


def _literal_key(o: list[Obj]) -> None:
    env = _triton(o)["env"]
    env[0] = {"name": "TRITON_ADMIN_KEY", "value": "hunter2"}


def _no_grpc_restriction(o: list[Obj]) -> None:
    args = _triton(o)["args"]
    args[:] = [a for a in args if not a.startswith("--grpc-restricted-protocol")]


def _disk_shm(o: list[Obj]) -> None:
    for volume in pod(find(o, "Deployment", "triton"))["volumes"]:
        if volume["name"] == "dshm":
            volume["emptyDir"].pop("medium")


def _small_shm(o: list[Obj]) -> None:
    for volume in pod(find(o, "Deployment", "triton"))["volumes"]:
        if volume["name"] == "dshm":
            volume["emptyDir"]["sizeLimit"] = "64Mi"


def _liveness_on_ready(o: list[Obj]) -> None:
    _triton(o)["livenessProbe"]["httpGet"]["path"] = "/v2/health/ready"


def _impatient_startup(o: list[Obj]) -> None:
    _triton(o)["startupProbe"]["failureThreshold"] = 6


def _no_pdb(o: list[Obj]) -> None:
    o.remove(find(o, "PodDisruptionBudget", "triton"))


def _hpa_on_cpu(o: list[Obj]) -> None:
    find(o, "HorizontalPodAutoscaler", "triton")["spec"]["metrics"] = [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
        }
    ]


def _fixed_replicas(o: list[Obj]) -> None:
    find(o, "Deployment", "triton")["spec"]["replicas"] = 3


def _any_gpu(o: list[Obj]) -> None:
    terms = pod(find(o, "Deployment", "triton"))["affinity"]["nodeAffinity"]
    terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].append(
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]}
    )


def _no_toleration(o: list[Obj]) -> None:
    pod(find(o, "Deployment", "triton"))["tolerations"] = []


def _writable_root(o: list[Obj]) -> None:
    _triton(o)["securityContext"]["readOnlyRootFilesystem"] = False


def _keep_capabilities(o: list[Obj]) -> None:
    _triton(o)["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}


def _init_as_root(o: list[Obj]) -> None:
    pod(find(o, "Deployment", "triton"))["initContainers"][0]["securityContext"]["runAsUser"] = 0


def _explicit_model_control(o: list[Obj]) -> None:
    args = _triton(o)["args"]
    args[args.index("--model-control-mode=none")] = "--model-control-mode=explicit"


def _open_ingress(o: list[Obj]) -> None:
    find(o, "NetworkPolicy", "triton")["spec"]["ingress"].append({"from": [{"namespaceSelector": {}}]})


def _latest_image(o: list[Obj]) -> None:
    _triton(o)["image"] = "nvcr.io/nvidia/tritonserver:latest"


def _portable_engine_build(o: list[Obj]) -> None:
    find(o, "ConfigMap", "triton-engine-build")["data"]["BUILD_TARGET"] = "onnxruntime"


def _builder_on_any_node(o: list[Obj]) -> None:
    del pod(find(o, "Job", "triton-engine-build"))["affinity"]


def _build_without_priority(o: list[Obj]) -> None:
    del pod(find(o, "Job", "triton-engine-build"))["priorityClassName"]


def _trt_mismatch(o: list[Obj]) -> None:
    find(o, "ConfigMap", "triton-engine-build")["data"]["TENSORRT_VERSION"] = "10.7.0"


def _monitor_wrong_port(o: list[Obj]) -> None:
    find(o, "ServiceMonitor", "triton")["spec"]["endpoints"][0]["port"] = "http"


def _dashboard_without_dcgm(o: list[Obj]) -> None:
    cm = find(o, "ConfigMap", "triton-dashboard")
    key = next(iter(cm["data"]))
    dashboard = json.loads(cm["data"][key])
    for panel in dashboard["panels"]:
        panel["targets"] = [t for t in panel["targets"] if "DCGM_FI_DEV_GPU_UTIL" not in t["expr"]]
    cm["data"][key] = json.dumps(dashboard)


def _adapter_rate_not_per_request(o: list[Obj]) -> None:
    cm = find(o, "ConfigMap", "prometheus-adapter-triton-rules")
    config = yaml.safe_load(cm["data"]["config.yaml"])
    config["rules"][0]["metricsQuery"] = (
        "sum(rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[30s])) by (<<.GroupBy>>)"
    )
    cm["data"]["config.yaml"] = yaml.safe_dump(config)


T4_REGRESSIONS: list[tuple[Callable[[list[Obj]], None], str]] = [
    (_drop_gpu, "expected limits nvidia.com/gpu: 1, found None"),
    (_root_user, "expected runAsUser 1000, found 0"),
    (_short_grace, "terminationGracePeriodSeconds 30 must exceed preStop sleep 10 + --exit-timeout-secs 30"),
    (
        _long_exit_timeout,
        "terminationGracePeriodSeconds 60 must exceed preStop sleep 10 + --exit-timeout-secs 55",
    ),
    (_unrestricted_trace, "`--http-restricted-api` must restrict trace"),
    (_literal_key, "`--http-restricted-api` key must come from a Secret, found `hunter2`"),
    (_no_grpc_restriction, "expected `--grpc-restricted-protocol` once, found it 0 times"),
    (_disk_shm, "expected /dev/shm as emptyDir medium Memory"),
    (_small_shm, "expected /dev/shm sizeLimit >= 256Mi, found 64Mi"),
    (_liveness_on_ready, "expected livenessProbe httpGet /v2/health/live, found /v2/health/ready"),
    (_impatient_startup, "startupProbe allows 60 s for model load; expected >= 300 s"),
    (_no_pdb, "expected a PodDisruptionBudget selecting the Triton pods"),
    (_hpa_on_cpu, "expected one Pods metric `triton_queue_time_us_per_request`, found []"),
    (_fixed_replicas, "expected no replicas while an HPA scales it (each apply would reset it), found 3"),
    (
        _any_gpu,
        "expected required node affinity nvidia.com/gpu.product In ['Tesla-T4', 'Tesla-T4-SHARED'] in every term",
    ),
    (_no_toleration, "expected toleration nvidia.com/gpu Exists NoSchedule, found none"),
    (_writable_root, "expected readOnlyRootFilesystem: true, found False"),
    (_keep_capabilities, "expected capabilities.drop [ALL], found None"),
    (_init_as_root, "container `wait-for-repository`: expected runAsUser 1000, found 0"),
    (
        _explicit_model_control,
        "expected `--model-control-mode=none`, or `explicit` with the models to load named by `--load-model` "
        "(not `*`), found explicit with no --load-model",
    ),
    (_open_ingress, "ingress rule admits any peer"),
    (_latest_image, "expected the image pinned by tag or digest, found `nvcr.io/nvidia/tritonserver:latest`"),
    (_portable_engine_build, "expected `tritonkit build --target tensorrt`, found ['onnxruntime']"),
    (_builder_on_any_node, "Job/triton-engine-build: expected required node affinity"),
    (_build_without_priority, "expected a priorityClassName defined in the overlay, found none"),
    (_trt_mismatch, "expected the marker `.engines-ready-trt10.5.0-sm75` to name TensorRT `10.7.0`"),
    (_monitor_wrong_port, "expected one endpoint on port `metrics`"),
    (_dashboard_without_dcgm, "expected a panel on `DCGM_FI_DEV_GPU_UTIL`"),
    (_adapter_rate_not_per_request, "expected `delta(nv_inference_queue_duration_us` in metricsQuery"),
]


@pytest.mark.parametrize(
    ("mutate", "expected"), T4_REGRESSIONS, ids=[m.__name__.strip("_") for m, _ in T4_REGRESSIONS]
)
def test_checklist_bites_on_t4(
    rendered: Rendered, mutate: Callable[[list[Obj]], None], expected: str
) -> None:
    objects = rendered("t4")
    mutate(objects)
    problems = deploy.checklist(objects, "t4")
    assert any(expected in line for line in problems), problems
    assert all(line.startswith("t4: ") for line in problems)


def test_checklist_bites_on_dev_gpu_and_loadtest_wiring(rendered: Rendered) -> None:
    dev = rendered("dev")
    _triton(dev)["resources"]["limits"]["nvidia.com/gpu"] = 1
    assert any(
        "expected no GPU in the dev overlay, found nvidia.com/gpu 1" in p
        for p in deploy.checklist(dev, "dev")
    )

    loadtest = rendered("loadtest")
    find(loadtest, "Deployment", "locust-worker")["spec"]["replicas"] = 2
    scenario_map = find(loadtest, "ConfigMap", "locust-scenario")["data"]
    scenario = json.loads(scenario_map["scenario.json"])
    scenario.update(http_url="example.com:8000", scenario="burst")
    scenario_map["scenario.json"] = json.dumps(scenario)
    problems = deploy.checklist(loadtest, "loadtest", scenarios=SCENARIOS)
    assert any("LOCUST_EXPECT_WORKERS=4 must equal the worker replicas (2)" in p for p in problems), problems
    assert any(
        "expected http_url on the Triton Service's port 8000, found `example.com:8000`" in p for p in problems
    )
    assert any(
        "expected scenario in ['ramp', 'soak', 'spike', 'steady'], found 'burst'" in p for p in problems
    )

    # a stopping user must finish the request it is in: Locust's stop timeout over the request timeout,
    # the worker pods' grace over that
    loadtest = rendered("loadtest")
    scenario_map = find(loadtest, "ConfigMap", "locust-scenario")["data"]
    scenario_map["scenario.json"] = json.dumps(
        {**json.loads(scenario_map["scenario.json"]), "request_timeout": 120.0}
    )
    del find(loadtest, "Deployment", "locust-worker")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    problems = deploy.checklist(loadtest, "loadtest", scenarios=SCENARIOS)
    assert any(
        "LOCUST_STOP_TIMEOUT=65 must exceed the scenario's request_timeout (120 s), or stopping users cancel"
        in p
        for p in problems
    ), problems
    assert any(
        "terminationGracePeriodSeconds 30 must exceed the users' stop timeout (120 s)" in p for p in problems
    )


# --- the server command line ---------------------------------------------------------------------
def test_triton_args_resolve_configmap_and_secret(rendered: Rendered) -> None:
    objects = rendered("t4")
    args = deploy.triton_args(objects, secrets={"tritonkit-admin-key/key": "k3y"})
    assert args[0] == "tritonserver"
    assert not [a for a in args if "$(" in a]
    assert f"--exit-timeout-secs={_server_args(objects)['TRITON_EXIT_TIMEOUT_SECS']}" in args
    restricted = "model-repository,shared-memory,trace,logging:tritonkit-admin-key=k3y"
    assert f"--http-restricted-api={restricted}" in args
    assert f"--grpc-restricted-protocol={restricted}" in args
    # without the secret the key stays a placeholder, never an empty string
    assert (
        "--http-restricted-api=model-repository,shared-memory,trace,logging:tritonkit-admin-key=<secret tritonkit-admin-key/key>"
        in deploy.triton_args(objects)
    )


# --- checkov skips ---------------------------------------------------------------------------------
@pytest.mark.parametrize("overlay", sorted(deploy.OVERLAYS))
def test_every_checkov_skip_is_justified(rendered: Rendered, overlay: str) -> None:
    assert deploy.skip_problems(rendered(overlay)) == []


def test_unjustified_skip_is_reported(rendered: Rendered) -> None:
    objects = rendered("t4")
    find(objects, "Deployment", "triton")["metadata"]["annotations"]["checkov.io/skip9"] = "CKV_K8S_16=ok"
    assert deploy.skip_problems(objects) == [
        "Deployment/triton: checkov.io/skip9 must read `CKV_K8S_NN=<reason of 20+ chars, no '='>`, found `CKV_K8S_16=ok`"
    ]


# --- checkov ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def checkov_binary() -> Any:
    path = deploy.find_checkov()
    if path is None:
        pytest.skip("needs checkov: run `make checkov` (creates .venv-checkov) or set TRITONKIT_CHECKOV")
    return path


def test_checkov_passes_every_overlay_and_bites(
    rendered_all: dict[str, list[Obj]], checkov_binary: Any
) -> None:
    broken = copy.deepcopy(rendered_all["t4"])
    security = _triton(broken)["securityContext"]
    security["privileged"] = True
    security["readOnlyRootFilesystem"] = False
    # one run (checkov starts slowly): the real overlays next to a copy with two regressions
    result = deploy.run_checkov({**rendered_all, "t4-broken": broken}, checkov=checkov_binary)
    assert result.passed > 0
    assert {line.split(" (")[1].split(")")[0] for line in result.failed} == {"t4-broken"}, result.failed
    failed_ids = {line.split()[0] for line in result.failed if "Deployment.tritonkit.triton" in line}
    assert {"CKV_K8S_16", "CKV_K8S_22"} <= failed_ids, result.failed
    annotations = sum(
        key.startswith("checkov.io/skip")
        for objects in rendered_all.values()
        for obj in objects
        for key in (obj["metadata"].get("annotations") or {})
    )
    real_skips = [line for line in result.skipped if "(t4-broken)" not in line]
    assert len(real_skips) == annotations  # every skip is one of ours, none is checkov's own default
    assert all(line.split(": ", 1)[1].strip() for line in real_skips)


# --- the rendered command line on the real tritonserver ----------------------------------------------
def _status(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    request = urllib.request.Request(
        url, headers=headers or {}, method=method, data=b"{}" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.parametrize("overlay", deploy.SERVER_OVERLAYS)
def test_rendered_args_run_on_real_triton_and_restrict_apis(
    rendered: Rendered, overlay: str, tmp_path: Any
) -> None:

    key = secrets.token_hex(16)
    args = deploy.triton_args(rendered(overlay), secrets={"tritonkit-admin-key/key": key})
    # The in-cluster repository path and fixed ports become a temp folder and free loopback ports;
    # every other flag goes to tritonserver 2.51 exactly as the pod would pass it (given last, so it wins).
    local = [
        a
        for a in args[1:]
        if a.split("=", 1)[0] not in ("--model-repository", "--http-port", "--grpc-port", "--metrics-port")
    ]
    assert len(local) == len(args) - 5
    header = {"tritonkit-admin-key": key}
    with EmbeddedServer(tmp_path, ServerOptions(restricted_apis=(), extra_args=local)) as server:
        base = f"http://{server.http_url}"
        assert _status(f"{base}/v2/health/ready") == 200  # probes need no key
        assert _status(f"{base}/v2/health/live") == 200
        # statistics are open: perf_analyzer, Model Analyzer and NVIDIA's examples read them
        assert _status(f"{base}/v2/models/stats") == 200
        for path, method in (
            ("/v2/repository/index", "POST"),
            ("/v2/systemsharedmemory/status", "GET"),
            ("/v2/trace/setting", "GET"),
            ("/v2/logging", "GET"),
        ):
            assert _status(base + path, method=method) == 403, path
            assert _status(base + path, header, method=method) == 200, path
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            assert client.get_inference_statistics() is not None
            with pytest.raises(InferenceServerException, match="restricted"):
                client.get_model_repository_index()
            # gRPC metadata carries the header under Triton's prefix (seen on 2.51; docs/deploy.md)
            grpc_header = {f"triton-grpc-protocol-{name}": value for name, value in header.items()}
            with pytest.raises(InferenceServerException, match="restricted"):
                client.get_model_repository_index(headers=header)
            assert client.get_model_repository_index(headers=grpc_header) is not None
        finally:
            client.close()
