"""Orchestration of one load test: check inputs, (start a server), run Locust, collect, report.

:func:`run` is the Python entry point (``tritonkit loadtest`` and ``make demo`` call it):
everything that can be wrong with the options (:mod:`.options`), the server or the model is
found *before* any load is sent. This module owns the order of the steps and what joins them:
the endpoints (given, or an embedded server it starts), ``run_config.json`` (what the
locustfile reads), the ``/metrics`` scraper and the liveness watch around the Locust run
(:mod:`.supervise`, :mod:`.watch`: a dead server or Ctrl-C ends the run early, and what was measured
until then is reported, saying so). Afterwards the report side (:mod:`.report.summary`) turns the run's files into a
:class:`~tritonkit.loadtest.report.summary.Summary`, checks the SLO gates and writes the
report files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tritonkit.errors import LoadTestError, TritonKitError
from tritonkit.loadtest.options import ADMIN_KEY_ENV, LoadTestOptions, ModelTarget, parse_model, stop_timeout
from tritonkit.loadtest.report import summary as reporting
from tritonkit.loadtest.report.metrics import MetricsScraper, batch_stats, server_statistics
from tritonkit.loadtest.scenarios import make_plan
from tritonkit.loadtest.supervise import run_locust
from tritonkit.loadtest.watch import ServerWatch
from tritonkit.loadtest.wrk import cross_check
from tritonkit.machine import description
from tritonkit.measure.payloads import ModelSpec, fetch_model_spec, make_payloads
from tritonkit.measure.provenance import collect as collect_provenance
from tritonkit.repository.store import ModelRepository
from tritonkit.serve.endpoint import Endpoint, endpoint

__all__ = ["LoadTestOptions", "ModelTarget", "parse_model", "run"]

#: an earlier run's files this run may not rewrite (a scenario without ramp, a run that fails):
#: removed first so that none of them passes for this run's
_STALE = ("ramp_steps.json", "summary.json", "summary.md")


def _precision(options: LoadTestOptions, spec: ModelSpec) -> str:
    """From the version's ``build.json`` when the repository is local (the embedded server's);
    else ``unknown``: the platform or backend (``python``, ``onnxruntime``) is not a precision."""
    if options.url is None:
        # a version built elsewhere has no manifest (or a version that is not a number)
        with contextlib.suppress(TritonKitError, ValueError):
            manifest = ModelRepository(Path(options.repo)).read_manifest(spec.name, int(spec.version))
            return str(manifest.precision)
    return "unknown"


def run(options: LoadTestOptions, *, on_ready: Callable[[Endpoint], None] | None = None) -> reporting.Summary:
    """Run one load test and write its report; returns its :class:`~tritonkit.loadtest.report.summary.Summary`.

    ``summary.exit_code`` is non-zero when an SLO gate broke. Raises :class:`LoadTestError` (or
    another :class:`~tritonkit.TritonKitError`) before any load is sent when an option, the
    server or a model is wrong. ``on_ready`` is called with the endpoints once everything is
    checked, just before the load starts.
    """
    options.validate()
    assert isinstance(options.duration, float)  # validate() made it seconds
    report = Path(options.report_dir)
    with endpoint(
        options.url,
        protocol=options.protocol,
        repo=options.repo,
        http_url=options.http_url,
        metrics_url=options.metrics_url,
        admin_key=options.admin_key or os.environ.get(ADMIN_KEY_ENV),
    ) as endpoints:
        url = endpoints.url(options.protocol)
        specs = [fetch_model_spec(url, m.name, m.version, protocol=options.protocol) for m in options.models]
        for target, spec in zip(options.models, specs, strict=True):
            make_payloads(spec, target.batch_mix, per_batch=1, source=target.source)  # mix vs model
        plan = make_plan(options.scenario, options.users, options.duration, ramp_steps=options.ramp_steps)
        provenance = collect_provenance(
            url,
            options.protocol,
            [(m.name, s.version) for m, s in zip(options.models, specs, strict=True)],
            repo=Path(options.repo) if options.url is None else None,
        )
        config_path = _fresh_report(options, endpoints, specs, report)
        if on_ready is not None:
            on_ready(endpoints)
        scraper, scrape_note = _start_scraper(endpoints)
        stats_before, stats_note = server_statistics(url, options.protocol, endpoints.headers, specs)
        watch, watch_note = _watch(endpoints)
        started_at = time.time()
        try:
            locust = run_locust(
                config_path,
                report,
                plan.duration,
                workers=options.workers,
                progress=options.progress,
                stream=options.stream,
                stop_timeout=stop_timeout(options.request_timeout),
                watch=watch,
            )
        finally:
            if scraper is not None:
                scraper.stop()
        stats_after, after_note = (
            server_statistics(url, options.protocol, endpoints.headers, specs)
            if stats_before is not None
            else (None, None)
        )
        batches = batch_stats(stats_before, stats_after)
        stopped = locust.stopped
        wrk_result = _wrk(options, endpoints, specs[0], report) if options.wrk and stopped is None else None
        summary = reporting.collect(
            report,
            options=options,
            specs=specs,
            precisions=[_precision(options, s) for s in specs],
            scraper=scraper,
            started_at=started_at,
            wall_seconds=locust.wall_s,
            machine=description(),
            wrk=wrk_result,
            notes=[n for n in (scrape_note, stats_note, after_note, watch_note) if n],
            batch_stats=batches,
            provenance=provenance.as_dict(),
            stopped=None if stopped is None else stopped.record(started_at),
        )
        reporting.write(summary, report, plots=options.plots)
        return summary


def _fresh_report(
    options: LoadTestOptions, endpoints: Endpoint, specs: Sequence[ModelSpec], report: Path
) -> Path:
    """Clear what an earlier run left in the report folder and write Locust's run config there."""
    for stale in _STALE:
        (report / stale).unlink(missing_ok=True)
    shutil.rmtree(report / ".latency", ignore_errors=True)
    config_path = report / "run_config.json"
    config_path.write_text(json.dumps(_locust_config(options, endpoints, specs, report), indent=1))
    return config_path


