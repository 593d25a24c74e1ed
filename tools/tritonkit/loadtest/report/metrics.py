"""The server-side view: Triton's Prometheus ``/metrics`` scraped during a run.

Per model version it keeps Triton's own counters (successes, failures, inferences, executions)
and cumulative durations (queue, compute input/infer/output). Differences between two scrapes
give what the report puts beside the client view: requests Triton counted (the accounting check),
queue vs compute time per request, and the average batch the dynamic batcher formed
(inferences / executions). The batch sizes formed come from Triton's statistics API instead
(:func:`server_statistics` before and after the run, :func:`batch_stats`): ``/metrics`` has no
batch-size histogram, and averages per interval would invent sizes no execution had.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tritonkit.client import Client, ClientError, ModelStatistics, RestrictedApiError
from tritonkit.errors import LoadTestError
from tritonkit.measure.payloads import ModelSpec

__all__ = [
    "COUNTERS",
    "MetricsScraper",
    "ServerDelta",
    "batch_stats",
    "increase",
    "parse_metrics",
    "scrape",
    "server_statistics",
]

#: Triton metric → short key (all cumulative per model version)
COUNTERS: dict[str, str] = {
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "failure",
    "nv_inference_count": "inferences",
    "nv_inference_exec_count": "executions",
    "nv_inference_request_duration_us": "request_us",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_input_duration_us": "compute_input_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_us",
    "nv_inference_compute_output_duration_us": "compute_output_us",
}

#: "model:version" → counter key → value
Counters = dict[str, dict[str, float]]


def parse_metrics(text: str) -> Counters:
    """Sum Triton's per-model counters (all ``reason`` labels of failures together).

    Read with ``prometheus_client``'s text-format parser, which handles label values holding
    ``}``, ``,`` or escaped quotes. That parser names a counter family without its ``_total``
    suffix and its samples with it (``nv_inference_count`` → samples ``nv_inference_count_total``),
    so a family is matched by name and only its value samples are summed: never ``_created``
    (a separate family in this format), nor the ``_bucket``/``_count``/``_sum`` samples of the
    histograms and summaries Triton can also export. Raises :class:`LoadTestError` for text that
    is not in the Prometheus text format.
    """
    result: Counters = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise LoadTestError(
            f"/metrics answer is not in the Prometheus text format: {exc or 'bad line'}"
        ) from None
    for family in families:
        short = COUNTERS.get(family.name)
        if short is None:
            continue
        for sample in family.samples:
            if sample.name not in (family.name, family.name + "_total") or "model" not in sample.labels:
                continue
            key = f"{sample.labels['model']}:{sample.labels.get('version', '')}"
            counters = result.setdefault(key, {})
            counters[short] = counters.get(short, 0.0) + float(sample.value)
    return result


def scrape(url: str, timeout: float = 5.0) -> Counters:
    """One scrape of ``url`` (``http://host:port/metrics``)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LoadTestError(f"cannot scrape Triton metrics at {url}: {reason}") from None
    try:
        return parse_metrics(text)
    except LoadTestError as exc:
        raise LoadTestError(f"cannot scrape Triton metrics at {url}: {exc}") from None


@dataclasses.dataclass
class ServerDelta:
    """Counters of one model version between two scrapes."""

    model: str
    seconds: float
    counters: dict[str, float]
    #: scrape intervals in which the counters went down: the server restarted (and counted from 0)
    restarts: int = 0

    def get(self, key: str) -> float:
        return self.counters.get(key, 0.0)

    @property
    def requests(self) -> int:
        return int(self.get("success") + self.get("failure"))

    def per_request_us(self, *keys: str) -> float | None:
        done = self.get("success")
        return sum(self.get(k) for k in keys) / done if done else None

    @property
    def avg_batch(self) -> float | None:
        executions = self.get("executions")
        return self.get("inferences") / executions if executions else None

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "success": int(self.get("success")),
            "failure": int(self.get("failure")),
            "inferences": int(self.get("inferences")),
            "executions": int(self.get("executions")),
            "queue_us_per_request": self.per_request_us("queue_us"),
            "compute_us_per_request": self.per_request_us(
                "compute_input_us", "compute_infer_us", "compute_output_us"
            ),
            "request_us_per_request": self.per_request_us("request_us"),
            "avg_batch": self.avg_batch,
            "restarts": self.restarts,
        }


def delta(before: Counters, after: Counters, seconds: float) -> dict[str, ServerDelta]:
    """What each model version counted between two scrapes.

    A counter that went down means the server restarted in between and counted again from 0, as
    Prometheus' ``increase()`` reads it: the increase is then the value after (what the new process
    counted; what the old one counted after the earlier scrape is lost). All counters of a version
    restart together, so one going down resets them all.
    """
    out = {}
    for key, counters in after.items():
        base = before.get(key, {})
        reset = any(v < base.get(k, 0.0) for k, v in counters.items())
        if reset:
            base = {}
        out[key] = ServerDelta(
            key, seconds, {k: v - base.get(k, 0.0) for k, v in counters.items()}, int(reset)
        )
    return out


