"""The load-test overlay's items of the checklist: Locust wired to Triton, a known scenario, its reports kept.

Owns: a headless Locust master Job waiting for exactly the worker Deployment's replicas and running the
project's locustfile; the scenario JSON both read from a mounted ConfigMap (a known scenario name, models,
Triton's Service as target); reports on a PersistentVolumeClaim; the workers reaching the master through
its Service and the Triton pods through a NetworkPolicy; the security context of every workload.

The known scenario names come from the caller (``tritonkit.loadtest.scenarios.SCENARIOS``): the deploy
package sits below nothing it checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.checks.security import check_security
from tritonkit.deploy.objects import (
    Obj,
    command_line,
    configmap_data,
    container_env,
    find,
    flags,
    pod_labels,
    pod_spec,
    ref,
    selects,
    workloads,
)

__all__ = ["check_loadtest"]

LOCUST_MASTER_PORT = 5557


def _mounted_json(p: Problems, objects: Sequence[Obj], workload: Obj, container: Obj, path: str) -> Any:
    """The JSON document a container reads at ``path`` from a mounted ConfigMap (None, with a problem, if not)."""
    folder, _, key = path.rpartition("/")
    volumes = {v.get("name"): v for v in pod_spec(workload).get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount.get("mountPath", "").rstrip("/") == folder:
            name = ((volumes.get(mount.get("name")) or {}).get("configMap") or {}).get("name", "")
            text = (configmap_data(objects, name) or {}).get(key)
            if text is None:
                break
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                p.add(ref(workload), f"`{path}` is not valid JSON ({exc})")
                return None
    p.add(ref(workload), f"expected TRITONKIT_LOADTEST_CONFIG `{path or '(unset)'}` in a mounted ConfigMap")
    return None


def _check_scenario(p: Problems, where: str, scenario: Any, scenarios: Collection[str]) -> None:
    """The options of ``tritonkit loadtest``: a known shape, models, and Triton's Service as target."""
    if not p.expect(isinstance(scenario, dict), where, "expected the scenario to be a JSON object"):
        return
    known = sorted(scenarios)
    name = scenario.get("scenario")
    p.expect(name in known, where, f"expected scenario in {known}, found {name!r}")
    for key, port in (("http_url", 8000), ("grpc_url", 8001)):
        url = str(scenario.get(key, ""))
        p.expect(
            re.fullmatch(rf"triton(\.[a-z0-9.-]+)?:{port}", url) is not None,
            where,
            f"expected {key} on the Triton Service's port {port}, found `{url}`",
        )
    models = scenario.get("models") or []
    p.expect(
        bool(models) and all(isinstance(m, dict) and m.get("name") for m in models),
        where,
        f"expected at least one model with a name, found {models}",
    )
    users = scenario.get("users")
    p.expect(isinstance(users, int) and users >= 1, where, f"expected users >= 1, found {users!r}")


def _component(objects: Sequence[Obj], kind: str, component: str) -> list[Obj]:
    return [w for w in find(objects, kind) if pod_labels(w).get("app.kubernetes.io/component") == component]


def _check_scenario_wiring(
    p: Problems,
    objects: Sequence[Obj],
    master: Obj,
    worker: Obj,
    env: dict[str, str],
    script: str,
    scenarios: Collection[str],
) -> None:
    """Master and workers read one scenario; the workers can write its report_dir; the master moves it."""
    m_container = pod_spec(master)["containers"][0]
    w_container = pod_spec(worker)["containers"][0]
    scenario = _mounted_json(p, objects, master, m_container, env.get("TRITONKIT_LOADTEST_CONFIG", ""))
    if scenario is None:
        return
    _check_scenario(p, ref(master), scenario, scenarios)
    w_env, _ = container_env(w_container, objects)
    worker_view = _mounted_json(p, objects, worker, w_container, w_env.get("TRITONKIT_LOADTEST_CONFIG", ""))
    p.expect(worker_view == scenario, ref(worker), "expected the workers to read the master's scenario")
    report_dir = str(scenario.get("report_dir", ""))
    p.expect(
        any(m.get("mountPath") == report_dir for m in w_container.get("volumeMounts", [])),
        ref(worker),
        f"expected a writable volume at the scenario's report_dir `{report_dir}`",
    )
    p.expect(
        "report_dir" in script and "TRITONKIT_LOADTEST_CONFIG=" in script,
        ref(master),
        "expected the master to point report_dir at the run's folder",
    )
    _check_stop_timeout(p, master, worker, env, scenario)


