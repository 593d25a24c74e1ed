"""The Triton pod items of the checklist: how the pods serve, start, stop and stay available.

Owns the checks run on every server overlay's Triton Deployment: ports (container and Service), health
probes and the start-up budget, ``/dev/shm`` and the read-only model repository, graceful shutdown,
disruption budget and topology spread, NetworkPolicies, and the start-up gate (ServiceAccount, an
initContainer waiting for the repository marker). Each takes ``(problems, objects, server)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tritonkit.deploy.checks.context import Problems, Server
from tritonkit.deploy.objects import Obj, command_line, container_env, find, quantity, ref, selects

__all__ = ["MIN_SHM_BYTES", "MIN_STARTUP_BUDGET_S", "SERVING_CHECKS", "TRITON_PORTS", "triton_services"]

#: Lower bound for the start-up probe's budget (period x failures): engine deserialization and
#: python-backend stubs take minutes on a T4, and a too-short budget kills pods in a restart loop.
MIN_STARTUP_BUDGET_S = 300
MIN_SHM_BYTES = 256 * 2**20
TRITON_PORTS = (("http", 8000), ("grpc", 8001), ("metrics", 8002))


def triton_services(objects: Sequence[Obj], labels: dict[str, str]) -> list[Obj]:
    """The Services selecting pods with ``labels``."""
    return [s for s in find(objects, "Service") if selects(s.get("spec", {}).get("selector"), labels)]


def _check_ports(p: Problems, objects: Sequence[Obj], server: Server) -> None:
    """Container and Service ports 8000/8001/8002."""
    ports = {port.get("name"): port.get("containerPort") for port in server.container.get("ports", [])}
    for name, number in TRITON_PORTS:
        p.expect(
            ports.get(name) == number,
            server.where,
            f"expected port `{name}` {number}, found {ports.get(name)}",
        )
    services = triton_services(objects, server.labels)
    if p.expect(bool(services), "Service", "expected a Service selecting the Triton pods"):
        service_ports = {
            port.get("name"): port.get("port") for port in services[0].get("spec", {}).get("ports", [])
        }
        for name, number in TRITON_PORTS:
            p.expect(
                service_ports.get(name) == number,
                ref(services[0]),
                f"expected port `{name}` {number}, found {service_ports.get(name)}",
            )


def _check_probes(p: Problems, objects: Sequence[Obj], server: Server) -> None:
    """Start-up and readiness on /ready, liveness on /live, a start-up budget for model load."""
    container = server.container
    for probe, path in (
        ("startupProbe", "/v2/health/ready"),
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        spec = container.get(probe) or {}
        got = (spec.get("httpGet") or {}).get("path")
        p.expect(got == path, server.where, f"expected {probe} httpGet {path}, found {got}")
    startup = container.get("startupProbe") or {}
    budget = startup.get("initialDelaySeconds", 0) + startup.get("periodSeconds", 10) * startup.get(
        "failureThreshold", 3
    )
    p.expect(
        budget >= MIN_STARTUP_BUDGET_S,
        server.where,
        f"startupProbe allows {budget} s for model load; expected >= {MIN_STARTUP_BUDGET_S} s",
    )


def _check_volumes(p: Problems, objects: Sequence[Obj], server: Server) -> None:
    """A memory-backed /dev/shm, and the model repository mounted read-only."""
    mounts = server.container.get("volumeMounts", [])
    volumes = {v.get("name"): v for v in server.pod.get("volumes", [])}
    shm_mounts = [m for m in mounts if m.get("mountPath") == "/dev/shm"]
    if p.expect(
        bool(shm_mounts),
        server.where,
        "expected a volume mounted at /dev/shm (the python backend needs more than 64 MB)",
    ):
        empty_dir = (volumes.get(shm_mounts[0].get("name")) or {}).get("emptyDir") or {}
        p.expect(
            empty_dir.get("medium") == "Memory",
            server.where,
            f"expected /dev/shm as emptyDir medium Memory, found {empty_dir or 'another volume'}",
        )
        size = quantity(empty_dir.get("sizeLimit"))
        p.expect(
            size is not None and size >= MIN_SHM_BYTES,
            server.where,
            f"expected /dev/shm sizeLimit >= 256Mi, found {empty_dir.get('sizeLimit')}",
        )

    repo = (server.flags.get("--model-repository") or [""])[0]
    repo_mounts = [m for m in mounts if m.get("mountPath") == repo]
    p.expect(
        bool(repo_mounts) and repo_mounts[0].get("readOnly") is True,
        server.where,
        f"expected the model repository `{repo}` mounted read-only",
    )


def _pre_stop_sleep(container: Obj) -> int:
    """Seconds the container's preStop hook sleeps (``sleep`` action or ``exec: [sleep, N]``); 0 if none."""
    pre_stop = ((container.get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"].get("seconds", 0))
    command = (pre_stop.get("exec") or {}).get("command") or []
    if len(command) == 2 and Path(str(command[0])).name == "sleep" and str(command[1]).isdigit():
        return int(command[1])
    return 0


def _check_shutdown(p: Problems, objects: Sequence[Obj], server: Server) -> None:
    """preStop sleep + --exit-timeout-secs fit in the grace period."""
    exit_timeout_text = (server.flags.get("--exit-timeout-secs") or [""])[0]
    exit_timeout = int(exit_timeout_text) if exit_timeout_text.isdigit() else None
    p.expect(
        exit_timeout is not None,
        server.where,
        f"expected `--exit-timeout-secs=N`, found `{exit_timeout_text or 'none'}`",
    )
    sleep = _pre_stop_sleep(server.container)
    p.expect(
        sleep > 0, server.where, "expected a preStop sleep so endpoints drop the pod before Triton drains"
    )
    grace = server.pod.get("terminationGracePeriodSeconds", 30)
    if exit_timeout is not None:
        p.expect(
            grace > sleep + exit_timeout,
            ref(server.deployment),
            f"terminationGracePeriodSeconds {grace} must exceed preStop sleep {sleep} + --exit-timeout-secs {exit_timeout}",
        )


def _check_availability(p: Problems, objects: Sequence[Obj], server: Server) -> None:
    """PodDisruptionBudget and topology spread over the Triton pods."""
    labels = server.labels
    pdbs = [
        x
        for x in find(objects, "PodDisruptionBudget")
        if selects(x.get("spec", {}).get("selector", {}).get("matchLabels"), labels)
    ]
    if p.expect(
        bool(pdbs), "PodDisruptionBudget", "expected a PodDisruptionBudget selecting the Triton pods"
    ):
        spec = pdbs[0].get("spec", {})
        p.expect(
            "minAvailable" in spec or "maxUnavailable" in spec,
            ref(pdbs[0]),
            "expected minAvailable or maxUnavailable",
        )
    spread = server.pod.get("topologySpreadConstraints") or []
    p.expect(
        any(selects(c.get("labelSelector", {}).get("matchLabels"), labels) for c in spread),
        ref(server.deployment),
        "expected a topologySpreadConstraint over the Triton pods",
    )


def _check_network(p: Problems, objects: Sequence[Obj], server: Server) -> None:
    """NetworkPolicies on the Triton pods admit named peers on named ports only."""
    policies = [
        n
        for n in find(objects, "NetworkPolicy")
        if selects(n.get("spec", {}).get("podSelector", {}).get("matchLabels"), server.labels)
    ]
    if not p.expect(bool(policies), "NetworkPolicy", "expected a NetworkPolicy selecting the Triton pods"):
        return
    for policy in policies:
        spec = policy.get("spec", {})
        p.expect(
            "Ingress" in (spec.get("policyTypes") or []),
            ref(policy),
            "expected policyTypes to include Ingress",
        )
        for rule in spec.get("ingress") or []:
            peers = rule.get("from") or []
            open_peer = not peers or any(
                not (peer.get("podSelector") or {}).get("matchLabels")
                and not (peer.get("namespaceSelector") or {}).get("matchLabels")
                for peer in peers
            )
            p.expect(
                not open_peer,
                ref(policy),
                f"ingress rule admits any peer ({peers or 'no from'}); expected named pods/namespaces",
            )
            p.expect(
                bool(rule.get("ports")),
                ref(policy),
                "ingress rule opens every port; expected a list of ports",
            )


def _check_startup_gate(p: Problems, objects: Sequence[Obj], server: Server) -> None:
    """The ServiceAccount exists; an initContainer waits for the repository marker."""
    account = server.pod.get("serviceAccountName")
    p.expect(
        bool(account) and bool(find(objects, "ServiceAccount", account)),
        ref(server.deployment),
        f"expected ServiceAccount `{account}` in the overlay",
    )
    marker = server.env.get("TRITON_REPOSITORY_READY_MARKER", "")
    waits = False
    for init in server.pod.get("initContainers", []):
        init_env, _ = container_env(init, objects)
        script = " ".join(command_line(init, init_env))
        waits = waits or (bool(marker) and marker in script)
    p.expect(
        waits,
        ref(server.deployment),
        f"expected an initContainer waiting for the repository marker `{marker or '(unset)'}`",
    )


#: The pod checks, in the order their problems are reported.
SERVING_CHECKS: tuple[Callable[[Problems, Sequence[Obj], Server], None], ...] = (
    _check_ports,
    _check_probes,
    _check_volumes,
    _check_shutdown,
    _check_availability,
    _check_network,
    _check_startup_gate,
)
