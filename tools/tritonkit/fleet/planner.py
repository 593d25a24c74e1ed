"""The fleet plan as a function: tuned configs, memory and shares measured, groups packed, measured again.

Owns :class:`PlanOptions`, :class:`FleetPlan` and :func:`plan_fleet`, in this order: each model's tuned
config and capacity per GPU type from its ``tune.json`` (or a tune run now on this machine's type:
``tune=True``, measured by the generator ``tune_overrides`` names); on this machine's type, one explicit-mode server loads each model alone with its tuned
config, finds the share of its target one pod carries open loop within its budget, and reads its memory
per instance (host RSS of its stubs; GPU memory where ``nvidia-smi`` is); a model that fits no type's
memory is an error here, before anything is written. Then packing and measuring alternate: the best
packing (:func:`tritonkit.fleet.packing.pack`) may lean on groups predicted from their parts; each such
group is served together and its share measured, and the packing is made again, until the best one
stands on measured groups only (at most ``max_rounds`` rounds; a group still unmeasured then is left
out). Groups on types not present here are one model per pod: their co-location cannot be measured here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from tritonkit.errors import TritonKitError
from tritonkit.fleet.capacity import Tuned, read_tuned
from tritonkit.fleet.colocate import ServerSession, ShareResult
from tritonkit.fleet.devices import CPU, local_type
from tritonkit.fleet.memory import Memory, gpu_used_mb, measure_model, server_memory
from tritonkit.fleet.openloop import GroupLevel, MeasureSettings, Stream
from tritonkit.fleet.packing import Demand, Device, PackResult, Share, pack, predicted_share
from tritonkit.fleet.spec import Fleet, ModelSpec
from tritonkit.machine import description
from tritonkit.tune.tuner import TuneOptions, tune

__all__ = ["FleetPlan", "PlanOptions", "plan_fleet"]


@dataclasses.dataclass
class PlanOptions:
    #: tune (model, this machine's type) pairs the fleet file gives no tune report for
    tune: bool = False
    #: TuneOptions fields for those tunes (grid, windows, search)
    tune_overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    settings: MeasureSettings = MeasureSettings()  # noqa: RUF009 - frozen, never mutated
    #: keywords of :func:`tritonkit.fleet.colocate.find_share`
    search: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    max_group: int = 4
    max_rounds: int = 6
    #: this machine's device type (None: detected)
    local_type: str | None = None
    stream: IO[str] | None = None


@dataclasses.dataclass
class FleetPlan:
    fleet: Fleet
    local_type: str
    machine: str
    tuned: dict[str, dict[str, Tuned]]
    memory: dict[str, Memory]
    pod_memory_mb: dict[str, dict[str, float]]
    memory_source: dict[str, str]
    base_mb: dict[str, float]
    alone: dict[str, ShareResult]
    groups: dict[tuple[str, ...], ShareResult]
    result: PackResult
    notes: list[str]

    def capacity_alone(self, gpu_type: str, model: str) -> float:
        """Requests/s one pod of ``gpu_type`` sustains for ``model`` alone within its budget (open loop
        where measured here, else the tune's)."""
        if gpu_type == self.local_type and model in self.alone:
            return self.alone[model].share * self.fleet.model(model).rate
        return self.tuned[gpu_type][model].capacity_rps

    def interference(self) -> list[dict[str, Any]]:
        """Per measured group: each model's capacity alone and in the group, and the group's summed use."""
        rows = []
        for models, result in sorted(self.groups.items()):
            entry: dict[str, Any] = {"group": list(models), "share": round(result.share, 4), "models": {}}
            use = 0.0
            for name in models:
                rate = self.fleet.model(name).rate
                alone = self.capacity_alone(self.local_type, name)
                inside = result.share * rate
                use += inside / alone if alone else 0.0
                entry["models"][name] = {
                    "alone_rps": round(alone, 3),
                    "in_group_rps": round(inside, 3),
                    "ratio": round(inside / alone, 4) if alone else None,
                }
            entry["summed_use"] = round(use, 4)
            entry["predicted_share"] = round(result.predicted, 4)
            rows.append(entry)
        return rows


def _say(options: PlanOptions, text: str) -> None:
    print(f"fleet: {text}", file=options.stream or sys.stderr, flush=True)


def _tuned(fleet: Fleet, options: PlanOptions, local: str, work: Path) -> dict[str, dict[str, Tuned]]:
    out: dict[str, dict[str, Tuned]] = {g.type: {} for g in fleet.gpus}
    for spec in fleet.models:
        for gpu in fleet.gpus:
            source = spec.tune.get(gpu.type)
            if source is None and gpu.type == local and options.tune:
                source = _tune_now(spec, gpu.type, options, work)
            if source is not None:
                out[gpu.type][spec.name] = read_tuned(spec.name, gpu.type, source, spec.p99_ms)
        if not any(spec.name in by_model for by_model in out.values()):
            raise TritonKitError(
                f"model `{spec.name}`: no tune report for any GPU type of the fleet; expected "
                f"models[].tune.<type> ({', '.join(g.type for g in fleet.gpus)}), or --tune to tune it now on "
                f"this machine ({local})"
            )
    return out


def _tune_now(spec: ModelSpec, gpu_type: str, options: PlanOptions, work: Path) -> Path:
    report = work / "tune" / gpu_type / spec.name
    _say(
        options, f"tuning {spec.name} on {gpu_type} (p99 <= {spec.p99_ms:g} ms, batch {spec.dominant_batch})"
    )
    settings: dict[str, Any] = {"search": "quick", "plots": False, **options.tune_overrides}
    tune(
        TuneOptions(
            spec.name, spec.p99_ms, report, repo=spec.repository, write="none",
            batch_size=spec.dominant_batch, stream=options.stream, **settings,
        )
    )  # fmt: skip
    return report


def _streams(fleet: Fleet, models: tuple[str, ...]) -> list[Stream]:
    return [Stream(m, fleet.model(m).rate, fleet.model(m).batch_mix, fleet.model(m).p99_ms) for m in models]


def _level_line(level: GroupLevel) -> str:
    parts = [
        f"{name} {r.throughput:.1f}/{r.offered_rps:.1f} req/s p99 {r.p99_ms:.1f} ms"
        + ("" if r.within else " (over)")
        for name, r in level.results.items()
    ]
    flag = "ok" if level.ok else ("generator-limited" if level.generator_limited else "breaks a budget")
    return f"  share {level.share:.3f}: " + "; ".join(parts) + f": {flag}"


def _measure_alone(
    fleet: Fleet, tuned: Mapping[str, Tuned], session: ServerSession, options: PlanOptions, local: str
) -> tuple[dict[str, ShareResult], dict[str, Memory]]:
    alone: dict[str, ShareResult] = {}
    memory: dict[str, Memory] = {}
    for name, t in tuned.items():
        spec = fleet.model(name)
        session.serve([])  # nothing loaded: the GPU's used memory before this model is its baseline
        before = gpu_used_mb()
        start = max(1e-3, 0.7 * t.capacity_rps / spec.rate)
        _say(options, f"{name} alone ({t.instances} instance(s), tuned capacity {t.capacity_rps:.1f} req/s)")
        result = session.measure_group(
            _streams(fleet, (name,)),
            start,
            on_level=lambda lv: _say(options, _level_line(lv)),
            **options.search,
        )
        assert session.server is not None
        memory[name] = measure_model(session.server, name, before)
        if result.share <= 0:
            raise TritonKitError(
                f"model `{name}` on {local}: no open-loop rate held p99 <= {spec.p99_ms:g} ms "
                f"(lowest tried {min(lv.share for lv in result.levels) * spec.rate:.2f} req/s); expected a budget "
                "its tuned config meets"
            )
        alone[name] = result
    return alone, memory


def _pod_memory(
    fleet: Fleet, tuned: dict[str, dict[str, Tuned]], memory: Mapping[str, Memory], local: str
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    pod: dict[str, dict[str, float]] = {g.type: {} for g in fleet.gpus}
    source: dict[str, str] = {}
    for gpu in fleet.gpus:
        for name, t in tuned[gpu.type].items():
            spec = fleet.model(name)
            if gpu.type in spec.memory_mb:
                pod[gpu.type][name] = spec.memory_mb[gpu.type] * t.instances
                source[f"{gpu.type}/{name}"] = "the fleet file's memory_mb (yours)"
            elif gpu.type == local and name in memory:
                m = memory[name]
                per = m.host_rss_mb if local == CPU else (m.gpu_mb or 0.0)
                pod[gpu.type][name] = per * t.instances
                source[f"{gpu.type}/{name}"] = (
                    "host RSS of its stubs" if local == CPU else f"GPU memory ({m.how_gpu})"
                )
    return pod, source


def _check_fit(fleet: Fleet, pod: Mapping[str, Mapping[str, float]], base: Mapping[str, float]) -> None:
    for spec in fleet.models:
        needs = {g.type: pod[g.type][spec.name] for g in fleet.gpus if spec.name in pod[g.type]}
        if not needs:
            raise TritonKitError(
                f"model `{spec.name}`: no memory per instance for any GPU type it has a tune for (measured only on "
                "this machine's type); expected models[].memory_mb.<type> with your figure"
            )
        fits = [
            t
            for t, mb in needs.items()
            if mb + base.get(t, 0.0) <= fleet.gpu(t).memory_gb * 1024 * fleet.node.memory_fraction
        ]
        if not fits:
            detail = ", ".join(
                f"{t} {needs[t] + base.get(t, 0.0):,.0f} MB > {fleet.gpu(t).memory_gb:g} GB x {fleet.node.memory_fraction:g}"
                for t in needs
            )
            raise TritonKitError(
                f"model `{spec.name}` fits no GPU type's memory ({detail}); expected a type with more memory, a "
                "higher node.memory_fraction, or fewer instances"
            )


def _devices(plan_state: dict[str, Any], fleet: Fleet, local: str) -> list[Device]:
    devices = []
    tuned, pod, base, alone = plan_state["tuned"], plan_state["pod"], plan_state["base"], plan_state["alone"]
    for gpu in fleet.gpus:
        demands = {}
        for name, t in tuned[gpu.type].items():
            if name not in pod[gpu.type]:
                continue
            rate = fleet.model(name).rate
            capacity = alone[name].share * rate if gpu.type == local and name in alone else t.capacity_rps
            demands[name] = Demand(name, rate, pod[gpu.type][name], capacity)
        devices.append(
            Device(
                gpu.type,
                demands,
                gpu.memory_gb * 1024 * fleet.node.memory_fraction,
                base.get(gpu.type, 0.0),
                gpu.price_per_hour,
                gpu.type == local,
            )
        )
    return devices


def plan_fleet(fleet: Fleet, options: PlanOptions, work: Path) -> FleetPlan:
    """Measure and pack ``fleet``; ``work`` holds what a tune run now writes (the caller's staging folder)."""
    local = options.local_type or local_type()
    notes: list[str] = []
    tuned = _tuned(fleet, options, local, work)
    if options.tune and options.tune_overrides.get("generator", "tritonkit") != "tritonkit":
        notes.append(
            f"the tunes run now measured with {options.tune_overrides['generator']} (their tune.json says which "
            "build); the open-loop levels alone and together with tritonkit's generator"
        )
    memory: dict[str, Memory] = {}
    alone: dict[str, ShareResult] = {}
    groups: dict[tuple[str, ...], ShareResult] = {}
    base: dict[str, float] = {}
    here = tuned.get(local, {})
    if local not in tuned:
        notes.append(
            f"this machine ({local}) is not one of the fleet's GPU types: nothing was measured together"
        )
    state: dict[str, Any] = {"tuned": tuned, "alone": alone, "base": base}
    configs = {name: t.config for name, t in here.items()}
    session = ServerSession(
        {m.name: m.repository / m.name for m in fleet.models if m.name in here}, configs, options.settings
    )
    with contextlib.ExitStack() as stack:
        if here:
            stack.enter_context(session)
        if here and session.server is not None:
            host, gpu_mb = server_memory(session.server)
            base[local] = host if local == CPU else (gpu_mb or 0.0)
            alone, memory = _measure_alone(fleet, here, session, options, local)
            state["alone"] = alone
        pod, source = _pod_memory(fleet, tuned, memory, local)
        state["pod"] = pod
        _check_fit(fleet, pod, base)
        devices = _devices(state, fleet, local)

        def shares(gpu_type: str, models: tuple[str, ...]) -> Share | None:
            if gpu_type != local:
                return None
            if len(models) == 1 and models[0] in alone:
                return Share(alone[models[0]].share, True)
            found = groups.get(tuple(sorted(models)))
            return Share(found.share, True) if found is not None else None

        def packed(share: Callable[[str, tuple[str, ...]], Share | None]) -> PackResult:
            return pack(
                devices,
                share,
                headroom=fleet.headroom,
                min_replicas=fleet.min_replicas,
                objective=fleet.objective,
                max_group=options.max_group,
            )

        result = packed(shares)
        for round_ in range(options.max_rounds):
            todo = _unmeasured(result, local)
            if not todo or not here:
                break
            for models in todo:
                groups[models] = _together(fleet, models, devices, local, session, options, round_)
            result = packed(shares)
        left = _unmeasured(result, local)
        if left:
            notes.append(f"left out after {options.max_rounds} rounds, not measured: {left}")
            forbidden = set(left)
            result = packed(lambda t, g: Share(0.0, True) if tuple(sorted(g)) in forbidden else shares(t, g))
    return FleetPlan(
        fleet, local, description(), tuned, memory, pod, source, base, alone, groups, result, notes
    )


def _together(
    fleet: Fleet,
    models: tuple[str, ...],
    devices: list[Device],
    local: str,
    session: ServerSession,
    options: PlanOptions,
    round_: int,
) -> ShareResult:
    """One group of models measured served together on this machine, from the share its demands predict."""
    demands = [d for dev in devices if dev.name == local for d in dev.demands.values() if d.model in models]
    predicted = predicted_share(demands)
    _say(options, f"round {round_ + 1}: {' + '.join(models)} together (predicted share {predicted:.3f})")
    return session.measure_group(
        _streams(fleet, models),
        predicted,
        on_level=lambda lv: _say(options, _level_line(lv)),
        **options.search,
    )


def _unmeasured(result: PackResult, local: str) -> list[tuple[str, ...]]:
    packings = [result.packed.get(local), result.cheapest]
    found = {
        tuple(sorted(g.models))
        for p in packings
        if p is not None
        for g in p.unmeasured
        if g.gpu_type == local
    }
    return sorted(found)
