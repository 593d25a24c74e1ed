"""The files of a tune: ``tune.json``, ``report.md`` and ``pareto.png``.

Owns the ranking (feasible configs by throughput within the budget, then the rest by p99), the
throughput/p99 Pareto front (configs no other config beats on both), ``report.md`` (provenance, the
model's own config as the baseline, the winner's finals median as the headline with the spread of its
rounds, the verdict, the finals table, the ranked table with each config's window spread, p99 interval
and server split; for a version with shape buckets, tokens/s beside req/s and the padded share of the tokens
sent, from the traffic's lengths and each config's edges), and the plot of every trial with the front, the budget, the finals, the winner and
the baseline drawn in and the configs labelled. Every file is written through a temporary file and a
rename.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.atomic import write_text, write_with
from tritonkit.measure.provenance import markdown_lines

__all__ = ["pareto_front", "ranked", "write_report"]


def ranked(trials: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(trials, key=lambda t: (not t["feasible"], -t["throughput"], t["p99_ms"] or 0.0))


def pareto_front(trials: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials with a measured level that no other trial beats on both throughput (higher) and p99 (lower)."""
    points = [t for t in trials if t.get("best")]
    front = [
        t
        for t in points
        if not any(
            o["throughput"] >= t["throughput"]
            and o["p99_ms"] <= t["p99_ms"]
            and (o["throughput"] > t["throughput"] or o["p99_ms"] < t["p99_ms"])
            for o in points
        )
    ]
    return sorted(front, key=lambda t: t["p99_ms"])


def _split(t: dict[str, Any]) -> str:
    b = t.get("best") or {}
    if not b:
        return "–"
    return (
        f"{b['queue_us']:.0f} / {b['compute_input_us']:.0f} / {b['compute_infer_us']:.0f} / "
        f"{b['compute_output_us']:.0f} (batch {b['average_batch']:.2f})"
    )


def markdown(data: Mapping[str, Any]) -> str:
    """``report.md`` of a tune run, from the same fields ``tune.json`` holds."""
    model, budget_ms, search = data["model"], data["latency_budget_ms"], data["search"]
    trials, winner = data["trials"], data["winner"]
    lines = [
        f"# tritonkit tune: `{model}`",
        "",
        *markdown_lines(data.get("provenance")),
        f"Latency budget p99 {budget_ms:g} ms; search `{search}`: {len(trials)} configs, {data['measurements']} load "
        "levels measured. Throughput counts successes only, at the highest concurrency whose p99 fits the budget "
        "(stable over 3 windows).",
        "",
        f"Load generator: {(data.get('method') or {}).get('generator_of_record', 'tritonkit')}.",
        "",
    ]
    partial = data.get("partial")
    if partial:
        lines += [
            f"**PARTIAL TUNE**: the time budget ({partial['time_budget_s']:g} s) ended it in its "
            f"{partial['stopped']} after {partial['configs_measured']} config(s) measured"
            + ("" if partial.get("baseline_measured") else ", before the model's own config was measured")
            + ": the figures below are what was measured by then, and nothing was written.",
            "",
        ]
    lines += _headline(data)
    lines += _traffic(trials, winner, data.get("baseline"))
    if winner is not None:
        lines += _finals(data.get("finals") or [], winner)
    lines += _table(trials)
    lines += [
        "",
        "Pareto front (throughput vs p99): " + ", ".join(f"`{t['key']}`" for t in pareto_front(trials)),
        "",
    ]
    return "\n".join(lines)


def _figure(row: Mapping[str, Any]) -> str:
    """A config's headline figure: its finals median with their spread, else its search measurement."""
    if row.get("final_figures"):
        figures = row["final_figures"]
        return (
            f"{row['confirmed_throughput']:.1f} req/s (finals median of {len(figures)} rounds, "
            f"{min(figures):.1f}-{max(figures):.1f})"
        )
    return f"{row['throughput']:.1f} req/s (one search measurement)"


