"""Steps that run native code on a user's graph, in a child process: export, graph clean-up,
FP16 conversion, INT8 calibration and quantization, the accuracy gate's ONNX Runtime sessions and
the TensorRT builder (:func:`run`).

A native crash there (a segfault in ONNX Runtime while it creates a session for an FP16 graph, an
abort in the exporter) would otherwise kill the build with exit 139 and no word. In a child it
becomes one :class:`StepCrashError` line naming the step, the model and the signal; the repository is
untouched because nothing is written before every step has passed. Each failure leaves a folder
(``$TRITONKIT_FAILURE_DIR``, default ``$XDG_CACHE_HOME/tritonkit/failures``) with the worker's log,
the step's inputs (files copied, arguments pickled) and ``repro.py``, which runs that one step alone
in the calling process, as Model Navigator's execution context does.

One worker serves every step of a build (:func:`session`): it is started at the first step, so a
build that needs no native step starts none, and torch, ONNX Runtime and Polygraphy are imported
once per build, not once per step. Its stdout and stderr (the exporter's progress lines and graph
dumps, ONNX Runtime's warnings, faulthandler's stack on a crash) go to its log, never to the
terminal. A step outside a session gets a worker of its own.

For tests and debugging only: ``TRITONKIT_TEST_CRASH=<step>`` makes the worker (and ``repro.py``)
dereference a null pointer before running the step so named (e.g. ``fp16 accuracy gate``): a real
SIGSEGV in native code. ``TRITONKIT_IN_PROCESS=1`` runs every step in the calling process.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import datetime
import faulthandler
import os
import pickle
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from tritonkit.errors import BuildError, TritonKitError

__all__ = [
    "FAILURE_DIR_ENV",
    "IN_PROCESS_ENV",
    "TEST_CRASH_ENV",
    "StepCrashError",
    "StepError",
    "UnpicklableError",
    "failure_root",
    "replay",
    "run",
    "session",
]

TEST_CRASH_ENV = "TRITONKIT_TEST_CRASH"
IN_PROCESS_ENV = "TRITONKIT_IN_PROCESS"
FAILURE_DIR_ENV = "TRITONKIT_FAILURE_DIR"
_HEADER = struct.Struct("!Q")
T = TypeVar("T")


class StepCrashError(BuildError):
    """A step's worker died (a signal or an exit) instead of answering."""


class UnpicklableError(BuildError):
    """A step's arguments cannot travel to the worker (a class defined inside a function, a module
    only the caller has)."""


class StepError(BuildError):
    """A step failed and wrote its detail (traceback, the library's own output) to the worker log;
    the line the user sees names that log."""


@dataclass
class _Task:
    step: str
    func: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    sys_path: list[str]
    #: ``TRITONKIT_TEST_CRASH`` as the caller had it when the step was sent.
    crash: str | None = None
    #: The caller's environment when the step was sent: the worker runs the step in it.
    environ: dict[str, str] | None = None


