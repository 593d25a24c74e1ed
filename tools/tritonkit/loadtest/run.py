"""Orchestration of one load test: check inputs, (start a server), run Locust, collect, report.

:func:`run` is the Python entry point (``tritonkit loadtest`` and ``make demo`` call it):
everything that can be wrong with the options, the server or the model is found *before* any
load is sent. Locust runs as child processes (one, or a master with ``workers`` workers, Locust's
own distributed mode) on the locustfile :mod:`.locustfile`; meanwhile Triton's ``/metrics`` is
scraped and a progress line printed. Afterwards the CSVs, latency histograms, ramp steps and
scrapes become a :class:`~tritonkit.loadtest.report.summary.Summary`, the SLO gates are checked, and the
report files are written.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.payloads import ModelSpec, fetch_model_spec, make_payloads, parse_batch_mix
from tritonkit.loadtest.report.metrics import MetricsScraper
from tritonkit.loadtest.scenarios import SCENARIOS, make_plan, parse_duration
from tritonkit.loadtest.slo import SLO
from tritonkit.machine import cpu_model

__all__ = ["LoadTestOptions", "ModelTarget", "parse_model", "run"]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
GRPC_TRANSPORTS = ("wire",)
HTTP_TRANSPORTS = ("lean", "tritonclient")


@dataclasses.dataclass
class ModelTarget:
    """One model of a run: ``name[:version]`` with its share of users and batch mix."""

    name: str
    version: str = ""
    weight: int = 1
    batch_mix: dict[int, float] = dataclasses.field(default_factory=lambda: {1: 1.0})
    source: str = "auto"


def parse_model(text: str, batch_mix: str | None = None, source: str = "auto") -> ModelTarget:
    """``minilm_int8``, ``minilm_int8:2`` or ``minilm_int8:2@3`` (weight 3) → :class:`ModelTarget`."""
    spec, _, weight_text = text.partition("@")
    name, _, version = spec.partition(":")
    if not name or (version and not version.isdigit()):
        raise LoadTestError(
            f"model {text!r}: expected NAME[:VERSION][@WEIGHT], like minilm_int8 or minilm_int8:1@3"
        )
    try:
        weight = int(weight_text) if weight_text else 1
    except ValueError:
        weight = 0
    if weight < 1:
        raise LoadTestError(f"model {text!r}: expected a whole weight >= 1 after '@', got {weight_text!r}")
    mix = parse_batch_mix(batch_mix) if batch_mix else {1: 1.0}
    return ModelTarget(name, version, weight, mix, source)


@dataclasses.dataclass
class LoadTestOptions:
    """Everything a run needs. ``url`` ``None`` starts the embedded server on ``repo``."""

    models: Sequence[ModelTarget]
    report_dir: Path | str
    url: str | None = None
    protocol: str = "http"
    scenario: str = "steady"
    users: int = 16
    duration: float | str = 60.0
    workers: int = 0
    ramp_steps: int = 5
    slo: SLO = dataclasses.field(default_factory=SLO)
    repo: Path | str = "model_repository"
    #: with ``url``: where Triton's other endpoints are (default: same host, ports 8000/8001/8002)
    http_url: str | None = None
    metrics_url: str | None = None
    seed: int = 0
    request_timeout: float = 60.0
    #: gRPC transport of the users: ``wire`` (hand-framed HTTP/2, the only one); see
    #: :class:`~tritonkit.loadtest.users.TritonGrpcUser`
    grpc_transport: str = "wire"
    #: HTTP transport of the users: ``lean`` (pre-encoded bodies on geventhttpclient, default) or
    #: ``tritonclient`` (``InferenceServerClient.infer`` per request, as applications call it)
    http_transport: str = "lean"
    wrk: bool = False
    plots: bool = True
    progress: bool = True
    #: where progress lines go (default stderr)
    stream: IO[str] | None = None

    def validate(self) -> None:
        """Raise :class:`LoadTestError` for the first bad value (one line, expected vs given)."""
        if not self.models:
            raise LoadTestError("no model given; expected at least one --model")
        if self.protocol not in ("http", "grpc"):
            raise LoadTestError(f"protocol {self.protocol!r}: expected http or grpc")
        if self.scenario not in SCENARIOS:
            raise LoadTestError(f"scenario {self.scenario!r}: expected one of {', '.join(SCENARIOS)}")
        if not isinstance(self.users, int) or self.users < 1:
            raise LoadTestError(f"users {self.users!r}: expected a whole number >= 1")
        self.duration = parse_duration(self.duration)
        if not isinstance(self.workers, int) or self.workers < 0:
            raise LoadTestError(f"workers {self.workers!r}: expected a whole number >= 0")
        if self.workers > (os.cpu_count() or 1) * 4:
            raise LoadTestError(
                f"workers {self.workers}: expected at most {(os.cpu_count() or 1) * 4} on this machine"
            )
        if self.grpc_transport not in GRPC_TRANSPORTS:
            raise LoadTestError(
                f"gRPC transport {self.grpc_transport!r}: expected one of {', '.join(GRPC_TRANSPORTS)}"
            )
        if self.http_transport not in HTTP_TRANSPORTS:
            raise LoadTestError(
                f"HTTP transport {self.http_transport!r}: expected one of {', '.join(HTTP_TRANSPORTS)}"
            )
        if self.ramp_steps < 1:
            raise LoadTestError(f"ramp steps {self.ramp_steps}: expected at least 1")
        if not self.request_timeout > 0:
            raise LoadTestError(
                f"request timeout {self.request_timeout}: expected a positive number of seconds"
            )
        make_plan(self.scenario, self.users, self.duration, ramp_steps=self.ramp_steps)
        self.report_dir = _writable_dir(Path(self.report_dir))


def _writable_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise LoadTestError(f"report directory {path} cannot be written: {exc.strerror or exc}") from None
    return path.resolve()


def _host(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _with_port(url: str, port: int) -> str:
    host = _host(url).rsplit(":", 1)[0] if ":" in _host(url) else _host(url)
    return f"{host}:{port}"


@dataclasses.dataclass
class _Endpoints:
    http: str
    grpc: str
    metrics: str | None
    metrics_explicit: bool


@contextlib.contextmanager
def _server(options: LoadTestOptions) -> Iterator[_Endpoints]:
    if options.url is not None:
        url = _host(options.url)
        http = (
            _host(options.http_url)
            if options.http_url
            else (url if options.protocol == "http" else _with_port(url, 8000))
        )
        grpc = url if options.protocol == "grpc" else _with_port(url, 8001)
        metrics = options.metrics_url or f"http://{_with_port(url, 8002)}/metrics"
        yield _Endpoints(http, grpc, metrics, options.metrics_url is not None)
        return
    from tritonkit.serve.embedded import EmbeddedServer

    repo = Path(options.repo)
    if not repo.is_dir():
        raise LoadTestError(
            f"model repository {repo} is not a directory; expected --repo DIR or --url HOST:PORT"
        )
    with EmbeddedServer(repo) as server:
        yield _Endpoints(server.http_url, server.grpc_url, server.metrics_url, True)


def _precision(options: LoadTestOptions, spec: ModelSpec) -> str:
    """From the version's build manifest when the repository is local; else the platform."""
    if options.url is None:
        with contextlib.suppress(Exception):
            from tritonkit.repository.store import ModelRepository

            manifest = ModelRepository(Path(options.repo)).read_manifest(spec.name, int(spec.version))
            return str(manifest.precision)
    return spec.platform or "-"


