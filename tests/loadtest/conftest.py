"""Fixtures for the load-test tests: one real embedded Triton serving three tiny probe models.

``probe_add`` answers right, ``probe_nan`` answers NaNs (a wrong answer), ``probe_error``
answers Triton errors, ``probe_wide`` takes 200 kB rows (see
:mod:`tritonkit_bench.probe_model`). Locust always runs in child
processes (it monkey-patches whatever process imports it), never inside pytest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tritonkit.config import load as load_config
from tritonkit.config import save
from tritonkit.loadtest.report.metrics import scrape
from tritonkit.loadtest.run import LoadTestOptions, parse_model, run
from tritonkit.loadtest.slo import SLO
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit_bench.probe_model import write_probe_model


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo = tmp_path_factory.mktemp("loadtest-repo")
    for mode in ("add", "nan", "error"):
        write_probe_model(repo, f"probe_{mode}", mode=mode)
    # 50,000 floats a row: request bodies larger than HTTP/2's initial flow-control window
    write_probe_model(repo, "probe_wide", dims=50_000, max_batch_size=2)
    # the same add model without the dynamic batcher: every execution is one request
    folder = write_probe_model(repo, "probe_nobatch", mode="add")
    config = dataclasses.replace(load_config(folder / "config.pbtxt"), dynamic_batching=None)
    save(config, folder / "config.pbtxt")
    with EmbeddedServer(repo) as started:
        yield started


@pytest.fixture
def throwaway_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A server of its own (``probe_wide`` only) for a test that cancels a gRPC call on purpose.

    tritonserver 2.51 can crash (SIGSEGV) soon after a gRPC call is cancelled while its answer races
    the cancel: an RST_STREAM, a ``grpc-timeout`` that runs out, a connection closed under the call
    (triton-inference-server/server#7368, fixed in 2.53). Here, about one such call in 15 to 190
    crashed the server within 0.1 s of its connection closing; on the session server that fails every
    later test with "connection refused". No test may cancel a call on the session server.
    """
    repo = tmp_path_factory.mktemp("throwaway-repo")
    write_probe_model(repo, "probe_wide", dims=50_000, max_batch_size=2)
    with EmbeddedServer(repo) as started:
        yield started


def triton_requests(server: EmbeddedServer) -> int:
    """Requests Triton counted so far (success + failure, all models)."""
    return int(sum(c.get("success", 0) + c.get("failure", 0) for c in scrape(server.metrics_url).values()))


@pytest.fixture
def loadtest(server: EmbeddedServer, tmp_path: Path) -> Callable[..., Any]:
    """Run a short load test against the session server; keyword arguments override options."""

    def _run(models: tuple[str, ...] = ("probe_add",), protocol: str = "http", **overrides: Any) -> Any:
        options = LoadTestOptions(
            models=[parse_model(m) for m in models],
            report_dir=overrides.pop("report_dir", tmp_path / "report"),
            url=server.grpc_url if protocol == "grpc" else server.http_url,
            http_url=server.http_url,
            metrics_url=overrides.pop("metrics_url", server.metrics_url),
            admin_key=overrides.pop("admin_key", server.admin_key),
            protocol=protocol,
            users=overrides.pop("users", 4),
            duration=overrides.pop("duration", "2s"),
            slo=overrides.pop("slo", SLO()),
            progress=False,
            plots=overrides.pop("plots", False),
            **overrides,
        )
        return run(options)

    return _run