def increase(samples: list[tuple[float, Counters]]) -> dict[str, ServerDelta]:
    """Per model version, the sum of :func:`delta` over consecutive scrapes: a restart between two
    scrapes starts a new segment instead of making the total negative."""
    out: dict[str, ServerDelta] = {}
    for (ta, a), (tb, b) in itertools.pairwise(samples):
        for key, d in delta(a, b, tb - ta).items():
            total = out.setdefault(key, ServerDelta(key, 0.0, {}))
            total.seconds += d.seconds
            total.restarts += d.restarts
            for k, v in d.counters.items():
                total.counters[k] = total.counters.get(k, 0.0) + v
    if samples:
        for total in out.values():
            total.seconds = samples[-1][0] - samples[0][0]
    return out


class MetricsScraper:
    """Scrapes ``url`` every ``interval`` seconds on a thread while a run is on."""

    def __init__(self, url: str, interval: float = 1.0) -> None:
        self.url = url
        self.interval = interval
        self.samples: list[tuple[float, Counters]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsScraper:
        self.samples.append((time.time(), scrape(self.url)))  # fails fast when metrics are off
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.samples.append((time.time(), scrape(self.url)))
            except LoadTestError as exc:
                self.errors.append(str(exc))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with contextlib.suppress(LoadTestError):
            self.samples.append((time.time(), scrape(self.url)))

    def total(self) -> dict[str, ServerDelta]:
        """Per model version, from the first scrape to the last, summed over restarts."""
        if len(self.samples) < 2:
            return {}
        return increase(self.samples)

    def series(self, keys: Iterable[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Per model version, one record per scrape interval (for plots and the batch table)."""
        wanted = set(keys) if keys is not None else None
        out: dict[str, list[dict[str, Any]]] = {}
        t_start = self.samples[0][0] if self.samples else 0.0
        for (ta, a), (tb, b) in zip(self.samples, self.samples[1:], strict=False):
            for key, d in delta(a, b, tb - ta).items():
                if wanted is not None and key not in wanted:
                    continue
                # "unix": the wall clock, so plots put server and client on one time axis
                record = {"t": round(tb - t_start, 3), "unix": round(tb, 3), **d.to_json()}
                out.setdefault(key, []).append(record)
        return out


#: label ("model:version") → Triton's cumulative statistics of that version
Statistics = dict[str, ModelStatistics]


def server_statistics(
    url: str, protocol: str, headers: Mapping[str, str], specs: Iterable[ModelSpec]
) -> tuple[Statistics | None, str | None]:
    """Triton's statistics of each model version in ``specs``, or ``None`` and a note saying why not.

    The statistics API is restricted on tritonkit's embedded server (admin key in ``headers``);
    without it the report says so rather than guessing batch sizes from averages.
    """
    out: Statistics = {}
    try:
        with Client(url, protocol, timeout=10.0, retries=1, headers=dict(headers)) as client:
            for spec in specs:
                for stats in client.statistics(spec.name, spec.version or None):
                    out[f"{stats.name}:{stats.version}"] = stats
    except RestrictedApiError:
        return None, (
            "batch sizes formed: Triton's statistics API is restricted on this server; pass its key "
            "with --admin-key (or TRITONKIT_ADMIN_KEY) to read them"
        )
    except ClientError as exc:
        return None, f"batch sizes formed: Triton's statistics unavailable: {exc}"
    return out, None


def batch_stats(before: Statistics | None, after: Statistics | None) -> dict[str, dict[str, Any]] | None:
    """Per model version, what the run added to Triton's statistics: inferences, executions and
    executions per batch size (``batch_stats``' compute-infer counts); ``None`` when unread.

    ``sum(size * executions)`` over the sizes equals ``inferences``: every inference ran in
    exactly one execution of the size Triton formed.
    """
    if before is None or after is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    for key, now in after.items():
        base = before.get(key)
        # Fewer inferences than before: the server restarted and these are the new process's counts.
        restarted = base is not None and (
            now.inference_count < base.inference_count or now.execution_count < base.execution_count
        )
        if restarted:
            base = None
        sizes = {
            size: count - (base.batch_executions.get(size, 0) if base else 0)
            for size, count in sorted(now.batch_executions.items())
        }
        out[key] = {
            "inferences": now.inference_count - (base.inference_count if base else 0),
            "executions": now.execution_count - (base.execution_count if base else 0),
            "batch_sizes": {str(size): n for size, n in sizes.items() if n > 0},
            "restarted": restarted,
        }
    return out
