"""Rendering and validating the Kubernetes manifests in ``k8s/`` (a kustomize base and its overlays).

Owns: where the manifests live; rendering an overlay with ``kubectl kustomize``; schema validation with
``kubernetes-validate`` in strict mode against a pinned Kubernetes version, plus the schemas bundled in
``k8s/schemas/`` for custom resources it has none for (ServiceMonitor); the deployment checklist of
``shared/docs/REFERENCE.md`` asserted on the rendered objects (:func:`checklist`); running ``checkov``
when it is installed; and :func:`triton_args`, the Triton command line a rendered overlay would run, so
tests can hand it to the real ``tritonserver``. ``tritonkit k8s`` (:mod:`tritonkit.commands.k8s`) is the CLI.

Every problem is one line naming the overlay, the object and what was expected versus found.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tritonkit.errors import DeployError
from tritonkit.loadtest.scenarios import SCENARIOS as LOADTEST_SCENARIOS  # stdlib-only module, no Locust

__all__ = [
    "ADAPTER_METRIC",
    "KUBERNETES_VERSION",
    "OVERLAYS",
    "REQUIRED_RESTRICTED_APIS",
    "SERVER_OVERLAYS",
    "CheckReport",
    "CheckovResult",
    "check",
    "checklist",
    "container_env",
    "find_checkov",
    "find_kubectl",
    "manifests_dir",
    "overlay_dir",
    "parse_objects",
    "render",
    "render_text",
    "run_checkov",
    "skip_problems",
    "triton_args",
    "validate",
]

Obj = dict[str, Any]

#: Overlay name -> directory under ``k8s/``. ``t4`` and ``dev`` are servers; ``loadtest`` is Locust.
OVERLAYS: dict[str, str] = {"t4": "overlays/t4", "dev": "overlays/dev", "loadtest": "loadtest"}
SERVER_OVERLAYS = ("t4", "dev")
#: The Kubernetes version the schemas are checked against: the oldest minor still supported by the
#: major managed offerings when this was written; newer API servers accept everything it accepts.
KUBERNETES_VERSION = "1.30"
#: API groups that need the admin header (REFERENCE.md, secure deployment).
REQUIRED_RESTRICTED_APIS = frozenset({"model-repository", "shared-memory", "statistics", "trace", "logging"})
#: The pods metric prometheus-adapter serves and the HPA scales on.
ADAPTER_METRIC = "triton_queue_time_us_per_request"
T4_PRODUCTS = frozenset({"Tesla-T4", "Tesla-T4-SHARED"})
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver"
TRITON_UID = 1000
#: Lower bound for the start-up probe's budget (period x failures): engine deserialization and
#: python-backend stubs take minutes on a T4, and a too-short budget kills pods in a restart loop.
MIN_STARTUP_BUDGET_S = 300
MIN_SHM_BYTES = 256 * 2**20
DASHBOARD_METRICS = (
    "nv_inference_request_success",
    'quantile="0.99"',
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
)

_KUBECTL_HINT = "install kubectl >= 1.27 (it bundles kustomize v5) or point TRITONKIT_KUBECTL at it"
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_SECRET = "<secret {name}/{key}>"


# --- locating and rendering ----------------------------------------------------------------------
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


def overlay_dir(overlay: str, root: str | os.PathLike[str] | None = None) -> Path:
    if overlay not in OVERLAYS:
        raise DeployError(f"unknown overlay `{overlay}`; expected one of: {', '.join(sorted(OVERLAYS))}")
    return manifests_dir(root) / OVERLAYS[overlay]


def render_text(overlay: str, *, root: str | os.PathLike[str] | None = None) -> str:
    """The overlay's manifests as ``kubectl kustomize`` prints them (multi-document YAML)."""
    directory = overlay_dir(overlay, root)
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


# --- schema validation ---------------------------------------------------------------------------
def _ref(obj: Obj) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name', '?')}"


def _bundled_schema(obj: Obj, schemas_dir: Path) -> Path:
    group_version = str(obj["apiVersion"])
    group, _, version = group_version.rpartition("/")
    return schemas_dir / f"{str(obj['kind']).lower()}-{group or 'core'}-{version}.json"


