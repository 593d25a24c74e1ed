"""The T4 overlay's scaling and monitoring items of the checklist.

Owns: the HorizontalPodAutoscaler (autoscaling/v2, on the queue-time-per-request pods metric, at least two
replicas, no replica count fixed in the Deployment); the prometheus-adapter rule that serves that metric;
the ServiceMonitor on the metrics port; and the Grafana dashboard with the Triton and DCGM panels.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence

import yaml

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.checks.serving import triton_services
from tritonkit.deploy.objects import Obj, find, pod_labels, ref, selects

__all__ = [
    "ADAPTER_METRIC",
    "DASHBOARD_METRICS",
    "check_adapter_rule",
    "check_autoscaling",
    "check_monitoring",
]

#: The pods metric prometheus-adapter serves and the HPA scales on.
ADAPTER_METRIC = "triton_queue_time_us_per_request"
DASHBOARD_METRICS = (
    "nv_inference_request_success",
    'quantile="0.99"',
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
)


def check_autoscaling(p: Problems, objects: Sequence[Obj], deployment: Obj) -> None:
    """HPA autoscaling/v2 on the queue-time pods metric, at least 2 replicas, none fixed in the Deployment."""
    name = deployment["metadata"]["name"]
    hpas = [
        h
        for h in find(objects, "HorizontalPodAutoscaler")
        if h.get("spec", {}).get("scaleTargetRef", {}).get("name") == name
    ]
    if not p.expect(bool(hpas), "HorizontalPodAutoscaler", f"expected an HPA scaling Deployment/{name}"):
        return
    hpa = hpas[0]
    p.expect(
        hpa.get("apiVersion") == "autoscaling/v2",
        ref(hpa),
        f"expected autoscaling/v2, found {hpa.get('apiVersion')}",
    )
    metrics = [
        m.get("pods", {}).get("metric", {}).get("name")
        for m in hpa.get("spec", {}).get("metrics", [])
        if m.get("type") == "Pods"
    ]
    p.expect(
        metrics == [ADAPTER_METRIC],
        ref(hpa),
        f"expected one Pods metric `{ADAPTER_METRIC}`, found {metrics}",
    )
    p.expect(
        hpa.get("spec", {}).get("minReplicas", 1) >= 2,
        ref(hpa),
        "expected minReplicas >= 2 (one pod may be disrupted)",
    )
    replicas = deployment.get("spec", {}).get("replicas")
    p.expect(
        replicas is None,
        ref(deployment),
        f"expected no replicas while an HPA scales it (each apply would reset it), found {replicas}",
    )


def check_adapter_rule(p: Problems, objects: Sequence[Obj]) -> None:
    """The prometheus-adapter rule computes queue time per request per pod."""
    rules: list[Obj] = []
    for cm in find(objects, "ConfigMap"):
        text = (cm.get("data") or {}).get("config.yaml")
        if text:
            with contextlib.suppress(yaml.YAMLError, AttributeError):
                rules += [r for r in (yaml.safe_load(text) or {}).get("rules", []) if isinstance(r, dict)]
    rule = next((r for r in rules if (r.get("name") or {}).get("as") == ADAPTER_METRIC), None)
    if rule is None:
        p.add("ConfigMap", f"expected a prometheus-adapter rule serving `{ADAPTER_METRIC}`")
        return
    query = " ".join(str(rule.get("metricsQuery", "")).split())
    for part in ("delta(nv_inference_queue_duration_us", "/ (1 + ", "delta(nv_inference_request_success"):
        p.expect(
            part in query,
            "prometheus-adapter rule",
            f"expected `{part}` in metricsQuery, found `{query}`",
        )
    overrides = (rule.get("resources") or {}).get("overrides") or {}
    p.expect(
        (overrides.get("pod") or {}).get("resource") == "pod",
        "prometheus-adapter rule",
        "expected the pod label mapped to the pod resource",
    )


def _check_service_monitor(p: Problems, objects: Sequence[Obj], deployment: Obj) -> None:
    """A ServiceMonitor selecting the Triton Service's metrics port, in its namespace."""
    services = triton_services(objects, pod_labels(deployment))
    monitors = find(objects, "ServiceMonitor")
    if not (
        p.expect(bool(monitors), "ServiceMonitor", "expected a ServiceMonitor for the metrics port")
        and services
    ):
        return
    spec = monitors[0].get("spec", {})
    service = services[0]
    p.expect(
        selects(spec.get("selector", {}).get("matchLabels"), service["metadata"].get("labels", {})),
        ref(monitors[0]),
        f"expected it to select {ref(service)}",
    )
    p.expect(
        [e.get("port") for e in spec.get("endpoints", [])] == ["metrics"],
        ref(monitors[0]),
        "expected one endpoint on port `metrics`",
    )
    names = (spec.get("namespaceSelector") or {}).get("matchNames") or []
    p.expect(
        service["metadata"].get("namespace") in names,
        ref(monitors[0]),
        f"expected namespaceSelector to include `{service['metadata'].get('namespace')}`",
    )


def _check_dashboard(p: Problems, objects: Sequence[Obj]) -> None:
    """A Grafana dashboard ConfigMap whose panels query every metric of :data:`DASHBOARD_METRICS`."""
    dashboards = [
        cm
        for cm in find(objects, "ConfigMap")
        if cm.get("metadata", {}).get("labels", {}).get("grafana_dashboard") == "1"
    ]
    if not p.expect(
        bool(dashboards), "ConfigMap", 'expected a Grafana dashboard ConfigMap (label grafana_dashboard: "1")'
    ):
        return
    for name, text in (dashboards[0].get("data") or {}).items():
        try:
            dashboard = json.loads(text)
        except json.JSONDecodeError as exc:
            p.add(ref(dashboards[0]), f"`{name}` is not valid JSON ({exc})")
            continue
        exprs = " ".join(
            str(t.get("expr", "")) for panel in dashboard.get("panels", []) for t in panel.get("targets", [])
        )
        for metric in DASHBOARD_METRICS:
            p.expect(metric in exprs, ref(dashboards[0]), f"expected a panel on `{metric}`")


def check_monitoring(p: Problems, objects: Sequence[Obj], deployment: Obj) -> None:
    """A ServiceMonitor on the metrics port; a Grafana dashboard with the Triton and DCGM panels."""
    _check_service_monitor(p, objects, deployment)
    _check_dashboard(p, objects)
