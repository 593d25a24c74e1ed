"""Fixtures shared by the serve tests: an embedded server of one add-one model, plain and with the guard in front."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.python_models import ADD_ONE, write_python_model

from tritonkit.serve.embedded import EmbeddedServer, ServerOptions


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A guarded server (body limit 1 MiB) serving `add_one`, one per test module."""
    repo = tmp_path_factory.mktemp("repo")
    write_python_model(repo, "add_one", ADD_ONE)
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1, guard=True, max_body_bytes=1 << 20)) as server:
        yield server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A plain server (no guard) serving `add_one`, one per test module."""
    repo = tmp_path_factory.mktemp("repo")
    write_python_model(repo, "add_one", ADD_ONE)
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        yield server
