"""Everything ``tritonkit k8s check`` does, at once: :func:`check` and its :class:`CheckReport`.

Owns the order (render, strict schemas, checklist, checkov skip annotations per overlay, then checkov over
all of them), the summary line per overlay, and what each checkov mode means.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Sequence

from tritonkit.deploy.checkov import find_checkov, run_checkov, skip_problems
from tritonkit.deploy.checks import checklist
from tritonkit.deploy.manifests import OVERLAYS, manifests_dir, render
from tritonkit.deploy.objects import Obj
from tritonkit.deploy.schemas import KUBERNETES_VERSION, validate
from tritonkit.errors import DeployError

__all__ = ["CHECKOV_MODES", "CheckReport", "check"]

CHECKOV_MODES = ("auto", "off", "require")


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
    scenarios: Collection[str],
    root: str | os.PathLike[str] | None = None,
    kubernetes_version: str = KUBERNETES_VERSION,
    checkov: str = "auto",
) -> CheckReport:
    """Render each overlay, validate it strictly, assert the checklist, and run checkov.

    ``scenarios``: the load-test scenario names the ``loadtest`` overlay may run.
    ``checkov``: ``auto`` runs it when found (and says so when not), ``require`` makes its absence a
    problem, ``off`` skips it.
    """
    if checkov not in CHECKOV_MODES:
        raise DeployError(f"unknown checkov mode `{checkov}`; expected one of: {', '.join(CHECKOV_MODES)}")
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
        checklist_problems = checklist(objects, name, scenarios=scenarios)
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
