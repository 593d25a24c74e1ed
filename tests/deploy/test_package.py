"""The deploy package's own shape: it imports nothing from the load-test stage (the scenario names its
checklist accepts come from the caller), and the checklist uses the names it is given."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit import deploy
from tritonkit.errors import DeployError

Obj = dict[str, Any]
DEPLOY = Path(deploy.__file__).resolve().parent


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; top-level and function-level imports alike)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import of {node.module}"
            names.add(node.module or "")
    return names


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("*.py")), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_deploy_does_not_import_the_loadtest_stage(path: Path) -> None:
    loadtest = sorted(
        n for n in _imported(path) if n == "tritonkit.loadtest" or n.startswith("tritonkit.loadtest.")
    )
    assert loadtest == [], f"{path.relative_to(DEPLOY)} imports {loadtest}"


def _with_scenario(objects: list[Obj], name: str) -> list[Obj]:
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].startswith("locust-scenario"):
            scenario = json.loads(obj["data"]["scenario.json"])
            scenario["scenario"] = name
            obj["data"]["scenario.json"] = json.dumps(scenario)
            return objects
    raise AssertionError("no locust-scenario ConfigMap")


def test_loadtest_checklist_uses_the_scenario_names_it_is_given(rendered: Callable[[str], list[Obj]]) -> None:
    objects = _with_scenario(rendered("loadtest"), "burst")
    assert deploy.checklist(objects, "loadtest", scenarios=("burst", "steady")) == []
    problems = deploy.checklist(objects, "loadtest", scenarios=("steady",))
    assert any("expected scenario in ['steady'], found 'burst'" in line for line in problems), problems


def test_loadtest_checklist_without_scenario_names_is_refused(rendered: Callable[[str], list[Obj]]) -> None:
    with pytest.raises(DeployError, match="needs the known scenario names"):
        deploy.checklist(rendered("loadtest"), "loadtest")
    assert deploy.checklist(rendered("dev"), "dev") == []  # server overlays need none
