"""``tritonkit tune`` as a function: every config of the search measured live, logged, ranked, written back.

Owns :class:`TuneOptions`, the trial log (``trials.jsonl`` in the report folder: a header line naming
the model, budget and grid, then one line per finished trial, appended and flushed as it finishes, so an
interrupted tune keeps every finished measurement and ``resume`` replays them instead of measuring
again; the finals' re-measurements are logged the same way, one line per config and round), and
:func:`tune`: start the embedded server in explicit model-control mode (or use the user's, with its
admin key), apply each config through the model-repository API, find the highest concurrency whose p99
fits the budget, search (brute or quick), measure the configs near the top again in alternating rounds
and crown the best median (finals), write the report, write the winner back atomically, and load the
model again from its (new) ``config.pbtxt``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from tritonkit.client import Client
from tritonkit.config import ModelConfig, from_proto, to_dict
from tritonkit.errors import OptionError, TritonKitError
from tritonkit.serve.endpoint import Endpoint, endpoint
from tritonkit.tune.apply import RepositoryApi, read_config, write_as_model, write_config
from tritonkit.tune.loadgen import Target
from tritonkit.tune.measure import LevelResult, MeasureOptions, Measurer, find_max, wait_ready
from tritonkit.tune.report import write_report
from tritonkit.tune.search import Final, Outcome, brute, finals, quick, snap
from tritonkit.tune.space import apply_point, axes_for, base_point, describe

__all__ = ["TuneOptions", "TuneResult", "load_finals", "load_trials", "tune"]

LOG = "trials.jsonl"


@dataclasses.dataclass
class TuneOptions:
    """Everything one tune needs. ``url`` None: the embedded server on ``repo`` (explicit model control)."""

    model: str
    latency_budget_ms: float
    report_dir: Path
    repo: Path | None = Path("model_repository")
    url: str | None = None
    http_url: str | None = None
    admin_key: str | None = None
    protocol: str = "http"
    min_throughput: float = 0.0
    search: str = "quick"
    resume: bool = False
    measure: MeasureOptions = dataclasses.field(default_factory=MeasureOptions)
    max_concurrency: int = 64
    refine: int = 1
    max_batch_sizes: Sequence[int] | None = None
    delays_us: Sequence[int | str] | None = None
    instances: Sequence[int] | None = None
    preferred: bool = True
    queue: bool = True
    gpu: bool = False
    write: str = "config"  # config | none | model:NAME
    shared_memory: str = "none"
    batch_size: int = 1
    plots: bool = True
    #: quick search moves only for a gain above this share: smaller differences are measurement noise
    min_gain: float = 0.03
    #: quick search starts each config's load search at the best config's concurrency so far (brute: at 1)
    warm_start: bool = True
    #: finals: up to this many configs within ``finals_within`` of the best are measured again
    #: ``final_rounds`` times at the concurrency the search found (fewer than 2: the search's best stands)
    finalists: int = 4
    final_rounds: int = 3
    finals_within: float = 0.10
    #: False: an unstable level may still be the best (reported as unstable); for noisy shared machines
    require_stable: bool = True
    stream: IO[str] | None = None

    def validate(self) -> None:
        """Raise :class:`OptionError` naming the first option whose value cannot work."""
        if not self.latency_budget_ms > 0:
            raise OptionError("latency_budget_ms", self.latency_budget_ms, "a positive number of ms")
        if self.search not in ("quick", "brute"):
            raise OptionError("search", repr(self.search), "quick or brute")
        if self.protocol not in ("http", "grpc"):
            raise OptionError("protocol", repr(self.protocol), "http or grpc")
        if self.write not in {"config", "none"} and not self.write.startswith("model:"):
            raise OptionError("write", repr(self.write), "config, none or model:NAME")
        if self.url is None and (self.repo is None or not (Path(self.repo) / self.model).is_dir()):
            raise OptionError("repo", self.repo, f"a model repository holding a folder `{self.model}`")
        if self.url is not None and self.protocol == "grpc" and not self.http_url:
            raise OptionError(
                "http_url", "not given", "the HTTP endpoint (model-repository API) of a gRPC url"
            )
        for name in ("finalists", "final_rounds"):
            if getattr(self, name) < 0:
                raise OptionError(name, getattr(self, name), "a whole number >= 0")
        if not 0 <= self.finals_within <= 1:
            raise OptionError("finals_within", self.finals_within, "a share between 0 and 1")
        if self.url is not None and not self.admin_key:
            raise OptionError(
                "admin_key", "not given", "the key of the restricted model-repository API with a url"
            )


@dataclasses.dataclass
class TuneResult:
    winner: dict[str, Any] | None
    baseline: dict[str, Any] | None
    trials: list[dict[str, Any]]
    evaluations: int
    measurements: int
    diff: str = ""


def load_trials(report_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(header, finished trials) of a trial log; a cut-off last line (interrupted write) is dropped."""
    header, rows = _rows(report_dir)
    return header, [row for row in rows if row.get("kind") == "trial"]


