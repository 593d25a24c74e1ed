"""``tritonkit tune`` as a function: every config of the search measured live, logged, ranked, judged, written.

Owns :class:`TuneOptions` and :func:`tune`: start the embedded server in explicit model-control mode (or
use the user's, with its admin key), apply each config through the model-repository API, find the
highest concurrency whose p99 fits the budget, search (brute or quick), measure the model's own config as
the baseline exactly as it stands (inside the grid or not: a narrowed grid never replaces it by its nearest
point), measure the configs near the top again in alternating rounds with the baseline beside them and
crown the best median (finals), judge whether that winner beats the baseline beyond the spread of their
repeated measurements (:mod:`.verdict`), write the report, write the winner back atomically only when it
does (config.pbtxt, and with ``--write spec`` the build spec too: :mod:`.spec_file`), and load the model
again from its ``config.pbtxt``. The trial log that makes it resumable is :mod:`.trial_log`'s: a resumed
tune replays the search from the own config the log began with (a first run's written winner is not the
baseline of the second), so finished trials and finals rounds are read back, never measured again, and
the finals' medians are never replaced by a search figure. ``time_budget_s`` bounds the whole tune's wall
clock: checked before each measurement, once spent nothing more is measured (the search stops at what
it measured; the baseline and the finals only from the log), the tune is *partial* (``tune.json``'s
``partial``), and nothing is written. Every level is measured by the generator of record
(``generator``: tritonkit's own or perf_analyzer, chosen by :mod:`.generators` before any server starts;
perf_analyzer's files for each level are kept in the report's ``perf_analyzer/`` folder and each level
record names its CSV as ``source``), with the same windows, stability rule and trial log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from tritonkit.client import Client
from tritonkit.config import ModelConfig, from_proto, to_dict
from tritonkit.errors import TritonKitError
from tritonkit.measure.generators import LevelMeasurer, choose, measurer_of
from tritonkit.measure.levels import wait_ready
from tritonkit.measure.loadgen import Target
from tritonkit.measure.provenance import collect
from tritonkit.serve.endpoint import Endpoint, endpoint
from tritonkit.tune.apply import RepositoryApi, read_config
from tritonkit.tune.finals import crowned, finals_summary
from tritonkit.tune.report import write_report
from tritonkit.tune.search import Axis, Final, Outcome, SearchResult, brute, finalists, finals, quick, snap
from tritonkit.tune.space import (
    apply_point,
    axes_for,
    base_point,
    describe,
    same_config,
)
from tritonkit.tune.spec_file import Written, spec_to_write, write_back
from tritonkit.tune.trial import measure_config, progress_line, start_level
from tritonkit.tune.trial_log import (
    LOG,
    append,
    header_row,
    load_baselines,
    load_finals,
    load_trials,
    logged_base,
    logged_figures,
)
from tritonkit.tune.tune_options import TuneOptions
from tritonkit.tune.verdict import Verdict, decide, spread

__all__ = ["TuneOptions", "TuneResult", "load_finals", "load_trials", "tune"]

#: marks the model's own config in a finals point when the grid does not hold it
OWN = "__own_config__"


@dataclasses.dataclass
class TuneResult:
    """What a tune found: ``winner`` (the best grid config, its finals median as ``confirmed_throughput``),
    ``baseline`` (the model's own config as measured), ``verdict`` (written or not, and why), the diffs."""

    winner: dict[str, Any] | None
    baseline: dict[str, Any] | None
    trials: list[dict[str, Any]]
    evaluations: int
    measurements: int
    diff: str = ""
    verdict: dict[str, Any] | None = None
    spec_diff: str = ""
    spec_path: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    #: where the winner was written ("" when it was not)
    written_to: str = ""
    #: the time budget ended the tune: what it stopped (``stopped``) and what was measured (None: whole)
    partial: dict[str, Any] | None = None


#: The embedded server's log, in the report folder (kept: a server that dies mid-tune says why there).
SERVER_LOG = "server.log"


def _endpoint(options: TuneOptions) -> contextlib.AbstractContextManager[Endpoint]:
    """The user's server, or the embedded one on ``repo`` in explicit model control (nothing loaded:
    tune loads the model, then each config, through the repository API), its log in the report."""
    return endpoint(
        options.url, protocol=options.protocol, repo=options.repo or ".", http_url=options.http_url,
        admin_key=options.admin_key, load=(), exit_timeout=1,
        log_file=Path(options.report_dir) / SERVER_LOG if options.url is None else None,
    )  # fmt: skip


def _say(options: TuneOptions, text: str) -> None:
    print(text, file=options.stream or sys.stderr, flush=True)


class _BudgetSpentError(Exception):
    """The tune's time budget is spent: nothing more is measured (caught inside :func:`tune`)."""


class _Run:
    """One tune's live state: the configs measured so far (cached by key, logged as they finish), the
    finals' rounds, and the model's own config; ``evaluate``/``remeasure`` are the search's callbacks."""

    def __init__(
        self,
        options: TuneOptions,
        api: RepositoryApi,
        target: Target,
        base: ModelConfig,
        report: Path,
        interrupt_after: int | None,
        measurer: LevelMeasurer | None = None,
    ) -> None:
        self.options, self.api, self.target, self.base = options, api, target, base
        self.measurer = measurer  # one load generator for every config (its workers start once)
        self.log = report / LOG
        self.interrupt_after = interrupt_after
        budget = options.time_budget_s
        self.deadline = time.monotonic() + budget if budget is not None else None
        #: what the spent time budget stopped (``search``, ``baseline``, ``finals``), None: nothing
        self.stopped: str | None = None
        done = load_trials(report)[1] if options.resume else []
        self.cached: dict[str, dict[str, Any]] = {t["key"]: t for t in done}
        self.trials: list[dict[str, Any]] = list(done)
        self.old_baseline = next(iter(load_baselines(report)), None) if options.resume else None
        self.finals_cached = {
            (f["key"], f["round"]): f for f in (load_finals(report) if options.resume else [])
        }
        self.final_rows: list[dict[str, Any]] = []
        self.new = self.levels = 0
        self.own = base_point(base)
        self.own_key = describe(self.own)
        self.baseline: dict[str, Any] | None = None

    def _tick(self) -> None:
        if self.interrupt_after is not None and self.new >= self.interrupt_after:
            raise KeyboardInterrupt
        if self.stopped is not None or (self.deadline is not None and time.monotonic() >= self.deadline):
            raise _BudgetSpentError

    def _measured(self, row: dict[str, Any]) -> None:
        self.new += 1
        self.levels += len(row["levels"])
        append(self.log, row)

    def evaluate(self, point: dict[str, Any]) -> Outcome:
        key = describe(point)
        t = self.cached.get(key)
        if t is None:
            self._tick()
            cfg = apply_point(self.base, point)
            t = measure_config(
                self.options, self.api, self.target, cfg, point, key, start_level(self.options, self.trials),
                measurer=self.measurer,
            )  # fmt: skip
            self._measured(t)
            self.trials.append(t)
            self.cached[key] = t
            _say(self.options, progress_line(t, len(self.trials)))
        return Outcome(t["throughput"], t["p99_ms"], t["feasible"])

    def measure_baseline(self, axes: Sequence[Axis]) -> dict[str, Any]:
        """The model's own config as it stands: the grid's trial when the grid holds exactly it (its
        point on the grid's axes makes the same config), else a trial of its own (``kind: baseline``,
        measured from concurrency 1 like a brute-force trial, labelled with every setting it has)."""
        names = {a.name for a in axes}
        projected = {k: v for k, v in self.own.items() if k in names}
        on_grid = snap(axes, projected) == projected and to_dict(
            apply_point(self.base, projected)
        ) == to_dict(self.base)
        if on_grid:
            self.own, self.own_key = projected, describe(projected)
            try:
                self.evaluate(self.own)
            except _BudgetSpentError:
                return self._unmeasured(True)
            self.baseline = {**self.cached[self.own_key], "on_grid": True}
        else:
            row = self.old_baseline
            if row is None:
                try:
                    self._tick()
                except _BudgetSpentError:
                    return self._unmeasured(False)
                row = measure_config(
                    self.options,
                    self.api,
                    self.target,
                    self.base,
                    self.own,
                    self.own_key,
                    1,
                    measurer=self.measurer,
                )
                row["kind"] = "baseline"
                self._measured(row)
                _say(self.options, "the model's own config: " + progress_line(row, 0).split(": ", 1)[1])
            self.baseline = {**row, "on_grid": False}
        self.baseline["own_config"] = True
        return self.baseline

    def _unmeasured(self, on_grid: bool) -> dict[str, Any]:
        """The own config when the time budget ran out before it was measured (no figure at all)."""
        self.stopped = self.stopped or "baseline"
        self.baseline = {
            "key": self.own_key, "point": self.own, "on_grid": on_grid, "own_config": True, "unmeasured": True,
            "feasible": False, "throughput": 0.0, "p99_ms": None, "concurrency": None, "levels": [],
        }  # fmt: skip
        return self.baseline

    def remeasure(self, point: dict[str, Any], round_: int) -> Outcome:
        own = bool(point.pop(OWN, False))
        key = self.own_key if own else describe(point)
        f = self.finals_cached.get((("own: " if own else "") + key, round_))
        if f is None:
            self._tick()
            source = self.baseline if own else self.cached[key]
            assert source is not None
            c = int(source["concurrency"])
            cfg = self.base if own else apply_point(self.base, point)
            f = measure_config(
                self.options,
                self.api,
                self.target,
                cfg,
                point,
                key,
                c,
                final=(round_, c),
                measurer=self.measurer,
            )
            if own:
                f["key"] = "own: " + key
            self._measured(f)
            _say(self.options, f"final round {round_ + 1}: {f['key']}: {f['throughput']:.1f} req/s")
        self.final_rows.append(f)
        return Outcome(f["throughput"], f["p99_ms"], f["feasible"])


def tune(options: TuneOptions, *, interrupt_after: int | None = None) -> TuneResult:
    """Run the search; ``interrupt_after`` (tests) stops with KeyboardInterrupt after that many new
    measurements (trials, the baseline and finals rounds alike)."""
    options.validate()
    binary = choose(options.generator, options.measure, options.shared_memory)  # before any server starts
    spec_path = spec_to_write(
        options.write, options.repo, options.model
    )  # refused before anything is measured
    report = Path(options.report_dir)
    header = load_trials(report)[0] if options.resume else None
    _check_header(options, header, None)
    report.mkdir(parents=True, exist_ok=True)
    if not options.resume and (report / LOG).exists():
        (report / LOG).unlink()
    with _endpoint(options) as where, contextlib.ExitStack() as stack:
        url, headers, server = where.url(options.protocol), where.headers, where.server
        api = RepositoryApi(where.http, headers, log=server.log_file if server is not None else None)
        try:
            if server is not None:
                api.load(options.model)
            wait_ready(url, options.protocol, options.model, headers)
            current = _base_config(options, url, headers)
            base, moved = logged_base(header, current)  # a resume replays from the log's own config
            if moved:
                _say(options, f"tritonkit tune: --resume: config.pbtxt is not the config {LOG} began with "
                              "(a tune wrote its winner, or it was edited); the log's own config is the baseline")  # fmt: skip
            provenance = collect(url, options.protocol, [(options.model, "")], repo=options.repo).as_dict()
            axes = _axes(options, base)
            _check_header(options, header, axes)
            if header is None:
                grid = {a.name: list(a.values) for a in axes}
                append(report / LOG, header_row(_wanted(options, grid), options.search, base))
            target = Target(
                url, options.model, options.protocol, headers=headers,
                shared_memory=options.shared_memory, batch_size=options.batch_size,
                input_data=options.input_data,
            )  # fmt: skip
            keep = report / "perf_analyzer" if binary is not None else None  # its own files, kept
            measurer = stack.enter_context(measurer_of(binary, target, options.measure, keep=keep))
            run = _Run(options, api, target, base, report, interrupt_after, measurer)
            result = _search(options, run, axes)
            baseline = run.measure_baseline(axes)
            winner, final_list, verdict = _finals_and_verdict(options, run, result)
            written = write_back(options, base, winner, verdict.write if verdict else False, spec_path)
            if server is not None or written.where or winner is not None:
                api.load(options.model)  # back to what config.pbtxt says (the winner, once written)
        finally:
            api.close()
    summary = _summary(options, run, result, winner, baseline, final_list, verdict, provenance, written)
    summary["method"] = options.method(binary)
    partial = summary["partial"]
    write_report(report, summary, plots=options.plots)
    return TuneResult(
        winner, baseline, summary["trials"], result.evaluations, summary["measurements"], written.diff,
        verdict.as_dict() if verdict is not None else None, written.spec_diff, written.spec, written.notes,
        written.where, partial,
    )  # fmt: skip


def _wanted(options: TuneOptions, grid: dict[str, list[Any]] | None) -> dict[str, Any]:
    return {
        "model": options.model, "budget_ms": options.latency_budget_ms, "grid": grid,
        "generator": options.generator,
    }  # fmt: skip


def _check_header(options: TuneOptions, header: dict[str, Any] | None, axes: Sequence[Axis] | None) -> None:
    """A resumed log must be of the same model and budget (and, once the grid is known, the same grid)."""
    if header is None:
        return
    keys = ["model", "budget_ms", "generator"] + (["grid"] if axes is not None else [])
    grid = {a.name: list(a.values) for a in axes} if axes is not None else None
    wanted = json.loads(json.dumps(_wanted(options, grid)))
    logged = {**header, "generator": header.get("generator", "tritonkit")}  # a log from before the flag
    if {k: logged.get(k) for k in keys} != {k: wanted[k] for k in keys}:
        raise TritonKitError(
            f"--resume: {Path(options.report_dir) / LOG} was written for another tune ({header.get('model')}, "
            f"{header.get('budget_ms')} ms, generator {logged['generator']}); expected the same model, budget, "
            "generator and grid"
        )


def _axes(options: TuneOptions, base: ModelConfig) -> list[Axis]:
    axes = axes_for(
        base,
        model_dir=(Path(options.repo) / options.model) if options.repo else None,
        gpu=options.gpu,
        max_batch_sizes=options.max_batch_sizes,
        delays_us=options.grid_delays(),
        instances=options.instances,
        queue=options.queue,
        jit_optimize=options.jit_optimize,
        input_data=options.input_data,
    )
    return axes if options.preferred else [a for a in axes if a.name != "preferred"]


def _search(options: TuneOptions, run: _Run, axes: Sequence[Axis]) -> SearchResult:
    same = partial(same_config, run.base)
    try:
        if options.search == "brute":
            return brute(axes, run.evaluate, same=same)
        return quick(axes, run.evaluate, base_point(run.base), min_gain=options.min_gain, same=same)
    except _BudgetSpentError:  # the search stops at what it measured
        run.stopped = "search"
        done = [(t["point"], Outcome(t["throughput"], t["p99_ms"] or 0.0, t["feasible"])) for t in run.trials]
        feasible = [(p, o) for p, o in done if o.feasible]
        best = max(feasible, key=lambda po: po[1].throughput, default=None)
        return SearchResult(best[0] if best else None, best[1] if best else None, done)


def _finals_and_verdict(
    options: TuneOptions, run: _Run, result: SearchResult
) -> tuple[dict[str, Any] | None, list[Final], Verdict | None]:
    """Finals (the baseline measured in the same rounds unless it is a finalist itself), the crowned
    winner, and whether it beats the baseline beyond the spread of their repeated figures."""
    baseline = run.baseline
    assert baseline is not None
    leaders = {describe(p) for p, _ in finalists(result, top=options.finalists, within=options.finals_within)}
    own = Final(
        {**run.own, **({} if baseline["on_grid"] else {OWN: True})},
        Outcome(baseline["throughput"], baseline["p99_ms"] or 0.0, baseline["feasible"]),
    )
    among = baseline["on_grid"] and run.own_key in leaders
    reference = own if baseline["feasible"] and not among else None
    try:
        best, final_list = finals(
            result, run.remeasure, top=options.finalists, within=options.finals_within,
            rounds=options.final_rounds, reference=reference,
        )  # fmt: skip
    except _BudgetSpentError:
        run.stopped = run.stopped or "finals"
        best, final_list = result.best, []
    if best is None:
        return None, final_list, None
    winner = _from_log(run, crowned(run.cached[describe(best)], final_list, run.final_rows), describe(best))
    if run.stopped is not None:
        return winner, final_list, _partial_verdict(options, run, winner, baseline)
    mine = next((f for f in final_list if among and describe(f.point) == run.own_key), None)
    own_figures = own.figures if reference is not None else (mine.figures if mine is not None else [])
    if own_figures:
        baseline["final_figures"] = list(own_figures)
        baseline["confirmed_throughput"] = round(statistics.median(own_figures), 3)
    same = baseline["on_grid"] and winner["key"] == run.own_key
    if "final_figures" in winner and (own_figures or not baseline["feasible"]):
        ours, theirs, method = list(winner["final_figures"]), list(own_figures), "finals"
    else:
        count = options.measure.stability.count
        ours, theirs, method = _window_figures(winner, count), _window_figures(baseline, count), "windows"
    verdict = decide(ours, theirs, same=same, method=method, baseline_feasible=baseline["feasible"])
    return winner, final_list, verdict


def _from_log(run: _Run, winner: dict[str, Any], key: str) -> dict[str, Any]:
    """The winner with the finals figures its rounds in the log hold, when this run's finals gave it none
    (a search figure never stands in for a finals median the tune measured)."""
    if "final_figures" in winner:
        return winner
    figures = logged_figures(list(run.finals_cached.values()), key)
    if len(figures) < 2:
        return winner
    return {**winner, "final_figures": figures, "confirmed_throughput": round(statistics.median(figures), 3)}


def _partial_verdict(
    options: TuneOptions, run: _Run, winner: dict[str, Any], baseline: dict[str, Any]
) -> Verdict:
    """Nothing is written by a tune its time budget ended: its figures are not the whole comparison."""
    figures = list(winner.get("final_figures") or [winner["throughput"]])
    own = list(baseline.get("final_figures") or ([baseline["throughput"]] if baseline["feasible"] else []))
    reason = (
        f"the time budget ({options.time_budget_s:g} s) ended the tune in its {run.stopped}, after "
        f"{len(run.trials)} config(s) measured: a partial tune writes nothing (--resume with a larger "
        "--time-budget goes on from the log)"
    )
    return Verdict(False, reason, "partial", spread(figures), spread(own))


def _window_figures(trial: dict[str, Any], count: int) -> list[float]:
    """The throughput of each window of a trial's best level that made its figure (the last ``count``)."""
    best = trial.get("best") or {}
    return [float(x) for x in (best.get("window_throughputs") or [])[-count:]]


def _base_config(options: TuneOptions, url: str, headers: dict[str, str]) -> ModelConfig:
    if options.repo is not None and (Path(options.repo) / options.model / "config.pbtxt").exists():
        return read_config(Path(options.repo) / options.model)

    with Client(url, options.protocol, timeout=30, headers=headers) as client:
        return from_proto(client.config(options.model))


def _summary(
    options: TuneOptions,
    run: _Run,
    result: SearchResult,
    winner: dict[str, Any] | None,
    baseline: dict[str, Any],
    final_list: Sequence[Final],
    verdict: Verdict | None,
    provenance: dict[str, Any],
    written: Written,
) -> dict[str, Any]:
    """What ``tune.json`` holds (``report.md`` is written from it)."""
    used = [t for t in run.trials if t["key"] in {describe(p) for p, _ in result.trials}]
    own_levels = 0 if baseline["on_grid"] else len(baseline["levels"])
    measurements = (
        sum(len(t["levels"]) for t in used) + own_levels + sum(len(f["levels"]) for f in run.final_rows)
    )
    # the config to serve: the winner when it beat the model's own config (written or, with --write none,
    # recommended), else the own config (tritonkit plan prices this one)
    chosen = winner if winner is not None and verdict is not None and verdict.write else baseline
    return {
        "model": options.model,
        "latency_budget_ms": options.latency_budget_ms,
        "search": options.search,
        "measurements": measurements,
        "winner": winner,
        "baseline": baseline,
        "verdict": verdict.as_dict() if verdict is not None else None,
        "written": {
            "mode": options.write,
            "where": written.where,
            "spec": written.spec,
            "notes": written.notes,
        },
        "chosen": {"key": chosen["key"], "own_config": chosen is baseline},
        "trials": used,
        "finals": finals_summary(final_list, run.final_rows, baseline),
        "partial": None
        if run.stopped is None
        else {
            "time_budget_s": options.time_budget_s,
            "stopped": run.stopped,
            "configs_measured": len(run.trials),
            "baseline_measured": not baseline.get("unmeasured", False),
        },
        "provenance": provenance,
    }
