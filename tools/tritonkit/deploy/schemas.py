"""Strict schema validation of rendered objects.

Owns the Kubernetes version the manifests are checked against and :func:`validate`: built-in kinds through
``kubernetes-validate`` in strict mode, custom resources it has no schema for (ServiceMonitor) through
the JSON schemas bundled in ``k8s/schemas/``; an object with no schema anywhere is a problem.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from tritonkit.deploy.manifests import manifests_dir
from tritonkit.deploy.objects import Obj, ref
from tritonkit.errors import DeployError

__all__ = ["KUBERNETES_VERSION", "validate"]

#: The Kubernetes version the schemas are checked against: the oldest minor still supported by the
#: major managed offerings when this was written; newer API servers accept everything it accepts.
KUBERNETES_VERSION = "1.30"


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
        import jsonschema  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)
        import kubernetes_validate  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)
        from kubernetes_validate import utils as kv_utils  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)
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
            problems.append(f"{ref(obj)}: {path}: {exc.message} (Kubernetes {kubernetes_version}, strict)")
        except kv_utils.SchemaNotFoundError:
            schema_path = _bundled_schema(obj, schemas)
            if not schema_path.is_file():
                problems.append(
                    f"{ref(obj)}: no schema for {obj['apiVersion']} {obj['kind']} in Kubernetes "
                    f"{kubernetes_version} nor at {schema_path}; expected one of them"
                )
                continue
            schema = json.loads(schema_path.read_text())
            validator = jsonschema.Draft202012Validator(schema)
            for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.path)):
                path = ".".join(str(part) for part in error.path) or "(root)"
                problems.append(f"{ref(obj)}: {path}: {error.message} (bundled schema {schema_path.name})")
    return problems