def _headline(data: Mapping[str, Any]) -> list[str]:
    """The baseline (the model's own config, exactly), the winner, the gain and whether it was written."""
    winner, baseline, verdict = data["winner"], data.get("baseline"), data.get("verdict")
    lines = []
    if baseline is not None:
        where = "on the grid" if baseline.get("on_grid") else "not on the grid: measured on its own"
        lines += [
            f"**Baseline**: the model's own config as it stood, `{baseline['key']}` ({where}): "
            + (
                _figure(baseline)
                if baseline.get("feasible")
                else "not measured (the time budget was spent)"
                if baseline.get("unmeasured")
                else "no load level within the budget"
            )
            + ".",
            "",
        ]
    if winner is None:
        return [*lines, "**No config met the budget.**", ""]
    searched = (
        f"; its search measurement {winner['throughput']:.1f} req/s" if "final_figures" in winner else ""
    )
    if winner.get("search_concurrency"):  # a finals round held the budget only at a lower level
        searched += (
            f" at concurrency {winner['search_concurrency']} (a finals round broke the budget there; every "
            f"round held it at {winner['concurrency']})"
        )
    lines += [
        f"**Winner**: `{winner['key']}`: {_figure(winner)} at concurrency {winner['concurrency']}, p50 "
        f"{winner['p50_ms']:.2f} ms, p99 {winner['p99_ms']:.2f} ms{searched}.",
        "",
    ]
    if verdict is not None:
        gain = (
            ""
            if verdict.get("gain") is None
            else f"{verdict['gain']:+.1%} against the baseline ({verdict['method']} medians); "
        )
        written = data.get("written") or {}
        if verdict["write"]:
            where = written.get("where") or "not written (--write none): recommended only"
            spec = f" and {written['spec']}" if written.get("spec") else ""
            action = f"written to {where}{spec}"
        else:
            action = "**NOT written**: config.pbtxt is unchanged"
        lines += [f"**Verdict**: {gain}{action}: {verdict['reason']}.", ""]
        lines += [f"Note: {note}" for note in written.get("notes") or []]
    return lines


def _traffic(
    trials: Sequence[dict[str, Any]], winner: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None
) -> list[str]:
    """For a version with shape buckets: where the lengths came from, and the winner's and the model's
    own tokens (real tokens/s, the padded share of the tokens sent)."""
    tokens = [t["tokens"] for t in trials if t.get("tokens")]
    if not tokens:
        return []
    lines = [
        f"**Tokens** (lengths from {tokens[0].get('lengths', 'the traffic')}; a request's tokens are the product "
        "of its lengths on the bucketed axes; padding: each request padded to its smallest covering edge, "
        "which the server's runner may pad further to run a group with a longer one):",
        "",
    ]
    for name, row in (("winner", winner), ("model's own config", baseline)):
        if row and row.get("tokens"):
            t, edges = row["tokens"], _edges(row.get("point") or {})
            figure = row.get("confirmed_throughput") or row["throughput"]  # the headline's figure
            lines.append(
                f"- {name}{f' ({edges})' if edges else ''}: {figure * t['tokens_per_request']:,.0f} tokens/s at "
                f"{figure:.1f} req/s ({t['tokens_per_request']:g} tokens a request, "
                f"{t['sent_tokens_per_request']:g} sent; {t['token_padded_share']:.1%} of the tokens sent padding)"
            )
    return [*lines, ""]


def _edges(point: Mapping[str, Any]) -> str:
    return ", ".join(f"{k.removeprefix('edges.')} [{v}]" for k, v in point.items() if k.startswith("edges."))


