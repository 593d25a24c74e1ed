"""The fleet plan's report: ``fleet-plan.json`` (everything measured and decided) and ``fleet-plan.md``.

Owns :func:`to_json` (a :class:`~tritonkit.fleet.planner.FleetPlan` plus its placement, overlay checks and
verification as plain data) and :func:`markdown` (from that data only, so the page can be rebuilt from
the JSON): the cheapest fleet, GPUs and cost per type packed and one model per pod, the placement (what
each pod loads, instance groups, Triton's model-control flags), each model's tuned config, capacity and
memory, co-location measured (capacity alone vs in the group), the separate load test, the overlays.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from tritonkit.fleet.devices import replicas_word
from tritonkit.fleet.planner import FleetPlan

__all__ = ["markdown", "to_json", "type_rows"]


def type_rows(plan: FleetPlan) -> list[dict[str, Any]]:
    """Per GPU type: price, usable memory, GPUs and cost packed and one model per pod."""
    rows = []
    for gpu in plan.fleet.gpus:
        packed = plan.result.packed.get(gpu.type)
        single = plan.result.single.get(gpu.type)
        rows.append({
            "type": gpu.type,
            "price_per_hour": gpu.price_per_hour,
            "memory_gb": gpu.memory_gb,
            "usable_mb": round(gpu.memory_gb * 1024 * plan.fleet.node.memory_fraction, 1),
            "packed_gpus": packed.gpus if packed else None,
            "packed_cost_per_hour": packed.cost_per_hour if packed else None,
            "packed_per_million": packed.cost_per_million if packed else None,
            "single_gpus": single.gpus if single else None,
            "single_cost_per_hour": single.cost_per_hour if single else None,
            "single_per_million": single.cost_per_million if single else None,
            "nodes": -(-packed.gpus // plan.fleet.node.gpus_per_node) if packed else None,
            "excluded": plan.result.excluded.get(gpu.type),
        })  # fmt: skip
    return rows


def to_json(
    plan: FleetPlan,
    placement: Sequence[Mapping[str, Any]],
    overlays: Sequence[Mapping[str, Any]],
    verify: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    fleet = plan.fleet
    result = plan.result
    return {
        "fleet": str(fleet.path),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": plan.machine,
        "measured_on": plan.local_type,
        "headroom": fleet.headroom,
        "min_replicas": fleet.min_replicas,
        "objective": fleet.objective,
        "node": {"gpus_per_node": fleet.node.gpus_per_node, "memory_fraction": fleet.node.memory_fraction},
        "models": [
            {
                "name": m.name,
                "rate": m.rate,
                "p99_ms": m.p99_ms,
                "batch_mix": {str(k): v for k, v in m.batch_mix.items()},
            }
            for m in fleet.models
        ],
        "types": type_rows(plan),
        "tuned": {t: {m: v.as_dict() for m, v in by.items()} for t, by in plan.tuned.items()},
        "memory_per_instance": {m: v.as_dict() for m, v in plan.memory.items()},
        "pod_memory_mb": plan.pod_memory_mb,
        "memory_source": plan.memory_source,
        "server_base_mb": plan.base_mb,
        "alone": {m: r.as_dict() for m, r in plan.alone.items()},
        "groups_measured": [r.as_dict() for r in plan.groups.values()],
        "interference": plan.interference(),
        "cheapest": result.cheapest.as_dict() if result.cheapest else None,
        "packed": {t: (p.as_dict() if p else None) for t, p in result.packed.items()},
        "one_model_per_pod": {t: (p.as_dict() if p else None) for t, p in result.single.items()},
        "placement": list(placement),
        "overlays": list(overlays),
        "verify": list(verify),
        "notes": plan.notes,
    }


def _money(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"${value:,.{digits}f}"


def _table(title: str, columns: str) -> list[str]:
    """A section's heading and the header of its one table (``columns``: names joined by `` | ``)."""
    return [f"## {title}", "", f"| {columns} |", "|" + "---|" * len(columns.split(" | "))]


