"""Only ``tritonkit.repository`` writes into a model repository, read from the source with :mod:`ast`.

The rule, as this test applies it to every module of the library (``tools/tritonkit``):

- A *repository path* is an expression that mentions a name holding one: a variable, parameter or
  attribute named ``repo``, ``repository``, ``repo_dir``, ``repo_root``, ``model_repository``,
  ``model_dir`` or ``version_dir``; the literal ``"config.pbtxt"`` or the names ``CONFIG_FILE``,
  ``MANIFEST_FILE`` and ``CONFIG_ORIGIN_FILE``; and, within one function (or the module's top
  level), every variable assigned from an expression that mentions one (followed through
  assignments, ``for`` targets, ``with ... as`` and walrus assignments until nothing changes).
- A *write* is a call that changes the file system: the methods ``write_text``, ``write_bytes``,
  ``mkdir``, ``touch``, ``rename``, ``replace`` (one argument: ``Path.replace``), ``unlink``,
  ``rmdir``, ``symlink_to``, ``hardlink_to`` and ``chmod`` on a repository path; the functions
  ``open`` (a mode with ``w``, ``a``, ``x`` or ``+``), ``os.replace``/``rename``/``makedirs``/``mkdir``/
  ``remove``/``unlink``/``rmdir``/``symlink``/``link``/``chmod``, ``shutil.copy``/``copy2``/``copyfile``/
  ``copytree``/``move``/``rmtree``, ``tempfile.mkstemp``/``mkdtemp``/``NamedTemporaryFile``/
  ``TemporaryDirectory``, the atomic helper (``write_text``, ``write_bytes``, ``write_with``,
  ``make_dir``, ``replace_dir``), ``config.save``, ``np.save``, ``onnx.save``/``save_model`` and
  ``torch.save``/``torch.export.save``, with a repository path among their arguments.
- A module may contain such a call only if it is in :data:`ALLOWED`: the repository package. Every
  other road into a repository goes through :class:`tritonkit.repository.ModelRepository`
  (``write_versions``, ``write_config``, ``clone_model``, ``remove_stale_staging``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tools" / "tritonkit"
#: The only modules that may write into a model repository.
ALLOWED: tuple[str, ...] = ("repository/",)

SEEDS = frozenset(
    {"repo", "repository", "repo_dir", "repo_root", "model_repository", "model_dir", "version_dir"}
)
PATH_NAMES = frozenset({"CONFIG_FILE", "MANIFEST_FILE", "CONFIG_ORIGIN_FILE"})
PATH_LITERALS = frozenset({"config.pbtxt"})
WRITE_METHODS = frozenset(
    {
        "write_text",
        "write_bytes",
        "mkdir",
        "touch",
        "rename",
        "unlink",
        "rmdir",
        "symlink_to",
        "hardlink_to",
        "chmod",
    }
)
#: Functions that write, by the arguments that name what they write: a position, or a keyword
#: (``None``: every argument, for the moves and renames whose source leaves as much as the target).
WRITE_FUNCTIONS: dict[str, tuple[int | str | None, ...]] = {
    **dict.fromkeys(("os.replace", "os.rename", "os.renames", "shutil.move"), (None,)),
    **dict.fromkeys(
        ("os.makedirs", "os.mkdir", "os.remove", "os.unlink", "os.rmdir", "os.chmod"), (0, "path")
    ),
    **dict.fromkeys(("os.symlink", "os.link"), (1, "dst")),
    **dict.fromkeys(("shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree"), (1, "dst")),
    "shutil.rmtree": (0, "path"),
    **dict.fromkeys(
        (
            "tempfile.mkstemp",
            "tempfile.mkdtemp",
            "tempfile.NamedTemporaryFile",
            "tempfile.TemporaryDirectory",
        ),
        ("dir",),
    ),
    **{
        f"{prefix}{name}": (0, "path")
        for prefix in ("", "atomic.")
        for name in ("write_text", "write_bytes", "write_with", "make_dir")
    },
    **dict.fromkeys(("replace_dir", "atomic.replace_dir"), (None,)),
    **dict.fromkeys(("np.save", "numpy.save"), (0, "file")),
    **dict.fromkeys(("save", "config.save"), (1, "path")),
    **dict.fromkeys(("onnx.save", "onnx.save_model", "torch.save", "torch.export.save"), (1, "f")),
    "open": (0, "file"),
}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _mentions(node: ast.AST, tainted: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and (sub.id in tainted or sub.id in SEEDS or sub.id in PATH_NAMES):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in SEEDS:
            return True
        if isinstance(sub, ast.arg) and sub.arg in SEEDS:
            return True
        if isinstance(sub, ast.Constant) and sub.value in PATH_LITERALS:
            return True
    return False


def _targets(node: ast.AST) -> Iterator[tuple[ast.expr, ast.AST]]:
    """(assigned target, value it comes from) for every binding in a scope."""
    for sub in _own_nodes(node):
        if isinstance(sub, ast.Assign):
            for target in sub.targets:
                yield target, sub.value
        elif (isinstance(sub, ast.AnnAssign | ast.AugAssign) and sub.value is not None) or isinstance(
            sub, ast.NamedExpr
        ):
            yield sub.target, sub.value
        elif isinstance(sub, ast.For | ast.comprehension):
            yield sub.target, sub.iter
        elif isinstance(sub, ast.withitem) and sub.optional_vars is not None:
            yield sub.optional_vars, sub.context_expr


def _bound_names(target: ast.expr) -> Iterator[str]:
    """Names a binding rebinds (``a``, ``a, b``, ``*a``); an attribute or item assigned rebinds none."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for item in target.elts:
            yield from _bound_names(item)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions defined in it (each is a scope of its own)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def _tainted(scope: ast.AST, inherited: set[str]) -> set[str]:
    tainted = set(inherited)
    bindings = list(_targets(scope))
    changed = True
    while changed:
        changed = False
        for target, value in bindings:
            if not _mentions(value, tainted):
                continue
            for name in _bound_names(target):
                if name not in tainted:
                    tainted.add(name)
                    changed = True
    return tainted


