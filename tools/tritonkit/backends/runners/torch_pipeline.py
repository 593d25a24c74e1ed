"""tritonkit GPU runner's helper: the pipelined execute, the host-time statistics of executes and
the profiler of executes (diagnosis).

Copied by the build beside ``model.py`` (``backends/runners/torch_runner.py``) into every torch-runner
version; the runner imports it from its own folder (the stub puts the version folder on ``sys.path``).
Self-contained like the runner: it imports only the standard library and, inside the stub,
``triton_python_backend_utils``.

Pipelined mode (config parameter ``pipeline: on``): ``execute`` copies the batch's inputs into one of
``pipeline_depth`` staging slots, keeps each request's response sender and returns None (the python
backend's default mode with a response sender, since 24.06): the model instance is free for Triton's
next batch at once. One worker thread per instance then copies up, replays the graph, copies down and
sends each request's response with the FINAL flag (``pipeline_senders`` threads, default 1, overlap
those sends). While it builds and sends one batch's answers (a round trip to the server per request,
with the GIL released) the GPU already runs the next batch:
launches are ordered on the worker's stream, each slot has its own host buffers. A full set of slots
blocks ``execute``, so Triton's queue, not the runner, holds the backlog.

Every request gets exactly one final response: a batch that fails is retried request by request and
each request that still fails gets its error; a batch ``execute`` cannot stage (inputs in GPU memory,
a missing input) waits until the worker is idle and runs the runner's general path synchronously;
``close`` (the model's ``finalize``) answers every queued batch before it returns. Triton's own
compute-infer statistic then measures ``execute``, the hand-over, and not the GPU work.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

try:  # absent outside the stub: tests import this module alone
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised only inside the stub
    pb_utils = None

SYNC_PHASES = ("gather", "launch", "respond", "wait")
PIPELINE_PHASES = ("gather", "queued", "launch", "wait", "respond")


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
            "pipelined": self.phases == PIPELINE_PHASES,
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


@dataclass
class Job:
    """One batch handed to the worker: its staging slot, staged inputs, rows per request and senders."""

    slot: int
    staged: list[Any]
    sizes: list[int]
    rows: int
    senders: list[Any]
    marks: list[float]
    outs: list[Any] = field(default_factory=list)
    event: Any = None
    error: BaseException | None = None


_STOP = object()


class Pipeline:
    """The worker of one model instance. ``runner`` is the runner's ``TritonPythonModel`` (its
    ``gather``, ``answers``, ``engine``, ``stats``, ``padded``, ``error_response`` and general path)."""

    def __init__(self, runner: Any, depth: int, senders: int = 1) -> None:
        for key, value in (("pipeline_depth", depth), ("pipeline_senders", senders)):
            if value < 1:
                raise ValueError(f"parameter `{key}` must be an integer >= 1; got {value}")
        self.runner, self.depth = runner, depth
        # Each send is a round trip to the server (the GIL released meanwhile): several threads
        # overlap them; one keeps the answers' order.
        self.senders = ThreadPoolExecutor(senders, "tritonkit-send") if senders > 1 else None
        self.sending = senders
        self.free: queue.Queue[int] = queue.Queue()
        for slot in range(depth):
            self.free.put(slot)
        self.jobs: queue.Queue[Any] = queue.Queue()
        self.closed = False
        self.thread = threading.Thread(
            target=self._work, name=f"tritonkit-pipeline-{runner.name}", daemon=True
        )
        self.thread.start()

    def describe(self) -> str:
        return f"depth {self.depth}, senders {self.sending}"

    # --- execute's side ------------------------------------------------------------------------

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Stage the batch and hand it over (None: the worker answers), or answer it here through the
        general path (a list of responses) when it cannot be staged."""
        marks = [time.perf_counter()]
        slot = self.free.get()  # backpressure: every slot is held by a batch not yet answered
        try:
            gathered = self.runner.gather(requests, slot)
        except Exception:  # the general path answers each request, errors included
            gathered = None
        if gathered is None:
            self.free.put(slot)
            answered: list[Any] = self.synchronously(lambda: self.runner.execute_general(requests))
            return answered
        staged, sizes, rows = gathered
        senders = [request.get_response_sender() for request in requests]
        marks.append(time.perf_counter())
        self.jobs.put(Job(slot, staged, sizes, rows, senders, marks))
        return None

    def synchronously(self, work: Any) -> Any:
        """``work()`` once every handed-over batch is answered (it holds every slot meanwhile, so the
        engine's graphs and buffers are the caller's alone)."""
        held = [self.free.get() for _ in range(self.depth)]
        try:
            return work()
        finally:
            for slot in held:
                self.free.put(slot)

    def close(self, timeout: float = 120.0) -> None:
        """Answer every batch handed over, then stop the worker (the model's ``finalize``)."""
        if self.closed:
            return
        self.closed = True
        self.jobs.put(_STOP)
        self.thread.join(timeout)
        if self.senders is not None:
            self.senders.shutdown(wait=True)
        while True:  # only if the worker died or hung: whatever is left still gets an answer
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, Job):
                self._fail_all(job, RuntimeError("the model instance stopped before running this request"))

    # --- the worker ----------------------------------------------------------------------------

    def _work(self) -> None:
        engine = self.runner.engine
        if engine.device.type == "cuda":
            engine.torch.cuda.set_device(engine.device)  # the current device is per thread
        pending: Job | None = None
        while True:
            job = self.jobs.get() if pending is None else self._next()
            if job is not None and job is not _STOP:
                self._launch(job)
            if pending is not None:  # the next batch (if any) already runs on the GPU meanwhile
                self._finish(pending)
            if job is _STOP:
                return
            pending = job

    def _next(self) -> Any:
        try:
            return self.jobs.get_nowait()
        except queue.Empty:
            return None

    def _launch(self, job: Job) -> None:
        job.marks.append(time.perf_counter())
        try:
            job.outs = self.runner.engine.launch(job.staged, job.rows, slot=job.slot)
            engine = self.runner.engine
            if engine.device.type == "cuda":
                job.event = engine.torch.cuda.Event()
                job.event.record()
        except Exception as exc:
            job.error = exc
        job.marks.append(time.perf_counter())

    def _finish(self, job: Job) -> None:
        """Wait for the job's GPU work, send each request its answer, free its slot."""
        try:
            try:
                if job.error is None and job.event is not None:
                    job.event.synchronize()
                job.marks.append(time.perf_counter())
                if job.error is None:
                    responses = self.runner.answers(job.outs, job.sizes)
                    pairs = list(zip(job.senders, responses, strict=True))
                    if self.senders is None:
                        for sender, response in pairs:
                            self._send(sender, response)
                    else:
                        list(self.senders.map(lambda pair: self._send(*pair), pairs))
                else:
                    self._one_by_one(job)
            except Exception as exc:  # a bug here must not lose requests
                self._fail_all(job, exc)
            job.marks.append(time.perf_counter())
            self.runner.stats.add(len(job.senders), job.rows, self.runner.padded(job.rows), job.marks)
        finally:
            self.free.put(job.slot)

    def _one_by_one(self, job: Job) -> None:
        """The failed batch again, one request at a time: one bad request fails only itself."""
        engine, start = self.runner.engine, 0
        for sender, size in zip(job.senders, job.sizes, strict=True):
            rows = slice(start, start + size)
            start += size
            try:
                outs = engine.launch([t[rows] for t in job.staged], size, slot=job.slot)
                engine.wait()
                response = self.runner.answers(outs, [size])[0]
            except Exception as exc:
                response = self.runner.error_response(exc)
            self._send(sender, response)

    def _fail_all(self, job: Job, exc: BaseException) -> None:
        for sender in job.senders:
            self._send(sender, self.runner.error_response(exc))

    def _send(self, sender: Any, response: Any) -> None:
        """Send ``response`` as the request's final one; if that fails before the sender closed, send
        the failure instead (a sender already closed refuses a second answer: nothing is lost)."""
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            sender.send(response, flags=final)
        except Exception as exc:
            try:
                sender.send(self.runner.error_response(exc), flags=final)
            except Exception as again:
                log(
                    f"tritonkit torch_runner: {self.runner.name}: a response could not be sent: {exc}; {again}"
                )