def _fleet_section(data: Mapping[str, Any]) -> list[str]:
    cheapest = data["cheapest"]
    if cheapest is None:
        return ["No fleet serves every model within its budget and memory on the types given.", ""]
    lines = _table(
        f"Cheapest fleet: {replicas_word([g['gpu_type'] for g in cheapest['groups']], cheapest['gpus'])}"
        + (
            f", {_money(cheapest['cost_per_hour'], 2)}/h, {_money(cheapest['cost_per_million'], 4)} per million inferences"
            if cheapest["cost_per_hour"] is not None
            else " (no price: capacity only)"
        ),
        "group | GPU type | models | pods | per pod (req/s) | share of targets per pod | HPA queue target",
    )
    queue = {p["group"]: p.get("hpa_queue_us") for p in data["placement"]}
    for i, g in enumerate(cheapest["groups"], 1):
        rates = ", ".join(f"{m} {r:g}" for m, r in g["per_pod_rps"].items())
        share = f"{g['share']:.3f} ({'measured' if g['measured'] else 'from the tune, one model'})"
        lines.append(
            f"| group-{i} | {g['gpu_type']} | {', '.join(g['models'])} | {g['replicas']} | {rates} | {share} | "
            f"{queue.get(f'group-{i}', '–')} µs |"
        )
    return [*lines, ""]


def _types_section(data: Mapping[str, Any]) -> list[str]:
    word = replicas_word([r["type"] for r in data["types"]])
    lines = _table(
        f"{word[0].upper()}{word[1:]} and cost per type (whole fleet on one type)",
        "type | price/h | usable memory | packed replicas | packed $/h | packed $/M inf. | one model per pod replicas | "
        "$/h | $/M inf. | note",
    )
    for r in data["types"]:
        unit = " CPU pods" if r["type"] == "cpu" else " GPUs"
        packed = f"{r['packed_gpus']}{unit}" if r["packed_gpus"] else "–"
        single = f"{r['single_gpus']}{unit}" if r["single_gpus"] else "–"
        lines.append(
            f"| {r['type']} | {_money(r['price_per_hour'])} | {r['usable_mb']:,.0f} MB | {packed} | "
            f"{_money(r['packed_cost_per_hour'], 2)} | {_money(r['packed_per_million'], 4)} | {single} | "
            f"{_money(r['single_cost_per_hour'], 2)} | {_money(r['single_per_million'], 4)} | {r['excluded'] or ''} |"
        )
    return [*lines, ""]


def _placement_section(data: Mapping[str, Any]) -> list[str]:
    lines = ["## Placement", ""]
    for p in data["placement"]:
        lines.append(
            f"- **{p['group']}** on {p['gpu_type']}, {p['replicas']} pods (HPA {p['replicas']}..{p['max_replicas']}):"
        )
        lines.append(f"  `tritonserver {' '.join(p['args'])}`")
        for model, groups in p["instance_groups"].items():
            lines.append(f"  - `{model}`: {groups}; config `{p['configs'][model]}`")
    return [*lines, ""]


def _models_section(data: Mapping[str, Any]) -> list[str]:
    lines = _table(
        "Models: tuned config, capacity alone, memory",
        "model | target req/s | p99 budget | type | tuned config | tune capacity | open-loop alone | instances | memory per instance",
    )
    alone = data["alone"]
    for m in data["models"]:
        for gpu_type, by in data["tuned"].items():
            t = by.get(m["name"])
            if t is None:
                continue
            mem = data["memory_per_instance"].get(m["name"]) if gpu_type == data["measured_on"] else None
            if mem is not None:
                gpu = (
                    "GPU not measured (CPU)"
                    if mem["gpu_mb_per_instance"] is None
                    else f"GPU {mem['gpu_mb_per_instance']:,.0f} MB"
                )
                memory = f"host RSS {mem['host_rss_mb_per_instance']:,.0f} MB; {gpu}"
            else:
                pod = data["pod_memory_mb"].get(gpu_type, {}).get(m["name"])
                memory = f"{pod / max(t['instances'], 1):,.0f} MB (yours)" if pod is not None else "–"
            opened = alone.get(m["name"]) if gpu_type == data["measured_on"] else None
            open_rps = f"{opened['share'] * m['rate']:.1f} req/s" if opened else "–"
            point = ", ".join(f"{k}={v}" for k, v in t["point"].items()) or "as built"
            lines.append(
                f"| {m['name']} | {m['rate']:g} | {m['p99_ms']:g} ms | {gpu_type} | {point} | {t['capacity_rps']:.1f} req/s "
                f"({t['basis']}, p99 {t['p99_ms']:.1f} ms) | {open_rps} | {t['instances']} | {memory} |"
            )
    return [*lines, ""]


