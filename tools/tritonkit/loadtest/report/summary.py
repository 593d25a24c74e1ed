"""The capacity report: :class:`Summary` from a run's files, and ``summary.json`` / ``summary.md``.

Client view (counts, throughput and p50/p95/p99 from the fine histograms the locustfile
:mod:`tritonkit.loadtest.locustfile` writes under ``.latency/``; error texts from Locust's
failures CSV through :mod:`.locust_csv`), server view (Triton's counters from :mod:`.metrics`), the
accounting check (requests Locust sent vs requests Triton counted), SLO gates per model and
overall, the ramp's steps and knee, the wrk cross-check and the run's provenance (device, engines,
Triton, host, date: :mod:`tritonkit.measure.provenance`), all in one place. The Markdown table
follows the T4 guide's benchmark table: model, precision, batch, p50/p95/p99 (the p99 with its sample
count and 95 % interval), throughput, failures.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.loadtest.report.locust_csv import read_failures
from tritonkit.loadtest.report.metrics import MetricsScraper
from tritonkit.loadtest.report.plots import draw_all
from tritonkit.loadtest.slo import EXIT_SLO_BREACH, Breach, Histogram, Totals, check_slo
from tritonkit.loadtest.watch import INTERRUPTED
from tritonkit.measure.payloads import ModelSpec
from tritonkit.measure.provenance import markdown_lines

__all__ = ["EXIT_INTERRUPTED", "EXIT_SERVER_DIED", "Summary", "collect", "markdown", "write"]

#: a run stopped early, its partial report written: the server died (4), Ctrl-C (130, the shell's)
EXIT_SERVER_DIED, EXIT_INTERRUPTED = 4, 130


@dataclasses.dataclass
class Summary:
    """Everything ``summary.json`` holds; ``exit_code`` is 0 when every SLO gate passed, else 3; a run
    stopped early is 4 (the server died) or 130 (Ctrl-C) whatever its gates say."""

    data: dict[str, Any]
    breaches: list[Breach]

    @property
    def slo_passed(self) -> bool:
        return not self.breaches

    @property
    def exit_code(self) -> int:
        stopped = self.data.get("stopped")
        if stopped:
            return EXIT_INTERRUPTED if stopped["reason"] == INTERRUPTED else EXIT_SERVER_DIED
        return 0 if self.slo_passed else EXIT_SLO_BREACH

    def stopped_line(self) -> str | None:
        """One line on a run stopped early (None: it ran its plan)."""
        stopped = self.data.get("stopped")
        if not stopped:
            return None
        when = f"{stopped['at_s']:.1f} s into the run of {self.data['duration_s']:g} s planned"
        if stopped["reason"] == INTERRUPTED:
            return f"interrupted (Ctrl-C) {when}: the report covers the run until then"
        return (
            f"the server died {when} ({stopped['detail']}): the run was stopped there and the report "
            "covers it until then"
        )

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


@dataclasses.dataclass
class _Counted:
    """One request name over all Locust processes: exact counts, fine histogram, time span."""

    requests: int = 0
    failures: int = 0
    first: float = float("inf")
    last: float = 0.0
    hist: Histogram = dataclasses.field(default_factory=Histogram)

    def add(self, other: _Counted) -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)
        self.hist.merge(other.hist)

    @property
    def seconds(self) -> float:
        return max(self.last - self.first, 1e-9) if self.requests else 0.0


def _read_cpu(folder: Path) -> float | None:
    """CPU seconds the Locust processes and their gRPC engines used while load was on."""
    values = (
        [json.loads(p.read_text()).get("_cpu_s") for p in sorted(folder.glob("*.json"))]
        if folder.is_dir()
        else []
    )
    known = [float(v) for v in values if v is not None]
    return sum(known) if known and len(known) == len(values) else None


def _read_counts(folder: Path) -> dict[str, _Counted]:
    merged: dict[str, _Counted] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        for name, item in json.loads(path.read_text()).items():
            if name.startswith("_"):
                continue
            counted = _Counted(
                int(item["requests"]),
                int(item["failures"]),
                float(item["first"]),
                float(item["last"]),
                Histogram({int(k): int(v) for k, v in item["histogram"].items()}),
            )
            merged.setdefault(name, _Counted()).add(counted)
    return merged


def _batch_label(mix: Mapping[int, float]) -> str:
    if len(mix) == 1:
        return str(next(iter(mix)))
    total = sum(mix.values())
    return ", ".join(f"{b} ({w / total:.0%})" for b, w in sorted(mix.items()))


def _scope(totals: Totals) -> dict[str, Any]:
    return {
        "requests": totals.requests,
        "failures": totals.failures,
        "succeeded": totals.requests - totals.failures,
        "rps": round(totals.rps, 2),  # successes per second
        "failures_per_s": round(totals.failures_per_s, 2),
        "failure_ratio": round(totals.failure_ratio, 6),
        "p50_ms": _round(totals.p50_ms),
        "p95_ms": _round(totals.p95_ms),
        "p99_ms": _round(totals.p99_ms),
        "p99_ci_ms": [_round(v) for v in totals.p99_ci_ms],
        "p99_samples": totals.samples,
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _model_entries(
    options: Any,
    specs: Sequence[ModelSpec],
    precisions: Sequence[str],
    counts: Mapping[str, _Counted],
    seconds: float,
    server: Mapping[str, Any],
    batch_stats: Mapping[str, Mapping[str, Any]] | None,
    failures: Mapping[str, Any],
) -> tuple[dict[str, Any], list[Breach]]:
    """Per model: its client figures, SLO verdict, errors, server view and batch sizes formed."""
    breaches: list[Breach] = []
    models: dict[str, Any] = {}
    for target, spec, precision in zip(options.models, specs, precisions, strict=True):
        label = spec.label
        counted = counts.get(label, _Counted())
        totals = Totals.from_histogram(counted.hist, counted.failures, seconds, requests=counted.requests)
        model_breaches = check_slo(options.slo, totals, scope=label)
        breaches += model_breaches
        entry: dict[str, Any] = {
            "model": spec.name,
            "version": spec.version,
            "precision": precision,
            "batch": _batch_label(target.batch_mix),
            "weight": target.weight,
            **_scope(totals),
            "samples_per_s": round(totals.rps * _mean_batch(target.batch_mix), 2),
            "slo_passed": not model_breaches,
            "slo_breaches": [str(b) for b in model_breaches],
            "errors": failures.get(label, {}),
        }
        if label in server:
            entry["server"] = server[label].to_json()
        # executions per batch size from Triton's statistics API (None: not readable, see notes)
        entry["batch_stats"] = dict(batch_stats[label]) if batch_stats and label in batch_stats else None
        models[label] = entry
    return models, breaches


def _accounting(
    overall: Totals,
    specs: Sequence[ModelSpec],
    server: Mapping[str, Any],
    batch_stats: Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """Requests the load generator sent against the requests Triton counted (and its restarts)."""
    labels = [s.label for s in specs if s.label in server]
    triton_requests = sum(server[label].requests for label in labels) if server else None
    accounting: dict[str, Any] = {
        "sent": overall.requests,
        "succeeded": overall.requests - overall.failures,
        "failed": overall.failures,
        "triton_requests": triton_requests,
        "triton_success": sum(int(server[label].get("success")) for label in labels) if server else None,
        "triton_failure": sum(int(server[label].get("failure")) for label in labels) if server else None,
    }
    accounting["matched"] = triton_requests == overall.requests if triton_requests is not None else None
    # Triton's counters start from 0 when the server restarts: sums are per segment (metrics.increase)
    restarts = max((d.restarts for d in server.values()), default=0)
    restarts = max(restarts, int(any((b or {}).get("restarted") for b in (batch_stats or {}).values())))
    accounting["server_restarts"] = restarts
    return accounting


def collect(
    report: Path,
    *,
    options: Any,
    specs: Sequence[ModelSpec],
    precisions: Sequence[str],
    scraper: MetricsScraper | None,
    started_at: float,
    wall_seconds: float,
    machine: str,
    wrk: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
    batch_stats: Mapping[str, Mapping[str, Any]] | None = None,
    provenance: Mapping[str, Any] | None = None,
    stopped: Mapping[str, Any] | None = None,
) -> Summary:
    """Read a finished run's files into a :class:`Summary` and check the SLO gates.

    ``stopped``: why and when (``at_s`` after ``started_at``) the run ended before its plan, or None."""
    # Counts and percentiles come from the locustfile's own listener, which sees every request
    # event (Locust's final CSV can miss the answers that arrive while users stop); rates are
    # over the span from the first to the last answer.
    counts = _read_counts(report / ".latency")
    client_cpu_s = _read_cpu(report / ".latency")
    overall_counted = _Counted()
    for counted in counts.values():
        overall_counted.add(counted)
    seconds = overall_counted.seconds or wall_seconds
    server = scraper.total() if scraper is not None else {}
    series = scraper.series([s.label for s in specs]) if scraper is not None else {}
    failures = read_failures(report / "locust_failures.csv")
    models, breaches = _model_entries(
        options, specs, precisions, counts, seconds, server, batch_stats, failures
    )
    overall = Totals.from_histogram(
        overall_counted.hist, overall_counted.failures, seconds, requests=overall_counted.requests
    )
    breaches = check_slo(options.slo, overall, scope="overall") + breaches
    ramp_path = report / "ramp_steps.json"
    ramp_steps = json.loads(ramp_path.read_text()) if ramp_path.exists() else []
    knee, knee_rule = _knee(ramp_steps)
    data: dict[str, Any] = {
        "scenario": options.scenario,
        "protocol": options.protocol,
        "grpc_transport": "wire" if options.protocol == "grpc" else None,  # the one gRPC transport
        "http_transport": options.http_transport if options.protocol == "http" else None,
        "users": options.users,
        "workers": options.workers,
        "duration_s": round(float(options.duration), 3),
        "measured_s": round(seconds, 3),
        "stopped": dict(stopped) if stopped else None,
        "machine": machine,
        "provenance": dict(provenance) if provenance is not None else None,
        "started": datetime.datetime.fromtimestamp(started_at, datetime.UTC).isoformat(timespec="seconds"),
        **_scope(overall),
        "slo_passed": not breaches,
        "slo": {**options.slo.to_json(), "breaches": [str(b) for b in breaches]},
        "models": models,
        "accounting": _accounting(overall, specs, server, batch_stats),
        # CPU seconds of the load generator's processes (Locust, workers, gRPC engines) per request:
        # what a load generator costs, less sensitive than req/s to neighbours on a shared machine.
        "client_cpu_s": None if client_cpu_s is None else round(client_cpu_s, 3),
        "client_cpu_us_per_request": (
            round(client_cpu_s * 1e6 / overall.requests, 1) if client_cpu_s and overall.requests else None
        ),
        "ramp_steps": ramp_steps,
        "knee": knee,
        "knee_rule": knee_rule,
        "wrk": dict(wrk) if wrk else None,
        "notes": list(notes) + (scraper.errors[:3] if scraper is not None else []),
    }
    if series:
        (report / "server_metrics.json").write_text(json.dumps(series, indent=1))
    return Summary(data, breaches)


#: a ramp step that adds less throughput than this over the previous one is past the knee
SATURATION_GAIN = 0.05


def _knee(steps: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any] | None, str | None]:
    """The ramp's knee: the last step within the SLO; without a breach, the step after which more
    users stopped adding throughput (under 5 %); ``None`` when neither happened."""
    if not steps:
        return None, None
    for index, step in enumerate(steps):
        if step["breaches"]:
            return (steps[index - 1], "slo") if index else (None, "slo")
    for before, after in itertools.pairwise(steps):
        if after["rps"] < before["rps"] * (1 + SATURATION_GAIN):
            return before, "saturation"
    return None, "not reached"


def _mean_batch(mix: Mapping[int, float]) -> float:
    total = sum(mix.values())
    return sum(b * w for b, w in mix.items()) / total if total else 1.0


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def _sizes(formed: Mapping[str, int]) -> str:
    return ", ".join(f"{b}: {n:,}" for b, n in formed.items()) or "-"


def _ci(values: Sequence[float | None] | None, samples: int | None) -> str:
    """``[low, high] (n)`` of a p99: ``<min``/``>max`` where the bound lies outside the sample."""
    low, high = values or (None, None)
    return (
        f"[{'<min' if low is None else f'{low:.2f}'}, {'>max' if high is None else f'{high:.2f}'}] "
        f"({samples or 0:,})"
    )


def _capacity_lines(d: Mapping[str, Any]) -> list[str]:
    """The T4 guide's table: model, precision, batch, percentiles (p99 with its interval), throughput."""
    lines = [
        "| model | precision | batch | p50 ms | p95 ms | p99 ms | p99 95% CI (n) | throughput (req/s) | "
        "samples/s | failures |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for label, m in d["models"].items():
        lines.append(
            f"| {label} | {m['precision']} | {m['batch']} | {_ms(m['p50_ms'])} | {_ms(m['p95_ms'])} | "
            f"{_ms(m['p99_ms'])} | {_ci(m.get('p99_ci_ms'), m.get('p99_samples'))} | {m['rps']:,.1f} | "
            f"{m['samples_per_s']:,.1f} | {m['failures']:,} / {m['requests']:,} |"
        )
    if len(d["models"]) > 1:
        lines.append(
            f"| **all** | | | {_ms(d['p50_ms'])} | {_ms(d['p95_ms'])} | {_ms(d['p99_ms'])} | "
            f"{_ci(d.get('p99_ci_ms'), d.get('p99_samples'))} | {d['rps']:,.1f} | | "
            f"{d['failures']:,} / {d['requests']:,} |"
        )
    return lines


def _server_lines(d: Mapping[str, Any]) -> list[str]:
    """Triton's view: requests, queue and compute per request, batches formed."""
    lines: list[str] = []
    servers = {k: m["server"] for k, m in d["models"].items() if "server" in m}
    if servers:
        lines += [
            "",
            "Server view (Triton `/metrics`, differences over the run):",
            "",
            "| model | Triton requests | queue µs/request | compute µs/request | avg batch formed | batch sizes formed (executions) |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for label, s in servers.items():
            formed = (d["models"][label].get("batch_stats") or {}).get("batch_sizes")
            sizes = "unavailable (see note)" if formed is None else _sizes(formed)
            lines.append(
                f"| {label} | {s['requests']:,} | {_ms(s['queue_us_per_request'])} | "
                f"{_ms(s['compute_us_per_request'])} | {_ms(s['avg_batch'])} | {sizes} |"
            )
    formed = {
        k: m["batch_stats"] for k, m in d["models"].items() if m.get("batch_stats") and k not in servers
    }
    if formed:  # no /metrics view: the statistics API's batch sizes on their own
        lines += ["", "Batch sizes formed (Triton's statistics, executions):"]
        lines += [f"- {label}: {_sizes(b['batch_sizes'])}" for label, b in formed.items()]
    return lines


def explain_difference(acc: Mapping[str, Any]) -> str:
    """Why the requests the load generator sent and those Triton counted differ (one sentence)."""
    diff = int(acc["sent"]) - int(acc["triton_requests"])
    failed, triton_failed = int(acc["failed"]), int(acc["triton_failure"] or 0)
    if diff > 0:
        unreached = max(0, failed - triton_failed)
        why = (
            f"{diff:,} request(s) the client counted never reached Triton's counters: of its {failed:,} "
            f"failure(s), {unreached:,} are not among Triton's {triton_failed:,} (refused or reset "
            "connections, client timeouts, a server that was gone)"
        )
        if diff > unreached:
            why += (
                f"; the other {diff - unreached:,} were answered by a server process whose last counts no scrape "
                "read (a restart or death after the last scrape)"
                if acc.get("server_restarts")
                else f"; the other {diff - unreached:,} were cut off with their server process before it counted them"
            )
        return why
    return (
        f"Triton counted {-diff:,} request(s) more than the client recorded: requests in flight at the cut "
        "(their users were stopped before the answers came back, or a timed-out request the server still "
        "completed), which the client never counted as sent and answered"
    )


def _accounting_lines(d: Mapping[str, Any]) -> list[str]:
    acc = d["accounting"]
    head = f"Accounting: sent {acc['sent']:,} = succeeded {acc['succeeded']:,} + failed {acc['failed']:,}; "
    if acc["triton_requests"] is None:
        lines = ["", head + "Triton's counters were not available."]
    else:
        verdict = (
            "match"
            if acc["matched"]
            else f"DIFFER by {acc['sent'] - acc['triton_requests']:+,}: {explain_difference(acc)}"
        )
        lines = [
            "",
            head + f"Triton counted {acc['triton_requests']:,} ({acc['triton_success']:,} success + "
            f"{acc['triton_failure']:,} failure): {verdict}.",
        ]
    if acc.get("server_restarts"):
        lines += [
            "",
            f"The server restarted during the run ({acc['server_restarts']} restart(s) seen): Triton's counters "
            "are summed per segment between restarts, and what a process counted after its last scrape is lost.",
        ]
    if d.get("client_cpu_us_per_request") is not None:
        name = d.get("grpc_transport") or d.get("http_transport")
        transport = f" (`{name}` transport)" if name else ""
        lines += [
            "",
            f"Load generator{transport}: {d['client_cpu_s']:.2f} CPU-seconds while load was on, "
            f"{d['client_cpu_us_per_request']:,.0f} µs per request.",
        ]
    return lines


def _ramp_lines(d: Mapping[str, Any]) -> list[str]:
    """The ramp's steps (each measured inside itself, after its settling period) and the knee."""
    if not d["ramp_steps"]:
        return []
    settle = max((s.get("settle_s") or 0.0 for s in d["ramp_steps"]), default=0.0)
    lines = [
        "",
        "Ramp steps (each from the requests completed inside the step, after a settling period of up to "
        f"{settle:g} s; never Locust's 10 s rolling window, which smears one step into the next):",
        "",
        "| step | users | req/s | p50 ms | p95 ms | p99 ms | p99 95% CI (n) | failures | SLO |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for s in d["ramp_steps"]:
        lines.append(
            f"| {s['step']} | {s['users']} | {s['rps']:,.1f} | {_ms(s['p50_ms'])} | {_ms(s['p95_ms'])} | "
            f"{_ms(s['p99_ms'])} | {_ci(s.get('p99_ci_ms'), s.get('samples'))} | {s['failures']:,} | "
            f"{'; '.join(s['breaches']) or 'ok'} |"
        )
    knee, rule = d["knee"], d["knee_rule"]
    if rule == "slo":
        text = (
            f"Knee: {knee['users']} users, {knee['rps']:,.1f} req/s, the last step within the SLO."
            if knee
            else "Knee: the first step already broke the SLO."
        )
    elif rule == "saturation":
        text = (
            f"Knee: {knee['users']} users, {knee['rps']:,.1f} req/s: more users added under "
            f"{SATURATION_GAIN:.0%} throughput, only latency (no SLO gate broke)."
        )
    else:
        text = "Knee: not reached; throughput still rose at the last step and no SLO gate broke."
    return [*lines, "", text]


def _wrk_lines(d: Mapping[str, Any]) -> list[str]:
    if not d["wrk"]:
        return []
    w = d["wrk"]
    ratio = d["rps"] / w["rps"] if w.get("rps") else None
    return [
        "",
        "Cross-check with wrk (same body, same endpoint, HTTP/1.1 JSON):",
        "",
        "| generator | connections | req/s | Locust / wrk |",
        "|---|---:|---:|---:|",
        f"| wrk | {w['connections']} | {w['rps']:,.1f} | |",
        f"| Locust ({d['protocol']}) | {d['users']} | {d['rps']:,.1f} | {ratio:.2f} |" if ratio else "",
    ]


def markdown(summary: Summary) -> str:
    """``summary.md``: provenance, the capacity table, server view, accounting, SLO verdict, ramp, wrk."""
    d = summary.data
    provenance = markdown_lines(d["provenance"]) if d.get("provenance") else [f"Machine: {d['machine']}.", ""]
    lines = [
        f"# Load test: {d['scenario']} over {d['protocol']}, {d['users']} users"
        + (f", {d['workers']} workers" if d["workers"] else ""),
        "",
        *provenance,
        f"Started {d['started']}, {d['measured_s']:.1f} s measured.",
        "",
        *([f"**Stopped early**: {line}.", ""] if (line := summary.stopped_line()) else []),
        *_capacity_lines(d),
        *_server_lines(d),
        *_accounting_lines(d),
    ]
    slo = d["slo"]
    gates = ", ".join(f"{k} {v:g}" for k, v in slo.items() if k != "breaches" and v is not None) or "none"
    lines += ["", f"SLO ({gates}): **{'PASSED' if d['slo_passed'] else 'BREACHED'}**"]
    lines += [f"- {b}" for b in slo["breaches"]]
    lines += _ramp_lines(d) + _wrk_lines(d)
    for note in d["notes"]:
        lines += ["", f"Note: {note}"]
    plots = [
        p
        for p in ("latency_over_time.png", "ramp_throughput_p99.png", "server_queue_compute.png")
        if p in d.get("plots", [])
    ]
    if plots:
        lines += [""] + [f"![{p[:-4]}]({p})" for p in plots]
    return "\n".join(lines).rstrip() + "\n"


def write(summary: Summary, report: Path, *, plots: bool = True) -> None:
    """Write ``summary.json``, ``summary.md`` and the PNG plots into ``report``."""
    if plots:
        summary.data["plots"] = draw_all(report, summary.data)
    else:
        summary.data["plots"] = []
    (report / "summary.json").write_text(json.dumps(summary.data, indent=1, default=str) + "\n")
    (report / "summary.md").write_text(markdown(summary))
