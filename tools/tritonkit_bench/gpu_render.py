"""``docs/benchmarks-gpu.md`` from the GPU benchmark's figures (:mod:`tritonkit_bench.gpu`).

Owns the page's text and tables: per model the engine in-process, the version served as built and as
tuned at each load level (served / peak in-process, padded share, Triton's split), the tune (its
command, time, where the trials' seconds went, winner against the built config, the profile check),
the summary against the issue's targets, and the published anchors the figures are read against.
Pure: it reads the figures' dict (the JSON that ``--raw`` writes) and imports no torch, so it is tested
without a GPU.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["peak", "render", "summary"]

RATIO = 0.85
C1_MARGIN_MS = 0.3
PADDED = 0.10
TUNE_S = 300.0
PROFILE_WITHIN = 0.10
TITLES = {
    "bert": "BERT-base, sequence 128",
    "minilm": "MiniLM, sequence 128",
    "resnet": "ResNet-50",
    "resnet16": "ResNet-50, FP16 image and logits on the wire",
    # held out: architectures the bench was not built around, run through its path by scripts/gpu/heldout.py
    "vit": "ViT-B/16 (held out)",
    "convnext": "ConvNeXt-T (held out)",
    "distilbert": "DistilBERT-base, sequence 128 (held out)",
}

ANCHORS = """## Anchors (published, other hardware: for reading the ratios only)

| source | figure |
|---|---|
| MLPerf Inference v0.7, T4, Triton vs TensorRT alone, offline | ResNet-50 0.996, BERT-Large 0.957 |
| MLPerf Inference v0.7, T4, Triton vs TensorRT alone, server | ResNet-50 0.944, BERT-Large 0.900 |
| MLPerf single-stream, latency Triton adds | 0.10 ms (ResNet-50) to 0.32 ms (BERT-Large) |
| TensorRT's BERT demo on a T4, batch 1, sequence 128 (BERT-base) | 1.69 ms INT8, 1.95 ms FP16 |

