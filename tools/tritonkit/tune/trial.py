"""One config of a tune measured: a trial of the search, the baseline, or one finals round.

Owns :func:`measure_config` (the config put into service through the model-repository API, then the
highest concurrency within the budget searched: from ``start`` up to ``--max-concurrency`` for a trial, at
the search's concurrency or below it for a finals round) and the row it logs, :func:`start_level` (where
a quick search's trial starts its load search) and :func:`progress_line` (what the terminal shows).
For a version with shape buckets every level and the row also carry the traffic's tokens
(:func:`~tritonkit.tune.traffic.token_figures`: tokens/s beside req/s, the padded share of the tokens
sent under the config's edges); a config whose clients pad (``pad_at: client``) and whose trial sets
edges is measured by a load generator of its own (of the tune's generator of record, ``generator``),
which pads the requests to those edges.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any, Protocol

from tritonkit.config import ModelConfig, to_dict
from tritonkit.errors import TritonKitError
from tritonkit.measure.generators import LevelMeasurer, choose, measurer_of
from tritonkit.measure.levels import GeneratorLimitedError, LevelResult, MeasureOptions, find_max, wait_ready
from tritonkit.measure.loadgen import Target
from tritonkit.tune.apply import RepositoryApi
from tritonkit.tune.space import buckets_of, padded_share
from tritonkit.tune.traffic import buckets_in, point_edges, token_figures, traffic_of

__all__ = ["Settings", "measure_config", "progress_line", "start_level"]


class Settings(Protocol):
    """What of a tune's options one measurement reads (:class:`~tritonkit.tune.tuner.TuneOptions` has it)."""

    model: str
    protocol: str
    latency_budget_ms: float
    min_throughput: float
    search: str
    warm_start: bool
    max_concurrency: int
    refine: int
    require_stable: bool
    measure: MeasureOptions
    input_data: str | None
    batch_size: int
    generator: str


def measure_config(
    options: Settings,
    api: RepositoryApi,
    target: Target,
    cfg: ModelConfig,
    point: dict[str, Any],
    key: str,
    start: int = 1,
    final: tuple[int, int] | None = None,
    *,
    measurer: LevelMeasurer | None = None,
) -> dict[str, Any]:
    """One config measured: a trial (load search from ``start`` up to ``--max-concurrency``) or, with
    ``final`` = (round, concurrency), a finals round: that concurrency or, when it breaks the budget (p99
    or failures), the highest level below it that fits (halved, then bisected once), stability not
    required (the rounds are the averaging). A level the generator limited with all the capacity it
    has ends the tune (:class:`~tritonkit.measure.levels.GeneratorLimitedError` goes up, nothing of it is
    logged or written): it measured the client, and a winner or a bound from it would be the client's. ``measurer``: the tune's one load generator (None: one for this config). The row
    says where the seconds went (``load_s``: the config put into service and ready; ``measure_s``: its
    levels) and, for a runner that pads to buckets, the share of padded rows (``padded_share``)."""
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
    loaded = started
    try:
        api.load(options.model, cfg)
        wait_ready(target.url, options.protocol, options.model, dict(target.headers))
        loaded = time.monotonic()
        with contextlib.ExitStack() as stack:
            if measurer is None or _pads_itself(cfg, point):
                binary = choose(options.generator, options.measure, target.shared_memory)
                measurer = stack.enter_context(measurer_of(binary, target, options.measure))
            used = measurer
            used.loaded()
            best, levels = find_max(
                used.measure,
                options.latency_budget_ms,
                start=start,
                limit=limit,
                refine=refine,
                require_stable=require_stable,
            )
    except GeneratorLimitedError:
        raise
    except TritonKitError as exc:
        row["error"] = " ".join(str(exc).split())
    buckets = buckets_of(cfg)
    row["levels"] = [_padding(r.summary(), buckets) for r in levels]
    row["best"] = _padding(best.summary(), buckets) if best is not None else None
    row["padded_share"] = row["best"].get("padded_share") if row["best"] else None
    row["load_s"] = round((loaded if loaded > started else time.monotonic()) - started, 2)
    row["measure_s"] = round(time.monotonic() - loaded, 2) if loaded > started else 0.0
    row["concurrency"] = int(best.level.value) if best is not None else None
    row["throughput"] = best.throughput if best is not None else 0.0
    row["p50_ms"] = best.p50_ms if best is not None else None
    row["p99_ms"] = best.p99_ms if best is not None else (min((r.p99_ms for r in levels), default=0.0))
    row["stable"] = best.stable if best is not None else False
    row["generator_limited"] = best.generator_limited if best is not None else False
    row["generator"] = best.summary()["generator"] if best is not None else None
    row["feasible"] = best is not None and best.throughput >= options.min_throughput
    _tokens(row, cfg, options)
    row["seconds"] = round(time.monotonic() - started, 2)
    return row


def _padding(summary: dict[str, Any], buckets: Sequence[int]) -> dict[str, Any]:
    """A level's summary with the share of padded rows the runner computed (bucketed runners only)."""
    share = padded_share(summary.get("batches") or {}, buckets)
    return {**summary, "padded_share": round(share, 4)} if share is not None else summary


def _pads_itself(cfg: ModelConfig, point: dict[str, Any]) -> bool:
    """True when the trial sets edges the clients pad to: the tune's generator padded its requests to
    the edges of the config it first read, so this config needs a generator of its own."""
    buckets = buckets_in(cfg)
    return buckets is not None and buckets.pad_at == "client" and bool(point_edges(point))


def _tokens(row: dict[str, Any], cfg: ModelConfig, options: Settings) -> None:
    """Token figures on every level and the row (shape-bucketed versions only)."""
    buckets, traffic = buckets_in(cfg), traffic_of(cfg, options.input_data, options.batch_size)
    if buckets is None or traffic is None:
        return
    for level in [*row["levels"], *([row["best"]] if row["best"] else [])]:
        level["tokens"] = token_figures(traffic, buckets, float(level.get("throughput") or 0.0))
    row["tokens"] = {**token_figures(traffic, buckets, row["throughput"]), "lengths": traffic.source}


def start_level(options: Settings, trials: Sequence[dict[str, Any]]) -> int:
    """The concurrency a new trial's load search starts from: brute force measures every config from 1;
    quick search from the concurrency at which the best config so far peaked (its neighbours peak near
    it), so a config costs about three levels instead of a doubling from 1."""
    feasible = [t for t in trials if t.get("feasible") and t.get("concurrency")]
    if options.search != "quick" or not options.warm_start or not feasible:
        return 1
    best = max(feasible, key=lambda t: (t["throughput"], -t["p99_ms"]))
    return max(1, min(int(best["concurrency"]), options.max_concurrency))


def progress_line(t: dict[str, Any], n: int) -> str:
    where = f"c={t['concurrency']}" if t["concurrency"] else "no level within budget"
    return (
        f"trial {n}: {t['key']}: {t['throughput']:.1f} req/s, {where}"
        + (f", p99 {t['p99_ms']:.2f} ms" if t["p99_ms"] else "")
        + (f", padded {t['padded_share']:.1%}" if t.get("padded_share") is not None else "")
        + (f", {_tokens_short(t['tokens'])}" if t.get("tokens") else "")
        + (f" ({t['load_s']:.1f} s loading, {t['measure_s']:.1f} s measuring)" if "load_s" in t else "")
        + (f" [{t['error']}]" if t.get("error") else "")
    )


def _tokens_short(tokens: dict[str, Any]) -> str:
    return f"{tokens['tokens_per_s']:,.0f} tokens/s, {tokens['token_padded_share']:.1%} of tokens padding"
