"""The load generator: tritonkit's :class:`~tritonkit.client.AsyncClient` on an asyncio loop, cut into windows.

Why this and not Locust: Locust's statistics keep whole milliseconds (a 0.4 ms model shows p99 "1 ms"),
and its gevent users are the generator whose saturation this module must detect, not hide. One asyncio
loop with ``AsyncClient`` sends HTTP or gRPC (or through system/CUDA shared memory) at a few tens of µs of
CPU per request, times every request with ``perf_counter_ns``, and measures its own CPU time; where one
core is not enough, ``workers`` processes each run a loop with a share of the load.

A load level is a concurrency (closed loop: that many requests always in flight) or a request rate (open
loop, constant spacing or Poisson arrivals; a send that starts more than ``late_us`` after its slot is
*late*, and one that finds ``max_in_flight`` requests outstanding is *dropped*: both say the generator,
not the server, set the pace). Windows end by time (``window_s``) or by completions (``window_count``).
A request counts in the window in which it completes; failures are counted apart, never as throughput.

:class:`LoadGenerator` hides where the loops run: ``workers=1`` the load loop of this process (its CPU is
that loop's thread's), ``workers>1`` spawned processes kept for every level of a sweep, each on its own
load loop (their CPU is the process'). One :class:`~tritonkit.client.AsyncClient` per loop (and, for a
level of one request in flight, one blocking :class:`~tritonkit.client.Client`) serves every level and is
closed on that loop, which is never closed (:mod:`tritonkit.tune.eventloop` says why).
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
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from tritonkit.client import AsyncClient, Client
from tritonkit.client.ops import ClientOps
from tritonkit.client.spec import ModelSpec
from tritonkit.errors import TritonKitError
from tritonkit.loadtest.payloads import INPUT_DATA, make_payloads
from tritonkit.tune import eventloop

__all__ = ["Level", "LoadGenerator", "OpenLoop", "RawWindow", "Target", "WindowSpec"]

MODES = ("concurrency", "rate", "poisson")
C = TypeVar("C", bound=ClientOps)


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


@dataclasses.dataclass(frozen=True)
class OpenLoop:
    """How an open-loop level judges its own pace: a send that starts more than ``late_us`` after its
    slot is late; one that finds ``max_in_flight`` requests outstanding is dropped."""

    late_us: float = 1000.0
    max_in_flight: int = 4096


@dataclasses.dataclass(frozen=True)
class Target:
    """What the generator sends: one model of one server, the same request every time."""

    url: str
    model: str
    protocol: str = "http"
    version: str = ""
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    shared_memory: str = "none"
    batch_size: int = 1
    #: size of every variable (-1) dimension other than the batch
    variable_dim: int = 16
    timeout_s: float = 30.0
    open_loop: OpenLoop = OpenLoop()
    seed: int = 0
    #: a perf_analyzer ``--input-data`` JSON file: its entries are the requests (default: generated data)
    input_data: str | None = None
    #: one request in flight is sent with blocking calls (:meth:`_Loop._single`); False: on the asyncio
    #: path like any other level (benchmarks compare the two; worker processes get it with the target)
    blocking_single: bool = True


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

    def _draw(self, payloads: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        """The next request's inputs (the pool in turn across windows), counted as sent."""
        inputs = payloads[self.drawn % len(payloads)]
        self.drawn += 1
        self.sent += 1
        return inputs

    def _failed(self, exc: Exception) -> None:
        """A failure: counted, kept as the window's first message, never timed."""
        self.failures += 1
        self.error = self.error or " ".join(str(exc).split())[:200]

    async def _one(self, client: Any, payloads: Sequence[Mapping[str, Any]]) -> None:
        t = self.target
        inputs = self._draw(payloads)
        self.in_flight += 1
        start = time.perf_counter_ns()
        try:
            await client.infer(t.model, inputs, version=t.version or None, timeout=t.timeout_s)
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

    async def _closed(self, client: Any, inputs: Sequence[Mapping[str, Any]], concurrency: int) -> None:
        async def user() -> None:
            while not self.draining:
                await self._one(client, inputs)

        await asyncio.gather(*(user() for _ in range(concurrency)))

    async def _open(self, client: Any, inputs: Sequence[Mapping[str, Any]], level: Level) -> None:
        rng = random.Random(self.target.seed)
        tasks: set[asyncio.Task[None]] = set()
        slot = time.perf_counter()
        late_s = self.target.open_loop.late_us / 1e6
        try:
            await self._schedule(client, inputs, level, rng, tasks, slot, late_s)
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
        client: Any,
        inputs: Sequence[Mapping[str, Any]],
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
            elif -delay > late_s:
                self.late += 1
            if self.in_flight >= self.target.open_loop.max_in_flight:
                self.dropped += 1
                continue
            task = asyncio.create_task(self._one(client, inputs))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def run(
        self,
        session: _Session,
        level: Level,
        window: WindowSpec,
        emit: Callable[[RawWindow], None],
        stopped: Callable[[], bool],
    ) -> None:
        client, inputs = await session.ready()
        self.draining = False
        single = self.target.blocking_single and level.mode == "concurrency" and int(level.value) == 1
        blocking = session.blocking(inputs) if single else None  # warmed before the level's clock starts
        started = (time.perf_counter(), self.cpu_clock())
        self.latencies, self.failures, self.sent, self.late, self.dropped = [], 0, 0, 0, 0
        self.completed = 0
        if blocking is not None:
            self._single(blocking, inputs, window, emit, stopped, started)
            return
        sender = (
            self._closed(client, inputs, int(level.value))
            if level.mode == "concurrency"
            else self._open(client, inputs, level)
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
        client: Client,
        inputs: Sequence[Mapping[str, Any]],
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
        t = self.target
        goal = window.count
        while not stopped():
            payload = self._draw(inputs)
            self.in_flight = 1
            start = time.perf_counter_ns()
            try:
                client.infer(t.model, payload, version=t.version or None, timeout=t.timeout_s)
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


class _Session:
    """One generator's :class:`AsyncClient` and request inputs, kept from level to level on the load loop.

    Made on first use (inside the loop: grpc.aio channels and aiohttp sessions bind to it), closed by
    :meth:`close` on the same loop, which keeps running afterwards (:mod:`tritonkit.tune.eventloop`).
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._client: AsyncClient | None = None
        self._blocking: Client | None = None
        self._inputs: list[dict[str, Any]] | None = None

    def _new(self, kind: type[C]) -> C:
        """A client of ``kind`` (both are made alike) on the target's server, protocol, headers and transport."""
        t = self.target
        return kind(t.url, t.protocol, timeout=t.timeout_s, retries=None, headers=dict(t.headers) or None,
                    shared_memory=t.shared_memory)  # fmt: skip

    async def ready(self) -> tuple[AsyncClient, list[dict[str, Any]]]:
        t = self.target
        if self._client is None:
            self._client = self._new(AsyncClient)
        if self._inputs is None:
            version = t.version or None
            spec = ModelSpec(
                await self._client.metadata(t.model, version), await self._client.config(t.model, version)
            )
            source = f"{INPUT_DATA}{t.input_data}" if t.input_data else "auto"
            pool = make_payloads(
                spec, {t.batch_size: 1.0}, seed=t.seed, source=source, variable_dim=t.variable_dim
            )
            self._inputs = [p.inputs for p in pool.payloads]
            with contextlib.suppress(Exception):  # warm the connection; a failure shows in the windows
                await self._client.infer(
                    t.model, self._inputs[0], version=t.version or None, timeout=t.timeout_s
                )
        return self._client, self._inputs

    def blocking(self, inputs: Sequence[Mapping[str, Any]]) -> Client:
        """A blocking :class:`~tritonkit.client.Client` like the session's (for one request in flight),
        warmed as the session's is: its connection (and shared-memory regions) made before any timing."""
        t = self.target
        if self._blocking is None:
            self._blocking = self._new(Client)
            with contextlib.suppress(Exception):  # a failure shows in the windows
                self._blocking.infer(t.model, inputs[0], version=t.version or None, timeout=t.timeout_s)
        return self._blocking

    @property
    def opened(self) -> bool:
        return self._client is not None or self._blocking is not None

    async def close(self) -> None:
        """Close both clients, concurrently. A close can wait on a server that stopped answering (each
        shared-memory region's unregister up to the client's timeout): the blocking client closes on a
        daemon thread, off the load loop, and both run to their end under a shield when the caller stops
        waiting (``eventloop.run(..., cancel=False)``), so neither the loop nor the process's exit waits
        for them."""
        closing: list[Any] = []
        if self._blocking is not None:
            blocking, self._blocking = self._blocking, None
            closing.append(_off_loop(blocking.close))
        if self._client is not None:
            client, self._client = self._client, None
            closing.append(client.close())
        if closing:
            await asyncio.shield(asyncio.gather(*closing, return_exceptions=True))


def _off_loop(fn: Callable[[], object]) -> asyncio.Future[None]:
    """``fn()`` on a daemon thread (an executor's thread would hold the interpreter's exit); its outcome
    as a future of the running loop (a failure is swallowed: closing is best effort)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def body() -> None:
        try:
            with contextlib.suppress(Exception):  # best effort: the client is gone either way
                fn()
        finally:
            loop.call_soon_threadsafe(settle)

    threading.Thread(target=body, name="tritonkit-close", daemon=True).start()
    return done


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
    session = _Session(target)
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
    """Runs load levels on one or more asyncio loops and yields their windows; a context manager."""

    def __init__(self, target: Target, workers: int = 1) -> None:
        if workers < 1:
            raise TritonKitError(f"generator workers {workers}: expected >= 1")
        self.target = target
        self.workers = workers
        self._procs: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
        self._session = _Session(target)
        self._level: concurrent.futures.Future[None] | None = None
        self._queue: queue.Queue[RawWindow | BaseException | str] = queue.Queue()
        self._stop = threading.Event()
        self._active = 0

    def __enter__(self) -> LoadGenerator:
        if self.workers > 1:
            ctx = multiprocessing.get_context("spawn")  # grpc and threads do not survive fork
            for _ in range(self.workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_child, args=(child, self.target), daemon=True)
                proc.start()
                self._procs.append((proc, parent))
        return self

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

    def start(self, level: Level, window: WindowSpec) -> None:
        """Begin sending at ``level``; windows come from :meth:`next_window`."""
        self.stop()
        if self._procs:
            parts = level.split(len(self._procs))
            spec = (
                window if not window.count else WindowSpec(window.seconds, max(1, window.count // len(parts)))
            )
            for (_, conn), part in zip(self._procs, parts, strict=False):
                conn.send((part, spec))
            self._active = len(parts)
            return
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
        if self._procs:
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
        if self._procs:
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