def _check_stop_timeout(
    p: Problems, master: Obj, worker: Obj, env: dict[str, str], scenario: dict[str, Any]
) -> None:
    """A stopping user finishes the request it is in: Locust's stop timeout exceeds the scenario's request
    timeout (the locustfile raises it to that + 5 s), and the worker pods outlive it (tritonserver 2.51 can crash on a gRPC call cancelled while
    it is answered, triton-inference-server/server#7368)."""
    request_timeout = float(scenario.get("request_timeout", 60.0))
    given = env.get("LOCUST_STOP_TIMEOUT", "0")
    seconds = int(given) if given.isdigit() else 0
    p.expect(
        seconds > request_timeout,
        ref(master),
        f"LOCUST_STOP_TIMEOUT={given} must exceed the scenario's request_timeout ({request_timeout:g} s), "
        "or stopping users cancel calls in flight",
    )
    grace = pod_spec(worker).get("terminationGracePeriodSeconds", 30)
    p.expect(
        isinstance(grace, int) and grace > max(seconds, request_timeout),
        ref(worker),
        f"terminationGracePeriodSeconds {grace} must exceed the users' stop timeout "
        f"({max(seconds, request_timeout):g} s)",
    )


def _check_worker_network(p: Problems, objects: Sequence[Obj], master: Obj, worker: Obj) -> None:
    """``locust --worker`` reaches the master through its Service and Triton through a NetworkPolicy."""
    w_container = pod_spec(worker)["containers"][0]
    w_env, _ = container_env(w_container, objects)
    w_args = command_line(w_container, w_env)
    p.expect("--worker" in w_args, ref(worker), "expected `locust --worker`")
    master_host = (flags(w_args).get("--master-host") or [""])[0]
    services = find(objects, "Service", master_host)
    if p.expect(
        bool(services), ref(worker), f"expected --master-host to name a Service, found `{master_host}`"
    ):
        p.expect(
            selects(services[0].get("spec", {}).get("selector"), pod_labels(master)),
            ref(services[0]),
            "expected it to select the master pod",
        )
        p.expect(
            LOCUST_MASTER_PORT in [x.get("port") for x in services[0].get("spec", {}).get("ports", [])],
            ref(services[0]),
            f"expected port {LOCUST_MASTER_PORT}",
        )
    allowed = [
        n
        for n in find(objects, "NetworkPolicy")
        if n.get("spec", {}).get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
        == "triton"
        and any(
            selects((peer.get("podSelector") or {}).get("matchLabels"), pod_labels(worker))
            for rule in n.get("spec", {}).get("ingress", [])
            for peer in rule.get("from", [])
        )
    ]
    p.expect(
        bool(allowed), "NetworkPolicy", "expected a policy letting the Locust workers reach the Triton pods"
    )


def check_loadtest(p: Problems, objects: Sequence[Obj], *, scenarios: Collection[str]) -> None:
    """Headless master Job wired to its workers, the Triton Service and a reports volume."""
    masters = _component(objects, "Job", "master")
    workers = _component(objects, "Deployment", "worker")
    if not (
        p.expect(bool(masters), "Job", "expected a Locust master Job")
        and p.expect(bool(workers), "Deployment", "expected a Locust worker Deployment")
    ):
        return
    master, worker = masters[0], workers[0]
    m_container = pod_spec(master)["containers"][0]
    env, missing = container_env(m_container, objects)
    for line in missing:
        p.add(ref(master), line)
    script = " ".join(command_line(m_container, env))
    p.expect("--master" in script.split(), ref(master), "expected `locust --master`")
    p.expect(
        env.get("LOCUST_HEADLESS") == "true",
        ref(master),
        f"expected LOCUST_HEADLESS=true, found {env.get('LOCUST_HEADLESS')}",
    )
    expect_workers = env.get("LOCUST_EXPECT_WORKERS", "")
    replicas = worker.get("spec", {}).get("replicas", 1)
    p.expect(
        expect_workers == str(replicas),
        ref(master),
        f"LOCUST_EXPECT_WORKERS={expect_workers or '(unset)'} must equal the worker replicas ({replicas})",
    )
    p.expect(
        env.get("LOCUST_LOCUSTFILE", "").startswith("/app/loadtests/"),
        ref(master),
        f"expected the project's loadtests/ locustfile, found {env.get('LOCUST_LOCUSTFILE')}",
    )
    _check_scenario_wiring(p, objects, master, worker, env, script, scenarios)
    claims = {
        v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName")
        for v in pod_spec(master).get("volumes", [])
    }
    report_mounts = [
        m
        for m in m_container.get("volumeMounts", [])
        if claims.get(m.get("name")) and m.get("mountPath") == "/reports"
    ]
    p.expect(
        bool(report_mounts) and "--csv" in script and "--html" in script,
        ref(master),
        "expected --csv/--html reports on a PersistentVolumeClaim at /reports",
    )
    _check_worker_network(p, objects, master, worker)
    for workload in workloads(objects):
        check_security(p, workload)