def _locust_command(config_path: Path, report: Path, role: str, master_port: int, workers: int) -> list[str]:
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--skip-log-setup"]
    if role == "worker":
        return [*command, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)]
    command += [
        "--csv",
        str(report / "locust"),
        "--csv-full-history",
        "--html",
        str(report / "locust.html"),
        "--stop-timeout",
        "30",
        "--host",
        "http://127.0.0.1",
    ]
    if role == "master":
        command += [
            "--master",
            "--expect-workers",
            str(workers),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
        ]
    return command


class _Progress:
    """One line, rewritten in place on a terminal, every few seconds otherwise."""

    def __init__(self, stream: IO[str], total: float, history: Path) -> None:
        self.stream, self.total, self.history = stream, total, history
        self.tty = stream.isatty()
        self.last_print = 0.0

    def update(self, elapsed: float) -> None:
        if not self.tty and elapsed - self.last_print < 5:
            return
        self.last_print = elapsed
        row = _last_aggregated(self.history)
        if row is None:
            line = f"[{elapsed:5.0f}s/{self.total:.0f}s] starting users..."
        else:
            line = (
                f"[{elapsed:5.0f}s/{self.total:.0f}s] users {row.get('User Count', '?'):>4}  "
                f"{_float(row.get('Requests/s')):9,.1f} req/s  p95 {row.get('95%', 'N/A'):>5} ms  "
                f"requests {int(_float(row.get('Total Request Count'))):,}  "
                f"failures {int(_float(row.get('Total Failure Count'))):,}"
            )
        if self.tty:
            self.stream.write("\r" + line.ljust(100))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _last_aggregated(path: Path) -> dict[str, str] | None:
    if not path.exists():
        return None
    with contextlib.suppress(OSError):
        with open(path, newline="", encoding="utf-8") as handle:
            lines = handle.readlines()
        if len(lines) < 2:
            return None
        header = next(csv.reader([lines[0]]))
        for line in reversed(lines[1:]):
            row = dict(zip(header, next(csv.reader([line])), strict=False))
            if row.get("Name") == "Aggregated":
                return row
    return None


