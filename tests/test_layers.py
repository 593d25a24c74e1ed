"""The package's shape: stage packages, no import cycle (function-level imports included), small modules.

Imports are read from the source with :mod:`ast`, so an import inside a function counts as much as
one at the top: a cycle held apart only by a deferred import is still a cycle here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tools" / "tritonkit"
MAX_LINES = 600
#: the longest a library function may be, its signature and docstring included
MAX_FUNCTION_LINES = 80

#: Stage packages, lowest first: a package may import only from packages before it in this list (or
#: itself). ``backends`` is the floor: the code Triton runs (runners copied into versions, the C++
#: backend), importing nothing from tritonkit (:func:`test_backends_import_nothing_from_tritonkit`).
#: ``commands``, ``cli`` and ``demo`` sit on top (``serve`` sits low: ``repository.check`` reports
#: what ``serve.sources`` refuses; ``deploy`` sits below ``loadtest``: the load-test scenario names it
#: checks are passed in, not imported) and nothing below imports them. ``measure`` (load generation,
#: windows, statistics, payloads, provenance) sits under every package that measures: ``loadtest``,
#: ``tune`` and ``fleet``.
LAYERS: tuple[str, ...] = (
    "backends",
    "errors",
    "machine",
    "atomic",
    "config",
    "serve",
    "repository",
    "convert",
    "deploy",
    "client",
    "measure",
    "loadtest",
    "tune",
    "fleet",
    "commands",
    "cli",
    "demo",
    "__main__",
)


#: The floors of ``convert``, lowest first: a module of ``tritonkit.convert`` may import only from its
#: own floor or the floors before it. A floor is a stage sub-package or, for a module left in
#: ``convert/`` itself, that module. ``isolate`` (the build worker every native step runs in) is the
#: floor under every stage; the stages follow the build's order (the spec, the source's graph, the data,
#: the precisions and their gate, the targets); the orchestration sits on top.
CONVERT_FLOORS: tuple[str, ...] = (
    "isolate",
    "spec",
    "graph",
    "inputs",
    "precisions",
    "targets",
    "versions",
    "report",
    "pipeline",
    "onnx_import",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """(imported tritonkit module, line) for every import in ``path``, wherever it sits."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tritonkit"):
                    yield _resolve(alias.name, known), node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("tritonkit"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else _resolve(base, known)), node.lineno


def _resolve(name: str, known: set[str]) -> str:
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for target, _ in _imports(name, path, known):
            if target != name and target in known:
                graph[name].add(target)
    return graph


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    return LAYERS.index(top) if top in LAYERS else -1


def test_no_import_cycle_between_tritonkit_modules() -> None:
    graph = _graph()
    # Tarjan's strongly connected components: any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == [], f"import cycles (function-level imports included): {cycles}"


def test_stage_packages_import_only_lower_layers() -> None:
    graph = _graph()
    unknown = sorted({m for m in graph if m != "tritonkit" and _layer(m) < 0})
    assert unknown == [], f"modules outside every stage package (add them to LAYERS): {unknown}"
    upward = sorted(
        f"{src} -> {dst}"
        for src, targets in graph.items()
        for dst in targets
        if src != "tritonkit" and dst != "tritonkit" and _layer(dst) > _layer(src)
    )
    assert upward == [], "imports from a higher layer:\n" + "\n".join(upward)


def _convert_floor(module: str) -> int:
    parts = module.split(".")
    return CONVERT_FLOORS.index(parts[2]) if len(parts) > 2 and parts[2] in CONVERT_FLOORS else -1


def test_convert_stages_import_only_lower_floors() -> None:
    graph = _graph()
    inside = {m for m in graph if m.startswith("tritonkit.convert.")}
    unknown = sorted(m for m in inside if _convert_floor(m) < 0)
    assert unknown == [], f"convert modules outside every floor (add them to CONVERT_FLOORS): {unknown}"
    upward = sorted(
        f"{src} -> {dst}"
        for src in inside
        for dst in graph[src]
        if dst in inside and _convert_floor(dst) > _convert_floor(src)
    )
    assert upward == [], "convert imports from a higher floor:\n" + "\n".join(upward)


def test_convert_floors_are_the_folder() -> None:
    """Every floor named is there (a sub-package or a module of ``convert/``), and ``convert/`` holds
    nothing else: a new stage or module is placed in the order before it lands."""
    convert = PACKAGE / "convert"
    present = {p.stem for p in convert.glob("*.py") if p.name != "__init__.py"} | {
        p.name for p in convert.iterdir() if (p / "__init__.py").is_file()
    }
    assert present == set(CONVERT_FLOORS)


def test_backends_import_nothing_from_tritonkit() -> None:
    """The floor imports only itself (its runners' type-checking imports of their siblings): not the
    package root, not ``errors``; a runner is copied into a version and runs in the stub without
    tritonkit."""
    modules = _modules()
    known = set(modules)
    offenders = sorted(
        f"{name}:{line} imports {target}"
        for name, path in modules.items()
        if name.startswith("tritonkit.backends")
        for target, line in _imports(name, path, known)
        if not target.startswith("tritonkit.backends")
    )
    assert offenders == [], "backends importing the rest of tritonkit:\n" + "\n".join(offenders)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines (at most {MAX_LINES})"


def test_no_library_function_is_long() -> None:
    long = [
        f"{path.relative_to(PACKAGE)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_every_package_says_what_it_owns() -> None:
    missing = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("__init__.py")
        if ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) is None
    ]
    assert missing == [], f"packages without a docstring: {missing}"


def test_library_never_imports_the_benchmarks() -> None:
    """``tritonkit_bench`` sits outside the library package: no ``tritonkit`` module imports it (the
    ``bench`` command loads its sections by name at run time)."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "tritonkit_bench" or n.startswith("tritonkit_bench.") for n in names):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == [], f"library modules importing the benchmarks: {offenders}"
