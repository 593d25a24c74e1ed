"""tritonkit torch runner's helper: the host-time statistics of executes and the profiler of executes
(diagnosis), and the runner's log line.

Copied by the build beside ``model.py`` (``backends/runners/torch_runner.py``) into every torch-runner
version; the runner imports it from its own folder (the stub puts the version folder on ``sys.path``)
and counts its synchronous executes and its shape-bucketed ones (``gpu_requests.BucketedPath``'s
phases) in a :class:`HostStats` each. Self-contained like the runner: it imports only the standard library and, inside the stub, ``triton_python_backend_utils``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any

try:  # absent outside the stub: tests import this module alone
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised only inside the stub
    pb_utils = None

#: the spans of a synchronous execute, between the marks it passes to :meth:`HostStats.add`
SYNC_PHASES = ("gather", "launch", "respond", "wait")


def log(text: str) -> None:
    """A line in the server log through the stub's logger (outside the stub: printed)."""
    logger = getattr(pb_utils, "Logger", None)
    logger.log_info(text) if logger is not None else print(text, flush=True)


class HostStats:
    """Where an instance's execute time goes (seconds summed since the last report), logged through
    the stub's logger every ``interval`` seconds (0: never). ``phases`` name the spans between the
    marks an execute passes to :meth:`add`."""

    def __init__(self, name: str, interval: float, phases: tuple[str, ...] = SYNC_PHASES) -> None:
        self.name, self.interval, self.phases = name, interval, phases
        self.reset(time.perf_counter())

    def reset(self, now: float) -> None:
        self.since = now
        self.executes = self.requests = self.rows = self.padded = 0
        self.seconds = dict.fromkeys(("total", *self.phases), 0.0)

    def add(self, requests: int, rows: int, padded: int, marks: list[float]) -> None:
        self.executes += 1
        self.requests += requests
        self.rows += rows
        self.padded += padded
        for phase, (a, b) in zip(self.phases, itertools.pairwise(marks), strict=False):
            self.seconds[phase] += b - a
        self.seconds["total"] += marks[-1] - marks[0]
        if self.interval > 0 and marks[-1] - self.since >= self.interval:
            self.report(marks[-1])

    def line(self, now: float) -> str:
        per = {k: round(1e6 * v / max(self.executes, 1), 1) for k, v in self.seconds.items()}
        busy = self.seconds["total"] / max(now - self.since, 1e-9)
        return "tritonkit torch_runner stats " + json.dumps({
            "model": self.name, "pid": os.getpid(), "window_s": round(now - self.since, 3),
            "executes": self.executes, "requests": self.requests, "rows": self.rows,
            "padded_rows": self.padded, "busy_share": round(busy, 4), "us_per_execute": per,
        }, sort_keys=True)  # fmt: skip

    def report(self, now: float) -> None:
        if self.executes:
            log(self.line(now))
        self.reset(now)


def profile_step(runner: Any) -> None:
    """torch.profiler over the runner's executes [skip, skip + count): a trace and a table in its
    ``profile_dir`` (diagnosis; called at the start of every execute)."""
    torch = runner.torch
    if runner.executes == runner.profile_skip + 1 and runner.profiler is None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if runner.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        runner.profiler = torch.profiler.profile(activities=activities)
        runner.profiler.__enter__()
    elif runner.executes == runner.profile_skip + runner.profile_count + 1 and runner.profiler is not None:
        runner.engine.wait()
        runner.profiler.__exit__(None, None, None)
        os.makedirs(runner.profile_dir, exist_ok=True)
        stem = os.path.join(runner.profile_dir, f"{runner.name}-{os.getpid()}")
        runner.profiler.export_chrome_trace(stem + ".trace.json")
        with open(stem + ".txt", "w", encoding="utf-8") as handle:
            table = runner.profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
            handle.write(f"{runner.profile_count} executes\n{table}\n")
        runner.profiler = None
        runner.profile_dir = ""