def _path_args(call: ast.Call, which: tuple[int | str | None, ...]) -> list[ast.expr]:
    if None in which:
        return [*call.args, *(k.value for k in call.keywords)]
    found = [call.args[i] for i in which if isinstance(i, int) and i < len(call.args)]
    return found + [k.value for k in call.keywords if k.arg in which]


def _is_write(call: ast.Call, tainted: set[str]) -> bool:
    func = call.func
    name = _dotted(func)
    if isinstance(func, ast.Attribute) and name not in WRITE_FUNCTIONS:
        method = func.attr
        if method in WRITE_METHODS or (method == "replace" and len(call.args) == 1 and not call.keywords):
            return _mentions(func.value, tainted)
    if name not in WRITE_FUNCTIONS:
        return False
    if name == "open":
        mode = (
            call.args[1]
            if len(call.args) > 1
            else next((k.value for k in call.keywords if k.arg == "mode"), None)
        )
        text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
        if not any(c in text for c in "wax+"):
            return False
    return any(_mentions(a, tainted) for a in _path_args(call, WRITE_FUNCTIONS[name]))


def repository_writes(source: str) -> list[int]:
    """Lines of ``source`` that write into a model repository, by the rule in the module docstring."""
    lines: set[int] = set()

    def visit(scope: ast.AST, inherited: set[str]) -> None:
        tainted = _tainted(scope, inherited)
        for node in _own_nodes(scope):
            if isinstance(node, ast.Call) and _is_write(node, tainted):
                lines.add(node.lineno)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                visit(node, tainted)  # a closure sees the names of the scope around it

    visit(ast.parse(source), set())
    return sorted(lines)


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_only_the_repository_package_writes_into_a_repository() -> None:
    offenders = []
    for path in _modules():
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(ALLOWED):
            continue
        for line in repository_writes(path.read_text(encoding="utf-8")):
            offenders.append(f"{relative}:{line}")
    assert offenders == [], "writes into a model repository outside tritonkit.repository:\n" + "\n".join(
        offenders
    )


def test_the_allowed_modules_are_the_writers() -> None:
    """The allow-list is not dead: the repository package does write (else the rule reads nothing)."""
    found = [
        p
        for p in _modules()
        if p.relative_to(PACKAGE).as_posix().startswith(ALLOWED)
        and repository_writes(p.read_text(encoding="utf-8"))
    ]
    assert [p.name for p in found] == ["staging.py", "store.py", "views.py"]


@pytest.mark.parametrize(
    ("snippet", "writes"),
    [
        (
            "def f(model_dir, cfg):\n    target = Path(model_dir) / 'config.pbtxt'\n    save(cfg, target)\n",
            True,
        ),
        ("def f(repo, name):\n    staging = tempfile.mkdtemp(dir=Path(repo))\n", True),
        (
            "def f(options):\n    d = Path(options.repo) / options.model\n    (d / 'x').write_text('y')\n",
            True,
        ),
        (
            "def f(root):\n    for v in (Path(root) / 'config.pbtxt').parent.iterdir():\n        shutil.rmtree(v)\n",
            True,
        ),
        (
            "def f(model_dir):\n    with open(Path(model_dir) / 'labels.txt', 'w') as fh:\n        fh.write('a')\n",
            True,
        ),
        ("def f(model_dir):\n    return (Path(model_dir) / 'config.pbtxt').read_text()\n", False),
        ("def f(workdir, data):\n    (workdir / 'fp16.onnx').write_bytes(data)\n", False),
        ("def f(repo, text):\n    return str(repo).replace('a', 'b')\n", False),
        ("def f(repo):\n    ModelRepository(repo).write_config('m', cfg, writer='t')\n", False),
        ("def f(repo, out):\n    text = describe(repo)\n    write_text(out / 'r.md', text)\n", False),
        ("def f(repo):\n    d = Path(repo)\n    def g():\n        (d / 'x').touch()\n    return g\n", True),
        ("def f(repo):\n    p = ModelRepository(repo).root\n\ndef g(p):\n    p.mkdir()\n", False),
    ],
)
def test_the_rule_reads_what_it_says(snippet: str, writes: bool) -> None:
    assert bool(repository_writes(snippet)) is writes
