"""Measuring a load level until it is stable, sweeps of levels, and the highest level within a budget.

Owns :class:`Window` (one window's client numbers, Triton's split from statistics deltas, and the
generator check), :class:`LevelResult` (a level's verdict: stable or not, always with its numbers),
:class:`Measurer` (one model, one generator, statistics snapshots between windows), :func:`sweep` and
:func:`find_max` (doubling, then bisection, for the highest load whose p99 stays within the budget).

Throughput counts successes only: failed requests are reported as ``failures`` and ``failure_ratio``.
The generator check marks a window ``generator_limited`` when its loop used more than
``max_generator_cpu`` of a core or, at a request rate, sent more than ``max_late_share`` of its requests
late or dropped them: such a level measures the generator, not the server. :meth:`Measurer.measure`
then measures the level again with twice the processes, up to what the host has
(:mod:`tritonkit.measure.capacity`), and a level still limited is never an answer: :func:`find_max` and
:func:`refuse_limited` stop with :class:`GeneratorLimitedError`, one line naming the limit and the
flag. Every result says the generator capacity it was measured with (``generator``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tritonkit.client import Client
from tritonkit.errors import TritonKitError
from tritonkit.measure.capacity import AUTO, Capacity
from tritonkit.measure.loadgen import Level, LoadGenerator, RawWindow, Target, WindowSpec
from tritonkit.measure.stats import (
    ServerSplit,
    StabilityRule,
    latency_percentiles,
    merge_splits,
    quantile_interval_us,
    server_split,
)

__all__ = [
    "GeneratorLimitedError",
    "LevelResult",
    "MeasureOptions",
    "Measurer",
    "Window",
    "find_max",
    "generator_line",
    "limited_message",
    "refuse_limited",
    "sweep",
]


class GeneratorLimitedError(TritonKitError):
    """A level measured the load generator, not the server, and the generator had no more capacity."""


@dataclasses.dataclass(frozen=True)
class MeasureOptions:
    """How a level is measured: windows, the stability rule, and the generator check's limits."""

    window: WindowSpec = WindowSpec()  # noqa: RUF009 - frozen, never mutated
    stability: StabilityRule = StabilityRule()  # noqa: RUF009 - frozen, never mutated
    max_windows: int = 10
    max_generator_cpu: float = 0.9
    max_late_share: float = 0.05
    #: generator processes: :data:`~tritonkit.measure.capacity.AUTO` (sized per level, grown when a level
    #: is limited) or that many for every level (1: this process's load loop)
    workers: int = AUTO
    #: with ``workers`` AUTO, the most processes (None: the cores this host leaves the generator)
    max_processes: int | None = None


@dataclasses.dataclass
class Window:
    """One window of a level, every loop merged."""

    wall_s: float
    successes: int
    failures: int
    sent: int
    late: int
    dropped: int
    throughput: float
    percentiles: dict[str, float]
    generator_cpu: float
    server: ServerSplit
    error: str = ""
    latencies_ns: list[int] = dataclasses.field(default_factory=list, repr=False)

    @property
    def p99_us(self) -> float:
        return self.percentiles["p99_us"]

    @property
    def late_share(self) -> float:
        return (self.late + self.dropped) / (self.sent + self.dropped) if self.sent + self.dropped else 0.0

    @classmethod
    def merge(cls, raws: Sequence[RawWindow], split: ServerSplit) -> Window:
        wall = max(r.wall_s for r in raws)
        latencies = [lat for r in raws for lat in r.latencies_ns]
        shares = [r.cpu_s / r.wall_s for r in raws if r.wall_s > 0]
        return cls(
            wall_s=wall,
            successes=len(latencies),
            failures=sum(r.failures for r in raws),
            sent=sum(r.sent for r in raws),
            late=sum(r.late for r in raws),
            dropped=sum(r.dropped for r in raws),
            throughput=len(latencies) / wall if wall > 0 else 0.0,
            percentiles=latency_percentiles(latencies),
            generator_cpu=max(shares) if shares else 0.0,
            server=split,
            error=next((r.error for r in raws if r.error), ""),
            latencies_ns=latencies,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 4),
            "successes": self.successes,
            "failures": self.failures,
            "sent": self.sent,
            "late": self.late,
            "dropped": self.dropped,
            "throughput": round(self.throughput, 3),
            **self.percentiles,
            "generator_cpu": round(self.generator_cpu, 3),
            "server": self.server.as_dict(),
            **({"error": self.error} if self.error else {}),
        }


