"""Process supervision for the embedded server: how ``tritonserver`` is spawned and what it leaves.

This module owns the operating-system side of :class:`~tritonkit.serve.embedded.EmbeddedServer`:

* spawning ``tritonserver`` in its own session, bound to the life of its wrapper
  (``prctl(PR_SET_PDEATHSIG)``), with the open-file limit raised to its hard maximum;
* hiding the admin key in the child's command line once Triton has parsed it
  (Triton 2.51 reads options only from ``argv``: no file, no environment variable);
* finding the python-backend stubs of a server and noticing when one has died;
* reaping what a dead server left behind: stubs whose server is gone (they outlive it for minutes
  and ignore SIGTERM) and their ``/dev/shm`` regions.

A stub's command line names everything needed to tell it apart from unrelated processes:
``<backends>/python/triton_python_backend_stub <model.py> <shm region> <size> <growth> <server pid>
<backends>/python <msg size> <instance name> <platform>``. Only stubs whose executable is the given
private stub path, owned by this user, and whose parent is no longer the server named in their
command line are ever killed; only regions named by such stubs are ever removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = [
    "LogPump",
    "Stub",
    "forget",
    "hide_in_cmdline",
    "reap_orphan_stubs",
    "record_regions",
    "remove_stale_regions",
    "spawn",
    "stubs_of",
]

_PR_SET_PDEATHSIG = 1
_REGION = re.compile(r"triton_python_backend_shm_region_[0-9A-Za-z_-]+")
_SHM = Path("/dev/shm")


@dataclasses.dataclass(frozen=True)
class Stub:
    """One python-backend stub process, read from ``/proc``."""

    pid: int
    parent: int  # the process's real parent now
    server: int  # the server pid named in its command line
    region: str  # its /dev/shm region
    instance: str  # e.g. ``add_one_0_0``

    @property
    def model(self) -> str:
        """The model name: the instance name less its ``_<group>_<index>`` suffix."""
        return self.instance.rsplit("_", 2)[0] if self.instance.count("_") >= 2 else self.instance


def _preexec(parent: int, prctl: Callable[..., int] | None) -> Callable[[], None]:
    # Runs in the forked child before exec: only calls resolved in the parent (no dlopen here,
    # whose loader lock another thread may have held at fork time).
    def run() -> None:
        # The server may hold one socket per client connection: a low soft limit made libevent log
        # "Too many open files" millions of times. Raise it to the hard limit the user may have.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        if prctl is not None:
            # SIGTERM (not SIGKILL) when the wrapper dies, so Triton still stops its stubs and
            # removes their regions. The kernel ties this to the forking *thread*.
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:  # the wrapper died before prctl took effect
                os._exit(1)

    return run


def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not Linux/glibc: no death signal
        return None


def spawn(
    command: Sequence[str], *, log: int | IO[bytes], env: Mapping[str, str], cwd: Path
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session; it gets SIGTERM when this process dies.

    The death signal is armed only from the main thread: the kernel sends it when the thread that
    forked exits, and a worker thread may end long before the server should.
    """
    prctl = _prctl() if threading.current_thread() is threading.main_thread() else None
    return subprocess.Popen(
        list(command),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,  # Ctrl-C in a terminal must not reach Triton before we stop it
        preexec_fn=_preexec(os.getpid(), prctl),  # noqa: PLW1509 - nothing in it takes a lock
    )


