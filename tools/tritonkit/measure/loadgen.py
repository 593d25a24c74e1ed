"""The load generator: tritonkit's :class:`~tritonkit.client.AsyncClient` on an asyncio loop, cut into windows.

Why this and not Locust: Locust's statistics keep whole milliseconds (a 0.4 ms model shows p99 "1 ms"),
and its gevent users are the generator whose saturation this module must detect, not hide. One asyncio
loop with ``AsyncClient`` sends HTTP or gRPC (or through system/CUDA shared memory) at a few tens of µs of
CPU per request, times every request with ``perf_counter_ns``, and measures its own CPU time; where one
core is not enough, worker processes each run a loop with a share of the load. Requests are encoded once
and sent as encoded on the loop's own connections (:mod:`tritonkit.measure.sender`).

A load level is a concurrency (closed loop: that many requests always in flight) or a request rate (open
loop, constant spacing or Poisson arrivals; a send that starts more than ``late_us`` after its slot is
*late*, and one that finds ``max_in_flight`` requests outstanding is *dropped*: both say the generator,
not the server, set the pace). Windows end by time (``window_s``) or by completions (``window_count``).
A request counts in the window in which it completes; failures are counted apart, never as throughput.

:class:`LoadGenerator` hides where the loops run: one loop, the load loop of this process (its CPU is
that loop's thread's), or spawned processes kept for every level of a sweep, each on its own load loop
(their CPU is the process'). ``workers=N`` runs every level on N processes (1: this process);
``workers=AUTO`` (0, the default of the commands) sizes each level by :func:`tritonkit.measure.capacity.auto_processes`
(the host's cores, the server on the same host or not, the request's size, the level) and can be told to
grow (:meth:`LoadGenerator.more`) when a level measured the generator instead of the server. One :class:`~tritonkit.client.AsyncClient` per loop (and, for a
level of one request in flight, one blocking :class:`~tritonkit.client.Client`) serves every level and is
closed on that loop, which is never closed (:mod:`tritonkit.measure.eventloop` says why).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import multiprocessing
import queue
import random
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

from tritonkit.errors import TritonKitError
from tritonkit.measure import eventloop
from tritonkit.measure.capacity import (
    AUTO,
    Capacity,
    auto_processes,
    connections,
    generator_cores,
    host_cores,
    is_local,
)
from tritonkit.measure.sender import OpenLoop, Session, Target

_Session = Session  # the name the tests drive the loop with

__all__ = ["Level", "LoadGenerator", "OpenLoop", "RawWindow", "Target", "WindowSpec"]

MODES = ("concurrency", "rate", "poisson")


@dataclasses.dataclass(frozen=True)
class Level:
    """One load level: ``concurrency`` (closed loop), ``rate`` (constant open loop) or ``poisson`` (requests/s)."""

    mode: str
    value: float

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TritonKitError(f"load mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if not self.value > 0 or (self.mode == "concurrency" and self.value != int(self.value)):
            kind = "a whole concurrency >= 1" if self.mode == "concurrency" else "a rate > 0 requests/s"
            raise TritonKitError(f"load level {self.value!r}: expected {kind}")

    def split(self, workers: int) -> list[Level]:
        """This level shared by ``workers`` loops (concurrency in whole parts; idle loops get none)."""
        if self.mode == "concurrency":
            n = int(self.value)
            parts = [n // workers + (1 if i < n % workers else 0) for i in range(workers)]
            return [Level(self.mode, p) if p else Level(self.mode, 1) for p in parts if p]
        return [Level(self.mode, self.value / workers) for _ in range(workers)]

    def label(self) -> str:
        return f"c{int(self.value)}" if self.mode == "concurrency" else f"{self.value:g}/s"


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """How a window ends: after ``seconds`` of wall time, or after ``count`` completions when set."""

    seconds: float = 1.0
    count: int | None = None


@dataclasses.dataclass
class RawWindow:
    """One loop's window: success latencies (ns), failures, sends, lateness, its CPU and wall time."""

    latencies_ns: list[int]
    failures: int
    sent: int
    late: int
    dropped: int
    cpu_s: float
    wall_s: float
    error: str = ""