@dataclasses.dataclass
class LevelResult:
    """A level's verdict. ``stable`` False still carries the numbers of its last windows."""

    level: Level
    stable: bool
    windows: list[Window]
    throughput: float
    percentiles: dict[str, float]
    failures: int
    successes: int
    generator_limited: bool
    generator_cpu: float
    late_share: float
    server: ServerSplit
    error: str = ""
    #: the 95 % confidence interval of the p99 (µs) from the ``successes`` it was computed from
    p99_ci_us: tuple[float | None, float | None] = (None, None)
    #: the generator this result was measured with
    capacity: Capacity = Capacity(1, 1, False)  # noqa: RUF009 - frozen, never mutated
    #: the generator's earlier tries at this level, each limited: [{"processes", "generator_cpu"}]
    limited_tries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: where the generator's own record of this level is (perf_analyzer's kept CSV; "": none kept)
    source: str = ""

    @property
    def p99_ms(self) -> float:
        return self.percentiles["p99_us"] / 1000.0

    @property
    def p99_ci_ms(self) -> list[float | None]:
        return [None if v is None else round(v / 1000.0, 4) for v in self.p99_ci_us]

    @property
    def p50_ms(self) -> float:
        return self.percentiles["p50_us"] / 1000.0

    @property
    def failure_ratio(self) -> float:
        total = self.successes + self.failures
        return self.failures / total if total else 0.0

    def within(
        self,
        budget_ms: float | None,
        max_failure_ratio: float = 0.0,
        require_stable: bool = True,
        allow_limited: bool = False,
    ) -> bool:
        """Stable (unless not required), not generator-limited (unless allowed), failures within bounds,
        p99 within ``budget_ms``."""
        return (
            (self.stable or not require_stable)
            and (allow_limited or not self.generator_limited)
            and self.successes > 0
            and self.failure_ratio <= max_failure_ratio
            and (budget_ms is None or self.p99_ms <= budget_ms)
        )

    def summary(self) -> dict[str, Any]:
        """The flat record of one level (what CSV rows, tune trials and reports keep)."""
        return {
            "mode": self.level.mode,
            "level": self.level.value,
            "stable": self.stable,
            "throughput": round(self.throughput, 3),
            "p50_ms": round(self.p50_ms, 4),
            "p90_ms": round(self.percentiles["p90_us"] / 1000.0, 4),
            "p95_ms": round(self.percentiles["p95_us"] / 1000.0, 4),
            "p99_ms": round(self.p99_ms, 4),
            "p99_samples": self.successes,
            "p99_ci_ms": self.p99_ci_ms,
            "window_throughputs": [round(w.throughput, 3) for w in self.windows],
            "successes": self.successes,
            "failures": self.failures,
            "failure_ratio": round(self.failure_ratio, 5),
            "windows": len(self.windows),
            "generator_cpu": round(self.generator_cpu, 3),
            "late_share": round(self.late_share, 4),
            "generator_limited": self.generator_limited,
            "generator": {**self.capacity.as_dict(), "limited_tries": self.limited_tries},
            "queue_us": self.server.queue_us,
            "compute_input_us": self.server.compute_input_us,
            "compute_infer_us": self.server.compute_infer_us,
            "compute_output_us": self.server.compute_output_us,
            "server_total_us": self.server.total_us,
            "average_batch": round(self.server.average_batch, 3),
            "batches": {str(k): v for k, v in sorted(self.server.batches.items())},
            **({"error": self.error} if self.error else {}),
            **({"source": self.source} if self.source else {}),
        }


