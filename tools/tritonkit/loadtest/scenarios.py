"""Load profiles as pure functions of time: ``steady``, ``ramp``, ``spike``, ``soak``.

Each plan answers "how many users, spawned how fast, at ``t`` seconds into the run" and ``None``
when the run is over. Locust's :class:`~locust.LoadTestShape` wrappers live in :mod:`.shapes`;
keeping the arithmetic here makes it testable without Locust and shared by the orchestration
(which needs a plan's length for its progress line). Durations are parsed here too.
"""

from __future__ import annotations

import dataclasses
import math
import re

from tritonkit.errors import LoadTestError

__all__ = [
    "SCENARIOS",
    "Plan",
    "Ramp",
    "Spike",
    "Steady",
    "make_plan",
    "parse_duration",
]

SCENARIOS = ("steady", "ramp", "spike", "soak")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

#: (users, spawn rate per second)
Tick = tuple[int, float]


def parse_duration(text: str | float) -> float:
    """``"90"``, ``"90s"``, ``"5m"``, ``"1h"`` → seconds (> 0); one line naming expected vs given."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if not match:
            raise LoadTestError(
                f"duration {text!r}: expected a number with an optional unit ms|s|m|h, like 60s or 5m"
            )
        seconds = float(match[1]) * _UNITS[match[2]]
    if not seconds > 0 or math.isinf(seconds):
        raise LoadTestError(f"duration {text!r}: expected a positive, finite time")
    return seconds


class Plan:
    """Base: a plan has a name, a nominal length and a tick function."""

    name = "plan"
    duration: float

    def tick(self, t: float) -> Tick | None:
        raise NotImplementedError

    def users_at(self, t: float) -> int:
        tick = self.tick(t)
        return tick[0] if tick else 0


@dataclasses.dataclass
class Steady(Plan):
    """``users`` for ``duration`` seconds (all spawned within the first second by default)."""

    users: int
    duration: float
    spawn_rate: float = 0.0
    name: str = "steady"

    def tick(self, t: float) -> Tick | None:
        if t >= self.duration:
            return None
        return self.users, self.spawn_rate or float(self.users)


@dataclasses.dataclass
class Ramp(Plan):
    """Steps of ``step_users`` every ``step_duration`` s, from ``start_users`` up to ``max_users``.

    The run stops after the last step, or earlier: the Locust shape calls :meth:`breach` at the
    end of a step whose latency broke the SLO, and the ramp ends there (the knee is the step
    before).
    """

    start_users: int
    step_users: int
    step_duration: float
    max_users: int
    name: str = "ramp"
    stopped_after: int | None = None

    @property
    def steps(self) -> int:
        return max(1, math.ceil((self.max_users - self.start_users) / max(1, self.step_users)) + 1)

    @property
    def duration(self) -> float:  # type: ignore[override]
        return self.steps * self.step_duration

    def step_at(self, t: float) -> int:
        return int(t // self.step_duration)

    def step_users_at(self, step: int) -> int:
        return min(self.max_users, self.start_users + step * self.step_users)

    def breach(self, step: int) -> None:
        """Stop at the end of ``step`` (the SLO broke during it)."""
        if self.stopped_after is None or step < self.stopped_after:
            self.stopped_after = step

    def tick(self, t: float) -> Tick | None:
        step = self.step_at(t)
        if step >= self.steps or (self.stopped_after is not None and step > self.stopped_after):
            return None
        users = self.step_users_at(step)
        return users, float(max(users, 1))


@dataclasses.dataclass
class Spike(Plan):
    """``base_users``, jumping to ``peak_users`` for ``spike_duration`` s at ``spike_at`` s."""

    base_users: int
    peak_users: int
    duration: float
    spike_at: float
    spike_duration: float
    name: str = "spike"

    def tick(self, t: float) -> Tick | None:
        if t >= self.duration:
            return None
        if self.spike_at <= t < self.spike_at + self.spike_duration:
            return self.peak_users, float(self.peak_users)  # as fast as Locust can: that is the spike
        return self.base_users, float(self.peak_users)


def make_plan(scenario: str, users: int, duration: float, *, ramp_steps: int = 5) -> Plan:
    """The plan of a named scenario for ``users`` (the peak) over ``duration`` seconds."""
    if scenario not in SCENARIOS:
        raise LoadTestError(f"scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
    if users < 1:
        raise LoadTestError(f"users {users}: expected at least 1")
    if scenario == "steady":
        return Steady(users, duration)
    if scenario == "soak":
        # Long and flat; users arrive over a tenth of the run so the start is not a spike.
        return Steady(users, duration, spawn_rate=max(1.0, users / max(1.0, duration / 10)), name="soak")
    if scenario == "spike":
        base = max(1, users // 4)
        return Spike(base, users, duration, spike_at=duration * 0.4, spike_duration=max(1.0, duration * 0.2))
    step_users = max(1, math.ceil(users / max(1, min(ramp_steps, users))))
    steps = math.ceil(users / step_users)
    return Ramp(
        start_users=step_users, step_users=step_users, step_duration=duration / steps, max_users=users
    )
