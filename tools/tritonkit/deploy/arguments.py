"""The Triton server a rendered overlay runs: its Deployment and container, and its command line.

Owns recognising the Triton container (by its image) and :func:`triton_args`, the command line with
``$(VAR)`` resolved as the kubelet would, so tests can hand it to the real ``tritonserver``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tritonkit.deploy.objects import SECRET, Obj, command_line, container_env, find, pod_spec
from tritonkit.errors import DeployError

__all__ = ["TRITON_IMAGE", "triton_args", "triton_container"]

TRITON_IMAGE = "nvcr.io/nvidia/tritonserver"


def triton_container(objects: Sequence[Obj]) -> tuple[Obj, Obj] | None:
    """The Triton Deployment and its server container (the first container running :data:`TRITON_IMAGE`)."""
    for deployment in find(objects, "Deployment"):
        for container in pod_spec(deployment).get("containers", []):
            if str(container.get("image", "")).startswith(TRITON_IMAGE):
                return deployment, container
    return None


def triton_args(objects: Sequence[Obj], *, secrets: Mapping[str, str] | None = None) -> list[str]:
    """The Triton container's command line with ``$(VAR)`` resolved as the kubelet would.

    ``secrets`` maps ``"NAME/KEY"`` to a value for the Secret references (the manifests never hold one).
    """
    found = triton_container(objects)
    if found is None:
        raise DeployError(f"no Deployment runs the Triton image `{TRITON_IMAGE}`; expected one")
    _, container = found
    env, missing = container_env(container, objects)
    if missing:
        raise DeployError(missing[0])
    for secret_ref, value in (secrets or {}).items():
        name, _, key = secret_ref.partition("/")
        env = {k: (value if v == SECRET.format(name=name, key=key) else v) for k, v in env.items()}
    return command_line(container, env)
