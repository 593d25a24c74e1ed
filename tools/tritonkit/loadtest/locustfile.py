"""The locustfile ``tritonkit loadtest`` runs: users and shape built from a run's options.

The orchestration (:mod:`.run`) writes the options as JSON and points ``TRITONKIT_LOADTEST_CONFIG``
at them; every Locust process (standalone, master, workers) reads the same file. Besides the users
and the shape, each process keeps a fine latency histogram per request name (Locust rounds its own
percentiles to whole milliseconds) with exact request and failure counts, and writes them to ``<report>/.latency/<pid>.json`` when it
quits; the process that runs the shape writes the ramp's steps to ``<report>/ramp_steps.json``.
SIGINT ends the run the way the end of its plan does (:func:`~tritonkit.loadtest.shapes.request_stop`:
the shape's next tick ends it, users finish the requests they are in, the statistics and these files are
written): Locust's own SIGTERM handler is installed only once a headless shape has finished, and its
KeyboardInterrupt lands in whichever greenlet runs, so neither stops a run cleanly while it is on.

Without that file (plain ``locust -f loadtests/locustfile.py --host http://HOST:PORT``) it defines
one HTTP user on the model named by ``--triton-model`` or ``$TRITONKIT_MODEL``, and no shape, so
Locust's own ``-u``/``-r``/``-t`` drive the run and its own statistics are the report.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import gevent
import locust.stats
from locust import constant_pacing, events
from locust.runners import WorkerRunner

from tritonkit.loadtest.scenarios import make_plan
from tritonkit.loadtest.shapes import Live, RampShape, request_stop, shape_for
from tritonkit.loadtest.slo import SLO, Histogram
from tritonkit.loadtest.users import TritonGrpcUser, TritonHttpUser
from tritonkit.measure.payloads import parse_batch_mix

CONFIG_ENV = "TRITONKIT_LOADTEST_CONFIG"
#: plain ``locust -f``: the model when ``--triton-model`` is not given
MODEL_ENV = "TRITONKIT_MODEL"


def _load() -> dict[str, Any] | None:
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        config: dict[str, Any] = json.load(handle)
    return config


def _random_phase(interval: float) -> Any:
    """A paced user's ``on_start``: wait a random part of its interval first, so that users spawned
    together send spread over the interval instead of in bursts."""

    def on_start(self: Any) -> None:
        gevent.sleep(self.rng.uniform(0.0, interval))
        # constant_pacing counts from these two (set when the user was made): start them after the wait,
        # or the next wait would take the phase back
        self._cp_last_run = time.perf_counter()
        self._cp_last_wait_time = 0.0

    return on_start


def build_users(config: dict[str, Any]) -> dict[str, type]:
    """One concrete user class per model, weighted as asked (or paced: a fixed count of users, each
    sending one request every ``users / rate`` seconds)."""
    base = TritonGrpcUser if config["protocol"] == "grpc" else TritonHttpUser
    classes: dict[str, type] = {}
    for index, model in enumerate(config["models"]):
        name = f"{config['protocol'].title()}User_{index}_{model['name']}"
        paced: dict[str, Any] = {}
        if model.get("rate"):
            users = int(model["users"])
            interval = users / float(model["rate"])
            paced = {
                "fixed_count": users,
                "wait_time": constant_pacing(interval),
                "on_start": _random_phase(interval),
            }
        classes[name] = type(
            name,
            (base,),
            {
                "abstract": False,
                "http_url": config["http_url"],
                "grpc_url": config["grpc_url"],
                "model": model["name"],
                "model_version": model.get("version", ""),
                "model_spec": model.get("spec"),
                "weight": int(model.get("weight", 1)),
                "batch_mix": {int(k): float(v) for k, v in model.get("batch_mix", {"1": 1.0}).items()},
                "payload_source": model.get("source", "auto"),
                "seed": int(config.get("seed", 0)) + index,
                "request_timeout": float(config.get("request_timeout", 60.0)),
                "http_transport": config.get("http_transport", "lean"),
                "__module__": __name__,
                **paced,
            },
        )
    return classes


# The progress line reads the history CSV; Locust flushes it every 5 s by default.
locust.stats.CSV_STATS_FLUSH_INTERVAL_SEC = 1

_CONFIG = _load()
_HISTOGRAMS: dict[str, Histogram] = {}
#: name → [requests, failures, first event time, last event time]; every event, even those fired
#: after Locust wrote its final CSV (its counts can miss the last few in-flight answers)
_COUNTS: dict[str, list[Any]] = {}
#: this process's CPU time when the test started (imports and set-up are not load-generation cost)
_CPU: list[float] = []
#: non-empty once the run began stopping (Locust's ``test_stopping``)
_STOPPING: list[bool] = []

if _CONFIG is not None:
    globals().update(build_users(_CONFIG))
    _slo = SLO(**_CONFIG.get("slo", {}))
    _plan = make_plan(
        _CONFIG["scenario"],
        int(_CONFIG["users"]),
        float(_CONFIG["duration"]),
        ramp_steps=int(_CONFIG.get("ramp_steps", 5)),
    )
    TritonShape = shape_for(_plan, _slo)
    #: the ramp's step measurements: this process's requests (standalone), or those the workers
    #: report (master); a worker keeps what it has not reported yet in _UNREPORTED
    _LIVE: Live | None = TritonShape.live if issubclass(TritonShape, RampShape) else None
    _UNREPORTED = Live()
    #: ``tritonkit loadtest`` sends SIGINT to stop a run early (Ctrl-C, a dead server); kept referenced
    _SIGINT = gevent.signal_handler(signal.SIGINT, request_stop)

    @events.test_stopping.add_listener  # type: ignore[untyped-decorator]
    def _stopping(**_: Any) -> None:
        _STOPPING.append(True)

    @events.request.add_listener  # type: ignore[untyped-decorator]
    def _record(name: str, response_time: float, exception: BaseException | None, **_: Any) -> None:
        entry = _COUNTS.get(name)
        if entry is None:
            entry = _COUNTS[name] = [0, 0, time.time(), 0.0]
            _HISTOGRAMS[name] = Histogram()
        entry[0] += 1
        if exception is not None:
            entry[1] += 1
        entry[3] = time.time()
        if _STOPPING:
            # Locust lets a user finish the request it is in while the run stops, and does its own
            # shutdown work meanwhile: such an answer is counted, but its time is Locust's, not Triton's.
            return
        if exception is None:  # a failure's time is no latency: never in the percentiles (counted above)
            _HISTOGRAMS[name].add(response_time)
        if _LIVE is not None:
            _LIVE.add(response_time, exception is not None)
            _UNREPORTED.add(response_time, exception is not None)

    @events.report_to_master.add_listener  # type: ignore[untyped-decorator]
    def _report(data: dict[str, Any], **_: Any) -> None:
        if _LIVE is not None and _UNREPORTED.requests:
            data["tritonkit_live"] = _UNREPORTED.take()

    @events.worker_report.add_listener  # type: ignore[untyped-decorator]
    def _merge_report(data: dict[str, Any], **_: Any) -> None:
        if _LIVE is not None and "tritonkit_live" in data:
            _LIVE.merge_json(data["tritonkit_live"])

    @events.test_start.add_listener  # type: ignore[untyped-decorator]
    def _cpu_start(**_: Any) -> None:
        _CPU.append(time.process_time())

    @events.quitting.add_listener  # type: ignore[untyped-decorator]
    def _write(environment: Any, **_: Any) -> None:
        cpu = time.process_time() - _CPU[0] if _CPU else None
        assert _CONFIG is not None
        report = Path(_CONFIG["report_dir"])
        if _HISTOGRAMS:
            latency = report / ".latency"
            latency.mkdir(parents=True, exist_ok=True)
            data: dict[str, Any] = {
                name: {
                    "requests": _COUNTS[name][0],
                    "failures": _COUNTS[name][1],
                    "first": _COUNTS[name][2],
                    "last": _COUNTS[name][3],
                    "histogram": {str(k): v for k, v in h.counts.items()},
                }
                for name, h in _HISTOGRAMS.items()
            }
            data["_cpu_s"] = cpu
            (latency / f"{os.getpid()}.json").write_text(json.dumps(data))
        shape = environment.shape_class
        if isinstance(shape, RampShape) and not isinstance(environment.runner, WorkerRunner):
            shape.finish_step(shape.get_run_time())  # type: ignore[no-untyped-call]
            (report / "ramp_steps.json").write_text(json.dumps(type(shape).steps, indent=1))


if _CONFIG is None:

    class TritonModelUser(TritonHttpUser):
        """Plain ``locust -f``: HTTP requests to ``--host`` for ``--triton-model`` (set at init)."""

        abstract = False

    @events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
    def _arguments(parser: Any, **_: Any) -> None:
        parser.add_argument(
            "--triton-model",
            default=os.environ.get(MODEL_ENV, ""),
            help=f"Triton model to load-test, NAME or NAME:VERSION (default ${MODEL_ENV})",
        )
        parser.add_argument(
            "--triton-batch-mix", default="1", help="BATCH[:WEIGHT],... e.g. 1:0.8,8:0.2 (default 1)"
        )

    @events.init.add_listener  # type: ignore[untyped-decorator]
    def _configure(environment: Any, **_: Any) -> None:
        options = environment.parsed_options
        if options is None:
            return  # Locust used as a library: the caller sets the user's attributes
        # (a --worker reads its own command line and environment: give it the model as well)
        name, _sep, version = str(options.triton_model).partition(":")
        if not name:
            sys.stderr.write(
                f"tritonkit locustfile: no model: expected --triton-model NAME or {MODEL_ENV}=NAME "
                "(and --host http://HOST:PORT of Triton's HTTP endpoint)\n"
            )
            sys.exit(2)
        host = str(environment.host or options.host or "")
        TritonModelUser.model, TritonModelUser.model_version = name, version
        TritonModelUser.batch_mix = parse_batch_mix(options.triton_batch_mix)
        if host:
            TritonModelUser.http_url = host.split("://", 1)[-1].rstrip("/")
