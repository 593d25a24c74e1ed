"""The Triton server items of the checklist: the pinned image, the server flags and the restricted APIs.

Owns finding the Triton Deployment in a server overlay, resolving its arguments through the ConfigMaps,
asserting the flags every deployment must run with (no model control, or explicit control with the
models loaded at start listed by ``--load-model``, as a fleet plan's group pod runs; strict readiness,
exit on error, no SageMaker/Vertex endpoints, no auto-complete: what ``tritonkit serve`` writes, read from
:data:`tritonkit.serve.options.SERVER_FLAGS`) and the admin header (``tritonkit-admin-key``, the name
``tritonkit serve`` uses) on every restricted API group; then
it hands the :class:`~tritonkit.deploy.checks.context.Server` to the pod checks of
:mod:`~tritonkit.deploy.checks.serving` and the security context check.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonkit.deploy.arguments import is_project_triton_image, triton_container
from tritonkit.deploy.checks.context import Problems, Server
from tritonkit.deploy.checks.security import check_security
from tritonkit.deploy.checks.serving import SERVING_CHECKS
from tritonkit.deploy.objects import Obj, container_env, expand, flags, ref, unresolved
from tritonkit.serve.options import ADMIN_HEADER, DEFAULT_RESTRICTED_APIS, SERVER_FLAGS, SERVER_SWITCHES

__all__ = ["REQUIRED_FLAGS", "REQUIRED_RESTRICTED_APIS", "TRITON_UID", "check_triton"]

#: API groups that need the admin header (Triton's secure deployment guide): those ``tritonkit serve``
#: restricts by default.
REQUIRED_RESTRICTED_APIS = frozenset(DEFAULT_RESTRICTED_APIS)
#: Flags the server must run with, each exactly once with this value: those ``tritonkit serve`` writes
#: (:data:`~tritonkit.serve.options.SERVER_FLAGS`, the one description of both).
REQUIRED_FLAGS = SERVER_FLAGS
TRITON_UID = 1000


def _restricted(p: Problems, where: str, flag: str, values: list[str]) -> None:
    """``APIS:HEADER=KEY`` covering every required API group, the key from a Secret."""
    if not p.expect(len(values) == 1, where, f"expected `{flag}` once, found it {len(values)} times"):
        return
    apis, sep, header_key = values[0].partition(":")
    header, _, key = header_key.partition("=")
    missing = sorted(REQUIRED_RESTRICTED_APIS - set(apis.split(",")))
    p.expect(not missing, where, f"`{flag}` must restrict {', '.join(missing)}; found `{apis}`")
    p.expect(
        bool(sep and header),
        where,
        f"`{flag}` must name the header as `APIS:HEADER=KEY`; found `{values[0]}`",
    )
    # One header name locally (tritonkit serve, the client's --header) and in the cluster.
    p.expect(
        not header or header == ADMIN_HEADER,
        where,
        f"`{flag}` must use the header `{ADMIN_HEADER}` (as tritonkit serve does), found `{header}`",
    )
    p.expect(
        key.startswith("<secret "), where, f"`{flag}` key must come from a Secret, found `{key or '(empty)'}`"
    )


def _explicit(p: Problems, where: str, models: list[str]) -> None:
    """Explicit model control is accepted for a fixed list: each model named by ``--load-model`` (loaded at
    start; the model-repository API that could load others is restricted behind the admin key)."""
    p.expect(
        bool(models) and "*" not in models and all(models),
        where,
        "expected `--model-control-mode=none`, or `explicit` with the models to load named by `--load-model` "
        f"(not `*`), found explicit with {models or 'no --load-model'}",
    )
    p.expect(
        len(set(models)) == len(models), where, f"expected each `--load-model` once, found {sorted(models)}"
    )


def _image_pinned(image: str) -> bool:
    """Pinned by digest, or by a tag other than ``latest``."""
    last = image.split("@", 1)[0].rsplit("/", maxsplit=1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    return "@sha256:" in image or tag not in ("", "latest")


def check_triton(p: Problems, objects: Sequence[Obj]) -> tuple[Obj, Obj] | None:
    """Image pin, server flags and restricted APIs, then the pod checks; returns (Deployment, container)."""
    found = triton_container(objects)
    if not p.expect(
        found is not None, "Deployment", "expected a Deployment whose container runs `tritonserver`"
    ):
        return None
    assert found is not None
    deployment, container = found
    where = f"{ref(deployment)} container `{container.get('name')}`"
    image = str(container.get("image", ""))
    p.expect(_image_pinned(image), where, f"expected the image pinned by tag or digest, found `{image}`")
    # NVIDIA's image lacks what the python-backend models import (tokenizers, onnxruntime) and the pod's
    # root filesystem is read-only: the project's image (k8s/images/Dockerfile, target triton) has them.
    p.expect(
        is_project_triton_image(image),
        where,
        f"expected the project's Triton image (k8s/images/Dockerfile target triton, with the python-backend "
        f"packages), found `{image}`",
    )

    env, missing = container_env(container, objects)
    for line in missing:
        p.add(where, line)
    args = [expand(str(a), env) for a in container.get("args", [])]
    left = unresolved(args)
    p.expect(not left, where, f"args reference undefined variables {', '.join(left)}")
    server = Server(deployment, container, env, flags(args))
    for flag, value in REQUIRED_FLAGS.items():
        found_values = server.flags.get(flag)
        if flag == "--model-control-mode" and found_values == ["explicit"]:
            _explicit(p, where, server.flags.get("--load-model", []))
            continue
        p.expect(found_values == [value], where, f"expected `{flag}={value}`, found {found_values or 'none'}")
    for switch in SERVER_SWITCHES:
        p.expect(switch in server.flags, where, f"expected `{switch}`")
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
        _restricted(p, where, flag, server.flags.get(flag, []))
    for serving_check in SERVING_CHECKS:
        serving_check(p, objects, server)
    check_security(p, deployment, uid=TRITON_UID)
    return deployment, container
