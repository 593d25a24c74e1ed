"""The plan checked by a separate load test: each group served alone, its models paced at their planned rates.

Owns :func:`verify_group` and :class:`GroupCheck`. A group's pod is rebuilt from scratch: a fresh
repository folder holding only the group's models (their versions linked, their tuned
``config.pbtxt`` written through :mod:`tritonkit.config`), served by ``tritonkit loadtest``'s own
embedded server (every model loaded at start, as the pod's ``--load-model`` list does), and loaded by
its Locust users, not by the planner's generator: each model paced at its planned per-pod rate
(:class:`~tritonkit.loadtest.options.ModelTarget` ``rate``/``users``), every answer validated. The
group passes when every model's client-side p99 is within its budget, none failed, and each model's
throughput is within ``tolerance`` of its planned rate.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonkit.client import Client
from tritonkit.config import ModelConfig
from tritonkit.fleet.packing import Group
from tritonkit.fleet.spec import Fleet
from tritonkit.loadtest.options import LoadTestOptions, ModelTarget
from tritonkit.loadtest.run import run as run_loadtest
from tritonkit.loadtest.slo import SLO
from tritonkit.measure.payloads import fetch_model_spec, make_payloads
from tritonkit.repository.views import link_view
from tritonkit.serve.endpoint import Endpoint
from tritonkit.serve.sources import trusting

__all__ = ["WARM_UP", "GroupCheck", "paced_users", "verify_group"]

#: requests per model and batch size sent before the load test starts
WARM_UP = 5


@dataclasses.dataclass
class GroupCheck:
    models: tuple[str, ...]
    gpu_type: str
    planned: dict[str, float]
    measured: dict[str, dict[str, Any]]
    tolerance: float
    seconds: float
    report_dir: str

    @property
    def ok(self) -> bool:
        return all(m["ok"] for m in self.measured.values()) and len(self.measured) == len(self.planned)

    def as_dict(self) -> dict[str, Any]:
        return {
            "models": list(self.models),
            "gpu_type": self.gpu_type,
            "ok": self.ok,
            "tolerance": self.tolerance,
            "seconds": self.seconds,
            "report_dir": self.report_dir,
            "planned_rps": {k: round(v, 3) for k, v in self.planned.items()},
            "measured": self.measured,
        }


def paced_users(rate: float, budget_ms: float) -> int:
    """Users that pace ``rate`` requests/s with each one's interval at least 4 budgets long (answers
    that take the whole budget still leave it on schedule), and at least 2 s of spacing at most."""
    interval = max(4 * budget_ms / 1000.0, 0.05)
    return max(1, min(256, math.ceil(rate * interval)))


def _warm_up(endpoints: Endpoint, fleet: Fleet, group: Group) -> None:
    """A few requests per model and batch size before the load: the first executions of a fresh server
    (stubs importing, allocators growing) are not the steady state the plan is about."""
    with Client(endpoints.http, "http", timeout=60, headers=endpoints.headers or None) as client:
        for name in group.models:
            spec = fleet.model(name)
            payloads = make_payloads(fetch_model_spec(endpoints.http, name), spec.batch_mix, per_batch=1)
            for payload in payloads.payloads:
                for _ in range(WARM_UP):
                    client.infer(name, payload.inputs)


def verify_group(
    fleet: Fleet,
    group: Group,
    configs: Mapping[str, ModelConfig],
    report_dir: Path,
    *,
    seconds: float = 30.0,
    tolerance: float = 0.15,
    protocol: str = "http",
) -> GroupCheck:
    """Serve ``group`` alone and load it with Locust at its planned per-pod rates; compare with the plan."""
    targets = []
    for name in group.models:
        spec = fleet.model(name)
        rate = group.per_pod_rps[name]
        targets.append(
            ModelTarget(name, batch_mix=dict(spec.batch_mix), rate=rate, users=paced_users(rate, spec.p99_ms))
        )
    with tempfile.TemporaryDirectory(prefix="tritonkit-fleet-verify-") as tmp:
        sources = {name: fleet.model(name).repository / name for name in group.models}
        repo = link_view(Path(tmp), sources, {name: configs[name] for name in group.models})
        options = LoadTestOptions(
            models=targets,
            report_dir=report_dir,
            protocol=protocol,
            scenario="steady",
            users=sum(t.users or 0 for t in targets),
            duration=seconds,
            slo=SLO(),
            repo=repo,
            plots=False,
            progress=False,
        )
        with trusting(sources.values()):  # the view links the models' own version folders
            summary = run_loadtest(options, on_ready=lambda endpoints: _warm_up(endpoints, fleet, group))
    measured: dict[str, dict[str, Any]] = {}
    for entry in summary["models"].values():
        name = entry["model"]
        planned = group.per_pod_rps[name]
        budget = fleet.model(name).p99_ms
        rps = float(entry["rps"])
        p99 = entry["p99_ms"]
        ratio = rps / planned if planned else 0.0
        measured[name] = {
            "rps": rps,
            "ratio": round(ratio, 4),
            "p99_ms": p99,
            "budget_ms": budget,
            "failures": entry["failures"],
            "users": next(t.users for t in targets if t.name == name),
            "ok": p99 is not None and p99 <= budget and not entry["failures"] and abs(ratio - 1) <= tolerance,
        }
    return GroupCheck(
        group.models, group.gpu_type, dict(group.per_pod_rps), measured, tolerance, seconds, str(report_dir)
    )
