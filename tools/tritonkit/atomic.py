"""Writing files that are never seen half-written: the package's one atomic-write helper.

A write goes to a temporary file in the target's own folder (same file system, so the last step is
a ``rename``), is flushed to disk (``fsync``), renamed over the target (``os.replace``: readers see
the old file or the new one, never a mix) and the folder itself is flushed, so the rename survives
a crash. A failure leaves the old file as it was and no temporary file; a process killed mid-write
leaves only a temporary file named ``.<name>.<random>.tmp`` beside the target
(:func:`leftovers` finds them). New files and folders get the mode the process umask gives
(``mkstemp`` and ``mkdtemp`` would make them 0600 and 0700, unreadable to a server running as
another user).

Who writes what: everything written into a model repository goes through :mod:`tritonkit.repository`,
which uses this module; reports, exports and manifests outside a repository call it directly.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tritonkit.errors import TritonKitError

__all__ = [
    "TEMP_SUFFIX",
    "fsync_dir",
    "fsync_tree",
    "leftovers",
    "make_dir",
    "replace_dir",
    "umask",
    "write_bytes",
    "write_text",
    "write_with",
]

#: Suffix of the temporary files a write makes beside its target.
TEMP_SUFFIX = ".tmp"


def umask() -> int:
    """The process umask, read without changing it where Linux reports it (``/proc/self/status``)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    current = os.umask(0o022)  # pragma: no cover - kernels before 4.7 (no Umask line)
    os.umask(current)  # pragma: no cover
    return current  # pragma: no cover


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush every file and folder below ``root`` (and ``root``), so a crash after the rename that
    publishes it never exposes empty files."""
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_symlink():
            continue
        if path.is_dir():
            fsync_dir(path)
        else:
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(root)


def _folder(path: Path, error: type[TritonKitError]) -> Path:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise error(f"cannot write {path}: folder {folder} does not exist; expected an existing folder")
    return folder


def write_with(
    path: str | os.PathLike[str],
    writer: Callable[[BinaryIO], object],
    *,
    error: type[TritonKitError] = TritonKitError,
) -> Path:
    """Write ``path`` atomically with ``writer(binary file)``; ``error`` (one line naming the path and
    the cause) when the folder is missing or the file system refuses. Returns the path."""
    target = Path(path)
    folder = _folder(target, error)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=folder)
    except OSError as exc:
        raise error(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as fh:
            writer(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        with contextlib.suppress(OSError):  # the file is in place; a folder that cannot sync is no error
            fsync_dir(folder)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise error(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_bytes(
    path: str | os.PathLike[str], data: bytes, *, error: type[TritonKitError] = TritonKitError
) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    return write_with(path, lambda fh: fh.write(data), error=error)


def write_text(
    path: str | os.PathLike[str], text: str, *, error: type[TritonKitError] = TritonKitError
) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"), error=error)


def leftovers(folder: Path, name: str) -> list[Path]:
    """Temporary files that writes of ``folder/name`` killed mid-way left beside it."""
    if not folder.is_dir():
        return []
    return sorted(folder.glob(f".{name}.*{TEMP_SUFFIX}"))


def make_dir(parent: Path, prefix: str) -> Path:
    """A new, uniquely named folder in ``parent`` whose mode follows the umask (``mkdtemp``'s 0700
    would survive a rename into place)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(folder, 0o777 & ~umask())
    return folder


def replace_dir(staged: Path, final: Path) -> None:
    """Rename the complete folder ``staged`` to ``final`` (which must not exist, or be an empty
    folder) and flush both to disk."""
    fsync_tree(staged)
    os.replace(staged, final)
    with contextlib.suppress(OSError):
        fsync_dir(final.parent)
