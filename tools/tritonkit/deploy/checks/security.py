"""The security-context item of the checklist, for every workload of every overlay.

Owns what each container (init ones too) must run with: non-root (a given UID for Triton), read-only root
filesystem, no privilege escalation, every capability dropped, the runtime's seccomp profile, CPU and
memory requests and limits; and no service-account token mounted in the pod.
"""

from __future__ import annotations

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.objects import Obj, all_containers, pod_spec, ref

__all__ = ["check_security"]


def check_security(p: Problems, workload: Obj, *, uid: int | None = None) -> None:
    """Every container (init ones too) with its effective settings: the container's win over the pod's."""
    pod = pod_spec(workload)
    pod_sc = pod.get("securityContext") or {}
    where = ref(workload)
    automount = pod.get("automountServiceAccountToken")
    p.expect(automount is False, where, f"expected automountServiceAccountToken: false, found {automount}")
    for container in all_containers(pod):
        c_where = f"{where} container `{container.get('name')}`"
        sc = container.get("securityContext") or {}
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        run_as = sc.get("runAsUser", pod_sc.get("runAsUser"))
        p.expect(non_root is True, c_where, f"expected runAsNonRoot: true, found {non_root}")
        if uid is not None:
            p.expect(run_as == uid, c_where, f"expected runAsUser {uid}, found {run_as}")
        else:
            p.expect(
                isinstance(run_as, int) and run_as > 0,
                c_where,
                f"expected a non-root runAsUser, found {run_as}",
            )
        ro = sc.get("readOnlyRootFilesystem")
        p.expect(ro is True, c_where, f"expected readOnlyRootFilesystem: true, found {ro}")
        escalation = sc.get("allowPrivilegeEscalation")
        p.expect(
            escalation is False, c_where, f"expected allowPrivilegeEscalation: false, found {escalation}"
        )
        p.expect(sc.get("privileged") is not True, c_where, "expected privileged to be false, found true")
        caps = sc.get("capabilities") or {}
        p.expect(
            "ALL" in (caps.get("drop") or []),
            c_where,
            f"expected capabilities.drop [ALL], found {caps.get('drop')}",
        )
        p.expect(not caps.get("add"), c_where, f"expected no added capabilities, found {caps.get('add')}")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        p.expect(
            seccomp == "RuntimeDefault", c_where, f"expected seccompProfile RuntimeDefault, found {seccomp}"
        )
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                value = (resources.get(section) or {}).get(resource)
                p.expect(value is not None, c_where, f"expected resources.{section}.{resource}, found none")
