"""Reading rendered Kubernetes objects: finding them, their pod templates, and what a container starts with.

Owns the plain-dict view of an object (:data:`Obj`), the lookups every check shares (objects by kind and
name, pod spec and labels, selectors), a container's environment as the kubelet builds it
(:func:`container_env`, with ``$(VAR)`` expansion), resource quantities, and command-line flag parsing.
Nothing here judges an object: the checks in :mod:`tritonkit.deploy.checks` do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "SECRET",
    "Obj",
    "all_containers",
    "command_line",
    "configmap_data",
    "container_env",
    "expand",
    "expand_shell",
    "find",
    "flags",
    "gpu_limit",
    "pod_labels",
    "pod_spec",
    "quantity",
    "ref",
    "selects",
    "unresolved",
    "workloads",
]

Obj = dict[str, Any]

#: How a Secret reference shows in a resolved environment: the value is never in the manifests.
SECRET = "<secret {name}/{key}>"
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_QUANTITY_FACTORS: dict[str | None, float] = {
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
}


def ref(obj: Obj) -> str:
    """``Kind/name``, how every problem line names an object."""
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name', '?')}"


def find(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """The objects of ``kind`` (named ``name`` when given)."""
    return [
        obj
        for obj in objects
        if obj.get("kind") == kind and (name is None or obj.get("metadata", {}).get("name") == name)
    ]


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload.get("spec", {}).get("template", {}).get("spec", {})
    return spec


def pod_labels(workload: Obj) -> dict[str, str]:
    labels: dict[str, str] = (
        workload.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
    )
    return labels


def all_containers(pod: Obj) -> list[Obj]:
    """Init containers, then the others."""
    return list(pod.get("initContainers", [])) + list(pod.get("containers", []))


def selects(match_labels: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """Whether a non-empty ``matchLabels`` selects ``labels`` (an empty selector selects nothing here)."""
    return bool(match_labels) and all(labels.get(k) == v for k, v in (match_labels or {}).items())


def workloads(objects: Iterable[Obj]) -> list[Obj]:
    return [obj for obj in objects if obj.get("kind") in ("Deployment", "Job", "StatefulSet", "DaemonSet")]


def gpu_limit(container: Obj) -> Any:
    return ((container.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")


def configmap_data(objects: Sequence[Obj], name: str) -> dict[str, str] | None:
    found = find(objects, "ConfigMap", name)
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
        cm_ref = source.get("configMapRef")
        if cm_ref:
            data = configmap_data(objects, cm_ref.get("name", ""))
            if data is None:
                missing.append(f"ConfigMap `{cm_ref.get('name')}` (envFrom) is not in the rendered objects")
            else:
                env.update({source.get("prefix", "") + k: v for k, v in data.items()})
    for item in container.get("env", []):
        name = item.get("name", "")
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
        elif secret := item.get("valueFrom", {}).get("secretKeyRef"):
            env[name] = SECRET.format(name=secret.get("name"), key=secret.get("key"))
        elif cm := item.get("valueFrom", {}).get("configMapKeyRef"):
            data = configmap_data(objects, cm.get("name", ""))
            if data is None or cm.get("key") not in data:
                missing.append(f"ConfigMap key `{cm.get('name')}/{cm.get('key')}` (env {name}) is missing")
            else:
                env[name] = data[cm["key"]]
    return env, missing


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are replaced, others stay as written."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text.replace("$$(", "\x00")).replace(
        "\x00", "$("
    )


def expand_shell(text: str, env: Mapping[str, str]) -> str:
    """``$VAR`` / ``${VAR}`` as the container's shell would expand them (undefined ones stay)."""
    return _SHELL_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def unresolved(args: Iterable[str]) -> list[str]:
    """The ``$(VAR)`` references left in already expanded arguments, sorted."""
    return sorted({m.group(0) for a in args for m in _VAR.finditer(a)})


def command_line(container: Obj, env: Mapping[str, str]) -> list[str]:
    """The container's command then args, each with ``$(VAR)`` expanded from ``env``."""
    return [
        expand(str(part), env)
        for part in list(container.get("command", [])) + list(container.get("args", []))
    ]


def quantity(value: Any) -> float | None:
    """A Kubernetes resource quantity in base units (bytes, cores); None when unparsable."""
    match = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(value).strip())
    if not match:
        return None
    return float(match.group(1)) * _QUANTITY_FACTORS[match.group(2)]


def flags(args: Sequence[str]) -> dict[str, list[str]]:
    """``--name=value`` and ``--name value`` (a script's words, quotes stripped) -> values by name."""
    words = [str(a).strip("\"'") for a in args]
    found: dict[str, list[str]] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            name, sep, value = word.partition("=")
            if not sep and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
            found.setdefault(name, []).append(value)
    return found