def _coloc_section(data: Mapping[str, Any]) -> list[str]:
    rows = data["interference"]
    if not rows:
        return ["## Co-location", "", "No group of several models was measured.", ""]
    lines = _table(
        "Co-location, measured (open loop at the targets' proportions, client-side p99 per model)",
        "group | model | capacity alone | capacity in the group | in / alone | group's summed use | share predicted / measured",
    )
    for row in rows:
        for i, (model, m) in enumerate(row["models"].items()):
            tail = (
                f"{row['summed_use']:.2f} | {row['predicted_share']:.3f} / {row['share']:.3f}"
                if i == 0
                else " | "
            )
            lines.append(
                f"| {' + '.join(row['group']) if i == 0 else ''} | {model} | {m['alone_rps']:.1f} req/s | "
                f"{m['in_group_rps']:.1f} req/s | {m['ratio'] if m['ratio'] is not None else '–'} | {tail} |"
            )
    lines += [
        "",
        "Summed use: each model's in-group capacity over its capacity alone, added up (1: the models share the "
        "pod as if taking turns; below 1: they slow each other down; above 1: they use what the other leaves idle).",
        "",
    ]
    return lines


def _verify_section(data: Mapping[str, Any]) -> list[str]:
    if not data["verify"]:
        return []
    lines = _table(
        "Checked by a separate mixed load test (Locust, each model paced at its planned per-pod rate)",
        "group | model | planned req/s | measured req/s | ratio | p99 | budget | verdict",
    )
    for check in data["verify"]:
        for model, m in check["measured"].items():
            lines.append(
                f"| {check['group']} | {model} | {check['planned_rps'][model]:g} | {m['rps']:.2f} | {m['ratio']:.3f} | "
                f"{m['p99_ms']} ms | {m['budget_ms']:g} ms | {'ok' if m['ok'] else 'FAILED'} |"
            )
    return [*lines, ""]


def markdown(data: Mapping[str, Any]) -> str:
    lines = [
        f"# Fleet plan: `{data['fleet']}`",
        "",
        f"Measured on {data['machine']} (device type `{data['measured_on']}`), {data['created']}. Headroom "
        f"{data['headroom']:.0%}, at least {data['min_replicas']} pods per group, objective `{data['objective']}`; "
        f"memory per pod at {data['node']['memory_fraction']:.0%} of the type's, {data['node']['gpus_per_node']} GPU(s) per node.",
        "",
    ]
    if data.get("load_average"):
        la = data["load_average"]
        lines += [
            f"Load average of the machine (1 min) when the measurements started: {la['start']:g}, when they ended: "
            f"{la['end']:g}, on {la['cores']} cores (the generators and other processes share them with the server).",
            "",
        ]
    lines += _fleet_section(data) + _types_section(data) + _placement_section(data) + _models_section(data)
    lines += _coloc_section(data) + _verify_section(data)
    if data["overlays"]:
        lines += ["## Deployment", ""]
        for o in data["overlays"]:
            verdict = "ok" if not o["problems"] else f"{len(o['problems'])} problems"
            lines.append(f"- `{o['path']}` ({o['objects']} objects): strict schemas and checklist {verdict}")
        lines.append("")
    if data["notes"]:
        lines += ["## Notes", "", *[f"- {n}" for n in data["notes"]], ""]
    return "\n".join(lines)
