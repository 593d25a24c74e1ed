"""Where the server's parts live: the ``nvidia-pytriton`` wheel, the private backend folder (with
tritonkit's native backend linked in when a model names it), ports.

Why the set-up is needed: the wheel ships one python-backend stub per Python minor version; the stub
must sit next to ``libtriton_python.so`` and it embeds the system ``libpython``, finding the virtual
environment's packages only when the venv's ``bin`` is first on ``PATH``.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import importlib.util
import os
import shutil
import socket
import sys
from pathlib import Path

from tritonkit.atomic import make_dir, replace_dir
from tritonkit.backends.native import NativeBackendError, prepare_native
from tritonkit.errors import PortInUseError, ServerError, ServerNotInstalledError

__all__ = [
    "TritonInstall",
    "cache_home",
    "check_port",
    "find_triton",
    "free_port",
    "link_native",
    "prepare_backends",
    "state_dir",
]

_INSTALL_HINT = "install it with `pip install 'nvidia-pytriton>=0.7,<0.8'` (or `pip install -e '.[serve]'`)"


@dataclasses.dataclass(frozen=True)
class TritonInstall:
    """Where the wheel's server parts live."""

    binary: Path
    python_backend: Path  # folder holding libtriton_python.so
    stub: Path  # triton_python_backend_stub for the running Python minor version
    caches: Path | None


def find_triton() -> TritonInstall:
    """Locate the ``tritonserver`` binary and python backend inside the ``nvidia-pytriton`` wheel."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServerNotInstalledError(
            f"`tritonserver` not found: the `nvidia-pytriton` wheel is missing; {_INSTALL_HINT}"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    binary = root / "bin" / "tritonserver"
    backend = root / "backends" / "python"
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / minor / "triton_python_backend_stub"
    for what, path in (("tritonserver binary", binary), ("python backend", backend / "libtriton_python.so")):
        if not path.exists():
            raise ServerNotInstalledError(f"{what} not found at {path}; {_INSTALL_HINT}")
    if not stub.exists():
        have = sorted(p.name for p in (root / "python_backend_stubs").iterdir())
        raise ServerNotInstalledError(
            f"no python-backend stub for Python {minor} in nvidia-pytriton; expected one of Python {', '.join(have)}"
        )
    caches = root / "caches"
    return TritonInstall(binary, backend, stub, caches if caches.is_dir() else None)


def prepare_backends(install: TritonInstall) -> Path:
    """A private ``backends/`` folder: the wheel's python backend plus the stub for this Python.

    The wheel's own folder is left untouched (it may be read-only or shared by several venvs);
    the private copy is keyed by the stub so different Python versions never collide.
    """
    digest = hashlib.sha256(str(install.stub.resolve()).encode()).hexdigest()[:12]
    key = f"py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    backends = cache_home() / f"backends-{key}"
    python_dir = backends / "python"
    if (python_dir / "triton_python_backend_stub").exists():
        return backends
    staging = make_dir(_mkdirs(cache_home()), ".backends-")
    (staging / "python").mkdir()
    for entry in install.python_backend.iterdir():
        if entry.name != "__pycache__":
            (staging / "python" / entry.name).symlink_to(entry)
    # A link, not a copy: the stub finds the wheel's bundled libraries through an $ORIGIN-relative
    # RPATH, which the kernel resolves from the link's target.
    (staging / "python" / "triton_python_backend_stub").symlink_to(install.stub)
    try:
        replace_dir(staging, backends)
    except OSError:  # another process prepared it first
        shutil.rmtree(staging, ignore_errors=True)
    return backends


def link_native(backends: Path, repo: Path) -> Path | None:
    """tritonkit's C++ backend (:mod:`tritonkit.backends.native`) linked into ``backends`` when a model
    of ``repo`` names it (compiled once into this cache); None when none does. A compile failure is a
    :class:`~tritonkit.errors.ServerError` with the backend's one line."""
    try:
        return prepare_native(backends, repo, cache_home() / "native")
    except NativeBackendError as err:
        raise ServerError(str(err)) from None


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tritonkit"


def state_dir() -> Path:
    """Where running servers record their stubs' ``/dev/shm`` regions (see ``process.py``)."""
    return cache_home() / "servers"


def _mkdirs(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


#: ports this process was handed lately: the OS may hand a port just released again, and a server
#: given one port for two listeners fails its start ("cannot listen ... at the same address and port")
_HANDED: collections.deque[int] = collections.deque(maxlen=256)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it), none of the last ones handed out here."""
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED:
            break
    _HANDED.append(port)
    return port


def check_port(host: str, port: int, role: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR ignores TIME_WAIT leftovers of a server just stopped (tritonserver binds the
        # same way) but still fails on a port another process is listening on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise PortInUseError(
                f"{role} port {port} is already in use on {host}; expected a free port "
                f"(choose another with --{role}-port, or omit it to pick one)"
            ) from None
