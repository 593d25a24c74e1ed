"""Fixtures for the Kubernetes manifest tests: every overlay rendered once per session with the real
``kubectl kustomize``; tests that change an object work on their own deep copy."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from tritonkit import deploy

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def rendered_all() -> dict[str, list[Obj]]:
    if shutil.which("kubectl") is None:
        pytest.skip("needs `kubectl` (v1.27+, with kustomize v5) on PATH to render the overlays")
    return {overlay: deploy.render(overlay) for overlay in deploy.OVERLAYS}


@pytest.fixture
def rendered(rendered_all: dict[str, list[Obj]]) -> Callable[[str], list[Obj]]:
    """A fresh deep copy of an overlay's objects, safe to mutate."""
    return lambda overlay: copy.deepcopy(rendered_all[overlay])
