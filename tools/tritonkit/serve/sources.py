"""Files from elsewhere: what a model repository may not make tritonserver read.

A repository is untrusted input as much as a request is: a model folder that is a symlink to
``/home/someone/model``, a version folder or file linked out of the repository, or an ONNX graph whose
external data names ``../../etc/passwd`` or ``/etc/passwd`` would have the server read (and serve
the bytes of) files the repository does not hold. :func:`foreign_files` finds each of them, and
:func:`refuse_foreign` is what :class:`~tritonkit.serve.embedded.EmbeddedServer` runs before it starts
tritonserver; ``tritonkit check`` reports the same (``repository.check``), so a repository check passes
is one the server serves. Links that stay inside the repository are served as they are.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tritonkit.errors import ServerError

__all__ = [
    "external_data_locations",
    "external_data_problems",
    "foreign_files",
    "location_problem",
    "refuse_foreign",
    "trusting",
]

#: Prefix of the staging folders a repository writer works in (``repository.staging``'s).
_STAGING_PREFIX = ".tritonkit-staging-"


def location_problem(version_dir: Path, location: str) -> str | None:
    """What is wrong with an ONNX external-data ``location`` of a graph in ``version_dir``, or None:
    it must be a relative path that stays in the version folder, links resolved."""
    shown = location[:120]
    if os.path.isabs(location) or location.startswith("\\"):
        return f"external data `{shown}` is an absolute path; expected a file inside the version folder"
    home = version_dir.resolve()
    target = (version_dir / location).resolve()
    if not target.is_relative_to(home):
        return f"external data `{shown}` resolves outside the version folder (to {str(target)[:120]!r})"
    return None


def external_data_locations(onnx_path: Path) -> list[str]:
    """The external-data locations an ONNX file's tensors name (initializers, constants, subgraphs);
    none when it does not parse (the server reports that itself)."""
    import onnx  # noqa: PLC0415 - only where a repository holds ONNX graphs
    from google.protobuf.message import DecodeError  # noqa: PLC0415

    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError):  # the loader's to report
        return []
    found: set[str] = set()
    graphs: list[Any] = [model.graph]
    while graphs:
        graph = graphs.pop()
        tensors: list[Any] = list(graph.initializer)
        for node in graph.node:
            for attr in node.attribute:
                tensors.extend([attr.t] if attr.HasField("t") else list(attr.tensors))
                graphs.extend([attr.g] if attr.HasField("g") else list(attr.graphs))
        for tensor in tensors:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                found.update(e.value for e in tensor.external_data if e.key == "location")
    return sorted(found)


def _links_out(model_dir: Path, root: Path) -> list[str]:
    problems = []
    for dirpath, dirnames, filenames in os.walk(model_dir):
        for name in (*dirnames, *filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                target = path.resolve()
                if not _inside(target, root):
                    rel = path.relative_to(model_dir)
                    problems.append(f"`{rel}` is a symlink leaving the repository (to {str(target)[:120]!r})")
    return problems


#: folders outside the repository whose files a link may reach: tritonkit's own views of other
#: repositories (the fleet's per-group repositories link the models' folders), set by :func:`trusting`
_TRUSTED: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar("tritonkit_trusted", default=())


@contextlib.contextmanager
def trusting(folders: Iterable[Path]) -> Iterator[None]:
    """Within the block, links into ``folders`` count as inside the repository (a view tritonkit made
    of repositories it was given, not files a repository brought from elsewhere)."""
    token = _TRUSTED.set((*_TRUSTED.get(), *(Path(f).resolve() for f in folders)))
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def _inside(target: Path, root: Path) -> bool:
    return target.is_relative_to(root) or any(target.is_relative_to(t) for t in _TRUSTED.get())


def foreign_files(repo: Path) -> list[str]:
    """``MODEL: problem`` lines for every file from elsewhere the server would read in ``repo``."""
    root = repo.resolve()
    problems: list[str] = []
    for entry in sorted(repo.iterdir()):
        if entry.is_symlink():
            target = entry.resolve()
            if entry.is_dir() and not _inside(target, root):
                problems.append(
                    f"{entry.name}: the model folder is a symlink leaving the repository (to {str(target)[:120]!r})"
                )
            continue  # one inside the repository is checked where it points
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        problems.extend(f"{entry.name}: {p}" for p in _links_out(entry, root))
        problems.extend(f"{entry.name}: {p}" for p in external_data_problems(entry))
    return problems


def external_data_problems(model_dir: Path) -> list[str]:
    """One line per ONNX external-data location, in any graph of a version of ``model_dir``, that is
    absolute or leaves its version folder (:func:`location_problem`)."""
    problems: list[str] = []
    try:
        versions = sorted(p for p in model_dir.iterdir() if p.name.isdigit() and p.is_dir())
    except OSError:
        return problems  # unreadable: the server reports it
    for version_dir in versions:
        for onnx_path in sorted(version_dir.glob("*.onnx")):
            for location in external_data_locations(onnx_path):
                problem = location_problem(version_dir, location)
                if problem is not None:
                    problems.append(f"version {version_dir.name} `{onnx_path.name}`: {problem}")
    return problems


def refuse_foreign(repo: Path) -> None:
    """:class:`ServerError` (one line) when ``repo`` holds a staging folder a killed writer left, or a
    file from elsewhere (:func:`foreign_files`); the server is not started."""
    leftovers = sorted(p.name for p in repo.glob(f"{_STAGING_PREFIX}*"))
    if leftovers:
        # Triton would try to load it as a model and fail the start naming no model of ours.
        raise ServerError(
            f"model repository {repo} holds {leftovers[0]}, left by an interrupted build; "
            "the next `tritonkit build` removes it (or remove it by hand)"
        )
    problems = foreign_files(repo)
    if problems:
        more = (
            f" (and {len(problems) - 1} more; `tritonkit check --repo {repo}` lists them)"
            if len(problems) > 1
            else ""
        )
        raise ServerError(
            f"not serving {repo}: {problems[0]}{more}; expected every file the server reads inside the repository"
        )
