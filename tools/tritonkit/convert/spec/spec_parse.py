"""Reading parsed YAML into the build spec's dataclasses: every key checked against the dataclass
fields and type hints, so an unknown key or a wrong type is one :class:`SpecError` line naming the
dotted key, what was expected and what was given.

A type with a ``from_mapping`` classmethod (e.g. :class:`tritonkit.convert.spec.execution.ServingSpec`)
parses its own section and raises its own one-line SpecError.

YAML is read by :func:`load_yaml`: a safe load in bounded memory and time. Aliases are shared by
the loader, not copied, but whatever walks or prints the value expands them (a "billion laughs"
spec of 1 KB is 10^9 nodes): the value's expanded size is counted first, and past
:data:`MAX_NODES` (or nesting past :data:`MAX_DEPTH`, where the composer would recurse into a
``RecursionError``) the file is refused in one line. Messages show given values through
:func:`shown`, which never formats more than a bounded prefix of one.
"""

from __future__ import annotations

import dataclasses
import reprlib
import types
import typing
from typing import Any, Literal

import yaml

from tritonkit.errors import SpecError

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "NOT_IN_YAML",
    "BoundedLoader",
    "YamlBoundError",
    "load_yaml",
    "parse_dataclass",
    "shown",
]

#: Nodes a YAML document may hold once its aliases are expanded, and how deep it may nest.
MAX_NODES = 100_000
MAX_DEPTH = 64

_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 80, 80
_SHOWN.maxdict = _SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = 8


def shown(value: Any, limit: int = 120) -> str:
    """``value``'s repr for a one-line message, bounded however large (or alias-expanded) it is."""
    text = _SHOWN.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class YamlBoundError(yaml.YAMLError):
    """A YAML document past :data:`MAX_NODES` expanded nodes or :data:`MAX_DEPTH` levels."""

    def __init__(self, message: str, mark: Any = None) -> None:
        super().__init__(message)
        self.problem_mark = mark


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer stops at MAX_DEPTH levels and whose documents expand to at most
    MAX_NODES nodes (each node counted once per reference to it, by a memo over the node graph)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YamlBoundError(f"the YAML nests deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        _expanded_size(node)
        return super().construct_document(node)  # type: ignore[no-untyped-call]


def _expanded_size(root: yaml.Node) -> int:
    """Nodes ``root`` holds with every alias expanded; YamlBoundError past MAX_NODES (memoized per
    node and depth-bounded by the composer, so this takes time in the document's size, not its expansion)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        size = 1 + sum(sizes.get(id(child), 1) for child in children)
        if size > MAX_NODES:
            raise YamlBoundError(
                f"the YAML expands to over {MAX_NODES} nodes once its aliases are followed", node.start_mark
            )
        sizes[id(node)] = size
    return sizes.get(id(root), 1)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)`` within MAX_NODES expanded nodes and MAX_DEPTH levels; yaml.YAMLError
    (:class:`YamlBoundError` past a bound) otherwise."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()  # type: ignore[no-untyped-call]
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(hint))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if origin is list:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    if origin is dict:
        return f"mapping of {_type_name(typing.get_args(hint)[1])}"
    if hint is type(None):
        return "null"
    if dataclasses.is_dataclass(hint):
        return "mapping"
    return getattr(hint, "__name__", str(hint))


def _key(name: Any) -> str:
    """A key from the file for a one-line message: as written when printable, else its repr."""
    return name if isinstance(name, str) and name.isprintable() else repr(name)


def _given(value: Any) -> str:
    return (
        f"{type(value).__name__} {shown(value)}"
        if not isinstance(value, dict | list)
        else type(value).__name__
    )


def _convert(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        for option in typing.get_args(hint):
            try:
                return _convert(option, value, key)
            except SpecError:
                continue
        raise SpecError(f"spec key `{key}`: expected {_type_name(hint)}, got {_given(value)}")
    if origin is Literal:
        if value in typing.get_args(hint):
            return value
        raise SpecError(f"spec key `{key}`: expected one of {_type_name(hint)}, got {_given(value)}")
    if hint is type(None):
        if value is None:
            return None
        raise SpecError(f"spec key `{key}`: expected null, got {_given(value)}")
    if origin in (list, dict):
        return _container(hint, origin, value, key)
    if isinstance(hint, type) and hasattr(hint, "from_mapping"):
        if value is not None and not isinstance(value, dict):
            raise SpecError(f"spec key `{key}`: expected a mapping, got {_given(value)}")
        return hint.from_mapping(value)
    if dataclasses.is_dataclass(hint):
        return parse_dataclass(hint, value, key)
    return _scalar(hint, value, key)


def _container(hint: Any, origin: Any, value: Any, key: str) -> Any:
    """A ``list[...]`` or ``dict[str, ...]`` value, each item converted."""
    if not isinstance(value, origin):
        raise SpecError(f"spec key `{key}`: expected {_type_name(hint)}, got {_given(value)}")
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    _, item = typing.get_args(hint)
    return {str(k): _convert(item, v, f"{key}.{_key(k)}") for k, v in value.items()}


def _scalar(hint: Any, value: Any, key: str) -> Any:
    """A bool, int, float (an int taken) or str value; a bool is never taken as a number."""
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str and isinstance(value, str):
        return value
    raise SpecError(f"spec key `{key}`: expected {_type_name(hint)}, got {_given(value)}")


#: BuildSpec fields set by the loader and the overrides, never by the YAML file.
NOT_IN_YAML = ("base_dir", "requested_gpu", "as_is")


def parse_dataclass(cls: Any, value: Any, key: str) -> Any:
    where = f"`{key}`" if key else "the spec"
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping, got {_given(value)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in NOT_IN_YAML]
    unknown = [k for k in value if k not in names]
    if unknown:
        prefix = f"{key}." if key else ""
        raise SpecError(f"unknown spec key `{prefix}{_key(unknown[0])}`; expected one of {', '.join(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in NOT_IN_YAML:
            continue
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"spec lacks required key `{key + '.' if key else ''}{f.name}`")
            continue
        kwargs[f.name] = _convert(hints[f.name], value[f.name], f"{key + '.' if key else ''}{f.name}")
    return cls(**kwargs)