def load_finals(report_dir: Path) -> list[dict[str, Any]]:
    """The finals' re-measurements of a trial log (one row per config and round), in the order taken."""
    return [row for row in _rows(report_dir)[1] if row.get("kind") == "final"]


def _rows(report_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    path = Path(report_dir) / LOG
    if not path.exists():
        return None, []
    header: dict[str, Any] | None = None
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("kind") == "header":
            header = row
        elif isinstance(row, dict):
            rows.append(row)
    return header, rows


def _append(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")
        handle.flush()


def _endpoint(options: TuneOptions) -> contextlib.AbstractContextManager[Endpoint]:
    """The user's server, or the embedded one on ``repo`` in explicit model control (nothing loaded:
    tune loads the model, then each config, through the repository API)."""
    return endpoint(
        options.url, protocol=options.protocol, repo=options.repo or ".", http_url=options.http_url,
        admin_key=options.admin_key, load=(), exit_timeout=1,
    )  # fmt: skip


def _say(options: TuneOptions, text: str) -> None:
    print(text, file=options.stream or sys.stderr, flush=True)


def tune(options: TuneOptions, *, interrupt_after: int | None = None) -> TuneResult:
    """Run the search; ``interrupt_after`` (tests) stops with KeyboardInterrupt after that many new trials."""
    options.validate()
    report = Path(options.report_dir)
    report.mkdir(parents=True, exist_ok=True)
    log = report / LOG
    header, done = load_trials(report) if options.resume else (None, [])
    done_finals = load_finals(report) if options.resume else []
    if not options.resume and log.exists():
        log.unlink()
    if header is not None and (header.get("model"), header.get("budget_ms")) != (
        options.model,
        options.latency_budget_ms,
    ):
        raise TritonKitError(
            f"--resume: {log} was written for another tune ({header.get('model')}, "
            f"{header.get('budget_ms')} ms); expected the same model, budget and grid"
        )
    with _endpoint(options) as where:
        url, headers, server = where.url(options.protocol), where.headers, where.server
        api = RepositoryApi(where.http, headers)
        try:
            if server is not None:
                api.load(options.model)
            wait_ready(url, options.protocol, options.model, headers)
            base = _base_config(options, url, headers)
            axes = axes_for(
                base,
                model_dir=(Path(options.repo) / options.model) if options.repo else None,
                gpu=options.gpu,
                max_batch_sizes=options.max_batch_sizes,
                delays_us=options.delays_us,
                instances=options.instances,
                queue=options.queue,
            )
            if not options.preferred:
                axes = [a for a in axes if a.name != "preferred"]
            grid = {a.name: list(a.values) for a in axes}
            wanted = {"model": options.model, "budget_ms": options.latency_budget_ms, "grid": grid}
            if header is not None and {k: header.get(k) for k in wanted} != json.loads(json.dumps(wanted)):
                raise TritonKitError(
                    f"--resume: {log} was written for another tune ({header.get('model')}, "
                    f"{header.get('budget_ms')} ms); expected the same model, budget and grid"
                )
            if header is None:
                _append(log, {"kind": "header", **wanted, "search": options.search, "base": base_point(base)})
            cached = {t["key"]: t for t in done}
            trials: list[dict[str, Any]] = list(done)
            counter = {"new": 0, "levels": 0}
            target = Target(
                url, options.model, options.protocol, headers=headers,
                shared_memory=options.shared_memory, batch_size=options.batch_size,
            )  # fmt: skip

            def evaluate(point: dict[str, Any]) -> Outcome:
                key = describe(point)
                if key in cached:
                    t = cached[key]
                else:
                    if interrupt_after is not None and counter["new"] >= interrupt_after:
                        raise KeyboardInterrupt
                    t = _trial(options, api, target, base, point, key, url, headers, _start(options, trials))
                    counter["new"] += 1
                    counter["levels"] += len(t["levels"])
                    _append(log, t)
                    trials.append(t)
                    cached[key] = t
                    _say(options, _line(t, len(trials)))
                return Outcome(t["throughput"], t["p99_ms"], t["feasible"])

            finals_cached = {(f["key"], f["round"]): f for f in done_finals}
            final_rows: list[dict[str, Any]] = []

            def remeasure(point: dict[str, Any], round_: int) -> Outcome:
                key = describe(point)
                f = finals_cached.get((key, round_))
                if f is None:
                    if interrupt_after is not None and counter["new"] >= interrupt_after:
                        raise KeyboardInterrupt
                    c = int(cached[key]["concurrency"])
                    f = _trial(options, api, target, base, point, key, url, headers, c, final=(round_, c))
                    counter["new"] += 1
                    counter["levels"] += len(f["levels"])
                    _append(log, f)
                    _say(options, f"final round {round_ + 1}: {key}: {f['throughput']:.1f} req/s")
                final_rows.append(f)
                return Outcome(f["throughput"], f["p99_ms"], f["feasible"])

            search: Callable[..., Any] = brute if options.search == "brute" else quick
            result = (
                search(axes, evaluate)
                if search is brute
                else quick(axes, evaluate, base_point(base), min_gain=options.min_gain)
            )
            best, final_list = finals(
                result, remeasure, top=options.finalists, within=options.finals_within,
                rounds=options.final_rounds,
            )  # fmt: skip
            baseline = cached.get(describe(snap(axes, base_point(base))))
            winner = _crowned(cached[describe(best)], final_list) if best is not None else None
            diff = _write_back(options, base, winner)
            if server is not None or diff or winner is not None:
                api.load(options.model)  # back to what config.pbtxt says (the winner, once written)
        finally:
            api.close()
    used = [t for t in trials if t["key"] in {describe(p) for p, _ in result.trials}]
    measurements = sum(len(t["levels"]) for t in used) + sum(len(f["levels"]) for f in final_rows)
    summary = {
        "model": options.model,
        "latency_budget_ms": options.latency_budget_ms,
        "search": options.search,
        "measurements": measurements,
        "winner": winner,
        "baseline": baseline,
        "trials": used,
        "finals": _finals_summary(final_list, final_rows),
    }
    write_report(report, summary, plots=options.plots)
    return TuneResult(winner, baseline, used, result.evaluations, measurements, diff)


def _base_config(options: TuneOptions, url: str, headers: dict[str, str]) -> ModelConfig:
    if options.repo is not None and (Path(options.repo) / options.model / "config.pbtxt").exists():
        return read_config(Path(options.repo) / options.model)

    with Client(url, options.protocol, timeout=30, headers=headers) as client:
        return from_proto(client.config(options.model))


def _trial(
    options: TuneOptions,
    api: RepositoryApi,
    target: Target,
    base: ModelConfig,
    point: dict[str, Any],
    key: str,
    url: str,
    headers: dict[str, str],
    start: int = 1,
    final: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One config measured: a trial (load search from ``start`` up to ``--max-concurrency``) or, with
    ``final`` = (round, concurrency), a finals round: that concurrency or, when it breaks the budget, the
    highest level below it that fits (halved, then bisected once), stability not required (the rounds
    are the averaging)."""
    cfg = apply_point(base, point)
    row: dict[str, Any] = {
        "kind": "trial", "key": key, "point": point, "config": to_dict(cfg), "start_concurrency": start,
    }  # fmt: skip
    limit, refine, require_stable = options.max_concurrency, options.refine, options.require_stable
    if final is not None:
        row = {"kind": "final", "key": key, "round": final[0], "start_concurrency": final[1]}
        limit, refine, require_stable = final[1], 1, False
    started = time.monotonic()
    levels: list[LevelResult] = []
    best: LevelResult | None = None
    try:
        api.load(options.model, cfg)
        wait_ready(url, options.protocol, options.model, headers)
        with Measurer(target, options.measure) as measurer:
            best, levels = find_max(
                measurer.measure,
                options.latency_budget_ms,
                start=start,
                limit=limit,
                refine=refine,
                require_stable=require_stable,
            )
    except TritonKitError as exc:
        row["error"] = " ".join(str(exc).split())
    row["levels"] = [r.summary() for r in levels]
    row["best"] = best.summary() if best is not None else None
    row["concurrency"] = int(best.level.value) if best is not None else None
    row["throughput"] = best.throughput if best is not None else 0.0
    row["p50_ms"] = best.p50_ms if best is not None else None
    row["p99_ms"] = best.p99_ms if best is not None else (min((r.p99_ms for r in levels), default=0.0))
    row["stable"] = best.stable if best is not None else False
    row["feasible"] = best is not None and best.throughput >= options.min_throughput
    row["seconds"] = round(time.monotonic() - started, 2)
    return row


def _crowned(trial: dict[str, Any], final_list: Sequence[Final]) -> dict[str, Any]:
    """The winner's trial, with its finals figures (``confirmed_throughput``: their median) when it had any."""
    mine = next((f for f in final_list if describe(f.point) == trial["key"] and f.figures), None)
    if mine is None:
        return trial
    return {**trial, "final_figures": list(mine.figures), "confirmed_throughput": round(mine.median, 3)}


def _finals_summary(final_list: Sequence[Final], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per finalist: the search's figure, each round's figure and concurrency, and their median."""
    out = []
    for f in final_list:
        key = describe(f.point)
        mine = sorted((r for r in rows if r["key"] == key), key=lambda r: r["round"])
        out.append({
            "key": key, "searched": f.searched.throughput, "figures": list(f.figures),
            "concurrencies": [r["concurrency"] for r in mine], "median": round(f.median, 3),
        })  # fmt: skip
    return out


def _start(options: TuneOptions, trials: Sequence[dict[str, Any]]) -> int:
    """The concurrency a new trial's load search starts from: brute force measures every config from 1;
    quick search from the concurrency at which the best config so far peaked (its neighbours peak near
    it), so a config costs about three levels instead of a doubling from 1."""
    feasible = [t for t in trials if t.get("feasible") and t.get("concurrency")]
    if options.search != "quick" or not options.warm_start or not feasible:
        return 1
    best = max(feasible, key=lambda t: (t["throughput"], -t["p99_ms"]))
    return max(1, min(int(best["concurrency"]), options.max_concurrency))


def _line(t: dict[str, Any], n: int) -> str:
    where = f"c={t['concurrency']}" if t["concurrency"] else "no level within budget"
    return (
        f"trial {n}: {t['key']}: {t['throughput']:.1f} req/s, {where}"
        + (f", p99 {t['p99_ms']:.2f} ms" if t["p99_ms"] else "")
        + (f" [{t['error']}]" if t.get("error") else "")
    )


def _write_back(options: TuneOptions, base: ModelConfig, winner: dict[str, Any] | None) -> str:
    if winner is None or options.write == "none" or options.repo is None:
        return ""
    model_dir = Path(options.repo) / options.model
    if not (model_dir / "config.pbtxt").exists():
        _say(options, f"tritonkit tune: {model_dir}/config.pbtxt not found; the winner is in the report only")
        return ""
    cfg = apply_point(base, winner["point"])
    if options.write.startswith("model:"):
        _, diff = write_as_model(model_dir, options.write.split(":", 1)[1], cfg)
        return diff
    return write_config(model_dir, cfg)
