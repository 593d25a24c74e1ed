"""Deployment on Kubernetes: rendering the ``k8s/`` overlays, schema validation, the checklist, checkov.

Modules, lowest first: :mod:`.package` (the build Jobs' workspace layout and ``tritonkit k8s package``),
:mod:`.objects` (reading rendered objects, a container's environment),
:mod:`.manifests` (the overlays, ``kubectl kustomize``, parsing), :mod:`.schemas` (strict validation),
:mod:`.arguments` (the Triton command line an overlay runs), :mod:`.checks` (the deployment checklist, one
module per concern), :mod:`.checkov` (checkov and its skip annotations) and :mod:`.report` (``check``,
everything at once). ``tritonkit k8s`` (:mod:`tritonkit.commands.k8s`) is the CLI.

Callers read the public names from here (``from tritonkit import deploy``; ``deploy.render("t4")``). This
package imports nothing from :mod:`tritonkit.loadtest`: the load-test scenario names the checklist accepts
are passed in by the caller. Every problem is one line naming the overlay, the object and what was
expected versus found.
"""

from __future__ import annotations

from tritonkit.deploy.arguments import TRITON_IMAGE, triton_args
from tritonkit.deploy.checkov import CheckovResult, find_checkov, run_checkov, skip_problems
from tritonkit.deploy.checks import checklist
from tritonkit.deploy.checks.scaling import ADAPTER_METRIC
from tritonkit.deploy.checks.server import REQUIRED_RESTRICTED_APIS
from tritonkit.deploy.checks.t4 import GPU_PRODUCTS
from tritonkit.deploy.manifests import (
    OVERLAYS,
    SERVER_OVERLAYS,
    find_kubectl,
    kustomize,
    manifests_dir,
    overlay_dir,
    parse_objects,
    render,
    render_text,
)
from tritonkit.deploy.objects import container_env
from tritonkit.deploy.package import (
    INPUTS_DIR,
    TIMING_CACHE_ENV,
    WORKSPACE_ENV,
    package_onnx,
    package_spec,
)
from tritonkit.deploy.report import CheckReport, check
from tritonkit.deploy.schemas import KUBERNETES_VERSION, validate

__all__ = [
    "ADAPTER_METRIC",
    "GPU_PRODUCTS",
    "INPUTS_DIR",
    "KUBERNETES_VERSION",
    "OVERLAYS",
    "REQUIRED_RESTRICTED_APIS",
    "SERVER_OVERLAYS",
    "TIMING_CACHE_ENV",
    "TRITON_IMAGE",
    "WORKSPACE_ENV",
    "CheckReport",
    "CheckovResult",
    "check",
    "checklist",
    "container_env",
    "find_checkov",
    "find_kubectl",
    "kustomize",
    "manifests_dir",
    "overlay_dir",
    "package_onnx",
    "package_spec",
    "parse_objects",
    "render",
    "render_text",
    "run_checkov",
    "skip_problems",
    "triton_args",
    "validate",
]
