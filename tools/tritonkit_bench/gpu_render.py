"""``docs/benchmarks-gpu.md`` from the GPU benchmark's figures (:mod:`tritonkit_bench.gpu`).

Owns the page's text and tables, the targets the issue sets (dynamic batching gain, serving
efficiency >= 0.85, FP16 cosine >= 0.999) with their verdicts, and for each missed target a sentence
naming the gap and the cause the figures point at. Pure: it reads the figures' dict (the JSON that
``--raw`` writes) and imports no torch, so it is tested without a GPU.
"""

from __future__ import annotations

import math
from typing import Any

from tritonkit_bench.gpu_models import HIDDEN, IMAGE_SIZE, PARTS, RESNET_MAX_BATCH, SEQ

__all__ = ["misses", "render", "targets"]

EFFICIENCY = 0.85
COSINE = 0.999

_INTRO = {
    "minilm": (
        "## MiniLM",
        f"MiniLM architecture (BERT, 6 layers, hidden {HIDDEN}, 12 heads, seeded weights, mean pooling), sequence "
        f"{SEQ}, inputs INT64 `input_ids`/`attention_mask`, output FP32 `EMBEDDING` [{HIDDEN}]. CUDA graphs for "
        "batch buckets 1, 2, 4, ..., 256 (max batch 256); ONNX graph + `onnx_cuda_runner` where onnxruntime has "
        "its CUDA provider. `_nodb`: no dynamic batcher; `_x1`: one instance.",
    ),
    "resnet": (
        "## ResNet-50",
        f"ResNet-50 architecture (`tritonkit.convert.flagship.resnet`, seeded synthetic weights: its predictions mean "
        f"nothing), input FP32 `image` [3, {IMAGE_SIZE}, {IMAGE_SIZE}] (602 KB a row; clients send FP32, the FP16 "
        f"program casts on the GPU inside its graph), output FP32 `logits` [1000]. CUDA graphs for batch buckets 1, "
        f"2, 4, ..., {RESNET_MAX_BATCH} (max batch {RESNET_MAX_BATCH}: {RESNET_MAX_BATCH} images are 38.5 MB through "
        "the python backend's shared memory per execute).",
    ),
}