def _table(trials: Sequence[dict[str, Any]]) -> list[str]:
    """The ranked table: every config of the search with its level, spread of windows and server split
    (and tokens/s with the padded share of the tokens for a version with shape buckets)."""
    tokens = any(t.get("tokens") for t in trials)
    lines = [
        "| rank | config | within budget | req/s | "
        + ("tokens/s (padding) | " if tokens else "")
        + "windows req/s (min-max) | concurrency | p50 ms | p99 ms | "
        "p99 95% CI (n) | stable | server µs/request: queue / in / infer / out | batches (size: executions) |",
        "|---:|---|---|---:|" + ("---:|" if tokens else "") + "---|---:|---:|---:|---|---|---|---|",
    ]
    for i, t in enumerate(ranked(trials), 1):
        b = t.get("best") or {}
        batches = ", ".join(f"{k}: {v}" for k, v in b.get("batches", {}).items()) or "–"
        p50 = "–" if t["p50_ms"] is None else f"{t['p50_ms']:.2f}"
        windows = b.get("window_throughputs") or []
        spread = f"{min(windows):.1f}-{max(windows):.1f}" if windows else "–"
        ci = b.get("p99_ci_ms") or [None, None]
        interval = (
            f"[{'<min' if ci[0] is None else f'{ci[0]:.2f}'}, {'>max' if ci[1] is None else f'{ci[1]:.2f}'}] "
            f"({b.get('p99_samples', '–')})"
            if b
            else "–"
        )
        tok = t.get("tokens")
        cell = (
            (f"{tok['tokens_per_s']:,.0f} ({tok['token_padded_share']:.1%}) | " if tok else "– | ")
            if tokens
            else ""
        )
        lines.append(
            f"| {i} | `{t['key']}` | {'yes' if t['feasible'] else 'no'} | {t['throughput']:.1f} | {cell}{spread} | "
            f"{t['concurrency'] or '–'} | {p50} | {(t['p99_ms'] or 0):.2f} | {interval} | "
            f"{'yes' if t['stable'] else 'no'} | {_split(t)} | {batches} |"
        )
    return lines


def _finals(finals: Sequence[Mapping[str, Any]], winner: Mapping[str, Any]) -> list[str]:
    """The finals table: each finalist's search figure and its re-measurements, winner first, the model's
    own config last."""
    if not any(f["figures"] for f in finals):
        return []
    rounds = max(len(f["figures"]) for f in finals)
    lines = [
        f"Finals: the config(s) the search measured within reach of the best "
        f"({sum(bool(f.get('finalist', True)) for f in finals)}), measured again in {rounds} alternating rounds at the "
        "concurrency the search found (a lower level when that broke the budget; a level the load "
        "generator limited is never a figure: it ends the tune), the model's own config in "
        "the same rounds; the winner has the highest median of the fresh figures, and the spread (min-max) "
        "is what one config measured again shows.",
        "",
        "| config | search req/s | "
        + " | ".join(f"round {r + 1}" for r in range(rounds))
        + " | median | spread |",
        "|---|---:|" + "---:|" * rounds + "---:|---|",
    ]
    order = sorted(finals, key=lambda f: (f["key"] != winner["key"], bool(f.get("own_config"))))
    for f in order:
        cells = " | ".join(
            f"{x:.1f} (c={c})" for x, c in zip(f["figures"], f.get("concurrencies") or [], strict=False)
        )
        label = f"`{f['key']}`" + (" (model's own config)" if f.get("own_config") else "")
        low, high = f.get("min", f["median"]), f.get("max", f["median"])
        lines.append(
            f"| {label} | {f['searched']:.1f} | {cells} | {f['median']:.1f} | {low:.1f}-{high:.1f} |"
        )
    return [*lines, ""]


_SHORT = {"instances": "i", "max_batch_size": "b", "delay_us": "d"}


def short_label(point: Mapping[str, Any]) -> str:
    """A config in a few characters for plots: ``i2 b8 d500`` (+ ``p`` preferred max, ``q`` bounded queue,
    ``gpu``, ``jit`` the native backend's optimised plan); ``d-`` is no dynamic batcher."""
    parts = []
    for key, letter in _SHORT.items():
        if key in point:
            value = point[key]
            parts.append(f"{letter}{'-' if value == 'off' else value}")
    if point.get("preferred") == "max":
        parts.append("p")
    if point.get("queue") == "bounded":
        parts.append("q")
    if point.get("kind") == "KIND_GPU":
        parts.append("gpu")
    if point.get("jit_optimize") == "on":
        parts.append("jit")
    parts += [f"e{v}" for k, v in sorted(point.items()) if k.startswith("edges.")]
    return " ".join(parts)


