"""The Triton server a rendered overlay runs: its Deployment and container, and its command line.

Owns recognising the Triton container (the one whose command is ``tritonserver``: NVIDIA's image or the
project's image built on it), what the project's Triton image is called, and :func:`triton_args`, the
command line with ``$(VAR)`` resolved as the kubelet would, so tests can hand it to the real
``tritonserver``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tritonkit.deploy.objects import SECRET, Obj, command_line, container_env, find, pod_spec
from tritonkit.errors import DeployError

__all__ = [
    "PROJECT_TRITON_IMAGES",
    "TRITON_IMAGE",
    "is_project_triton_image",
    "triton_args",
    "triton_container",
]

#: NVIDIA's Triton image, the base of the project's own (k8s/images/Dockerfile, target ``triton``).
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver"
#: How the project's Triton image is named: its repository path ends with one of these.
PROJECT_TRITON_IMAGES = ("tritonkit-triton", "tritonkit/triton")


def triton_container(objects: Sequence[Obj]) -> tuple[Obj, Obj] | None:
    """The Triton Deployment and its server container (the first container whose command is ``tritonserver``)."""
    for deployment in find(objects, "Deployment"):
        for container in pod_spec(deployment).get("containers", []):
            command = [str(part) for part in container.get("command", [])]
            if command[:1] == ["tritonserver"]:
                return deployment, container
    return None


def is_project_triton_image(image: str) -> bool:
    """Whether ``image`` (``name[:tag][@digest]``) is the project's Triton image."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: name.rindex(":")]
    return name.endswith(PROJECT_TRITON_IMAGES)


def triton_args(objects: Sequence[Obj], *, secrets: Mapping[str, str] | None = None) -> list[str]:
    """The Triton container's command line with ``$(VAR)`` resolved as the kubelet would.

    ``secrets`` maps ``"NAME/KEY"`` to a value for the Secret references (the manifests never hold one).
    """
    found = triton_container(objects)
    if found is None:
        raise DeployError(
            "no Deployment runs `tritonserver`; expected one (NVIDIA's Triton image or the project's)"
        )
    _, container = found
    env, missing = container_env(container, objects)
    if missing:
        raise DeployError(missing[0])
    for secret_ref, value in (secrets or {}).items():
        name, _, key = secret_ref.partition("/")
        env = {k: (value if v == SECRET.format(name=name, key=key) else v) for k, v in env.items()}
    return command_line(container, env)