def validate(
    objects: Iterable[Obj],
    *,
    kubernetes_version: str = KUBERNETES_VERSION,
    schemas_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Strict schema validation; returns one line per problem (empty when all objects are valid).

    Built-in kinds go through ``kubernetes_validate.validate(..., strict=True)``, which rejects unknown
    fields. A kind it has no schema for (a CRD) is checked against ``k8s/schemas/<kind>-<group>-<version>.json``
    and fails closed when there is none: an unvalidated object never passes silently.
    """
    try:
        import jsonschema
        import kubernetes_validate
        from kubernetes_validate import utils as kv_utils
    except ImportError as exc:
        raise DeployError(
            f"schema validation needs `{exc.name}`; install it with `pip install -e '.[dev]'`"
        ) from None

    available = kv_utils.all_versions()
    minor = [tuple(int(x) for x in v.split(".")[:2]) for v in available]
    wanted = re.fullmatch(r"v?(\d+)\.(\d+)(\.\d+)?", kubernetes_version)
    if wanted is None or not minor[0] <= (int(wanted[1]), int(wanted[2])) <= minor[-1]:
        raise DeployError(
            f"no Kubernetes schemas for version `{kubernetes_version}`; expected one from "
            f"{available[0].rsplit('.', 1)[0]} to {available[-1].rsplit('.', 1)[0]}"
        )
    schemas = Path(schemas_dir) if schemas_dir is not None else manifests_dir() / "schemas"
    problems: list[str] = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, kubernetes_version, strict=True)
        except kv_utils.ValidationError as exc:
            path = ".".join(str(part) for part in exc.path) or "(root)"
            problems.append(f"{_ref(obj)}: {path}: {exc.message} (Kubernetes {kubernetes_version}, strict)")
        except kv_utils.SchemaNotFoundError:
            schema_path = _bundled_schema(obj, schemas)
            if not schema_path.is_file():
                problems.append(
                    f"{_ref(obj)}: no schema for {obj['apiVersion']} {obj['kind']} in Kubernetes "
                    f"{kubernetes_version} nor at {schema_path}; expected one of them"
                )
                continue
            schema = json.loads(schema_path.read_text())
            validator = jsonschema.Draft202012Validator(schema)
            for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.path)):
                path = ".".join(str(part) for part in error.path) or "(root)"
                problems.append(f"{_ref(obj)}: {path}: {error.message} (bundled schema {schema_path.name})")
    return problems


# --- object helpers ------------------------------------------------------------------------------
def _objects(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        obj
        for obj in objects
        if obj.get("kind") == kind and (name is None or obj.get("metadata", {}).get("name") == name)
    ]


def _pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload.get("spec", {}).get("template", {}).get("spec", {})
    return spec


def _pod_labels(workload: Obj) -> dict[str, str]:
    labels: dict[str, str] = (
        workload.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
    )
    return labels


def _all_containers(pod: Obj) -> list[Obj]:
    return list(pod.get("initContainers", [])) + list(pod.get("containers", []))


def _selects(match_labels: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    return bool(match_labels) and all(labels.get(k) == v for k, v in (match_labels or {}).items())


def _workloads(objects: Iterable[Obj]) -> list[Obj]:
    return [obj for obj in objects if obj.get("kind") in ("Deployment", "Job", "StatefulSet", "DaemonSet")]


def _configmap_data(objects: Sequence[Obj], name: str) -> dict[str, str] | None:
    found = _objects(objects, "ConfigMap", name)
    if not found:
        return None
    return {str(k): str(v) for k, v in (found[0].get("data") or {}).items()}


def container_env(container: Obj, objects: Sequence[Obj]) -> tuple[dict[str, str], list[str]]:
    """The environment a container starts with (envFrom ConfigMaps, then env), and what could not be resolved.

    Secret references become a ``<secret NAME/KEY>`` placeholder: the value is never in the manifests.
    """
    env: dict[str, str] = {}
    missing: list[str] = []
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        if ref:
            data = _configmap_data(objects, ref.get("name", ""))
            if data is None:
                missing.append(f"ConfigMap `{ref.get('name')}` (envFrom) is not in the rendered objects")
            else:
                env.update({source.get("prefix", "") + k: v for k, v in data.items()})
    for item in container.get("env", []):
        name = item.get("name", "")
        if "value" in item:
            env[name] = _expand(str(item["value"]), env)
        elif secret := item.get("valueFrom", {}).get("secretKeyRef"):
            env[name] = _SECRET.format(name=secret.get("name"), key=secret.get("key"))
        elif cm := item.get("valueFrom", {}).get("configMapKeyRef"):
            data = _configmap_data(objects, cm.get("name", ""))
            if data is None or cm.get("key") not in data:
                missing.append(f"ConfigMap key `{cm.get('name')}/{cm.get('key')}` (env {name}) is missing")
            else:
                env[name] = data[cm["key"]]
    return env, missing


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are replaced, others stay as written."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text.replace("$$(", "\x00")).replace(
        "\x00", "$("
    )


def _expand_shell(text: str, env: Mapping[str, str]) -> str:
    return _SHELL_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def _quantity(value: Any) -> float | None:
    """A Kubernetes resource quantity in base units (bytes, cores); None when unparsable."""
    match = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(value).strip())
    if not match:
        return None
    factor = {
        None: 1,
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
    }[match.group(2)]
    return float(match.group(1)) * factor


def _flags(args: Sequence[str]) -> dict[str, list[str]]:
    """``--name=value`` and ``--name value`` (a script's words, quotes stripped) -> values by name."""
    words = [str(a).strip("\"'") for a in args]
    flags: dict[str, list[str]] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            name, sep, value = word.partition("=")
            if not sep and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
            flags.setdefault(name, []).append(value)
    return flags


def _triton(objects: Sequence[Obj]) -> tuple[Obj, Obj] | None:
    """The Triton Deployment and its server container."""
    for deployment in _objects(objects, "Deployment"):
        for container in _pod_spec(deployment).get("containers", []):
            if str(container.get("image", "")).startswith(TRITON_IMAGE):
                return deployment, container
    return None


def triton_args(objects: Sequence[Obj], *, secrets: Mapping[str, str] | None = None) -> list[str]:
    """The Triton container's command line with ``$(VAR)`` resolved as the kubelet would.

    ``secrets`` maps ``"NAME/KEY"`` to a value for the Secret references (the manifests never hold one).
    """
    found = _triton(objects)
    if found is None:
        raise DeployError(f"no Deployment runs the Triton image `{TRITON_IMAGE}`; expected one")
    _, container = found
    env, missing = container_env(container, objects)
    if missing:
        raise DeployError(missing[0])
    for ref, value in (secrets or {}).items():
        name, _, key = ref.partition("/")
        env = {k: (value if v == _SECRET.format(name=name, key=key) else v) for k, v in env.items()}
    return [
        _expand(str(part), env)
        for part in list(container.get("command", [])) + list(container.get("args", []))
    ]


# --- the checklist -------------------------------------------------------------------------------
class _Problems:
    def __init__(self, overlay: str) -> None:
        self.overlay = overlay
        self.lines: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.lines.append(f"{self.overlay}: {where}: {message}")

    def expect(self, condition: bool, where: str, message: str) -> bool:
        if not condition:
            self.add(where, message)
        return condition


def _check_security(p: _Problems, workload: Obj, *, uid: int | None = None) -> None:
    """Every container (init ones too) with its effective settings: the container's win over the pod's."""
    pod = _pod_spec(workload)
    pod_sc = pod.get("securityContext") or {}
    where = _ref(workload)
    automount = pod.get("automountServiceAccountToken")
    p.expect(automount is False, where, f"expected automountServiceAccountToken: false, found {automount}")
    for container in _all_containers(pod):
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


def _restricted(p: _Problems, where: str, flag: str, values: list[str]) -> None:
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
    p.expect(
        key.startswith("<secret "), where, f"`{flag}` key must come from a Secret, found `{key or '(empty)'}`"
    )


@dataclasses.dataclass
class _Server:
    """The Triton Deployment, its server container, environment and parsed flags."""

    deployment: Obj
    container: Obj
    env: dict[str, str]
    flags: dict[str, list[str]]

    @property
    def pod(self) -> Obj:
        return _pod_spec(self.deployment)

    @property
    def labels(self) -> dict[str, str]:
        return _pod_labels(self.deployment)

    @property
    def where(self) -> str:
        return f"{_ref(self.deployment)} container `{self.container.get('name')}`"


def _check_triton(p: _Problems, objects: Sequence[Obj]) -> tuple[Obj, Obj] | None:
    """Image pin, server flags and restricted APIs, then the sub-checks; returns (Deployment, container)."""
    found = _triton(objects)
    if not p.expect(found is not None, "Deployment", f"expected a Deployment running `{TRITON_IMAGE}`"):
        return None
    assert found is not None
    deployment, container = found
    where = f"{_ref(deployment)} container `{container.get('name')}`"
    image = str(container.get("image", ""))
    last = image.split("@", 1)[0].rsplit("/", maxsplit=1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    p.expect(
        "@sha256:" in image or (tag not in ("", "latest")),
        where,
        f"expected the image pinned by tag or digest, found `{image}`",
    )

    env, missing = container_env(container, objects)
    for line in missing:
        p.add(where, line)
    args = [_expand(str(a), env) for a in container.get("args", [])]
    unresolved = sorted({m.group(0) for a in args for m in _VAR.finditer(a)})
    p.expect(not unresolved, where, f"args reference undefined variables {', '.join(unresolved)}")
    flags = _flags(args)
    server = _Server(deployment, container, env, flags)
    for flag, value in {
        "--model-control-mode": "none",
        "--strict-readiness": "true",
        "--exit-on-error": "true",
        "--allow-sagemaker": "false",
        "--allow-vertex-ai": "false",
    }.items():
        found_values = flags.get(flag)
        p.expect(found_values == [value], where, f"expected `{flag}={value}`, found {found_values or 'none'}")
    p.expect("--disable-auto-complete-config" in flags, where, "expected `--disable-auto-complete-config`")
    _restricted(p, where, "--http-restricted-api", flags.get("--http-restricted-api", []))
    _restricted(p, where, "--grpc-restricted-protocol", flags.get("--grpc-restricted-protocol", []))
    for sub_check in (
        _check_ports,
        _check_probes,
        _check_volumes,
        _check_shutdown,
        _check_availability,
        _check_network,
        _check_startup_gate,
    ):
        sub_check(p, objects, server)
    _check_security(p, deployment, uid=TRITON_UID)
    return deployment, container


def _check_ports(p: _Problems, objects: Sequence[Obj], server: _Server) -> None:
    """Container and Service ports 8000/8001/8002."""
    container = server.container
    labels = server.labels
    where = server.where
    ports = {port.get("name"): port.get("containerPort") for port in container.get("ports", [])}
    for name, number in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
        p.expect(
            ports.get(name) == number, where, f"expected port `{name}` {number}, found {ports.get(name)}"
        )
    services = [
        s for s in _objects(objects, "Service") if _selects(s.get("spec", {}).get("selector"), labels)
    ]
    if p.expect(bool(services), "Service", "expected a Service selecting the Triton pods"):
        service_ports = {
            port.get("name"): port.get("port") for port in services[0].get("spec", {}).get("ports", [])
        }
        for name, number in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
            p.expect(
                service_ports.get(name) == number,
                _ref(services[0]),
                f"expected port `{name}` {number}, found {service_ports.get(name)}",
            )


def _check_probes(p: _Problems, objects: Sequence[Obj], server: _Server) -> None:
    """Start-up and readiness on /ready, liveness on /live, a start-up budget for model load."""
    container = server.container
    where = server.where
    for probe, path in (
        ("startupProbe", "/v2/health/ready"),
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        spec = container.get(probe) or {}
        got = (spec.get("httpGet") or {}).get("path")
        p.expect(got == path, where, f"expected {probe} httpGet {path}, found {got}")
    startup = container.get("startupProbe") or {}
    budget = startup.get("initialDelaySeconds", 0) + startup.get("periodSeconds", 10) * startup.get(
        "failureThreshold", 3
    )
    p.expect(
        budget >= MIN_STARTUP_BUDGET_S,
        where,
        f"startupProbe allows {budget} s for model load; expected >= {MIN_STARTUP_BUDGET_S} s",
    )


def _check_volumes(p: _Problems, objects: Sequence[Obj], server: _Server) -> None:
    """A memory-backed /dev/shm, and the model repository mounted read-only."""
    container = server.container
    pod = server.pod
    where = server.where
    flags = server.flags
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    shm_mounts = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == "/dev/shm"]
    if p.expect(
        bool(shm_mounts),
        where,
        "expected a volume mounted at /dev/shm (the python backend needs more than 64 MB)",
    ):
        empty_dir = (volumes.get(shm_mounts[0].get("name")) or {}).get("emptyDir") or {}
        p.expect(
            empty_dir.get("medium") == "Memory",
            where,
            f"expected /dev/shm as emptyDir medium Memory, found {empty_dir or 'another volume'}",
        )
        size = _quantity(empty_dir.get("sizeLimit"))
        p.expect(
            size is not None and size >= MIN_SHM_BYTES,
            where,
            f"expected /dev/shm sizeLimit >= 256Mi, found {empty_dir.get('sizeLimit')}",
        )

    repo = (flags.get("--model-repository") or [""])[0]
    mounts = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == repo]
    p.expect(
        bool(mounts) and mounts[0].get("readOnly") is True,
        where,
        f"expected the model repository `{repo}` mounted read-only",
    )


def _check_shutdown(p: _Problems, objects: Sequence[Obj], server: _Server) -> None:
    """preStop sleep + --exit-timeout-secs fit in the grace period."""
    deployment = server.deployment
    container = server.container
    pod = server.pod
    where = server.where
    flags = server.flags
    exit_timeout_text = (flags.get("--exit-timeout-secs") or [""])[0]
    exit_timeout = int(exit_timeout_text) if exit_timeout_text.isdigit() else None
    p.expect(
        exit_timeout is not None,
        where,
        f"expected `--exit-timeout-secs=N`, found `{exit_timeout_text or 'none'}`",
    )
    pre_stop = ((container.get("lifecycle") or {}).get("preStop")) or {}
    sleep = 0
    if "sleep" in pre_stop:
        sleep = int(pre_stop["sleep"].get("seconds", 0))
    elif (command := (pre_stop.get("exec") or {}).get("command") or []) and (
        Path(str(command[0])).name == "sleep" and len(command) == 2 and str(command[1]).isdigit()
    ):
        sleep = int(command[1])
    p.expect(sleep > 0, where, "expected a preStop sleep so endpoints drop the pod before Triton drains")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if exit_timeout is not None:
        p.expect(
            grace > sleep + exit_timeout,
            _ref(deployment),
            f"terminationGracePeriodSeconds {grace} must exceed preStop sleep {sleep} + --exit-timeout-secs {exit_timeout}",
        )


def _check_availability(p: _Problems, objects: Sequence[Obj], server: _Server) -> None:
    """PodDisruptionBudget and topology spread over the Triton pods."""
    deployment = server.deployment
    pod = server.pod
    labels = server.labels
    pdbs = [
        x
        for x in _objects(objects, "PodDisruptionBudget")
        if _selects(x.get("spec", {}).get("selector", {}).get("matchLabels"), labels)
    ]
    if p.expect(
        bool(pdbs), "PodDisruptionBudget", "expected a PodDisruptionBudget selecting the Triton pods"
    ):
        spec = pdbs[0].get("spec", {})
        p.expect(
            "minAvailable" in spec or "maxUnavailable" in spec,
            _ref(pdbs[0]),
            "expected minAvailable or maxUnavailable",
        )
    spread = pod.get("topologySpreadConstraints") or []
    p.expect(
        any(_selects(c.get("labelSelector", {}).get("matchLabels"), labels) for c in spread),
        _ref(deployment),
        "expected a topologySpreadConstraint over the Triton pods",
    )


def _check_network(p: _Problems, objects: Sequence[Obj], server: _Server) -> None:
    """NetworkPolicies on the Triton pods admit named peers on named ports only."""
    labels = server.labels
    policies = [
        n
        for n in _objects(objects, "NetworkPolicy")
        if _selects(n.get("spec", {}).get("podSelector", {}).get("matchLabels"), labels)
    ]
    if p.expect(bool(policies), "NetworkPolicy", "expected a NetworkPolicy selecting the Triton pods"):
        for policy in policies:
            spec = policy.get("spec", {})
            p.expect(
                "Ingress" in (spec.get("policyTypes") or []),
                _ref(policy),
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
                    _ref(policy),
                    f"ingress rule admits any peer ({peers or 'no from'}); expected named pods/namespaces",
                )
                p.expect(
                    bool(rule.get("ports")),
                    _ref(policy),
                    "ingress rule opens every port; expected a list of ports",
                )


def _check_startup_gate(p: _Problems, objects: Sequence[Obj], server: _Server) -> None:
    """The ServiceAccount exists; an initContainer waits for the repository marker."""
    deployment = server.deployment
    pod = server.pod
    env = server.env
    account = pod.get("serviceAccountName")
    p.expect(
        bool(account) and bool(_objects(objects, "ServiceAccount", account)),
        _ref(deployment),
        f"expected ServiceAccount `{account}` in the overlay",
    )
    marker = env.get("TRITON_REPOSITORY_READY_MARKER", "")
    waits = False
    for init in pod.get("initContainers", []):
        init_env, _ = container_env(init, objects)
        script = " ".join(
            _expand(str(x), init_env) for x in list(init.get("command", [])) + list(init.get("args", []))
        )
        waits = waits or (bool(marker) and marker in script)
    p.expect(
        waits,
        _ref(deployment),
        f"expected an initContainer waiting for the repository marker `{marker or '(unset)'}`",
    )


def _repository_jobs(
    p: _Problems, objects: Sequence[Obj], deployment: Obj, container: Obj
) -> list[tuple[Obj, Obj, str]]:
    """Jobs that fill the model repository the Triton pods read, with their container and resolved script."""
    claim = {
        v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName")
        for v in _pod_spec(deployment).get("volumes", [])
    }
    repo_claims = {
        claim.get(m.get("name")) for m in container.get("volumeMounts", []) if m.get("readOnly")
    } - {None}
    server_env, _ = container_env(container, objects)
    marker = server_env.get("TRITON_REPOSITORY_READY_MARKER")
    jobs: list[tuple[Obj, Obj, str]] = []
    for job in _objects(objects, "Job"):
        pod = _pod_spec(job)
        claims = {(v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod.get("volumes", [])}
        if not claims & repo_claims:
            continue
        for build in pod.get("containers", []):
            env, missing = container_env(build, objects)
            for line in missing:
                p.add(_ref(job), line)
            script = " ".join(
                _expand_shell(_expand(str(x), env), env)
                for x in list(build.get("command", [])) + list(build.get("args", []))
            )
            if "tritonkit build" in script:
                p.expect(
                    env.get("TRITON_REPOSITORY_READY_MARKER") == marker
                    and "TRITON_REPOSITORY_READY_MARKER" in " ".join(build.get("args", [])),
                    _ref(job),
                    f"expected the Job to write the marker the Triton pods wait for (`{marker}`), found `{env.get('TRITON_REPOSITORY_READY_MARKER')}`",
                )
                jobs.append((job, build, script))
    p.expect(
        bool(jobs), "Job", "expected a Job running `tritonkit build` into the Triton pods' model repository"
    )
    return jobs


def _gpu_limit(container: Obj) -> Any:
    return ((container.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")


def _check_t4_scheduling(p: _Problems, workload: Obj, container: Obj) -> None:
    """One GPU, required T4 node affinity in every term, the GPU taint tolerated."""
    where = _ref(workload)
    gpu = _gpu_limit(container)
    p.expect(
        str(gpu) == "1",
        f"{where} container `{container.get('name')}`",
        f"expected limits nvidia.com/gpu: 1, found {gpu}",
    )
    pod = _pod_spec(workload)
    terms = (
        ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    t4_terms = [
        term
        for term in terms
        if any(
            e.get("key") == "nvidia.com/gpu.product"
            and e.get("operator") == "In"
            and set(e.get("values", [])) == T4_PRODUCTS
            for e in term.get("matchExpressions", [])
        )
    ]
    p.expect(
        bool(terms) and len(t4_terms) == len(terms),
        where,
        f"expected required node affinity nvidia.com/gpu.product In {sorted(T4_PRODUCTS)} in every term, found {terms or 'none'}",
    )
    tolerations = pod.get("tolerations") or []
    p.expect(
        any(
            t.get("key") == "nvidia.com/gpu"
            and t.get("operator") == "Exists"
            and t.get("effect") == "NoSchedule"
            for t in tolerations
        ),
        where,
        f"expected toleration nvidia.com/gpu Exists NoSchedule, found {tolerations or 'none'}",
    )


def _check_t4(p: _Problems, objects: Sequence[Obj], deployment: Obj, container: Obj) -> None:
    """One T4 per pod; the engine build on a T4 for the Triton image's TensorRT; scaling; monitoring."""
    _check_t4_scheduling(p, deployment, container)
    server_env, _ = container_env(container, objects)
    for job, build, script in _repository_jobs(p, objects, deployment, container):
        env, _ = container_env(build, objects)
        flags = _flags(script.split())
        p.expect(
            flags.get("--target") == ["tensorrt"],
            _ref(job),
            f"expected `tritonkit build --target tensorrt`, found {flags.get('--target')}",
        )
        p.expect(flags.get("--gpu") == ["T4"], _ref(job), f"expected `--gpu T4`, found {flags.get('--gpu')}")
        _check_t4_scheduling(p, job, build)
        _check_build_priority(p, objects, job, deployment)
        trt = env.get("TENSORRT_VERSION", "")
        marker = server_env.get("TRITON_REPOSITORY_READY_MARKER", "")
        p.expect(
            bool(trt) and f"trt{trt}" in marker,
            _ref(job),
            f"expected the marker `{marker}` to name TensorRT `{trt or '(unset)'}`",
        )
        _check_security(p, job)
    _check_autoscaling(p, objects, deployment)
    _check_adapter_rule(p, objects)
    _check_monitoring(p, objects, deployment)


def _check_build_priority(p: _Problems, objects: Sequence[Obj], job: Obj, deployment: Obj) -> None:
    """The engine build outranks the Triton pods, which hold their T4 while waiting for it (no deadlock)."""

    def priority(workload: Obj) -> int:
        name = _pod_spec(workload).get("priorityClassName")
        classes = _objects(objects, "PriorityClass", name) if name else []
        return int(classes[0].get("value", 0)) if classes else 0

    name = _pod_spec(job).get("priorityClassName")
    p.expect(
        bool(name) and bool(_objects(objects, "PriorityClass", name)),
        _ref(job),
        f"expected a priorityClassName defined in the overlay, found {name or 'none'}",
    )
    p.expect(
        priority(job) > priority(deployment),
        _ref(job),
        f"expected a priority above the Triton pods' ({priority(job)} <= {priority(deployment)}): "
        "waiting Triton pods hold every T4 otherwise",
    )


def _check_autoscaling(p: _Problems, objects: Sequence[Obj], deployment: Obj) -> None:
    """HPA autoscaling/v2 on the queue-time pods metric, at least 2 replicas, none fixed in the Deployment."""
    hpas = [
        h
        for h in _objects(objects, "HorizontalPodAutoscaler")
        if h.get("spec", {}).get("scaleTargetRef", {}).get("name") == deployment["metadata"]["name"]
    ]
    if p.expect(
        bool(hpas),
        "HorizontalPodAutoscaler",
        f"expected an HPA scaling Deployment/{deployment['metadata']['name']}",
    ):
        hpa = hpas[0]
        p.expect(
            hpa.get("apiVersion") == "autoscaling/v2",
            _ref(hpa),
            f"expected autoscaling/v2, found {hpa.get('apiVersion')}",
        )
        metrics = [
            m.get("pods", {}).get("metric", {}).get("name")
            for m in hpa.get("spec", {}).get("metrics", [])
            if m.get("type") == "Pods"
        ]
        p.expect(
            metrics == [ADAPTER_METRIC],
            _ref(hpa),
            f"expected one Pods metric `{ADAPTER_METRIC}`, found {metrics}",
        )
        p.expect(
            hpa.get("spec", {}).get("minReplicas", 1) >= 2,
            _ref(hpa),
            "expected minReplicas >= 2 (one pod may be disrupted)",
        )
        replicas = deployment.get("spec", {}).get("replicas")
        p.expect(
            replicas is None,
            _ref(deployment),
            f"expected no replicas while an HPA scales it (each apply would reset it), found {replicas}",
        )


def _check_adapter_rule(p: _Problems, objects: Sequence[Obj]) -> None:
    """The prometheus-adapter rule computes queue time per request per pod."""
    rules: list[Obj] = []
    for cm in _objects(objects, "ConfigMap"):
        text = (cm.get("data") or {}).get("config.yaml")
        if text:
            with contextlib.suppress(yaml.YAMLError, AttributeError):
                rules += [r for r in (yaml.safe_load(text) or {}).get("rules", []) if isinstance(r, dict)]
    rule = next((r for r in rules if (r.get("name") or {}).get("as") == ADAPTER_METRIC), None)
    if p.expect(
        rule is not None, "ConfigMap", f"expected a prometheus-adapter rule serving `{ADAPTER_METRIC}`"
    ):
        assert rule is not None
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


def _check_monitoring(p: _Problems, objects: Sequence[Obj], deployment: Obj) -> None:
    """A ServiceMonitor on the metrics port; a Grafana dashboard with the Triton and DCGM panels."""
    labels = _pod_labels(deployment)
    services = [
        s for s in _objects(objects, "Service") if _selects(s.get("spec", {}).get("selector"), labels)
    ]
    monitors = _objects(objects, "ServiceMonitor")
    if (
        p.expect(bool(monitors), "ServiceMonitor", "expected a ServiceMonitor for the metrics port")
        and services
    ):
        spec = monitors[0].get("spec", {})
        service = services[0]
        p.expect(
            _selects(spec.get("selector", {}).get("matchLabels"), service["metadata"].get("labels", {})),
            _ref(monitors[0]),
            f"expected it to select {_ref(service)}",
        )
        p.expect(
            [e.get("port") for e in spec.get("endpoints", [])] == ["metrics"],
            _ref(monitors[0]),
            "expected one endpoint on port `metrics`",
        )
        names = (spec.get("namespaceSelector") or {}).get("matchNames") or []
        p.expect(
            service["metadata"].get("namespace") in names,
            _ref(monitors[0]),
            f"expected namespaceSelector to include `{service['metadata'].get('namespace')}`",
        )

    dashboards = [
        cm
        for cm in _objects(objects, "ConfigMap")
        if cm.get("metadata", {}).get("labels", {}).get("grafana_dashboard") == "1"
    ]
    if p.expect(
        bool(dashboards), "ConfigMap", 'expected a Grafana dashboard ConfigMap (label grafana_dashboard: "1")'
    ):
        for name, text in (dashboards[0].get("data") or {}).items():
            try:
                dashboard = json.loads(text)
            except json.JSONDecodeError as exc:
                p.add(_ref(dashboards[0]), f"`{name}` is not valid JSON ({exc})")
                continue
            exprs = " ".join(
                str(t.get("expr", ""))
                for panel in dashboard.get("panels", [])
                for t in panel.get("targets", [])
            )
            for metric in DASHBOARD_METRICS:
                p.expect(metric in exprs, _ref(dashboards[0]), f"expected a panel on `{metric}`")


def _check_dev(p: _Problems, objects: Sequence[Obj], deployment: Obj, container: Obj) -> None:
    """No GPU anywhere; a CPU job builds ONNX Runtime versions into the repository."""
    for workload in _workloads(objects):
        for c in _all_containers(_pod_spec(workload)):
            p.expect(
                _gpu_limit(c) is None,
                _ref(workload),
                f"expected no GPU in the dev overlay, found nvidia.com/gpu {_gpu_limit(c)}",
            )
    for job, _, script in _repository_jobs(p, objects, deployment, container):
        flags = _flags(script.split())
        p.expect(
            flags.get("--target") == ["onnxruntime"],
            _ref(job),
            f"expected `--target onnxruntime` (CPU), found {flags.get('--target')}",
        )
        _check_security(p, job)


def _mounted_json(p: _Problems, objects: Sequence[Obj], workload: Obj, container: Obj, path: str) -> Any:
    """The JSON document a container reads at ``path`` from a mounted ConfigMap (None, with a problem, if not)."""
    folder, _, key = path.rpartition("/")
    volumes = {v.get("name"): v for v in _pod_spec(workload).get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount.get("mountPath", "").rstrip("/") == folder:
            name = ((volumes.get(mount.get("name")) or {}).get("configMap") or {}).get("name", "")
            text = (_configmap_data(objects, name) or {}).get(key)
            if text is None:
                break
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                p.add(_ref(workload), f"`{path}` is not valid JSON ({exc})")
                return None
    p.add(_ref(workload), f"expected TRITONKIT_LOADTEST_CONFIG `{path or '(unset)'}` in a mounted ConfigMap")
    return None


def _check_scenario(p: _Problems, where: str, scenario: Any) -> None:
    """The options of ``tritonkit loadtest``: a known shape, models, and Triton's Service as target."""
    if not p.expect(isinstance(scenario, dict), where, "expected the scenario to be a JSON object"):
        return
    name = scenario.get("scenario")
    p.expect(
        name in LOADTEST_SCENARIOS,
        where,
        f"expected scenario in {sorted(LOADTEST_SCENARIOS)}, found {name!r}",
    )
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


def _check_loadtest(p: _Problems, objects: Sequence[Obj]) -> None:
    """Headless master Job wired to its workers, the Triton Service and a reports volume."""
    masters = [
        j for j in _objects(objects, "Job") if _pod_labels(j).get("app.kubernetes.io/component") == "master"
    ]
    workers = [
        d
        for d in _objects(objects, "Deployment")
        if _pod_labels(d).get("app.kubernetes.io/component") == "worker"
    ]
    if not (
        p.expect(bool(masters), "Job", "expected a Locust master Job")
        and p.expect(bool(workers), "Deployment", "expected a Locust worker Deployment")
    ):
        return
    master, worker = masters[0], workers[0]
    m_container = _pod_spec(master)["containers"][0]
    w_container = _pod_spec(worker)["containers"][0]
    env, missing = container_env(m_container, objects)
    for line in missing:
        p.add(_ref(master), line)
    script = " ".join(
        _expand(str(x), env) for x in list(m_container.get("command", [])) + list(m_container.get("args", []))
    )
    p.expect("--master" in script.split(), _ref(master), "expected `locust --master`")
    p.expect(
        env.get("LOCUST_HEADLESS") == "true",
        _ref(master),
        f"expected LOCUST_HEADLESS=true, found {env.get('LOCUST_HEADLESS')}",
    )
    expect_workers = env.get("LOCUST_EXPECT_WORKERS", "")
    replicas = worker.get("spec", {}).get("replicas", 1)
    p.expect(
        expect_workers == str(replicas),
        _ref(master),
        f"LOCUST_EXPECT_WORKERS={expect_workers or '(unset)'} must equal the worker replicas ({replicas})",
    )
    p.expect(
        env.get("LOCUST_LOCUSTFILE", "").startswith("/app/loadtests/"),
        _ref(master),
        f"expected the project's loadtests/ locustfile, found {env.get('LOCUST_LOCUSTFILE')}",
    )
    scenario = _mounted_json(p, objects, master, m_container, env.get("TRITONKIT_LOADTEST_CONFIG", ""))
    if scenario is not None:
        _check_scenario(p, _ref(master), scenario)
        w_env, _ = container_env(w_container, objects)
        worker_view = _mounted_json(
            p, objects, worker, w_container, w_env.get("TRITONKIT_LOADTEST_CONFIG", "")
        )
        p.expect(worker_view == scenario, _ref(worker), "expected the workers to read the master's scenario")
        report_dir = str(scenario.get("report_dir", ""))
        p.expect(
            any(m.get("mountPath") == report_dir for m in w_container.get("volumeMounts", [])),
            _ref(worker),
            f"expected a writable volume at the scenario's report_dir `{report_dir}`",
        )
        p.expect(
            "report_dir" in script and "TRITONKIT_LOADTEST_CONFIG=" in script,
            _ref(master),
            "expected the master to point report_dir at the run's folder",
        )
    claims = {
        v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName")
        for v in _pod_spec(master).get("volumes", [])
    }
    report_mounts = [
        m
        for m in m_container.get("volumeMounts", [])
        if claims.get(m.get("name")) and m.get("mountPath") == "/reports"
    ]
    p.expect(
        bool(report_mounts) and "--csv" in script and "--html" in script,
        _ref(master),
        "expected --csv/--html reports on a PersistentVolumeClaim at /reports",
    )
    w_env, _ = container_env(w_container, objects)
    w_args = [
        _expand(str(x), w_env)
        for x in list(w_container.get("command", [])) + list(w_container.get("args", []))
    ]
    p.expect("--worker" in w_args, _ref(worker), "expected `locust --worker`")
    master_host = (_flags(w_args).get("--master-host") or [""])[0]
    services = _objects(objects, "Service", master_host)
    if p.expect(
        bool(services), _ref(worker), f"expected --master-host to name a Service, found `{master_host}`"
    ):
        p.expect(
            _selects(services[0].get("spec", {}).get("selector"), _pod_labels(master)),
            _ref(services[0]),
            "expected it to select the master pod",
        )
        p.expect(
            5557 in [x.get("port") for x in services[0].get("spec", {}).get("ports", [])],
            _ref(services[0]),
            "expected port 5557",
        )
    allowed = [
        n
        for n in _objects(objects, "NetworkPolicy")
        if n.get("spec", {}).get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
        == "triton"
        and any(
            _selects((peer.get("podSelector") or {}).get("matchLabels"), _pod_labels(worker))
            for rule in n.get("spec", {}).get("ingress", [])
            for peer in rule.get("from", [])
        )
    ]
    p.expect(
        bool(allowed), "NetworkPolicy", "expected a policy letting the Locust workers reach the Triton pods"
    )
    for workload in _workloads(objects):
        _check_security(p, workload)


def checklist(objects: Sequence[Obj], overlay: str) -> list[str]:
    """The deployment checklist (REFERENCE.md) asserted on an overlay's rendered objects.

    Returns one line per unmet item; an empty list means every item holds.
    """
    if overlay not in OVERLAYS:
        raise DeployError(f"unknown overlay `{overlay}`; expected one of: {', '.join(sorted(OVERLAYS))}")
    p = _Problems(overlay)
    if overlay == "loadtest":
        _check_loadtest(p, objects)
        return p.lines
    found = _check_triton(p, objects)
    if found is not None:
        deployment, container = found
        (_check_t4 if overlay == "t4" else _check_dev)(p, objects, deployment, container)
    return p.lines


# --- checkov ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class CheckovResult:
    """Outcome of one checkov run over the rendered overlays."""

    passed: int
    failed: list[str]  # "CKV_K8S_xx resource (file)"
    skipped: list[str]  # "CKV_K8S_xx resource (file): reason"
    version: str


def find_checkov(root: str | os.PathLike[str] | None = None) -> Path | None:
    """``$TRITONKIT_CHECKOV``, the repository's ``.venv-checkov`` (``make checkov``), or ``checkov`` on PATH."""
    if os.environ.get("TRITONKIT_CHECKOV"):
        return Path(os.environ["TRITONKIT_CHECKOV"])
    with contextlib.suppress(DeployError):
        local = manifests_dir(root).parent / ".venv-checkov" / "bin" / "checkov"
        if local.exists():
            return local
    found = shutil.which("checkov")
    return Path(found) if found else None


@contextlib.contextmanager
def _written(rendered: Mapping[str, Sequence[Obj]]) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tritonkit-k8s-") as tmp:
        for overlay, objects in rendered.items():
            (Path(tmp) / f"{overlay}.yaml").write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
        yield Path(tmp)


def run_checkov(
    rendered: Mapping[str, Sequence[Obj]], *, checkov: str | os.PathLike[str] | None = None
) -> CheckovResult:
    """Run ``checkov --framework kubernetes`` over rendered overlays (offline: ``--skip-download``)."""
    binary = Path(checkov) if checkov is not None else find_checkov()
    if binary is None or not binary.exists():
        raise DeployError(
            "`checkov` not found; run `make checkov` (creates .venv-checkov) or set TRITONKIT_CHECKOV"
        )
    with _written(rendered) as folder:
        result = subprocess.run(
            [str(binary), "--framework", "kubernetes", "-d", str(folder), "-o", "json", "--skip-download"],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
            env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
        )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise DeployError(
            f"checkov failed (exit {result.returncode}): {lines[-1] if lines else 'no output'}"
        ) from None
    reports = report if isinstance(report, list) else [report]
    passed, failed, skipped, version = 0, [], [], ""
    for part in reports:
        summary = part.get("summary", part)
        passed += int(summary.get("passed", 0))
        version = str(summary.get("checkov_version", version))
        results = part.get("results") or {}
        failed += [
            f"{c['check_id']} {c['resource']} ({Path(c['file_path']).stem}): {c.get('check_name', '')}"
            for c in results.get("failed_checks", [])
        ]
        skipped += [
            f"{c['check_id']} {c['resource']} ({Path(c['file_path']).stem}): "
            f"{(c.get('check_result') or {}).get('suppress_comment', '')}"
            for c in results.get("skipped_checks", [])
        ]
    return CheckovResult(passed=passed, failed=failed, skipped=skipped, version=version)


def skip_problems(objects: Iterable[Obj], *, min_reason: int = 20) -> list[str]:
    """Every ``checkov.io/skipN`` annotation must be ``CHECK_ID=reason`` with a real reason."""
    problems = []
    for obj in objects:
        for key, value in (obj.get("metadata", {}).get("annotations") or {}).items():
            if key.startswith("checkov.io/skip"):
                check_id, sep, reason = str(value).partition("=")
                if not (
                    re.fullmatch(r"CKV2?_K8S_\d+", check_id)
                    and sep
                    and len(reason.strip()) >= min_reason
                    and "=" not in reason
                ):
                    problems.append(
                        f"{_ref(obj)}: {key} must read `CKV_K8S_NN=<reason of {min_reason}+ chars, no '='>`, found `{value}`"
                    )
    return problems


# --- everything at once -----------------------------------------------------------------------------
@dataclasses.dataclass
class CheckReport:
    """What ``tritonkit k8s check`` found: summary lines and problems (the check passed when empty)."""

    lines: list[str]
    problems: list[str]
    rendered: dict[str, list[Obj]]

    @property
    def ok(self) -> bool:
        return not self.problems


def check(
    overlays: Sequence[str] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    kubernetes_version: str = KUBERNETES_VERSION,
    checkov: str = "auto",
) -> CheckReport:
    """Render each overlay, validate it strictly, assert the checklist, and run checkov.

    ``checkov``: ``auto`` runs it when found (and says so when not), ``require`` makes its absence a
    problem, ``off`` skips it.
    """
    if checkov not in ("auto", "require", "off"):
        raise DeployError(f"unknown checkov mode `{checkov}`; expected one of: auto, off, require")
    names = list(overlays or OVERLAYS)
    schemas = manifests_dir(root) / "schemas"
    lines: list[str] = []
    problems: list[str] = []
    rendered: dict[str, list[Obj]] = {}
    for name in names:
        objects = render(name, root=root)
        rendered[name] = objects
        schema_problems = [
            f"{name}: {line}"
            for line in validate(objects, kubernetes_version=kubernetes_version, schemas_dir=schemas)
        ]
        checklist_problems = checklist(objects, name)
        skip = [f"{name}: {line}" for line in skip_problems(objects)]
        problems += schema_problems + checklist_problems + skip
        lines.append(
            f"{name}: {len(objects)} objects; schemas (Kubernetes {kubernetes_version}, strict): "
            f"{'ok' if not schema_problems else f'{len(schema_problems)} problems'}; checklist: "
            f"{'ok' if not checklist_problems else f'{len(checklist_problems)} problems'}"
        )
    if checkov != "off":
        binary = find_checkov(root)
        if binary is None:
            message = "checkov: not installed (run `make checkov`)"
            (problems if checkov == "require" else lines).append(message)
        else:
            result = run_checkov(rendered, checkov=binary)
            problems += [f"checkov: {line}" for line in result.failed]
            lines.append(
                f"checkov {result.version}: {result.passed} passed, {len(result.failed)} failed, "
                f"{len(result.skipped)} skipped (each with its reason in a checkov.io/skip annotation)"
            )
    return CheckReport(lines=lines, problems=problems, rendered=rendered)
