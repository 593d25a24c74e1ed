"""The embedded Triton server: the real ``tritonserver`` binary from the ``nvidia-pytriton`` wheel.

This module owns the life cycle between "a model repository on disk" and "a ready server on
loopback": choosing ports, the secure-by-default command line, waiting for readiness, telling
when a model's stub died (:meth:`EmbeddedServer.problems`), and a graceful stop (the guard
drains, then SIGTERM: in-flight requests finish within ``exit_timeout``).

Its parts: the binary and backend folder, ``install.py``; its options (:class:`ServerOptions`: defaults, range
checks, the command line derived from them), ``options.py``; the
log's error lines, ``tritonlog.py``; the processes (bound to this process, admin key hidden from ``ps``,
crash leftovers reaped, bounded log), ``process.py``; the guards, ``guard.py`` and ``grpc_front.py``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType

from tritonkit.errors import (
    ModelLoadError,
    ServerError,
    ServerStartTimeoutError,
)
from tritonkit.serve.grpc_front import GrpcFront
from tritonkit.serve.guard import Guard
from tritonkit.serve.health import HealthMonitor
from tritonkit.serve.install import (
    TritonInstall,
    check_port,
    find_triton,
    free_port,
    link_native,
    prepare_backends,
    state_dir,
)
from tritonkit.serve.options import ADMIN_HEADER, ServerOptions
from tritonkit.serve.process import (
    LogPump,
    Stub,
    forget,
    hide_in_cmdline,
    reap_orphan_stubs,
    record_regions,
    remove_stale_regions,
    spawn,
    stubs_of,
)
from tritonkit.serve.reply_queues import widen_reply_queues
from tritonkit.serve.sources import refuse_foreign
from tritonkit.serve.tritonlog import describe_exit, load_failures, startup_failure, stub_failures

__all__ = [
    "MALLOC_ENV",
    "MALLOC_TUNING_ENV",
    "REPLY_QUEUES_ENV",
    "STUB_PYTHON_ENV",
    "EmbeddedServer",
    "ServerOptions",
    "TritonInstall",
    "find_triton",
    "free_port",
]

#: Environment variable: the Python executable whose environment the python-backend stubs use
#: (default: the one running tritonkit).
STUB_PYTHON_ENV = "TRITONKIT_STUB_PYTHON"

#: glibc malloc settings given to tritonserver and its stubs unless the environment sets them: the
#: python-backend stub copies every host input into a new NumPy array (python_backend pb_tensor.cc), and
#: an array over glibc's mmap threshold (128 KiB: one 224 x 224 FP32 image is 602 KB) comes from fresh
#: pages that fault in on every request, then goes back to the system. Served from the heap and kept,
#: the copy is a plain memcpy (measured on the H100 host: docs/benchmarks-gpu.md). Costs memory held at
#: its peak; ``TRITONKIT_MALLOC_TUNING=0`` leaves glibc's defaults.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
MALLOC_TUNING_ENV = "TRITONKIT_MALLOC_TUNING"
#: ``0`` leaves tritonserver's HTTP reply queues at the kernel's size (past ~278 HTTP inferences in
#: flight Triton 2.51 then drops answers: :mod:`tritonkit.serve.reply_queues`)
REPLY_QUEUES_ENV = "TRITONKIT_REPLY_QUEUES"

_POLL_INTERVAL_S = 0.1


class EmbeddedServer(GrpcFront):
    """Run ``tritonserver`` on a model repository as ``options`` describe (:class:`ServerOptions`); a context
    manager.

    >>> with EmbeddedServer("model_repository", ServerOptions(guard=True)) as server:   # doctest: +SKIP
    ...     client = tritonclient.http.InferenceServerClient(server.http_url)

    Ports the options leave as ``None`` are picked free at the start. The defaults follow Triton's
    secure-deployment guide (:class:`ServerOptions`); the restricted APIs need the header with :attr:`admin_key`.

    The server is bound to this process: it gets SIGTERM when the process dies (when started from
    the main thread), and a start first reaps the python stubs and ``/dev/shm`` regions a crashed
    earlier server left behind. :meth:`problems` tells when a model's stub has died.
    """

    def __init__(self, repo: str | os.PathLike[str], options: ServerOptions | None = None) -> None:
        #: how this server runs; the ports the start picks, the log file and the admin key are its own
        self.options = options = ServerOptions() if options is None else options
        self.repo = Path(repo).resolve()
        self._ports: dict[str, int | None] = {
            "http": options.http_port,
            "grpc": options.grpc_port,
            "metrics": options.metrics_port,
        }
        # hex, 128 bits: a urlsafe token starts with '-' one time in 64, and `--admin-key -...` is then
        # read as an option by argparse (the key is printed for users to pass exactly that way)
        self.admin_key = options.admin_key or secrets.token_hex(16)
        self._health: HealthMonitor | None = None
        self._problems: tuple[float, list[str]] = (0.0, [])
        self._log_pump: LogPump | None = None
        self._guard: Guard | None = None
        self._triton_http_port: int | None = None
        #: removes the temporary log directory when this object goes (or at exit): the log stays
        #: readable after stop() and in start-up error messages, and nothing is left behind
        self._log_dir: weakref.finalize[..., object] | None = None
        #: the options' log file, or the temporary one the start makes
        self.log_file = Path(options.log_file) if options.log_file is not None else None
        self._process: subprocess.Popen[bytes] | None = None
        self._stubs: list[Stub] = []
        self._stub_file: Path | None = None
        #: Whether ``ps`` no longer shows the admin key in the server's command line.
        self.key_hidden = False
        #: answers one HTTP thread can queue (None: left at the kernel's ~278); why not, if not
        self.http_reply_room: int | None = None
        self.http_reply_problem: str | None = None

    # --- addresses --------------------------------------------------------------------------
    def _port(self, role: str) -> int:
        port = self._ports[role]
        if port is None:
            raise ServerError("the server has not been started; ports are chosen by start()")
        return port

    @property
    def http_port(self) -> int:
        return self._port("http")

    @property
    def grpc_port(self) -> int:
        return self._port("grpc")

    @property
    def metrics_port(self) -> int:
        return self._port("metrics")

    @property
    def _client_host(self) -> str:
        return "127.0.0.1" if self.options.host in ("0.0.0.0", "") else self.options.host

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint (tritonclient style, no scheme)."""
        return f"{self._client_host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint."""
        return f"{self._client_host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """Full URL of the Prometheus metrics page."""
        return f"http://{self._client_host}:{self.metrics_port}/metrics"

    @property
    def admin_headers(self) -> dict[str, str]:
        """Headers that unlock the restricted APIs."""
        return {ADMIN_HEADER: self.admin_key}

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # --- life cycle ---------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The full ``tritonserver`` command line (ports must be resolved)."""
        install = find_triton()
        backends = prepare_backends(install)
        link_native(backends, self.repo)  # tritonkit's C++ backend, when a model uses it
        metrics = self.metrics_port if self.options.metrics else None
        return [
            str(install.binary),
            f"--model-repository={self.repo}",
            f"--backend-directory={backends}",
            *self.options.triton_args(
                http_port=self._port_of_triton_http(),
                grpc_port=self._triton_grpc_port or self.grpc_port,
                metrics_port=metrics,
                admin_key=self.admin_key,
                caches=install.caches,
            ),
        ]

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The python-backend stub embeds its interpreter without reading PYTHONPATH: it finds packages
        # through the first `python3` on PATH (that prefix's site-packages and .pth files). By default that
        # is tritonkit's own environment; STUB_PYTHON_ENV names another (a host whose Python has NumPy 2,
        # which this stub release cannot move tensors with, gives its stubs an environment with numpy<2).
        venv_bin = str(Path(env.get(STUB_PYTHON_ENV) or sys.executable).parent)
        env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
        env.pop("PYTHONHOME", None)
        if env.get(MALLOC_TUNING_ENV, "1") != "0":
            for key, value in MALLOC_ENV.items():
                env.setdefault(key, value)
        return env

    def start(self) -> EmbeddedServer:
        """Start the server and block until ``/v2/health/ready`` answers 200."""
        if self.is_running():
            raise ServerError(f"the server is already running (pid {self.pid})")
        if not self.repo.is_dir():
            raise ServerError(f"model repository {self.repo} is not a directory; expected a folder of models")
        refuse_foreign(self.repo)  # a killed build's staging folder; symlinks or ONNX data from elsewhere
        host = self.options.host
        roles = ["http", "grpc"] + (["metrics"] if self.options.metrics else [])
        for role in roles:
            if self._ports[role] is None:
                self._ports[role] = free_port(host if host != "0.0.0.0" else "127.0.0.1")
            else:
                check_port(host, self._port(role), role)
        if self.options.guard:  # Triton listens privately; the guard takes the public HTTP port
            self._triton_http_port = free_port()
        self._pick_grpc_port()
        if self.log_file is None:
            log_dir = tempfile.mkdtemp(prefix="tritonkit-server-")
            # Not TemporaryDirectory: its implicit clean-up at garbage collection warns (ResourceWarning).
            self._log_dir = weakref.finalize(self, shutil.rmtree, log_dir, ignore_errors=True)
            self.log_file = Path(log_dir) / "tritonserver.log"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._launch()
            if self.options.guard:
                self._guard = Guard(
                    host,
                    self.http_port,
                    self._port_of_triton_http(),
                    max_body_bytes=self.options.max_body_bytes,
                    max_inflight_bytes=self.options.inflight_bytes,
                    request_timeout=self.options.request_timeout,
                    unready=self.unready,
                )
                self._guard.start()
            self._open_grpc(self.grpc_port, self.admin_headers)
            self._start_health()
        except BaseException:
            self._stop_health()
            self._close_guard()
            self._terminate(grace=5.0)
            raise
        return self

    def _launch(self) -> None:
        """Spawn tritonserver, hide the admin key, wait until it is ready, note its stubs."""
        assert self.log_file is not None
        command = self.command()
        self.reap()
        if self.log_file.exists() and self.log_file.stat().st_size > 0:
            # An earlier run's log (a resumed tune's) is kept as <log>.1: the new log must start empty,
            # since hiding the admin key waits for Triton's first line in it.
            os.replace(self.log_file, self.log_file.with_name(self.log_file.name + ".1"))
        self._process = spawn(command, log=subprocess.PIPE, env=self._environment(), cwd=self.repo)
        assert self._process.stdout is not None
        self._log_pump = LogPump(self._process.stdout, self.log_file, self.options.log_max_bytes)
        if self.options.restricted_apis:
            log_file = self.log_file
            # Triton logs its first line after parsing its options: the key bytes are unused then.
            process = self._process
            self.key_hidden = hide_in_cmdline(
                self._process.pid,
                self.admin_key,
                ready=lambda: (
                    process.poll() is not None or (log_file.exists() and log_file.stat().st_size > 0)
                ),
            )
        self._wait_ready()
        if os.environ.get(REPLY_QUEUES_ENV, "1") != "0":
            try:
                self.http_reply_room = widen_reply_queues(self._process.pid)
            except OSError as exc:
                self.http_reply_problem = exc.strerror or str(exc)
        self._stubs = stubs_of(self._process.pid, self._stub_path())
        record_regions(state_dir(), self._process.pid, [stub.region for stub in self._stubs])

    def _start_health(self) -> None:
        if self.options.probes_health:
            self._health = HealthMonitor(self._port_of_triton_http(), headers=self.admin_headers)
            self._health.start()

    def _stop_health(self) -> None:
        if self._health is not None:
            self._health.stop()
            self._health = None

    def restart(self) -> None:
        """Stop tritonserver and start it again on the same ports (a dead stub, a crash); the guards stay
        up, answering HTTP 503 with ``Retry-After`` (also to what Triton took unanswered), gRPC UNAVAILABLE."""
        self._hold_grpc("the server is restarting; retry shortly")
        if self._guard is not None:
            self._guard.hold("the server is restarting; retry shortly")
        self._stop_health()
        self._stop_triton(grace=self.options.exit_timeout + 10.0)
        if self.options.guard:
            self._triton_http_port = free_port()
        self._pick_grpc_port()
        self._launch()
        self._start_health()
        self._release_grpc()
        if self._guard is not None:
            self._guard.release(self._port_of_triton_http())

    def _port_of_triton_http(self) -> int:
        return self._triton_http_port or self.http_port

    def _close_guard(self) -> None:
        self._close_grpc()
        if self._guard is not None:
            self._guard.close()
            self._guard = None

    @property
    def refused(self) -> int:
        """Requests the guards refused (0 without guards)."""
        return (self._guard.refused if self._guard is not None else 0) + self.grpc_refused

    def _stub_path(self) -> Path:
        if self._stub_file is None:
            self._stub_file = prepare_backends(find_triton()) / "python" / "triton_python_backend_stub"
        return self._stub_file

    def reap(self) -> list[str]:
        """Kill the python stubs of crashed tritonkit servers and remove their ``/dev/shm`` regions.

        Only stubs of this private backend folder whose server is gone, and regions recorded for
        servers no longer running, are touched. Returns what was removed, one line each.
        """
        orphans = reap_orphan_stubs(self._stub_path())
        regions = remove_stale_regions(state_dir())
        return [f"stub {s.instance} (pid {s.pid}, region {s.region})" for s in orphans] + regions

    def stubs(self) -> list[Stub]:
        """The python-backend stubs the running server has now, one per model instance (none when stopped)."""
        if self._process is None or self._process.poll() is not None:
            return []
        return stubs_of(self._process.pid, self._stub_path())

    def unready(self, model: str | None = None) -> str | None:
        """Why the server (or ``model``) cannot serve now: a dead or unresponsive stub, an exit; None if it can.

        What the guard answers readiness from; dead stubs are looked up at most every 0.2 s.
        """
        now = time.monotonic()
        if now - self._problems[0] > 0.2:
            self._problems = (now, self.problems())
        problems = self._problems[1]
        if model is not None:
            problems = [
                p for p in problems if f"model `{model}`" in p or "tritonserver" in p or "not running" in p
            ]
        if problems:
            return problems[0]
        return self._health.reason(model) if self._health is not None else None

    def exit_reason(self) -> str:
        """One line on how tritonserver ended: the signal or exit code and the log line that tells why."""
        if (code := self._process.poll() if self._process is not None else None) is not None:
            self._drain_log()
        return describe_exit(code, self._log_lines())

    def _drain_log(self, timeout: float = 1.0) -> None:
        """Let the pump copy an exited server's last lines (often the one that tells why); bounded."""
        if self._log_pump is not None:
            self._log_pump.join(timeout)

    def problems(self) -> list[str]:
        """What makes the running server unable to serve: an exit, or a model's dead python stub.

        Triton keeps answering ``/v2/health/ready`` and model-ready with 200 after a stub dies
        while every call to that model fails with "Stub process is not healthy"; this is the check
        Triton lacks. Stubs are compared with those present at readiness, so it is meaningful with
        ``model_control_mode="none"`` (the default), where models never load or unload later.
        """
        if self._process is None:
            return ["the server is not running"]
        code = self._process.poll()
        if code is not None:
            return [f"tritonserver exited with code {code}"]
        if self.options.model_control_mode != "none":  # models may load and unload: no fixed set of stubs
            return []
        alive = {stub.pid for stub in stubs_of(self._process.pid, self._stub_path())}
        return [
            f"the python stub of model `{stub.model}` (instance {stub.instance}, pid {stub.pid}) died"
            for stub in self._stubs
            if stub.pid not in alive
        ]

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.options.startup_timeout
        url = f"http://127.0.0.1:{self._port_of_triton_http()}/v2/health/ready"
        next_look = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                self._drain_log()
                raise startup_failure(code, self._log_lines(), self.log_file)
            if time.monotonic() > next_look:
                next_look = time.monotonic() + 0.5
                stuck = self._stub_failures()
                if stuck:
                    raise ModelLoadError(stuck[0])
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError, OSError),
                urllib.request.urlopen(url, timeout=1.0) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(_POLL_INTERVAL_S)
        failures = self._load_failures()
        if failures:
            raise ModelLoadError(failures[0])
        raise ServerStartTimeoutError(
            f"tritonserver was not ready after {self.options.startup_timeout:g} s "
            f"(expected /v2/health/ready to answer 200); see {self.log_file}"
        )

    def _log_lines(self) -> list[str]:
        if self.log_file is None or not self.log_file.exists():
            return []
        return self.log_file.read_text(errors="replace").splitlines()

    def load_failures(self) -> list[str]:
        """One line per model that failed to load (``exit_on_error=False`` serves the others)."""
        return [*self._load_failures(), *self._stub_failures()]

    def _load_failures(self) -> list[str]:
        return load_failures(self._log_lines())

    def _stub_failures(self) -> list[str]:
        return stub_failures(self._log_lines(), self.repo)

    def _terminate(self, grace: float) -> int | None:
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def stop(self) -> int | None:
        """SIGTERM the server and wait: in-flight requests finish within ``exit_timeout`` seconds.

        A server that crashed leaves its python stubs running; they are reaped here."""
        if self._guard is not None and self.is_running():
            # Triton keeps serving open keep-alive connections while it drains; the guard does not.
            self._guard.drain(self.options.exit_timeout)
        self._drain_grpc()
        self._stop_health()
        code = self._stop_triton(grace=self.options.exit_timeout + 10.0)
        self._close_guard()
        return code

    def _stop_triton(self, grace: float) -> int | None:
        pid = self.pid
        code = self._terminate(grace=grace)
        self._process = None
        self._stubs = []
        if pid is not None:
            if code == 0:
                forget(state_dir(), pid)
            with contextlib.suppress(OSError, ServerError):
                self.reap()
        if self._log_pump is not None:  # after the reap: orphaned stubs hold the log pipe open
            self._log_pump.join()
            self._log_pump = None
        return code

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the server process exits (for ``tritonkit serve``)."""
        if self._process is None:
            return None
        return self._process.wait(timeout=timeout)

    def tail(self, lines: int = 20) -> list[str]:
        """The last lines of the server log."""
        return self._log_lines()[-lines:]

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:  # a forgotten server must not outlive the interpreter
        with contextlib.suppress(Exception):
            if self._process is not None and self._process.poll() is None:
                self._process.kill()