def _f(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _verdict(name: str, measured: str, target: str, met: bool) -> dict[str, str]:
    return {"name": name, "measured": measured, "target": target, "met": "yes" if met else "no"}


def targets(data: dict[str, Any]) -> list[dict[str, str]]:
    """Every target with its measured figure and verdict."""
    out = []
    parts: dict[str, Any] = data.get("parts", {})
    minilm = parts.get("minilm")
    if minilm:
        rows = {(r["model"], r["batch"], r["in_flight"]): r for r in minilm["served"]}
        # Dynamic batching gain: the same fp16 model with and without a batcher, on 1 and 2 instances.
        for suffix, instances in (("_x1", "1 instance"), ("", "2 instances")):
            for batch, flight, goal in ((1, 64, 12), (16, 16, 4)):
                a = rows.get((f"minilm_fp16{suffix}", batch, flight))
                b = rows.get((f"minilm_fp16_nodb{suffix}", batch, flight))
                if a and b and b["samples_per_s"]:
                    value = a["samples_per_s"] / b["samples_per_s"]
                    out.append(
                        _verdict(
                            f"dynamic batching gain, {instances}, requests of {batch}, {flight} in flight (fp16)",
                            f"{value:.1f}x",
                            f">= {goal:g}x",
                            value >= goal,
                        )
                    )
    for part in parts.values():
        for row in part["served"]:
            eff = row.get("effective_in_process")
            if eff:
                value = row["samples_per_s"] / eff
                out.append(
                    _verdict(
                        f"serving efficiency {row['model']}, requests of {row['batch']}, {row['in_flight']} in "
                        f"flight (in-process at batch {row['effective_batch']}: {eff:,.0f}/s)",
                        f"{value:.2f}",
                        f">= {EFFICIENCY}",
                        value >= EFFICIENCY,
                    )
                )
    for part in parts.values():
        for name, acc in part["accuracy"].items():
            if "fp16" in name:
                out.append(
                    _verdict(
                        f"FP16 cosine vs FP32 ({name}, min over rows)",
                        f"{acc['min']:.7f}",
                        f">= {COSINE}",
                        acc["min"] >= COSINE,
                    )
                )
    return out


def misses(data: dict[str, Any]) -> list[str]:
    """One paragraph per missed efficiency or accuracy target: the gap, and the cause the figures show."""
    lines = []
    for part in data.get("parts", {}).values():
        for row in part["served"]:
            eff = row.get("effective_in_process")
            if not eff or row["samples_per_s"] / eff >= EFFICIENCY:
                continue
            b = row["effective_batch"]
            engine_us = b / eff * 1e6  # the engine alone on one batch of that size
            host_us = max(row["compute_us"] - engine_us, 0.0)
            text = (
                f"- **{row['model']}, requests of {row['batch']} at {row['in_flight']} in flight: "
                f"{row['samples_per_s'] / eff:.2f} (target {EFFICIENCY})**, {_f(row['samples_per_s'])} samples/s "
                f"served against {_f(eff)} in-process at batch {b}. Each execute took {_f(row['compute_us'])} µs "
                f"against {_f(engine_us)} µs for the engine alone at that batch"
            )
            if host_us > 0.2 * engine_us:
                text += (
                    f": {_f(host_us)} µs of host work ({_f(host_us / max(b, 1), 1)} µs a row: the stub reading "
                    "each request's inputs from the python backend's shared memory, the pinned staging copy, "
                    "the answers back)"
                )
            else:
                text += (
                    ", so the time is lost outside the execute call: in Triton's gRPC front end, its queue "
                    "and the hand-over to the stub"
                )
            text += f", with the GPU {_f(row['gpu_util'])} % busy and {_f(row['queue_us'])} µs per request in Triton's queue."
            if row["client_cpu_share"] > 0.5:
                text += (
                    f" The load generator used {100 * row['client_cpu_share']:.0f} % of the CPUs: part of "
                    "the gap is the client."
                )
            if row["part"] == "resnet":
                text += (
                    " An image row is 602 KB, so per-row host work is mostly copying: gRPC decoding, the "
                    "copy into shared memory, the copy into the pinned buffer."
                )
            lines.append(text)
        for name, acc in part["accuracy"].items():
            if "fp16" in name and acc["min"] < COSINE:
                lines.append(
                    f"- **{name}: FP16 cosine min {acc['min']:.7f} (target {COSINE})**, mean {acc['mean']:.7f}: "
                    "rounding to half precision accumulates through the layers; the FP32 version is the "
                    "one to serve where this matters."
                )
    return lines


def _precision(name: str, part: dict[str, Any]) -> list[str]:
    """FP16 against FP32 of one part: in-process at the largest batch, served at requests of 16."""
    rates = part["in_process"]
    fp16, fp32 = rates.get("torch fp16 CUDA graphs"), rates.get("torch fp32 CUDA graphs")
    lines = []
    if fp16 and fp32:
        top = str(max(part["batches"]))
        if top in fp16 and top in fp32 and fp32[top]:
            lines.append(
                f"FP16 against FP32 in-process at batch {top}: {_f(fp16[top])} against {_f(fp32[top])} "
                f"samples/s ({fp16[top] / fp32[top]:.1f}x)."
            )
    served = {(r["model"], r["batch"], r["in_flight"]): r for r in part["served"]}
    prefix = "resnet50" if name == "resnet" else name
    a, b = served.get((f"{prefix}_fp16", 16, 16)), served.get((f"{prefix}_fp32", 16, 16))
    if a and b and b["samples_per_s"]:
        lines.append(
            f"Served, requests of 16 at 16 in flight: {_f(a['samples_per_s'])} against {_f(b['samples_per_s'])} "
            f"samples/s ({a['samples_per_s'] / b['samples_per_s']:.1f}x)."
        )
    return lines


def _part(name: str, part: dict[str, Any]) -> list[str]:
    title, intro = _INTRO[name]
    batches = part["batches"]
    lines = [
        title,
        "",
        intro,
        "",
        "Versions: " + "; ".join(f"`{k}` {v}" for k, v in part["versions"].items()) + ".",
        "",
        "### Engines in-process (samples/s, inputs on the GPU)",
        "",
        "| engine | " + " | ".join(f"batch {b}" for b in batches) + " |",
        "|---|" + "---:|" * len(batches),
    ]
    for label, by_batch in part["in_process"].items():
        lines.append(f"| {label} | " + " | ".join(_f(by_batch.get(str(b))) for b in batches) + " |")
    rows = "256 ragged rows" if name == "minilm" else f"{RESNET_MAX_BATCH} held-out images"
    lines += [
        "",
        f"### Accuracy against FP32 (eager torch on the GPU, TF32 off; engines as served; {rows})",
        "",
        "| version | cosine min | cosine mean | top-1 agreement | target | met |",
        "|---|---:|---:|---:|---|---|",
    ]
    for version, acc in part["accuracy"].items():
        goal = COSINE if "fp16" in version else 0.9999
        lines.append(
            f"| {version} | {acc['min']:.7f} | {acc['mean']:.7f} | {100 * acc.get('top1', 1.0):.1f} % | "
            f">= {goal} | {'yes' if acc['min'] >= goal else 'no'} |"
        )
    lines += [
        "",
        "### Served by the embedded tritonserver (gRPC, 8 client processes)",
        "",
        "| version | request batch | in flight | samples/s | p50 ms | p99 ms | avg batch formed | queue µs/req | "
        "compute µs/req | GPU util % | client CPU % | server CPU % | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in part["served"]:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['in_flight']} | {_f(r['samples_per_s'])} | {_f(r['p50_ms'], 2)} | "
            f"{_f(r['p99_ms'], 2)} | {_f(r['avg_batch'], 1)} | {_f(r['queue_us'])} | {_f(r['compute_us'])} | "
            f"{_f(r['gpu_util'])} | {_f(100 * r['client_cpu_share'], 1)} | "
            f"{_f(100 * r['server_cpu_share'], 1)} | {r['errors']} |"
        )
    if not part["served"]:
        lines.append("| (not run: --skip-served) | | | | | | | | | | | | |")
    precision = _precision(name, part)
    if precision:
        lines += ["", "**Precision:** " + " ".join(precision)]
    return [*lines, ""]


def render_tune(tune: dict[str, Any]) -> list[str]:
    """The tune section: the search's settings, its ranked trials, winner against the baseline."""
    s = tune["settings"]
    lines = [
        "## Tune on the GPU",
        "",
        f"`tritonkit tune` (its Python API, `--search {s['search']}`) on `{s['model']}` ({s['about']}), served by "
        f"the embedded tritonserver in explicit model-control mode, each config loaded through the "
        f"model-repository API. Grid: instances {_join(s['instances'])}, max batch {_join(s['max_batch_sizes'])}, "
        f"delay µs {_join(s['delays_us'])}, no preferred sizes, no queue policy; p99 budget {s['budget_ms']:g} ms, "
        f"{s['protocol']}, {s['workers']} generator processes, windows of {s['window_s']:g} s, concurrency "
        f"doubled up to {s['max_concurrency']}. Instances are python-backend stubs whose runner is pinned to "
        "the GPU by its `device` parameter (the grid's kind stays KIND_CPU; the runner still runs on GPU 0).",
        "",
    ]
    if tune.get("error"):
        return [*lines, f"Tune did not finish: {tune['error']}", ""]
    lines += [
        f"{tune['evaluations']} configs, {tune['measurements']} load levels, {tune['seconds'] / 60:.1f} minutes.",
        "",
        "| rank | config | req/s within budget | concurrency | p50 ms | p99 ms | avg batch formed | "
        "queue µs/req | compute µs/req | stable | generator-limited levels |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    trials = sorted(tune["trials"], key=lambda t: -float(t.get("throughput") or 0.0))
    base_key = (tune.get("baseline") or {}).get("key")
    win_key = (tune.get("winner") or {}).get("key")
    for rank, t in enumerate(trials, 1):
        best = t.get("best") or {}
        marks = " (winner)" if t["key"] == win_key else ""
        marks += " (baseline: as built)" if t["key"] == base_key else ""
        limited = sum(1 for level in t.get("levels", []) if level.get("generator_limited"))
        lines.append(
            f"| {rank} | `{_short(t['point'])}`{marks} | {_f(t.get('throughput'))} | {t.get('concurrency') or '-'} | "
            f"{_f(t.get('p50_ms'), 2)} | {_f(t.get('p99_ms'), 2)} | {_f(best.get('average_batch'), 1)} | "
            f"{_f(best.get('queue_us'))} | {_f(best.get('compute_infer_us'))} | "
            f"{'yes' if t.get('stable') else 'no'} | {limited} |"
            + (f" failed: {t['error'][:80] or '(no message)'}" if "error" in t else "")
        )
    win, base = tune.get("winner"), tune.get("baseline")
    if win and base and base.get("throughput"):
        lines += [
            "",
            f"Winner `{_short(win['point'])}`: {_f(win['throughput'])} req/s at concurrency {win['concurrency']} "
            f"against the built config's {_f(base['throughput'])} ({win['throughput'] / base['throughput']:.2f}x), "
            f"p99 {_f(win['p99_ms'], 2)} ms.",
        ]
    elif not win:
        lines += ["", f"No config met the {s['budget_ms']:g} ms p99 budget."]
    return [*lines, ""]


def _join(values: list[Any]) -> str:
    return ", ".join(str(v) for v in values)


def _short(point: dict[str, Any]) -> str:
    keys = ("instances", "max_batch_size", "delay_us")
    return " ".join(f"{k}={point[k]}" for k in keys if k in point)


def render(data: dict[str, Any]) -> str:
    """The whole page."""
    m = data["machine"]
    lines = [
        "# GPU benchmarks",
        "",
        f"GPU: **{m['gpu']}** (driver {m['driver']}), {m['cores']} CPU cores, Python {m['python']}, torch "
        f"{m['torch']}, onnxruntime {m['onnxruntime']}, tritonserver 2.51 (nvidia-pytriton 0.7.0, python backend). "
        f"Run {data['when']}.",
        "Re-run on a GPU host: `scripts/gpu/pack.sh` on a networked machine, then `scripts/gpu/bench.sh` there "
        "(it calls `python -m tritonkit_bench.gpu`; `--only minilm,resnet,tune` picks parts).",
        "",
        "Versions are built by `tritonkit.convert.torch_program` as a build would (torch.export program + "
        "`torch_runner`), KIND_GPU instances on GPU 0 (the default placement, 2 per GPU, unless the name ends in "
        "`_x1`), dynamic batching with 500 µs queue delay and the buckets as preferred batch sizes.",
        "",
        "How to read: samples/s = rows answered per second. Served runs: closed loop, each client process "
        "keeps its share of the requests in flight, 2 s warm-up then the measured window; latencies are "
        "client-side. Avg batch formed, queue and compute per request come from Triton's own counters "
        "(`/metrics`, differences over the run; compute = the execute call each request rode in). Client / "
        "server CPU % = CPU time of the load generator's processes / of tritonserver and its stubs over wall "
        f"time x cores ({m['cores']} = 100 %). Serving efficiency = served samples/s / the same engine in-process "
        "at the batch Triton formed (padded to the same bucket); for 2-instance versions that engine is one "
        "instance, so above 1 is possible.",
        "",
    ]
    for name in PARTS:
        if name in data.get("parts", {}):
            lines += _part(name, data["parts"][name])
    found = targets(data)
    if found:
        lines += ["## Targets", "", "| figure | measured | target | met |", "|---|---:|---|---|"]
        lines += [f"| {t['name']} | {t['measured']} | {t['target']} | {t['met']} |" for t in found]
        lines.append("")
    missed = misses(data)
    if missed:
        lines += ["### Missed: the gap and its cause", "", *missed, ""]
    if data.get("tune"):
        lines += render_tune(data["tune"])
    lines += [*data.get("notes", [])]
    return "\n".join(lines).rstrip("\n") + "\n"
