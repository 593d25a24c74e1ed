"""Where the Kubernetes manifests live and how an overlay becomes objects.

Owns the overlays of ``k8s/`` (a kustomize base and its overlays), finding that tree and ``kubectl``,
rendering an overlay with ``kubectl kustomize``, and parsing the multi-document YAML it prints into one
dict per object.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from tritonkit.deploy.objects import Obj
from tritonkit.errors import DeployError

__all__ = [
    "OVERLAYS",
    "SERVER_OVERLAYS",
    "find_kubectl",
    "known_overlay",
    "kustomize",
    "manifests_dir",
    "overlay_dir",
    "parse_objects",
    "render",
    "render_text",
]

#: Overlay name -> directory under ``k8s/``. ``t4`` and ``dev`` are servers; ``loadtest`` is Locust.
OVERLAYS: dict[str, str] = {"t4": "overlays/t4", "dev": "overlays/dev", "loadtest": "loadtest"}
SERVER_OVERLAYS = ("t4", "dev")

_KUBECTL_HINT = "install kubectl >= 1.27 (it bundles kustomize v5) or point TRITONKIT_KUBECTL at it"


def manifests_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """The ``k8s/`` folder: ``root`` if given, else ``$TRITONKIT_K8S_DIR``, ``./k8s``, or the source tree's."""
    candidates: list[Path] = []
    if root is not None:
        candidates.append(Path(root))
    elif os.environ.get("TRITONKIT_K8S_DIR"):
        candidates.append(Path(os.environ["TRITONKIT_K8S_DIR"]))
    else:
        candidates += [Path.cwd() / "k8s", Path(__file__).resolve().parents[3] / "k8s"]
    for path in candidates:
        if (path / "base" / "kustomization.yaml").is_file():
            return path
    raise DeployError(
        f"no kustomize tree found at {candidates[0]}; expected a folder with base/kustomization.yaml "
        "(run from the repository root or pass --k8s-dir)"
    )


def find_kubectl() -> str:
    """Path of ``kubectl`` (``$TRITONKIT_KUBECTL`` first)."""
    path = os.environ.get("TRITONKIT_KUBECTL") or shutil.which("kubectl")
    if not path or not Path(path).exists():
        raise DeployError(f"`kubectl` not found on PATH; {_KUBECTL_HINT}")
    return path


def known_overlay(overlay: str) -> str:
    """``overlay`` itself when it is one of :data:`OVERLAYS`; a one-line error otherwise."""
    if overlay not in OVERLAYS:
        raise DeployError(f"unknown overlay `{overlay}`; expected one of: {', '.join(sorted(OVERLAYS))}")
    return overlay


def overlay_dir(overlay: str, root: str | os.PathLike[str] | None = None) -> Path:
    return manifests_dir(root) / OVERLAYS[known_overlay(overlay)]


def render_text(overlay: str, *, root: str | os.PathLike[str] | None = None) -> str:
    """The overlay's manifests as ``kubectl kustomize`` prints them (multi-document YAML)."""
    return kustomize(overlay_dir(overlay, root))


def kustomize(directory: str | os.PathLike[str]) -> str:
    """``kubectl kustomize DIRECTORY``: the manifests of any kustomization (a fleet plan's group overlays)."""
    result = subprocess.run(
        [find_kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        detail = lines[-1].strip() if lines else f"exit code {result.returncode}"
        raise DeployError(f"`kubectl kustomize {directory}` failed: {detail}")
    return result.stdout


def render(overlay: str, *, root: str | os.PathLike[str] | None = None) -> list[Obj]:
    """Render an overlay and parse it into one dict per Kubernetes object."""
    return parse_objects(render_text(overlay, root=root), source=f"overlay `{overlay}`")


def parse_objects(text: str, *, source: str = "manifests") -> list[Obj]:
    """The objects of a multi-document YAML text; each must have ``apiVersion`` and ``kind``."""
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc]
    except yaml.YAMLError as exc:
        raise DeployError(f"{source} is not valid YAML: {' '.join(str(exc).split())}") from None
    bad = [doc for doc in docs if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc]
    if bad:
        raise DeployError(
            f"{source}: expected Kubernetes objects with apiVersion and kind, got {str(bad[0])[:80]}"
        )
    return docs