class _Loop:
    """The asyncio side: send at one level, cut windows, hand each to ``emit``; stop when ``stopped()``."""

    def __init__(self, target: Target, cpu_clock: Callable[[], float]) -> None:
        self.target = target
        self.cpu_clock = cpu_clock
        self.latencies: list[int] = []
        self.failures = self.sent = self.late = self.dropped = 0
        #: requests drawn from the payloads (never reset: each window goes on through the pool)
        self.drawn = 0
        self.error = ""
        self.in_flight = 0
        self.completed = 0
        #: set when a level ends: senders stop sending and the requests in flight finish
        self.draining = False
        #: requests cancelled in flight (unanswered after the request timeout at a level's end)
        self.abandoned = 0

    def _cut(self, started: tuple[float, float]) -> tuple[RawWindow, tuple[float, float]]:
        now = (time.perf_counter(), self.cpu_clock())
        window = RawWindow(
            self.latencies, self.failures, self.sent, self.late, self.dropped,
            cpu_s=now[1] - started[1], wall_s=now[0] - started[0], error=self.error,
        )  # fmt: skip
        self.latencies = []
        self.failures = self.sent = self.late = self.dropped = 0
        self.error = ""
        return window, now

    def _draw(self, count: int) -> int:
        """The next request's index in the pool (the pool in turn across windows), counted as sent."""
        index = self.drawn % count
        self.drawn += 1
        self.sent += 1
        return index

    def _failed(self, exc: BaseException) -> None:
        """A failure: counted, kept as the window's first message, never timed."""
        self.failures += 1
        self.error = self.error or " ".join((str(exc) or type(exc).__name__).split())[:200]

    async def _one(self, session: Session) -> None:
        t, requests, lanes = self.target, session.requests, session.lanes
        index = self._draw(len(requests.encoded))
        transport = lanes.lane(self.in_flight) if lanes is not None else None
        self.in_flight += 1
        start = time.perf_counter_ns()
        try:
            if transport is not None:  # as encoded, on this loop's connections
                await transport.infer(requests.encoded[index], requests.names, t.timeout_s)
            else:  # shared memory: the client's regions
                await session.client.infer(
                    t.model, requests.inputs[index], version=t.version or None, timeout=t.timeout_s
                )
        except asyncio.CancelledError:
            self.abandoned += 1
            raise
        except Exception as exc:  # any failure
            self._failed(exc)
        else:
            self.latencies.append(time.perf_counter_ns() - start)
        finally:
            self.in_flight -= 1
            self.completed += 1

    async def _closed(self, session: Session, concurrency: int) -> None:
        async def user() -> None:
            while not self.draining:
                await self._one(session)

        await asyncio.gather(*(user() for _ in range(concurrency)))

    async def _open(self, session: Session, level: Level) -> None:
        rng = random.Random(self.target.seed)
        tasks: set[asyncio.Task[None]] = set()
        slot = time.perf_counter()
        late_s = self.target.open_loop.late_us / 1e6
        try:
            await self._schedule(session, level, rng, tasks, slot, late_s)
        finally:
            # The requests in flight finish (see run), then any left are cancelled and unwound (their
            # shared-memory regions released), as the closed loop's gather does: none outlives its level.
            pending = list(tasks)
            try:
                if pending and self.draining:
                    await asyncio.wait(pending, timeout=self.target.timeout_s)
            finally:  # also when the level's own wait ran out and cancelled this one
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

    async def _schedule(
        self,
        session: Session,
        level: Level,
        rng: random.Random,
        tasks: set[asyncio.Task[None]],
        slot: float,
        late_s: float,
    ) -> None:
        while not self.draining:
            slot += rng.expovariate(level.value) if level.mode == "poisson" else 1.0 / level.value
            delay = slot - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.in_flight >= self.target.open_loop.max_in_flight:
                self.dropped += (
                    1  # dropped, not also late: a slot counts once (late + dropped <= sent + dropped)
                )
                continue
            if -delay > late_s:
                self.late += 1
            task = asyncio.create_task(self._one(session))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def run(
        self,
        session: Session,
        level: Level,
        window: WindowSpec,
        emit: Callable[[RawWindow], None],
        stopped: Callable[[], bool],
    ) -> None:
        await session.ready()
        self.draining = False
        single = self.target.blocking_single and level.mode == "concurrency" and int(level.value) == 1
        if single:
            session.blocking(session.requests.inputs)  # warmed before the level's clock starts
        started = (time.perf_counter(), self.cpu_clock())
        self.latencies, self.failures, self.sent, self.late, self.dropped = [], 0, 0, 0, 0
        self.completed = 0
        if single:
            self._single(
                session.blocking_send(), len(session.requests.encoded), window, emit, stopped, started
            )
            return
        sender = (
            self._closed(session, int(level.value))
            if level.mode == "concurrency"
            else self._open(session, level)
        )
        task = asyncio.ensure_future(sender)
        try:
            while not stopped():
                if window.count:
                    goal = self.completed + window.count
                    while self.completed < goal and not task.done() and not stopped():
                        await asyncio.sleep(0.001)
                else:
                    await asyncio.sleep(max(0.0, started[0] + window.seconds - time.perf_counter()))
                if task.done():
                    task.result()  # raises what stopped the sender
                raw, started = self._cut(started)
                emit(raw)
        finally:
            # A level ends by letting its requests in flight finish, not by cancelling them: a gRPC
            # cancellation racing the answer crashes Triton's gRPC front end (tritonserver 2.51 aborts
            # in gRPC's sync.cc, "ASSERTION FAILED: prior > 0", at tune's level ends on a GPU serving
            # 15-50k requests/s; triton-inference-server/server#7368, fixed in 2.53). Only requests
            # still unanswered after the request timeout are cancelled. The client outlives the level
            # (it is closed with the session, on this same loop).
            self.draining = True
            await asyncio.wait({task}, timeout=self.target.timeout_s)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _single(
        self,
        send: Callable[[int], object],
        count: int,
        window: WindowSpec,
        emit: Callable[[RawWindow], None],
        stopped: Callable[[], bool],
        started: tuple[float, float],
    ) -> None:
        """One request in flight: blocking calls on this loop's thread, windows cut between requests.

        On the asyncio path a lone request carried the loop's round trip (task, future, callbacks):
        a 602 KB image on a 2-core host, p50 through HTTP 1.36 ms there against 1.25 ms here and 1.20 ms
        for raw ``tritonclient``, through gRPC 1.30, 1.18 and 1.06 ms (``scripts/tune/lone_request.py``,
        docs/benchmarks-lone-request.md). A single stream's latency is what a planner reads for low load;
        the loop has nothing else to do at this level."""
        goal = window.count
        while not stopped():
            index = self._draw(count)
            self.in_flight = 1
            start = time.perf_counter_ns()
            try:
                send(index)
            except Exception as exc:  # any failure
                self._failed(exc)
            else:
                self.latencies.append(time.perf_counter_ns() - start)
            finally:
                self.in_flight = 0
                self.completed += 1
            if (self.completed >= goal) if goal else (time.perf_counter() >= started[0] + window.seconds):
                raw, started = self._cut(started)
                self.completed = 0
                emit(raw)


