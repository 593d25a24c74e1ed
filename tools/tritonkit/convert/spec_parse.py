"""Reading parsed YAML into the build spec's dataclasses: every key checked against the dataclass
fields and type hints, so an unknown key or a wrong type is one :class:`SpecError` line naming the
dotted key, what was expected and what was given.

A type with a ``from_mapping`` classmethod (e.g. :class:`tritonkit.convert.execution.ServingSpec`)
parses its own section and raises its own one-line SpecError.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from tritonkit.errors import SpecError

__all__ = ["NOT_IN_YAML", "parse_dataclass"]


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
    return f"{type(value).__name__} {value!r}" if not isinstance(value, dict | list) else type(value).__name__


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
    if origin is list:
        if not isinstance(value, list):
            raise SpecError(f"spec key `{key}`: expected {_type_name(hint)}, got {_given(value)}")
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"spec key `{key}`: expected {_type_name(hint)}, got {_given(value)}")
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, f"{key}.{_key(k)}") for k, v in value.items()}
    if isinstance(hint, type) and hasattr(hint, "from_mapping"):
        if value is not None and not isinstance(value, dict):
            raise SpecError(f"spec key `{key}`: expected a mapping, got {_given(value)}")
        return hint.from_mapping(value)
    if dataclasses.is_dataclass(hint):
        return parse_dataclass(hint, value, key)
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
