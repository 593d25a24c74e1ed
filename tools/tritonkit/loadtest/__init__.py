"""Load testing Triton with Locust: users, payloads, scenarios, SLO gates, reports.

Entry point for Python callers (``tritonkit loadtest``, ``make demo``)::

    from tritonkit.loadtest import SLO, LoadTestOptions, parse_model, run
    summary = run(LoadTestOptions(models=[parse_model("minilm_int8", source="text")],
                                  report_dir="reports/loadtest", scenario="ramp", users=16,
                                  duration="30s", slo=SLO(p95_ms=250)))

Modules: ``options`` (what a run is asked to do, and its checks), ``run`` (orchestration),
``supervise`` (the Locust child processes and the progress line), ``watch`` (how a run ends early: the
server found dead, or Ctrl-C), ``users`` (Locust users), ``transports/`` (how a gRPC user's request
reaches Triton: ``wire``, HTTP/2 framed by hand, on ``hub``, the socket driven by the gevent hub),
``scenarios`` / ``shapes`` (load profiles), ``slo`` (gates, histograms, quantile intervals), ``report/``
(``summary``: the capacity report; ``locust_csv``: Locust's CSVs; ``metrics``: Triton's ``/metrics``;
``plots``), ``wrk`` with ``post.lua`` (C cross-check), ``locustfile`` (what ``tritonkit loadtest`` runs).
Request data, answer checks and provenance are :mod:`tritonkit.measure`'s (``payloads``, ``input_data``,
``validation``, ``provenance``), shared with every other measuring tool.
Nothing here imports Locust or gevent at import time (Locust monkey-patches the process that
imports it); the names below load lazily.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonkit.loadtest.options import LoadTestOptions, ModelTarget, parse_model
    from tritonkit.loadtest.report.summary import Summary
    from tritonkit.loadtest.run import run
    from tritonkit.loadtest.slo import SLO

__all__ = ["SLO", "LoadTestOptions", "ModelTarget", "Summary", "parse_model", "run"]

_LAZY = {
    "LoadTestOptions": "tritonkit.loadtest.options",
    "ModelTarget": "tritonkit.loadtest.options",
    "parse_model": "tritonkit.loadtest.options",
    "run": "tritonkit.loadtest.run",
    "SLO": "tritonkit.loadtest.slo",
    "Summary": "tritonkit.loadtest.report.summary",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tritonkit.loadtest' has no attribute {name!r}")

    return getattr(importlib.import_module(module), name)