Those servers ran TensorRT engines in Triton's C++ backend; the versions here run a torch program with
CUDA graphs in the embedded tritonserver 2.51, through tritonkit's native C++ backend (`tritonkit_torch`)
or the python backend (each model's section says which)."""

#: How each ``serving.runner`` serves a version, for the page.
RUNNERS = {
    "python": "the torch runner in Triton's python backend",
    "native": "tritonkit's native C++ backend `tritonkit_torch` (the program traced per bucket, CUDA graphs)",
}


def _f(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def peak(rates: dict[str, float]) -> tuple[int, float]:
    """(batch, samples/s) of the best in-process rate."""
    batch, rate = max(rates.items(), key=lambda kv: kv[1])
    return int(batch), rate


def _top(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    good = [r for r in rows if not r.get("errors")]
    return max(good, key=lambda r: r["samples_per_s"]) if good else None


def _alone(part: dict[str, Any]) -> str:
    """A lone row's in-process time, host in and out, where the run measured it."""
    if not part.get("alone_ms"):
        return ""
    paused = f", {part['alone_paused_ms']:.2f} with pauses" if part.get("alone_paused_ms") else ""
    return f" (one row alone in-process, host in and out: {part['alone_ms']:.2f}{paused})"


def summary(data: dict[str, Any]) -> list[dict[str, str]]:
    """One row per part: the issue's acceptance figures and their verdicts."""
    out = []
    for name, part in _ordered(data):
        if part.get("error") or not part.get("in_process"):
            continue
        batch, rate = peak(part["in_process"])
        tuned = part.get("tuned_served") or []
        served = tuned or part.get("served") or []
        http = part.get("served_http") or []
        http_built = part.get("served_http_built") or []
        # the peak over both configs (the tuned one keeps its p99 budget; the built one may not) and both
        # front ends (HTTP serves the final config, and the built one where a bench tuned it)
        top_grpc = _top([*(part.get("served") or []), *tuned])
        top_http = _top([*http_built, *http])
        top = max((t for t in (top_grpc, top_http) if t), key=lambda r: r["samples_per_s"], default=None)
        which = "as built"
        if top is not None and (any(top is r for r in tuned) or (any(top is r for r in http) and tuned)):
            which = "tuned"
        c1s = {
            proto: r["p50_ms"]
            for proto, rows in (("gRPC", served), ("HTTP", http))
            for r in rows
            if r["in_flight"] == 1
        }
        one_ms = 1000.0 / part["in_process"]["1"] if part["in_process"].get("1") else None
        tune = part.get("tune") or {}
        winner, base, prof = tune.get("winner"), tune.get("baseline"), tune.get("profile") or {}
        ratios = [
            f"{t['samples_per_s'] / rate:.2f} {proto}"
            for proto, t in (("gRPC", top_grpc), ("HTTP", top_http))
            if t
        ]
        row = {
            "part": name,
            "peak_in_process": f"{rate:,.0f} (batch {batch})",
            "peak_served": f"{top['samples_per_s']:,.0f} ({which}, {_proto(top)}, c{top['in_flight']}, "
            f"p99 {top['p99_ms']:.1f} ms)"
            if top
            else "n/a",
            "ratio": ", ".join(ratios) if ratios else "n/a",
            "ratio_met": "yes" if top and top["samples_per_s"] / rate >= RATIO else "no",
            "c1": ", ".join(f"{v:.2f} {k}" for k, v in c1s.items())
            + f" vs {one_ms:.2f} + {C1_MARGIN_MS}"
            + _alone(part)
            if c1s and one_ms
            else "n/a",
            "c1_met": "yes" if c1s and one_ms and min(c1s.values()) <= one_ms + C1_MARGIN_MS else "no",
            "padded": _pct(top.get("padded_share")) if top else "n/a",
            "padded_met": "yes" if top and (top.get("padded_share") or 0.0) <= PADDED else "no",
            "tune_s": _f(tune.get("seconds"), 0) if tune else "not run",
            "tune_met": "yes"
            if tune and tune.get("seconds", 1e9) <= TUNE_S and not tune.get("refused")
            else "no",
            "beats": _beats(winner, base) + ("" if _written(tune) else " (not written)"),
            "profile": _f(prof.get("ratio"), 3) if prof else "n/a",
            "profile_met": "yes" if prof.get("ratio") and abs(prof["ratio"] - 1) <= PROFILE_WITHIN else "no",
        }
        out.append(row)
    return out


def _proto(row: dict[str, Any]) -> str:
    return "HTTP" if str(row.get("protocol", "grpc")) in ("http", "http-burst") else "gRPC"


def _ordered(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The parts in the page's order (BERT, MiniLM, ResNet-50, then any other)."""
    order = list(TITLES)
    parts = data.get("parts", {})
    return sorted(parts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))


def _written(tune: dict[str, Any]) -> bool:
    """Whether tune wrote its winner (recorded since 2026-11-26; earlier runs' last lines say so)."""
    if "written" in tune:
        return bool(tune["written"])
    return "NOT written" not in str(tune.get("log_tail", ""))


def _figure(t: dict[str, Any]) -> float:
    return float(t.get("confirmed_throughput") or t.get("throughput") or 0.0)


def _beats(winner: dict[str, Any] | None, base: dict[str, Any] | None) -> str:
    if not winner or not base:
        return "n/a"
    if winner.get("key") == base.get("key"):
        return "no (the built config won)"
    # like with like: the finals' medians where both were measured again, else the search's figures
    if winner.get("confirmed_throughput") and base.get("confirmed_throughput"):
        return f"{_figure(winner) / _figure(base):.2f}x"
    return f"{winner['throughput'] / max(base['throughput'], 1e-9):.2f}x"


def _served_table(rows: list[dict[str, Any]], rate: float) -> list[str]:
    """One row per level."""
    lines = [
        "| in flight | samples/s | / peak in-process | p50 ms | p99 ms | avg batch | padded rows | queue µs/req | "
        "input / infer / output µs per execution | GPU util % | client CPU % | server CPU % | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        split = f"{r['compute_input_us']:,.0f} / {r['compute_infer_us']:,.0f} / {r['compute_output_us']:,.0f}"
        lines.append(
            f"| {r['in_flight']} | {r['samples_per_s']:,.0f} | {r['samples_per_s'] / rate:.2f} | {_f(r['p50_ms'], 2)} | "
            f"{_f(r['p99_ms'], 2)} | {r['avg_batch']:.1f} | {_pct(r.get('padded_share'))} | {r['queue_us']:,.0f} | "
            f"{split} | {_f(r.get('gpu_util'))} | {100 * r['client_cpu_share']:.1f} | {100 * r['server_cpu_share']:.1f} | "
            f"{r['errors']}{' ' + r['first_error'][:80] if r.get('first_error') else ''} |"
        )
    return lines


def _tune(tune: dict[str, Any]) -> list[str]:
    lines = [f"`{tune['command']}`", ""]
    if tune.get("error"):
        return [*lines, f"**Tune failed:** {tune['error']}", "", "```", tune.get("log_tail", ""), "```", ""]
    trials = tune.get("trials", [])
    lines.append(
        f"{len(trials)} configs searched, {tune.get('runs', 0)} config loads in all (finals included), "
        f"{tune.get('measurements')} load levels; {tune['seconds']:.0f} s wall, of which {tune.get('load_s', 0):.0f} s "
        f"putting configs into service (load + ready) and {tune.get('measure_s', 0):.0f} s measuring; "
        f"trials refused: {len(tune.get('refused', []))}."
    )
    winner, base = tune.get("winner"), tune.get("baseline")
    if winner:
        lines += ["", f"Winner `{winner['key']}`: {_figure(winner):,.0f} req/s (finals median where measured) at "
                  f"concurrency {winner['concurrency']}, p99 {_f(winner.get('p99_ms'), 2)} ms; built config "
                  f"{'`' + base['key'] + '`: ' + format(_figure(base), ',.0f') + ' req/s' if base else 'not measured'} "
                  f"({_beats(winner, base)})"
                  + ("." if _written(tune) else "; not written: the winner does not beat the built config beyond the "
                     "spread of their repeated measurements, so tune left the config as built.")]  # fmt: skip
    prof = tune.get("profile") or {}
    if prof.get("throughput") is not None:
        lines += ["", f"`tritonkit profile` of the config as tune left it at c{prof['concurrency']}: {prof['throughput']:,.0f} "
                  f"req/s against tune's {prof['tune_figure']:,.0f} ({prof['ratio']:.3f}), p99 {_f(prof.get('p99_ms'), 2)} ms, "
                  f"padded {_pct(prof.get('padded_share'))}."]  # fmt: skip
    lines += ["", "| config | req/s | concurrency | p99 ms | avg batch | padded | load s | measure s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for t in sorted(trials, key=lambda t: -t.get("throughput", 0)):
        lines.append(
            f"| `{t['key']}` | {t.get('throughput', 0):,.0f} | {t.get('concurrency') or '–'} | {_f(t.get('p99_ms'), 2)} | "
            f"{_f(t.get('average_batch'), 1)} | {_pct(t.get('padded_share'))} | {_f(t.get('load_s'), 1)} | "
            f"{_f(t.get('measure_s'), 1)} |"
        )
    return [*lines, ""]


def _part(name: str, part: dict[str, Any]) -> list[str]:
    lines = [f"## {TITLES.get(name, name)}", ""]
    if part.get("error"):
        return [*lines, f"**Not measured:** {part['error']}", ""]
    acc = part.get("accuracy") or {}
    lines += [
        f"{part['about']}. Version `{part['model']}` as built, served by {RUNNERS[part.get('runner', 'python')]}: "
        f"{part['instances']} instances per GPU, max batch "
        f"{part['max_batch']}, {part['delay_us']} µs delay, buckets {part['buckets']} (the batcher's preferred sizes). "
        f"FP16 against FP32 (eager, TF32 off, held-out rows): cosine min {acc.get('min', float('nan')):.5f}, mean "
        f"{acc.get('mean', float('nan')):.5f}, top-1 agreement {100 * acc.get('top1', float('nan')):.1f} %.",
        "",
        "In-process (the served engine, CUDA graphs, inputs already on the GPU):",
        "",
        "| batch | " + " | ".join(part["in_process"]) + " |",
        "|---|" + "---:|" * len(part["in_process"]),
        "| samples/s | " + " | ".join(f"{v:,.0f}" for v in part["in_process"].values()) + " |",
        "| ms per batch | "
        + " | ".join(f"{1000 * int(b) / v:.3f}" for b, v in part["in_process"].items())
        + " |",
        "",
    ]
    batch, rate = peak(part["in_process"])
    lines += [
        f"Served as built (requests of one row; / peak in-process = / {rate:,.0f} at batch {batch}):",
        "",
    ]
    lines += [*_served_table(part.get("served", []), rate), ""]
    for row in part.get("malloc_off", []):
        lines += [f"Same version at c{row['in_flight']} without tritonkit's malloc settings (`TRITONKIT_MALLOC_TUNING=0`): "
                  f"{row['samples_per_s']:,.0f} samples/s, compute infer {row['compute_infer_us']:,.0f} µs per execution.", ""]  # fmt: skip
    if part.get("tune"):
        lines += ["### Tune", "", *_tune(part["tune"])]
    if part.get("tuned_served"):
        tc = part.get("tuned_config", {})
        lines += [f"Served with the tuned config ({tc.get('instances')} instances per GPU, max batch {tc.get('max_batch')}, "
                  f"{tc.get('delay_us')} µs delay, buckets {tc.get('buckets')}"
                  f"{', TorchScript optimised plan' if tc.get('jit_optimize') else ''}):", ""]  # fmt: skip
        lines += [*_served_table(part["tuned_served"], rate), ""]
    if part.get("served_http"):
        lines += [f"Through Triton's HTTP front end, the {'tuned' if part.get('tuned_served') else 'built'} config "
                  "(the same requests as HTTP/1.1 with the binary tensor extension, one keep-alive connection per "
                  "request in flight"
                  + (", each process's opened one by one once the load has started (connections opened together on "
                     "an idle tritonserver 2.51 all land on its first HTTP thread)"
                     if part.get("http_connect") == "ramp"
                     else ", opened by the generator each row names" if part.get("http_connect") == "generator"
                     else ", all opened before the load")
                  + (f"; {part['http_threads']} HTTP threads" if part.get("http_threads") else "")
                  + (f"; room for {part['http_reply_room']:,} queued answers per HTTP thread"
                     if part.get("http_reply_room") else
                     "; at most 256: tritonserver 2.51's HTTP front end left requests unanswered with several hundred "
                     "connections open")
                  + "):", ""]  # fmt: skip
        lines += [*_served_table(part["served_http"], rate), ""]
    if part.get("served_http_built"):
        lines += ["The built config through Triton's HTTP front end (the same requests and connections):", ""]
        lines += [*_served_table(part["served_http_built"], rate), ""]
    return lines


def render(data: dict[str, Any]) -> str:
    m = data.get("machine", {})
    whens = {name: p["when"] for name, p in _ordered(data) if isinstance(p, dict) and p.get("when")}
    run = (
        "Runs: " + "; ".join(f"{name} {when}" for name, when in whens.items())
        if len(set(whens.values())) > 1
        else f"Run {data.get('when', '?')}"
    )
    lines = [
        "# GPU benchmarks",
        "",
        f"GPU: **{m.get('gpu', '?')}** (driver {m.get('driver', '?')}), {m.get('cores', '?')} CPU cores"
        f"{' (' + m['cpu'] + ')' if m.get('cpu') else ''}, Python "
        f"{m.get('python', '?')}, torch {m.get('torch', '?')}, tritonserver 2.51 (nvidia-pytriton 0.7.0). "
        f"{run}. Re-run: `scripts/gpu/pack.sh` on a networked machine, then "
        "`scripts/gpu/bench.sh` on the GPU host (`python -m tritonkit_bench.gpu`; `--only bert,minilm,resnet,resnet16`).",
        "",
        "How to read: samples/s = rows answered per second; every request is one row. Served levels are closed "
        + (
            f"loops ({data['client_processes']} client processes sending pre-serialised gRPC requests (or HTTP "
            "requests where a table says so), one in flight per process as blocking calls, more through asyncio; "
            "1 s warm-up, then the measured window); "
            if "client_processes" in data
            else "loops (8 client processes sending pre-serialised gRPC requests through asyncio; 1 s warm-up, "
            "then the measured window); "
        )
        + "latencies are client-side. Queue, compute input / infer / output and the batches formed are Triton's own "
        "statistics over the level (compute figures per execution); padded rows = rows the runner computed that "
        "no request asked for / all rows it computed (each batch padded to its bucket). / peak in-process = served "
        "samples/s over the engine's best in-process rate at any batch up to the max batch.",
        "",
        "## Summary",
        "",
        "| model | peak in-process | peak served | served / in-process, per front end (>= 0.85) | c1 p50 ms per front end (tuned config where tuned) vs in-process batch 1 + 0.3 | "
        "padded at peak (<= 10 %) | tune s (<= 300, none refused) | winner vs built | profile / tune (within 10 %) |",
        "|---|---:|---:|---|---|---|---|---|---|",
    ]
    for r in summary(data):
        lines.append(
            f"| {r['part']} | {r['peak_in_process']} | {r['peak_served']} | {r['ratio']} ({r['ratio_met']}) | "
            f"{r['c1']} ({r['c1_met']}) | {r['padded']} ({r['padded_met']}) | {r['tune_s']} ({r['tune_met']}) | "
            f"{r['beats']} | {r['profile']} ({r['profile_met']}) |"
        )
    lines.append("")
    for name, part in _ordered(data):
        lines += _part(name, part)
    lines += [ANCHORS, ""]
    if data.get("notes"):
        lines += [str(data["notes"]).rstrip(), ""]
    return "\n".join(lines)
