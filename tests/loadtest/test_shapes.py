"""The Locust shapes fed as the locustfile's listeners feed them (:class:`Live`), in a child process
(Locust monkey-patches the process that imports it, so never pytest's)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json
from tritonkit.loadtest.scenarios import make_plan
from tritonkit.loadtest.shapes import shape_for
from tritonkit.loadtest.slo import SLO

plan = make_plan("ramp", 12, 30.0, ramp_steps=3)          # steps of 4, 8, 12 users, 10 s each
Shape = shape_for(plan, SLO(p95_ms=20))
shape = Shape()
clock = [0.0]
shape.get_run_time = lambda: clock[0]
ticks = []
# step 1 breaks the p95 budget by 0.4 ms, which Locust's whole milliseconds would round away
latency = {0: 5, 1: 20.4, 2: 5}
for t in range(0, 40, 5):
    clock[0] = float(t)
    ticks.append(shape.tick())
    step = int(t // 10)
    for _ in range(100):
        Shape.live.add(latency.get(step, 5), False)
steady = shape_for(make_plan("steady", 3, 4.0))()
steady.get_run_time = lambda: clock[0]
clock[0] = 1.0; a = steady.tick(); clock[0] = 4.0; b = steady.tick()
print(json.dumps({"ticks": ticks, "steps": Shape.steps, "steady": [a, b]}))
"""


def test_ramp_shape_measures_steps_and_stops_at_the_knee() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    data = json.loads(result.stdout.strip().splitlines()[-1])
    ticks = [tuple(t) if t else None for t in data["ticks"]]
    # t = 0, 5 → step 0 (4 users); 10, 15 → step 1 (8); step 1 broke the SLO, so 20 stops the ramp.
    assert ticks[:4] == [(4, 4.0), (4, 4.0), (8, 8.0), (8, 8.0)]
    assert ticks[4] is None
    steps = data["steps"]
    assert [s["users"] for s in steps] == [4, 8]
    # a step is measured after its settling period (2 s of 10: from the tick at 5 s on), so the 100
    # requests the listener saw at 0 s belong to no step; its p99 comes with its sample count and interval
    assert steps[0]["breaches"] == [] and steps[0]["requests"] == 100 and steps[0]["settle_s"] == 5.0
    assert steps[0]["samples"] == 100 and steps[0]["p99_ci_ms"] == [5.0, None]
    assert steps[0]["settle_requests"] == 100
    assert steps[1]["breaches"] and "p95 latency 20.40 ms exceeds 20.00" in steps[1]["breaches"][0]
    assert data["steady"] == [[3, 3.0], None]
