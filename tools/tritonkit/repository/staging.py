"""The mechanics of a write into a model repository: the repository lock, staging folders and the
renames that publish them.

Every writer holds the repository's lock (``fcntl.flock`` on ``<repo>/.tritonkit.lock``) from
choosing a version number to the last rename, so two builds of one model never pick the same
version, and a check made under the lock still holds when the write lands. A writer assembles what
it adds in a staging folder ``.tritonkit-staging-<pid>-<random>`` at the repository root (same file
system: publishing is a rename). A staging folder exists only while its writer holds the lock, so
one that a process holding the lock finds, and whose pid is not a live process here, was left by a
killed writer and is removed (a killed tune write-back's as much as a killed build's). The kernel
drops the lock of a killed process; the lock file itself is removed by the writer that holds it
(a waiter that then finds another file at the path locks again).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from tritonkit.atomic import make_dir
from tritonkit.errors import ModelImportError, RepositoryError

__all__ = [
    "LOCK_FILE",
    "LOCK_TIMEOUT_S",
    "STAGING_PREFIX",
    "commit_into_existing",
    "locked",
    "new_staging",
    "remove_staging",
    "stage_files",
    "staging_dirs",
]

#: Prefix of the folders a write assembles its result in (removed before it returns).
STAGING_PREFIX = ".tritonkit-staging-"
#: The repository's lock file (a file: Triton loads only folders at the root).
LOCK_FILE = ".tritonkit.lock"
#: How long a writer waits for another one to finish before giving up.
LOCK_TIMEOUT_S = 600.0


def _not_writable(root: Path, exc: OSError) -> RepositoryError:
    return RepositoryError(f"repository {str(root)!r} is not writable ({exc.strerror or exc})")


def _same_file(fd: int, path: Path) -> bool:
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (current.st_dev, current.st_ino)


def _acquire(fd: int, root: Path, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RepositoryError(
                    f"repository {str(root)!r} is being written by another process ({LOCK_FILE} held "
                    f"for over {LOCK_TIMEOUT_S:g} s); expected it to finish first"
                ) from None
            time.sleep(0.05)


@contextlib.contextmanager
def locked(root: Path, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the repository's write lock (waiting up to ``timeout`` s for another writer);
    RepositoryError when the repository cannot be written or the wait runs out."""
    path = root / LOCK_FILE
    deadline = time.monotonic() + (LOCK_TIMEOUT_S if timeout is None else timeout)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise _not_writable(root, exc) from None
        try:
            _acquire(fd, root, deadline)
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            break
        os.close(fd)  # the holder before us removed the file we waited on: lock the current one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def staging_dirs(root: Path) -> list[Path]:
    """Staging folders at the repository root (Triton would try to load each as a model)."""
    return sorted(p for p in root.iterdir() if p.name.startswith(STAGING_PREFIX))


def _writer_alive(staging_name: str) -> bool:
    """True when the pid recorded in a staging folder's name is a running process."""
    pid_text = staging_name[len(STAGING_PREFIX) :].split("-", 1)[0]
    if not pid_text.isdigit() or int(pid_text) <= 0:
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def remove_staging(root: Path) -> list[Path]:
    """Remove the staging folders of writers that are gone (call while holding the lock); returns them."""
    removed = []
    for path in staging_dirs(root):
        if _writer_alive(path.name):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed


def new_staging(root: Path) -> Path:
    """A fresh staging folder named after this process (for a person reading a leftover's name)."""
    try:
        return make_dir(root, f"{STAGING_PREFIX}{os.getpid()}-")
    except OSError as exc:
        raise _not_writable(root, exc) from None


def stage_files(version_dir: Path, entries: Mapping[PurePosixPath, Path | bytes]) -> None:
    """Copy (paths) or write (bytes) ``entries`` into ``version_dir``, which is being staged."""
    for rel, value in entries.items():
        dest = version_dir.joinpath(*rel.parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, bytes | bytearray | memoryview):
            dest.write_bytes(bytes(value))
            continue
        source = Path(value)
        if not source.is_file():
            raise ModelImportError(f"file for `{rel}` not found: {str(source)!r}; expected an existing file")
        shutil.copyfile(source, dest)


def commit_into_existing(
    staging: Path, staged_model: Path, model_dir: Path, target: Path, config_file: str, *, force: bool
) -> None:
    """Rename the staged version (and config) into an existing model folder; undo on failure.

    The version in place is moved aside only with ``force`` (its replacement then takes its place).
    """
    if target.exists() and not force:
        raise RepositoryError(
            f"{str(target)!r} appeared while it was being written; expected a new version or --force"
        )
    aside = staging / "replaced-version"
    moved_aside = placed = False
    try:
        if target.exists():
            os.rename(target, aside)
            moved_aside = True
        os.rename(staged_model / target.name, target)
        placed = True
        # os.replace is atomic: readers see the old config or the new one, never a mix.
        os.replace(staged_model / config_file, model_dir / config_file)
    except BaseException:
        if placed:
            os.rename(target, staging / "failed-version")
        if moved_aside:
            os.rename(aside, target)
        raise