def _verdict(
    level: Level, windows: list[Window], stable: bool, options: MeasureOptions, capacity: Capacity
) -> LevelResult:
    used = windows[-options.stability.count :] if windows else []
    wall = sum(w.wall_s for w in used)
    latencies = [lat for w in used for lat in w.latencies_ns]
    late = max((w.late_share for w in used), default=0.0)
    cpu = max((w.generator_cpu for w in used), default=0.0)
    return LevelResult(
        level=level,
        stable=stable,
        windows=windows,
        throughput=len(latencies) / wall if wall > 0 else 0.0,
        percentiles=latency_percentiles(latencies),
        failures=sum(w.failures for w in used),
        successes=len(latencies),
        # a level whose every request failed measured no server at all: its failures are the answer,
        # not the generator's limit (failed requests come back at once and keep a process busy)
        generator_limited=bool(latencies)
        and (
            cpu > options.max_generator_cpu
            or (
                level.mode != "concurrency" and options.max_late_share < 1.0 and late > options.max_late_share
            )
        ),
        generator_cpu=cpu,
        late_share=late,
        server=merge_splits([w.server for w in used]),
        error=next((w.error for w in used if w.error), ""),
        p99_ci_us=quantile_interval_us(latencies),
        capacity=capacity,
    )


def limited_message(result: LevelResult) -> str:
    """The one line of a level the generator limited: the level, the generator, the flag."""
    lv = result.level
    level = f"concurrency {lv.value:g}" if lv.mode == "concurrency" else f"{lv.value:g} requests/s"
    c = dataclasses.replace(result.capacity, cpu=result.generator_cpu)
    late = f", {result.late_share:.0%} sent late".replace("%", " %") if lv.mode != "concurrency" else ""
    more = (
        "with --url on a separate load host (this host has no more cores for it) or more --workers"
        if c.auto
        else "with more --workers (or --workers auto), or with --url on a separate load host"
    )
    return f"the generator, not the server, limited {level} ({c.describe()}{late}); rerun {more}"


def generator_line(result: LevelResult) -> str:
    """What a report prints of the generator a level was measured with ("" for one process on its
    first try, the default of every small level)."""
    c, tries = result.capacity, result.limited_tries
    if c.processes == 1 and not tries:
        return ""
    again = ", ".join(f"{t['processes']} at {t['generator_cpu']:.0%}".replace("%", " %") for t in tries)
    noun = "process" if c.processes == 1 else "processes"
    return f"  {result.level.label()}: generator {c.processes} {noun}" + (
        f" (measured again: the generator limited it with {again} CPU)" if tries else ""
    )


def refuse_limited(result: LevelResult) -> LevelResult:
    """``result``, or :class:`GeneratorLimitedError` when the generator limited it."""
    if result.generator_limited:
        raise GeneratorLimitedError(limited_message(result))
    return result