def plot(path: Path, data: Mapping[str, Any]) -> None:
    """``pareto.png``: every config (throughput vs p99), the Pareto front, the budget, the finals (median
    and min-max of their rounds), the winner and the model's own config marked; configs labelled."""
    import matplotlib  # noqa: PLC0415 (matplotlib is heavy; only report writing needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib is heavy; only report writing needs it)

    trials, budget_ms = data["trials"], data["latency_budget_ms"]
    winner, baseline = data.get("winner"), data.get("baseline")
    measured = [t for t in trials if t.get("best")]
    front = pareto_front(trials)
    by_key = {t["key"]: t for t in measured}
    fig, ax = plt.subplots(figsize=(11, 5.5))
    ax.scatter(
        [t["p99_ms"] for t in measured], [t["throughput"] for t in measured], s=18, label="configs (search)"
    )
    ax.plot(
        [t["p99_ms"] for t in front], [t["throughput"] for t in front], "o-", color="C3", label="Pareto front"
    )
    finals = [f for f in data.get("finals") or [] if f["figures"]]
    for i, f in enumerate(finals):
        source = by_key.get(f["key"]) or (baseline if baseline and f["key"] == baseline["key"] else None)
        if source is None or not source.get("p99_ms"):
            continue
        ax.errorbar(
            [source["p99_ms"]], [f["median"]], yerr=[[f["median"] - f["min"]], [f["max"] - f["median"]]],
            fmt="s", color="C2", capsize=4, label="finals: median, min-max" if i == 0 else None,
        )  # fmt: skip
    marks = [(baseline, "model's own config", "D", "C1"), (winner, "winner", "*", "C4")]
    for row, name, marker, color in marks:
        if row and row.get("p99_ms"):
            figure = row.get("confirmed_throughput") or row["throughput"]
            ax.scatter([row["p99_ms"]], [figure], s=160, marker=marker, color=color, zorder=5, label=name)
            ax.annotate(name, (row["p99_ms"], figure), textcoords="offset points", xytext=(6, -12), fontsize=8,
                        color=color, fontweight="bold")  # fmt: skip
    labelled = (
        measured
        if len(measured) <= 20
        else [*front, *(by_key[f["key"]] for f in finals if f["key"] in by_key)]
    )
    for t in {t["key"]: t for t in labelled}.values():
        ax.annotate(short_label(t.get("point") or {}), (t["p99_ms"], t["throughput"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)  # fmt: skip
    ax.axvline(budget_ms, color="grey", linestyle="--", label=f"budget p99 {budget_ms:g} ms")
    ax.margins(x=0.12, y=0.12)
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (req/s, successes)")
    ax.set_title(
        f"tritonkit tune: {data['model']} (labels: i instances, b max batch, d delay µs, p preferred, q bounded queue)",
        fontsize=9,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # outside: it hides no point
    fig.tight_layout()
    try:
        write_with(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    finally:
        plt.close(fig)


def write_report(report_dir: Path, data: Mapping[str, Any], *, plots: bool = True) -> list[Path]:
    """Write ``tune.json`` (``data``: model, latency_budget_ms, search, measurements, winner, baseline,
    trials), ``report.md`` and (with ``plots``) ``pareto.png``; return their paths."""
    report_dir.mkdir(parents=True, exist_ok=True)
    written = [report_dir / "tune.json", report_dir / "report.md"]
    write_text(written[0], json.dumps(data, indent=2, sort_keys=True) + "\n")
    write_text(written[1], markdown(data))
    if plots:
        written.append(report_dir / "pareto.png")
        plot(written[-1], data)
    return written