_STOP = "stop"


class _StopFlag:
    """True once the parent has sent "stop" (read without blocking)."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.flag = conn, False

    def __call__(self) -> bool:
        while not self.flag and self.conn.poll():
            self.flag = self.conn.recv() == _STOP
        return self.flag


def _child(conn: Connection, target: Target) -> None:  # pragma: no cover - runs in a spawned process
    """A worker process: run each level it is sent until told to stop; ``None`` ends it.

    Every level runs on this process's one load loop with one client, closed there at the end."""
    session = Session(target)
    try:
        while True:
            message = conn.recv()
            if message is None:
                return
            if message == _STOP:  # the level already ended on its own
                continue
            level, window = message
            try:
                eventloop.run(
                    _Loop(target, time.process_time).run(session, level, window, conn.send, _StopFlag(conn))
                )
            except Exception as exc:
                conn.send(
                    exc if isinstance(exc, TritonKitError) else TritonKitError(" ".join(str(exc).split()))
                )
            conn.send("done")
    finally:
        if session.opened:
            with contextlib.suppress(Exception):
                eventloop.run(session.close(), timeout=10, cancel=False)


class LoadGenerator:
    """Runs load levels on one or more asyncio loops and yields their windows; a context manager.

    ``workers``: N processes for every level (1: this process's load loop), or :data:`AUTO`: each
    level sized by :func:`~tritonkit.measure.capacity.auto_processes`, up to ``max_processes`` (None: the
    cores this host leaves the generator, :func:`~tritonkit.measure.capacity.generator_cores`); processes
    are spawned when a level first needs them and kept for the rest of the run."""

    def __init__(self, target: Target, workers: int = 1, max_processes: int | None = None) -> None:
        if workers < 0 or (max_processes is not None and max_processes < 1):
            raise TritonKitError(
                f"generator workers {workers} (at most {max_processes}): expected auto (0) or >= 1"
            )
        self.target = target
        self.workers = workers
        self.auto = workers == AUTO
        self.local = is_local(target.url)
        self.ceiling = (
            workers if not self.auto else max_processes or generator_cores(host_cores(), self.local)
        )
        self._procs: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
        self._session = Session(target)
        self._level: concurrent.futures.Future[None] | None = None
        self._queue: queue.Queue[RawWindow | BaseException | str] = queue.Queue()
        self._stop = threading.Event()
        self._active = 0
        self._remote = False
        #: per load mode, (the lowest level that needed them, processes) once a level grew
        self._grown: dict[str, tuple[float, int]] = {}
        #: what the level sent last was sent with
        self.capacity = Capacity(1, 1, self.auto)

    def __enter__(self) -> LoadGenerator:
        if not self.auto and self.workers > 1:
            self._spawn(self.workers)
        return self

    def _spawn(self, count: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # grpc and threads do not survive fork
        while len(self._procs) < count:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child, args=(child, self.target), daemon=True)
            proc.start()
            self._procs.append((proc, parent))

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._session.opened:
            with contextlib.suppress(Exception):
                eventloop.run(self._session.close(), timeout=10, cancel=False)
        for proc, conn in self._procs:
            with contextlib.suppress(OSError):
                conn.send(None)
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        self._procs = []

    def request_bytes(self) -> int:
        """The tensor bytes of the target's largest request (read once, by this process's session)."""
        eventloop.run(self._session.ready(), timeout=self.target.timeout_s + 30)
        return self._session.requests.nbytes

    def processes_for(self, level: Level) -> int:
        """The processes ``level`` starts with: ``workers``, or the sizing rule's (and at least what a
        lower level of the same mode grew to)."""
        if not self.auto:
            return self.workers
        wanted = auto_processes(level.mode, level.value, self.request_bytes(), self.ceiling)
        grown = self._grown.get(level.mode)
        if grown is not None and level.value >= grown[0] and int(level.value) > 1:
            wanted = max(wanted, grown[1])
        return min(wanted, self._most(level))

    def _most(self, level: Level) -> int:
        return min(self.ceiling, int(level.value)) if level.mode == "concurrency" else self.ceiling

    def more(self, level: Level, processes: int) -> int | None:
        """The processes to measure ``level`` again with, after ``processes`` were the limit (twice as
        many, up to the ceiling); None when the generator has no more (or its count was given)."""
        if not self.auto or processes >= self._most(level):
            return None
        more = min(self._most(level), processes * 2)
        low = self._grown.get(level.mode)
        if low is None or more > low[1] or level.value < low[0]:
            self._grown[level.mode] = (level.value, max(more, low[1] if low else 0))
        return more

    def start(self, level: Level, window: WindowSpec, processes: int | None = None) -> None:
        """Begin sending at ``level`` (on ``processes``, default :meth:`processes_for`); windows come
        from :meth:`next_window`."""
        self.stop()
        count = processes or self.processes_for(level)
        in_flight = int(level.value) if level.mode == "concurrency" else 0
        self._remote = count > 1 or (not self.auto and self.workers > 1)
        if self._remote:
            self._spawn(count)
            parts = level.split(count)
            spec = (
                window if not window.count else WindowSpec(window.seconds, max(1, window.count // len(parts)))
            )
            for (_, conn), part in zip(self._procs, parts, strict=False):
                conn.send((part, spec))
            self._active = len(parts)
            share = max(int(p.value) for p in parts) if in_flight else 0
            self.capacity = Capacity(len(parts), connections(share, self.target.protocol), self.auto)
            return
        self.capacity = Capacity(1, connections(in_flight, self.target.protocol), self.auto)
        self._stop.clear()
        self._queue = queue.Queue()
        q = self._queue

        async def body() -> None:
            try:
                await _Loop(self.target, time.thread_time).run(
                    self._session, level, window, q.put, self._stop.is_set
                )
            except Exception as exc:  # handed to the caller of next_window
                q.put(exc)
            finally:
                q.put("done")

        self._level = eventloop.submit(body())
        self._active = 1

    def next_window(self, timeout: float) -> list[RawWindow]:
        """The next window of every loop (blocks up to ``timeout`` seconds for each)."""
        if not self._active:
            raise TritonKitError("the load generator is not running; call start() first")
        if self._remote:
            out = []
            for _, conn in self._procs[: self._active]:
                if not conn.poll(timeout):
                    raise TritonKitError(f"no window from a generator worker within {timeout:g} s")
                out.append(self._checked(conn.recv()))
            return out
        try:
            return [self._checked(self._queue.get(timeout=timeout))]
        except queue.Empty:
            raise TritonKitError(f"no window from the load generator within {timeout:g} s") from None

    @staticmethod
    def _checked(item: object) -> RawWindow:
        if isinstance(item, RawWindow):
            return item
        if isinstance(item, TritonKitError):
            raise item
        if isinstance(item, BaseException):
            raise TritonKitError(f"the load generator failed: {' '.join(str(item).split())}") from item
        raise TritonKitError("the load generator stopped before its window was complete")

    def stop(self) -> None:
        """Stop the level being sent (its requests in flight finish first) and wait for the loops to end."""
        if not self._active:
            return
        if self._remote:
            for _, conn in self._procs[: self._active]:
                conn.send(_STOP)
            for _, conn in self._procs[: self._active]:
                deadline = time.monotonic() + self.target.timeout_s + 10
                while time.monotonic() < deadline and conn.poll(max(0.0, deadline - time.monotonic())):
                    if conn.recv() == "done":
                        break
        else:
            self._stop.set()
            if self._level is not None:
                with contextlib.suppress(Exception):  # its errors went to the queue
                    self._level.result(timeout=self.target.timeout_s + 10)
                self._level.cancel()  # when it did not end in time
            self._level = None
        self._active = 0