class Measurer:
    """Measures levels of one model: a generator plus Triton's statistics between windows.

    ``statistics`` returns the model version's cumulative :class:`~tritonkit.client.ModelStatistics`
    (or None); by default a blocking :class:`~tritonkit.client.Client` on the target asks for them.
    """

    def __init__(
        self,
        target: Target,
        options: MeasureOptions | None = None,
        statistics: Callable[[], Any] | None = None,
    ) -> None:
        self.target = target
        self.options = options or MeasureOptions()
        self._statistics = statistics
        self._client: Any = None
        self._generator: LoadGenerator | None = None
        self.measurements = 0
        #: windows sent and not kept (the first after a config load: see :meth:`loaded`)
        self.discarded = 0
        #: levels measured again with more generator processes
        self.remeasured = 0
        self._cold = False

    def __enter__(self) -> Measurer:
        options = self.options
        self._generator = LoadGenerator(self.target, options.workers, options.max_processes).__enter__()
        if self._statistics is None:
            t = self.target
            self._client = Client(t.url, t.protocol, timeout=10, headers=dict(t.headers) or None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._generator is not None:
            self._generator.__exit__()
        if self._client is not None:
            self._client.close()

    def snapshot(self) -> Any:
        """The model version's cumulative statistics now (None when the server has none yet)."""
        if self._statistics is not None:
            return self._statistics()
        t = self.target
        rows = self._client.statistics(t.model, t.version or None)
        return rows[-1] if rows else None

    def loaded(self) -> None:
        """A config was just put into service: the next level's first window is sent and not kept.
        Right after a load the first window ran 4-10 % below the next ones (a ResNet-50 tune's finals on
        an H200: 8 of 8), which biased every trial against the figure of the config once warm."""
        self._cold = True

    def measure(self, level: Level) -> LevelResult:
        """Send ``level`` until ``stability.count`` windows agree or ``max_windows`` pass (after one
        window not kept when a config was just loaded). A level the generator limited is measured again
        with more processes while the generator has more (``workers`` auto); the result says every
        limited try (``limited_tries``) and is still ``generator_limited`` when none was left."""
        generator = self._generator
        if generator is None:
            raise TritonKitError("Measurer used outside its `with` block")
        processes = generator.processes_for(level)
        tries: list[dict[str, Any]] = []
        while True:
            result = self._measure_with(generator, level, processes)
            result.limited_tries = list(tries)
            more = generator.more(level, processes) if result.generator_limited else None
            if more is None:
                return result
            tries.append({"processes": processes, "generator_cpu": round(result.generator_cpu, 3)})
            self.remeasured += 1
            processes = more

    def _measure_with(self, generator: LoadGenerator, level: Level, processes: int) -> LevelResult:
        options = self.options
        timeout = (options.window.seconds if not options.window.count else 60.0) + self.target.timeout_s + 30
        windows: list[Window] = []
        self.measurements += 1
        generator.start(level, options.window, processes)
        capacity = generator.capacity
        try:
            if self._cold:
                self._cold = False
                generator.next_window(timeout)
                self.discarded += 1
            before = self.snapshot()
            while len(windows) < options.max_windows:
                raws = generator.next_window(timeout)
                after = self.snapshot()
                windows.append(Window.merge(raws, server_split(before, after)))
                before = after
                if options.stability.stable([w.throughput for w in windows], [w.p99_us for w in windows]):
                    return _verdict(level, windows, True, options, capacity)
            return _verdict(level, windows, False, options, capacity)
        finally:
            generator.stop()


def sweep(measurer: Measurer, levels: Sequence[Level]) -> Iterator[LevelResult]:
    """Measure each level in turn (every result, stable or not)."""
    for level in levels:
        yield measurer.measure(level)


def find_max(
    measure: Callable[[Level], LevelResult],
    budget_ms: float,
    *,
    mode: str = "concurrency",
    start: float = 1.0,
    limit: float = 256.0,
    refine: int = 2,
    max_failure_ratio: float = 0.0,
    require_stable: bool = True,
    on_result: Callable[[LevelResult], None] | None = None,
) -> tuple[LevelResult | None, list[LevelResult]]:
    """The highest level within ``budget_ms`` (p99), stable, without generator limits or failures.

    Doubles the level from ``start`` until one breaks the budget (p99 over it, failures: or ``limit``, or throughput stops growing by 2 % over two doublings: the server is
    saturated; over one it may be a plateau), then bisects ``refine`` times between the last good and
    the first bad level. When ``start`` itself breaks the budget (a warm start from a neighbouring
    config's answer), the level is halved until one fits, then bisected the same way; from the default
    ``start`` of 1 this never happens. An unstable level within the budget is inconclusive, not bad: the
    search goes on past it, but only a stable level can be the answer (unless ``require_stable`` is
    False). A level the generator limited (after ``measure`` gave it all the generator has) is never
    an answer nor a bound: its figure is the generator's, so the search stops there with
    :class:`GeneratorLimitedError` (after ``on_result`` saw it), whatever its p99. Returns (the best
    level or None, every level measured).
    """
    search = _Search(measure, budget_ms, mode, max_failure_ratio, require_stable, on_result)
    search.climb(start, limit)
    search.descend(start)
    search.bisect(refine)
    return search.good, search.results


@dataclasses.dataclass
class _Search:
    """One :func:`find_max` search: every level measured, the best within the budget, the lowest over it."""

    measure: Callable[[Level], LevelResult]
    budget_ms: float
    mode: str
    max_failure_ratio: float
    require_stable: bool
    on_result: Callable[[LevelResult], None] | None
    results: list[LevelResult] = dataclasses.field(default_factory=list)
    good: LevelResult | None = None
    bad: float | None = None

    def fits(self, result: LevelResult) -> bool:
        """Within the budget, and stable where that is required: a candidate answer."""
        return result.within(self.budget_ms, self.max_failure_ratio, self.require_stable)

    def breaks(self, result: LevelResult) -> bool:
        """Over the budget (p99 or failures) even without asking for stability: a bound."""
        return not result.within(self.budget_ms, self.max_failure_ratio, False)

    def run(self, value: float) -> LevelResult:
        """Measure the level ``value`` (rounded for concurrency), recorded; a generator-limited one raises."""
        result = self.measure(Level(self.mode, round(value) if self.mode == "concurrency" else value))
        self.results.append(result)
        if self.on_result is not None:
            self.on_result(result)
        return refuse_limited(result)

    def climb(self, start: float, limit: float) -> None:
        """Double from ``start`` until a level breaks the budget, ``limit`` or throughput stops growing."""
        value, flat = start, 0
        while value <= limit:
            result = self.run(value)
            if self.breaks(result):
                self.bad = value
                break
            if not self.fits(result):
                value *= 2  # unstable but within the budget: inconclusive, look higher
                continue
            good = self.good
            if good is not None and result.throughput < good.throughput * 1.02:
                self.good = max(good, result, key=lambda r: r.throughput)
                flat += 1
                if flat >= 2:
                    self.bad = value  # saturated: more load only queues
                    break
                value *= 2  # one flat doubling may be a plateau (a batcher packing every request in flight
                continue  # into one execution leaves the other instances idle until the load grows further)
            flat = 0
            self.good = result
            value *= 2

    def descend(self, start: float) -> None:
        """Nothing fitted from a warm start: halve until a level does (the bisection then narrows it)."""
        floor, value = (1.0 if self.mode == "concurrency" else start / 64), start / 2
        while self.good is None and self.bad is not None and value >= floor:
            result = self.run(value)
            if self.fits(result):
                self.good = result
            elif self.breaks(result):
                self.bad = value
            value /= 2

    def bisect(self, refine: int) -> None:
        """Narrow ``refine`` times between the best level and the lowest that broke the budget."""
        lo = self.good.level.value if self.good is not None else 0.0
        for _ in range(refine):
            bad = self.bad
            if bad is None:
                break
            mid = (lo + bad) / 2
            if self.mode == "concurrency":
                mid = round(mid)
                if mid <= lo or mid >= bad:
                    break
            elif mid <= 0:
                break
            result = self.run(mid)
            if self.fits(result) and (self.good is None or result.throughput >= self.good.throughput):
                self.good, lo = result, mid
            else:
                self.bad = mid


def wait_ready(
    url: str, protocol: str, model: str, headers: dict[str, str] | None, timeout: float = 60
) -> None:
    """Block until ``model`` is ready on the server (after a load through the repository API)."""

    deadline = time.monotonic() + timeout
    with Client(url, protocol, timeout=10, headers=headers) as client:
        client.wait_until_ready(timeout=max(1.0, deadline - time.monotonic()), model=model)
