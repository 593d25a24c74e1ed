"""checkov over the rendered overlays, and the rule its skip annotations follow.

Owns finding ``checkov`` (``$TRITONKIT_CHECKOV``, the repository's ``.venv-checkov``, or PATH), running it
offline over the rendered overlays written to a temporary folder, summing its JSON report into a
:class:`CheckovResult`, and :func:`skip_problems`: every ``checkov.io/skipN`` annotation names one check
and gives a real reason.
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

import yaml

from tritonkit.deploy.manifests import manifests_dir
from tritonkit.deploy.objects import Obj, ref
from tritonkit.errors import DeployError

__all__ = ["CheckovResult", "find_checkov", "run_checkov", "skip_problems"]


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
                        f"{ref(obj)}: {key} must read `CKV_K8S_NN=<reason of {min_reason}+ chars, no '='>`, found `{value}`"
                    )
    return problems
