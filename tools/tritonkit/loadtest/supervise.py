"""Locust as child processes: the command lines, starting and reaping them, and the progress line.

Owns the life of the Locust processes of one run: one standalone process, or a master with
``workers`` workers (Locust's own distributed mode) on the locustfile :mod:`.locustfile`; a
deadline (the plan's length plus a grace period); stopping early (Ctrl-C, or a dead server seen by a
:class:`~tritonkit.loadtest.watch.ServerWatch`) by SIGINT to the process that runs the shape, which ends
the run as its plan's end does, statistics and all; termination of every child whatever happens;
the verdict on Locust's exit; and the progress line printed while it runs (read from
``locust_stats_history.csv`` through :mod:`.report.locust_csv`). Locust runs in children because
it monkey-patches the process that imports it; they run in a session of their own (as Triton does),
so a terminal's Ctrl-C reaches this process alone and the run is stopped once, in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.options import stop_timeout
from tritonkit.loadtest.report.locust_csv import aggregated_rows, as_float
from tritonkit.loadtest.watch import INTERRUPTED, ServerWatch, Stop
from tritonkit.serve.embedded import free_port
from tritonkit.serve.process import spawn as spawn_process

__all__ = ["GRACE_S", "LOCUSTFILE", "LocustRun", "Progress", "last_error", "locust_command", "run_locust"]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
#: beyond the plan's length and the users' stop timeout: report writing, slow starts
GRACE_S = 120.0
#: Locust's ``--stop-timeout`` for the default request timeout (60 s)
STOP_TIMEOUT_S = stop_timeout(60.0)


def locust_command(
    config_path: Path,
    report: Path,
    role: str,
    master_port: int,
    workers: int,
    *,
    stop_timeout: int = STOP_TIMEOUT_S,
) -> list[str]:
    """The command line of one Locust process; ``role`` is ``standalone``, ``master`` or ``worker``.

    ``config_path`` reaches the locustfile through the environment (see :func:`run_locust`), so it
    is not on the command line. ``stop_timeout``: seconds a stopping user may take to finish the
    request it is in (:func:`~tritonkit.loadtest.options.stop_timeout`); the master passes it on to
    the workers.
    """
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--skip-log-setup"]
    if role == "worker":
        return [*command, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)]
    command += [
        "--csv",
        str(report / "locust"),
        "--csv-full-history",
        "--html",
        str(report / "locust.html"),
        "--stop-timeout",
        str(stop_timeout),
        "--host",
        "http://127.0.0.1",
    ]
    if role == "master":
        command += [
            "--master",
            "--expect-workers",
            str(workers),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
        ]
    return command


class Progress:
    """One line, rewritten in place on a terminal, every few seconds otherwise.

    The rate is the requests between the history rows of this line and the previous one over the
    seconds between them (the first line: since the first row), not Locust's ``Requests/s``, which
    reads 0 while its window fills. Elapsed time never reads past the plan's length: after it,
    the line says the users are stopping.
    """

    def __init__(self, stream: IO[str], total: float, history: Path) -> None:
        self.stream, self.total, self.history = stream, total, history
        self.tty = stream.isatty()
        self.last_print = 0.0
        #: (Timestamp, Total Request Count) of the row the previous line showed
        self._base: tuple[float, float] | None = None
        self._rate_text = f"{'-':>9}"

    def _rate(self, rows: list[dict[str, str]]) -> str:
        row = rows[-1]
        now = (as_float(row.get("Timestamp")), as_float(row.get("Total Request Count")))
        first = rows[0]
        base = self._base or (as_float(first.get("Timestamp")), as_float(first.get("Total Request Count")))
        if now[0] <= base[0]:
            return self._rate_text  # no newer row: the last interval's rate (a terminal redraws often)
        self._base = now
        self._rate_text = f"{(now[1] - base[1]) / (now[0] - base[0]):9,.1f}"
        return self._rate_text

    def update(self, elapsed: float) -> None:
        if not self.tty and elapsed - self.last_print < 5:
            return
        self.last_print = elapsed
        rows = aggregated_rows(self.history)
        clock = f"[{min(elapsed, self.total):5.0f}s/{self.total:.0f}s]"
        if elapsed > self.total:
            clock += f" stopping users (+{elapsed - self.total:.0f}s)"
        if not rows:
            line = f"{clock} starting users..."
        else:
            row = rows[-1]
            line = (
                f"{clock} users {row.get('User Count', '?'):>4}  "
                f"{self._rate(rows)} req/s  p95 {row.get('95%', 'N/A'):>5} ms  "
                f"requests {int(as_float(row.get('Total Request Count'))):,}  "
                f"failures {int(as_float(row.get('Total Failure Count'))):,}"
            )
        if self.tty:
            self.stream.write("\r" + line.ljust(100))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclasses.dataclass(frozen=True)
class LocustRun:
    """A finished Locust run: its wall time, and why it ended before its plan (None: it did not)."""

    wall_s: float
    stopped: Stop | None = None


def run_locust(
    config_path: Path,
    report: Path,
    total: float,
    *,
    workers: int = 0,
    progress: bool = True,
    stream: IO[str] | None = None,
    stop_timeout: int = STOP_TIMEOUT_S,
    watch: ServerWatch | None = None,
) -> LocustRun:
    """Run Locust to completion on ``config_path``, writing into ``report``.

    ``stop_timeout``: Locust's ``--stop-timeout``, long enough for the users' request timeout (the
    users finish the requests they are in when the run stops). ``watch``: probed while Locust runs;
    once it finds the server dead, Locust is stopped (SIGINT) and the result says so. The first
    KeyboardInterrupt (Ctrl-C) stops Locust the same way and this returns the partial run; a second
    one while it stops is raised. Raises :class:`LoadTestError` when it outlives ``total`` +
    ``stop_timeout`` + :data:`GRACE_S` or exits without its stats (exit code 1 only means some
    requests failed; the report tells which), KeyboardInterrupt when Ctrl-C came before Locust
    wrote any. Every child is gone when this returns or raises.
    """

    env = dict(os.environ)
    env["TRITONKIT_LOADTEST_CONFIG"] = str(config_path)
    env.setdefault("PYTHONUNBUFFERED", "1")
    port = free_port() if workers else 0
    log_path = report / "locust.log"
    processes: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    out = stream or sys.stderr
    line = Progress(out, total, report / "locust_stats_history.csv") if progress else None
    stopped: Stop | None = None
    with open(log_path, "wb") as log:
        try:
            for role in ["master" if workers else "standalone"] + ["worker"] * workers:
                command = locust_command(config_path, report, role, port, workers, stop_timeout=stop_timeout)
                processes.append(spawn_process(command, log=log, env=env, cwd=Path.cwd()))
            limit = total + stop_timeout + GRACE_S
            deadline = started + limit
            master = processes[0]
            while master.poll() is None:
                try:
                    if time.monotonic() > deadline:
                        raise LoadTestError(f"Locust did not finish within {limit:.0f} s; see {log_path}")
                    if line is not None:
                        line.update(time.monotonic() - started)
                    found = watch.poll() if watch is not None and stopped is None else None
                    if found is not None:
                        stopped = _stop(master, found, out)
                        deadline = min(deadline, time.monotonic() + stop_timeout + GRACE_S)
                    time.sleep(0.5)
                except KeyboardInterrupt:
                    if stopped is not None and stopped.reason == INTERRUPTED:
                        raise  # a second Ctrl-C: give the run up
                    stopped = _stop(master, Stop(INTERRUPTED, time.time(), "Ctrl-C (SIGINT)"), out)
                    deadline = min(deadline, time.monotonic() + stop_timeout + GRACE_S)
            for worker in processes[1:]:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(timeout=15)
        finally:
            _reap(processes)
            if line is not None:
                line.done()
    code = processes[0].returncode
    if code not in (0, 1) or not (report / "locust_stats.csv").exists():
        if stopped is not None and stopped.reason == INTERRUPTED:
            raise KeyboardInterrupt  # stopped before Locust measured anything: no report to write
        raise LoadTestError(
            f"Locust exited with code {code}: {last_error(log_path)}; see {log_path}"
            + (f" (the run was stopped: the server died, {stopped.detail})" if stopped is not None else "")
        )
    return LocustRun(time.monotonic() - started, stopped)


def _stop(master: subprocess.Popen[bytes], stop: Stop, out: IO[str]) -> Stop:
    """Ask the process that runs the shape to end the run (the locustfile's SIGINT handler), and say so
    on a line of its own (after a terminal's progress line)."""
    with contextlib.suppress(ProcessLookupError):
        master.send_signal(signal.SIGINT)
    text = (
        "interrupted: stopping the users, then the partial report (Ctrl-C again to give it up)"
        if stop.reason == INTERRUPTED
        else f"the server is dead ({stop.detail}): stopping the users, then the partial report"
    )
    out.write(("\n" if out.isatty() else "") + f"tritonkit loadtest: {text}\n")
    out.flush()
    return stop


def _reap(processes: list[subprocess.Popen[bytes]]) -> None:
    """Terminate, then kill, every child still running; wait for each."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        if process.poll() is None:
            process.kill()
            process.wait()


def last_error(log_path: Path) -> str:
    """The last line of Locust's log that mentions an error (else its last line), for one-line errors."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else "no output"