def _watch(endpoints: Endpoint) -> tuple[ServerWatch, str | None]:
    """The watch that stops the run when the server dies, and the note when it cannot."""
    watch = ServerWatch(endpoints.http)
    if watch.armed:
        return watch, None
    return watch, f"a dead server would not stop this run: its liveness endpoint {watch.url} did not answer"


def _locust_config(
    options: LoadTestOptions, endpoints: Endpoint, specs: Sequence[ModelSpec], report: Path
) -> dict[str, Any]:
    """``run_config.json``: everything the locustfile in each Locust process needs."""
    return {
        "http_url": endpoints.http,
        "grpc_url": endpoints.grpc,
        "protocol": options.protocol,
        "scenario": options.scenario,
        "users": options.users,
        "duration": options.duration,
        "ramp_steps": options.ramp_steps,
        "seed": options.seed,
        "request_timeout": options.request_timeout,
        "http_transport": options.http_transport,
        "slo": options.slo.to_json(),
        "report_dir": str(report),
        "models": [
            {
                "name": t.name,
                "version": s.version,
                "weight": t.weight,
                "batch_mix": {str(k): v for k, v in t.batch_mix.items()},
                "source": t.source,
                "spec": s.to_json(),
                **({"rate": t.rate, "users": t.users} if t.rate is not None else {}),
            }
            for t, s in zip(options.models, specs, strict=True)
        ],
    }


def _start_scraper(endpoints: Endpoint) -> tuple[MetricsScraper | None, str | None]:
    """The running scraper, or a note why the report has no server view.

    A ``/metrics`` URL the caller named (or the embedded server's) must answer; the guessed
    default (port 8002 of ``--url``'s host) may be closed, and the run goes on without it.
    """
    if not endpoints.metrics:
        return None, None
    try:
        return MetricsScraper(endpoints.metrics).start(), None
    except LoadTestError as exc:
        if endpoints.metrics_named:
            raise
        return None, (
            f"server view unavailable: tried {endpoints.metrics} (Triton's default metrics port of "
            f"--url's host) and it did not answer ({exc}); name the server's /metrics URL with "
            "--metrics-url (`tritonkit serve` prints it at start)"
        )


def _wrk(options: LoadTestOptions, endpoints: Endpoint, spec: ModelSpec, report: Path) -> dict[str, Any]:
    """The wrk cross-check on the first model, after the Locust run (never beside it)."""

    assert isinstance(options.duration, float)
    return cross_check(
        endpoints.http,
        spec,
        options.models[0].batch_mix,
        connections=options.users,
        duration=min(10.0, options.duration),
        seed=options.seed,
        report_dir=report,
    )