def failure_root() -> Path:
    """Where failure folders go: ``$TRITONKIT_FAILURE_DIR``, else ``$XDG_CACHE_HOME/tritonkit/failures``."""
    if os.environ.get(FAILURE_DIR_ENV):
        return Path(os.environ[FAILURE_DIR_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tritonkit" / "failures"


def _execute(task: _Task, crash: str | None) -> Any:
    """Run one step here; the test crash hook fires first (a real null-pointer read)."""
    if crash == task.step:
        ctypes.string_at(0)  # SIGSEGV in native code, for the containment test
    if task.environ is not None and task.environ != os.environ:
        os.environ.clear()
        os.environ.update(task.environ)
    for entry in reversed(task.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    return task.func(*task.args, **task.kwargs)


# --- the worker (child side) ----------------------------------------------------------------------
def _pickled(payload: Any) -> bytes:
    try:
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RuntimeError, NotImplementedError) as exc:
        # RuntimeError: torch refuses to pickle parametrized modules (weight_norm: Wav2Vec2, HiFi-GAN)
        raise UnpicklableError(f"cannot send to the worker: {exc}") from None


def _send(stream: IO[bytes], data: bytes) -> None:
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive_bytes(stream: IO[bytes]) -> bytes:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return data


def _answer(task: _Task) -> tuple[str, Any]:
    try:
        return "ok", _execute(task, task.crash)
    except TritonKitError as exc:
        if isinstance(exc, StepError):
            traceback.print_exc()
        return "error", exc
    except BaseException as exc:  # the library's own failure: the user gets a line, the log the rest
        traceback.print_exc()
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return "failed", f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _serve(log_path: str) -> None:
    """The worker's loop: tasks from stdin, answers on the original stdout; fd 1 and 2 go to the log."""
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (lives as long as the process)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 (lives as long as the process)
    faulthandler.enable(file=sys.stderr)
    while True:
        try:
            data = _receive_bytes(requests)
        except EOFError:
            return
        try:
            task = pickle.loads(data)
        except Exception as exc:  # a class or module the caller has and this process cannot import
            traceback.print_exc()
            _send(answers, _pickled(("unpicklable", f"{type(exc).__name__}: {exc}")))
            continue
        print(f"--- {datetime.datetime.now().isoformat(timespec='seconds')} {task.step}", flush=True)
        status, value = _answer(task)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            answer = _pickled((status, value))
        except UnpicklableError:
            answer = _pickled(("failed", f"{type(value).__name__}: {value}"))
        _send(answers, answer)


# --- the parent side ------------------------------------------------------------------------------
def _signal_name(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-returncode).name
        return f"signal {-returncode}"
    return f"exit code {returncode}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "step"


class _Worker:
    """One child process running steps in order."""

    def __init__(self) -> None:
        import tritonkit  # noqa: PLC0415 (where this package lives: the child imports it from there)

        self.folder = Path(tempfile.mkdtemp(prefix="tritonkit-worker-"))
        self.log = self.folder / "worker.log"
        env = dict(os.environ)
        root = str(Path(tritonkit.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tritonkit.convert.isolate", str(self.log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def call(self, task: _Task) -> tuple[str, Any]:
        """(status, value) of the step; ("crashed", returncode) when the worker died. UnpicklableError
        when ``task`` cannot be sent or the worker cannot read it."""
        assert self.process.stdin is not None and self.process.stdout is not None
        data = _pickled(task)
        try:
            _send(self.process.stdin, data)
            answer = _receive_bytes(self.process.stdout)
        except (EOFError, BrokenPipeError, OSError):
            return "crashed", self.process.wait()
        try:
            status, value = pickle.loads(answer)
        except Exception as exc:  # an exception class this process cannot rebuild
            return "failed", f"the worker's answer cannot be read here ({type(exc).__name__}: {exc})"
        if status == "unpicklable":
            raise UnpicklableError(f"the worker cannot read the `{task.step}` step's arguments: {value}")
        return status, value

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class _Session:
    model: str
    holder: list[_Worker]  # the shared worker, once started (shared with nested sessions)


_session: contextvars.ContextVar[_Session | None] = contextvars.ContextVar("tritonkit_isolate", default=None)


@contextlib.contextmanager
def session(model: str) -> Iterator[None]:
    """Steps run inside share one worker (an enclosing session's, if any), named after ``model``."""
    outer = _session.get()
    holder: list[_Worker] = outer.holder if outer is not None else []
    token = _session.set(_Session(model, holder))
    try:
        yield
    finally:
        _session.reset(token)
        if outer is None:
            while holder:
                holder.pop().close()


def _relocate(value: Any, files: Path, copied: dict[Path, Path]) -> Any:
    """``value`` with every Path replaced by a copy in ``files`` (a path not yet there: a new name)."""
    if isinstance(value, Path):
        if value not in copied:
            target = files / f"{len(copied):02d}-{value.name}"
            if value.is_dir():
                shutil.copytree(value, target)
            elif value.is_file():
                shutil.copy2(value, target)
                for sibling in _external_data(value):
                    with contextlib.suppress(OSError):
                        shutil.copy2(value.parent / sibling, files / sibling)
            copied[value] = target
        return copied[value]
    if isinstance(value, list | tuple):
        return type(value)(_relocate(v, files, copied) for v in value)
    if isinstance(value, dict):
        return {k: _relocate(v, files, copied) for k, v in value.items()}
    return value


def _external_data(path: Path) -> list[str]:
    if path.suffix != ".onnx":
        return []
    try:
        from tritonkit.repository.onnx_io import external_data_files, load_model  # noqa: PLC0415 (only a failure needs it)

        return list(external_data_files(load_model(path, check=False)))
    except TritonKitError:
        return []


def _keep(task: _Task, model: str, log: Path | None) -> Path:
    """The failure folder of ``task``: its log, its inputs, and ``repro.py``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    root = failure_root()
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{_slug(model or 'build')}-{_slug(task.step)}-{stamp}-", dir=root))
    files = folder / "files"
    files.mkdir()
    if log is not None and log.is_file():
        shutil.copy2(log, folder / "worker.log")
    copied: dict[Path, Path] = {}
    try:
        args = _relocate(task.args, files, copied)
        kwargs = _relocate(task.kwargs, files, copied)
        (folder / "step.pkl").write_bytes(
            pickle.dumps(_Task(task.step, task.func, args, kwargs, task.sys_path))  # replay: its own env
        )
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
        (folder / "step.pkl.error").write_text(f"the step's inputs could not be kept: {exc}\n")
    (folder / "repro.py").write_text(
        f'"""Runs the step `{task.step}` of model `{model}` alone, in this process, with the inputs\n'
        'the build gave it (files/, step.pkl). Run: python repro.py"""\n'
        "import sys\n"
        f"sys.path[:0] = {task.sys_path!r}\n"
        "from pathlib import Path\n"
        "from tritonkit.convert.isolate import replay\n"
        "print(replay(Path(__file__).resolve().parent))\n",
        encoding="utf-8",
    )
    return folder


def replay(folder: Path) -> Any:
    """Run the step kept in ``folder`` (by a failed build) in this process and return its result."""
    task: _Task = pickle.loads((Path(folder) / "step.pkl").read_bytes())
    return _execute(task, os.environ.get(TEST_CRASH_ENV))


def _outcome(task: _Task, model: str, status: str, value: Any, log: Path) -> Any:
    if status == "ok":
        return value
    if status == "error" and not isinstance(value, StepError):
        raise value  # the step's own one-line error (too few samples, a failed gate...)
    folder = _keep(task, model, log)
    where = f"reproduce it alone: python {folder / 'repro.py'} (log: {folder / 'worker.log'})"
    named = f"{task.step} for model `{model}`" if model else task.step
    if status == "crashed":
        raise StepCrashError(f"{named} crashed with {_signal_name(int(value))}; nothing was written; {where}")
    if status == "error":
        raise type(value)(f"{value}; details: {folder / 'worker.log'}")
    raise StepError(f"{named} failed: {value}; nothing was written; {where}")


def run(step: str, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in the build's worker (module docstring). ``func`` must be a
    module-level function, its arguments and result picklable; ``step`` names it in a failure."""
    if os.environ.get(IN_PROCESS_ENV) == "1":
        return func(*args, **kwargs)
    task = _Task(step, func, args, kwargs, list(sys.path), os.environ.get(TEST_CRASH_ENV), dict(os.environ))
    current = _session.get()
    holder: list[_Worker] = current.holder if current is not None else []
    if not holder:
        holder.append(_Worker())
    worker = holder[0]
    try:
        status, value = worker.call(task)
        if status == "crashed":
            holder.clear()  # the next step (of another build in this session) starts a fresh one
        return _outcome(task, current.model if current else "", status, value, worker.log)  # type: ignore[no-any-return]
    finally:
        if current is None or worker not in holder:
            worker.close()


if __name__ == "__main__":
    _serve(sys.argv[1])