class LogPump:
    """Copy a child's output into ``path``, keeping at most two files of ``max_bytes`` each.

    Triton has no log rotation and can write hundreds of MB in seconds (libevent repeating
    "Too many open files" once per failed accept); past ``max_bytes`` the file becomes
    ``<path>.1`` (replacing the previous one) and a new file starts. Ends with the child's output.
    A write that fails (a full disk: ENOSPC) drops the log, said once on stderr, and the pump keeps
    draining the pipe: a child blocked on a full pipe stops answering.
    """

    def __init__(self, source: IO[bytes], path: Path, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max_bytes
        self.rotations = 0
        self.dropped = 0  # bytes of output not written (the log failed)
        self.failure: str | None = None  # why the log was dropped
        self._source = source
        self._thread = threading.Thread(target=self._run, name="tritonkit-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        size = 0
        try:
            out: IO[bytes] | None = open(self.path, "wb")  # noqa: SIM115 - reopened on rotation
        except OSError as exc:
            self._fail(None, exc)
            out = None
        try:
            while chunk := os.read(self._source.fileno(), 1 << 16):
                if out is None:  # the log failed: keep draining, or Triton blocks on a full pipe
                    self.dropped += len(chunk)
                    continue
                try:
                    if size + len(chunk) > self.max_bytes and size > 0:
                        out.close()
                        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                        out = open(self.path, "wb")  # noqa: SIM115
                        size = 0
                        self.rotations += 1
                    out.write(chunk)
                    out.flush()
                    size += len(chunk)
                except OSError as exc:  # ENOSPC, EIO, a quota: drop the log, never the server
                    self._fail(out, exc)
                    out = None
                    self.dropped += len(chunk)
        except OSError:
            pass  # the pipe's read failed: the child's output has ended
        finally:
            if out is not None:
                with contextlib.suppress(OSError):
                    out.close()
            self._source.close()

    def _fail(self, out: IO[bytes] | None, exc: OSError) -> None:
        """Close the log after a failed write and say so once; its output is dropped from here on."""
        if out is not None:
            with contextlib.suppress(OSError):
                out.close()  # flushes what is buffered: may fail the same way
        self.failure = f"{exc.strerror or type(exc).__name__} (errno {exc.errno})"
        print(
            f"tritonkit: warning: writing the server log {self.path} failed: {self.failure}; "
            "tritonserver's output is dropped from here on (the server keeps serving)",
            file=sys.stderr,
            flush=True,
        )

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name (which may itself hold spaces or parentheses).
    return text.rsplit(")", 1)[1].split()


def hide_in_cmdline(pid: int, secret: str, *, wait_s: float = 10.0, ready: Callable[[], bool]) -> bool:
    """Overwrite ``secret`` in ``pid``'s argument memory once ``ready()`` says it has been parsed.

    ``/proc/<pid>/cmdline`` (what ``ps`` shows every local user) reads that memory; Triton copied
    its options into its own strings while parsing them, so the original bytes are no longer used.
    Writing ``/proc/<pid>/mem`` needs ptrace rights over the child, which a parent normally has;
    returns False (and changes nothing) where it does not.
    """
    deadline = time.monotonic() + wait_s
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 48:
        return False
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (proc(5), fields 48 and 49)
    needle = secret.encode()
    try:
        with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            args = mem.read(end - start)
            at = args.find(needle)
            while at >= 0:
                mem.seek(start + at)
                mem.write(b"*" * len(needle))
                at = args.find(needle, at + len(needle))
    except OSError:
        return False
    return True


def _stub(pid: int, stub_path: str, uid: int) -> Stub | None:
    proc = Path(f"/proc/{pid}")
    try:
        if proc.stat().st_uid != uid:
            return None
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if len(argv) < 9 or argv[0].decode(errors="replace") != stub_path:
        return None
    fields = _stat_fields(pid)
    region = argv[2].decode(errors="replace")
    if fields is None or not argv[5].isdigit() or not _REGION.fullmatch(region):
        return None
    return Stub(pid, int(fields[1]), int(argv[5]), region, argv[8].decode(errors="replace"))


def _all_stubs(stub_path: Path) -> list[Stub]:
    path, uid = str(stub_path), os.getuid()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stub = _stub(int(entry.name), path, uid)
            if stub is not None:
                found.append(stub)
    return found


def stubs_of(server_pid: int, stub_path: Path) -> list[Stub]:
    """The live stubs the server ``server_pid`` started (its children running ``stub_path``)."""
    return [s for s in _all_stubs(stub_path) if s.server == server_pid and s.parent == server_pid]


def reap_orphan_stubs(stub_path: Path) -> list[Stub]:
    """SIGKILL every stub of ``stub_path`` whose server is gone, and remove its ``/dev/shm`` region.

    A stub is an orphan when its parent is no longer the server its command line names (the kernel
    re-parented it): its server died. Stubs of running servers (other users of the same private
    backend folder included) are never touched. Returns the stubs reaped.
    """
    orphans = [s for s in _all_stubs(stub_path) if s.parent != s.server]
    for stub in orphans:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(stub.pid, signal.SIGKILL)
    for stub in orphans:
        deadline = time.monotonic() + 2.0
        while not _gone(stub.pid) and time.monotonic() < deadline:  # its region must not be in use
            time.sleep(0.02)
        _remove_region(stub.region)
    return orphans


def _gone(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X")


def _remove_region(name: str) -> None:
    if not _REGION.fullmatch(name):
        return
    region = _SHM / name
    with contextlib.suppress(FileNotFoundError, PermissionError):
        if region.stat().st_uid == os.getuid():
            region.unlink()


def _identity(pid: int) -> str | None:
    """``<pid>-<start time>``: a pid the kernel later reuses gets another start time."""
    fields = _stat_fields(pid)
    return None if fields is None else f"{pid}-{fields[19]}"


def record_regions(state_dir: Path, server_pid: int, regions: Sequence[str]) -> None:
    """Note the server's stub regions, so a later start can remove them if the server dies."""
    identity = _identity(server_pid)
    if identity is not None and regions:
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / f"{identity}.regions").write_text("".join(f"{r}\n" for r in sorted(regions)))


def forget(state_dir: Path, server_pid: int) -> None:
    """Drop the record of a server that stopped cleanly."""
    for path in state_dir.glob(f"{server_pid}-*.regions"):
        path.unlink(missing_ok=True)


def remove_stale_regions(state_dir: Path) -> list[str]:
    """Remove the regions recorded for servers no longer running; returns the names removed."""
    removed: list[str] = []
    for path in state_dir.glob("*-*.regions") if state_dir.is_dir() else ():
        pid = path.name.split("-", 1)[0]
        if pid.isdigit() and _identity(int(pid)) == path.name.removesuffix(".regions"):
            continue  # that server still runs
        for name in path.read_text().split():
            if (_SHM / name).exists():
                _remove_region(name)
                removed.append(name)
        path.unlink(missing_ok=True)
    return removed