def _run_locust(options: LoadTestOptions, config_path: Path, report: Path, total: float) -> float:
    """Run Locust to completion; returns its wall time."""
    from tritonkit.serve.embedded import free_port

    env = dict(os.environ)
    env["TRITONKIT_LOADTEST_CONFIG"] = str(config_path)
    env.setdefault("PYTHONUNBUFFERED", "1")
    port = free_port() if options.workers else 0
    log_path = report / "locust.log"
    processes: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    stream = options.stream or sys.stderr
    progress = _Progress(stream, total, report / "locust_stats_history.csv") if options.progress else None
    with open(log_path, "wb") as log:
        try:
            role = "master" if options.workers else "standalone"
            processes.append(
                subprocess.Popen(
                    _locust_command(config_path, report, role, port, options.workers),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
            )
            for _ in range(options.workers):
                processes.append(
                    subprocess.Popen(
                        _locust_command(config_path, report, "worker", port, options.workers),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                    )
                )
            deadline = started + total + 120.0
            master = processes[0]
            while master.poll() is None:
                if time.monotonic() > deadline:
                    raise LoadTestError(f"Locust did not finish within {total + 120:.0f} s; see {log_path}")
                if progress is not None:
                    progress.update(time.monotonic() - started)
                time.sleep(0.5)
            for worker in processes[1:]:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(timeout=15)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.terminate()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=10)
                if process.poll() is None:
                    process.kill()
                    process.wait()
            if progress is not None:
                progress.done()
    code = processes[0].returncode
    if (
        code not in (0, 1) or not (report / "locust_stats.csv").exists()
    ):  # 1 only means "some requests failed"
        raise LoadTestError(f"Locust exited with code {code}: {_last_error(log_path)}; see {log_path}")
    return time.monotonic() - started


def _last_error(log_path: Path) -> str:
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def run(options: LoadTestOptions, *, on_ready: Callable[[Any], None] | None = None) -> Any:
    """Run one load test and write its report; returns the :class:`~tritonkit.loadtest.report.summary.Summary`.

    ``summary.exit_code`` is non-zero when an SLO gate broke. Raises :class:`LoadTestError` (or
    another :class:`~tritonkit.TritonKitError`) before any load is sent when an option, the
    server or a model is wrong.
    """
    from tritonkit.loadtest.report import summary as reporting

    options.validate()
    report = Path(options.report_dir)
    with _server(options) as endpoints:
        url = endpoints.grpc if options.protocol == "grpc" else endpoints.http
        specs = [fetch_model_spec(url, m.name, m.version, protocol=options.protocol) for m in options.models]
        for target, spec in zip(options.models, specs, strict=True):
            make_payloads(
                spec, target.batch_mix, per_batch=1, source=target.source
            )  # checks the mix vs the model
        assert isinstance(options.duration, float)
        plan = make_plan(options.scenario, options.users, options.duration, ramp_steps=options.ramp_steps)
        for stale in ("ramp_steps.json", "summary.json", "summary.md"):
            (report / stale).unlink(missing_ok=True)
        shutil.rmtree(report / ".latency", ignore_errors=True)
        config = {
            "http_url": endpoints.http,
            "grpc_url": endpoints.grpc,
            "protocol": options.protocol,
            "scenario": options.scenario,
            "users": options.users,
            "duration": options.duration,
            "ramp_steps": options.ramp_steps,
            "seed": options.seed,
            "request_timeout": options.request_timeout,
            "grpc_transport": options.grpc_transport,
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
                }
                for t, s in zip(options.models, specs, strict=True)
            ],
        }
        config_path = report / "run_config.json"
        config_path.write_text(json.dumps(config, indent=1))
        if on_ready is not None:
            on_ready(endpoints)
        scraper: MetricsScraper | None = None
        scrape_note = None
        if endpoints.metrics:
            try:
                scraper = MetricsScraper(endpoints.metrics).start()
            except LoadTestError as exc:
                if endpoints.metrics_explicit:
                    raise
                scrape_note = f"server view unavailable: {exc}"
        started_at = time.time()
        try:
            wall = _run_locust(options, config_path, report, plan.duration)
        finally:
            if scraper is not None:
                scraper.stop()
        wrk_result = None
        if options.wrk:
            from tritonkit.loadtest.wrk import cross_check

            target = options.models[0]
            spec = specs[0]
            wrk_result = cross_check(
                endpoints.http,
                spec,
                target.batch_mix,
                connections=options.users,
                duration=min(10.0, options.duration),
                seed=options.seed,
                report_dir=report,
            )
        summary = reporting.collect(
            report,
            options=options,
            specs=specs,
            precisions=[_precision(options, s) for s in specs],
            scraper=scraper,
            started_at=started_at,
            wall_seconds=wall,
            machine=machine_description(),
            wrk=wrk_result,
            notes=[scrape_note] if scrape_note else [],
        )
        reporting.write(summary, report, plots=options.plots)
        return summary


def machine_description() -> str:
    """ "x86_64, 2 cores, Linux 6.1, Python 3.11.7" (the benchmark tables name the machine)."""
    cpu = cpu_model() or ""
    return (
        f"{platform.machine()}, {os.cpu_count()} cores{' (' + cpu + ')' if cpu else ''}, "
        f"{platform.system()} {platform.release().split('-')[0]}, Python {platform.python_version()}"
    )
