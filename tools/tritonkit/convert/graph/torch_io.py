"""How a ``source.torch`` module is called and what it returns, made the same for every exporter and
the torch-program engine: inputs bound by name where the module's ``forward`` takes them by name,
and outputs flattened to one tensor per output name.

- **Inputs.** Example inputs are given in ``input_names`` order. When every input name is a parameter
  of ``forward`` and positional order would bind them differently (keyword-only parameters, or names
  out of the signature's order: ``GPT2LMHeadModel(input_ids, attention_mask)`` takes
  ``past_key_values`` second), the module is called by keyword. A ``forward`` with required
  keyword-only parameters the names do not cover is refused in one line naming them.
- **Outputs.** A tensor, or a tuple/list of tensors, is exported as it is. A dict (a ``transformers``
  ``ModelOutput`` is one) whose keys include every output name gives those entries in that order;
  any other structure (nested tuples, dicts with other keys) is flattened in order with ``None``
  dropped. The number of tensors must equal the number of output names (one line otherwise).

:func:`adapt` returns the module itself when nothing needs adapting (the exported graph is then
exactly as before), else a wrapper taking the inputs positionally and returning a tuple.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from tritonkit.errors import ModelImportError

__all__ = ["adapt", "dynamic_shapes", "keyword_binding"]


def keyword_binding(module: Any, input_names: Sequence[str]) -> bool:
    """Whether ``module`` must be called with the inputs by keyword (see the module docstring)."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False
    kinds = inspect.Parameter
    positional = [
        n for n, p in params.items() if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    required_kw = [n for n, p in params.items() if p.kind is kinds.KEYWORD_ONLY and p.default is p.empty]
    named = all(n in params and params[n].kind is not kinds.POSITIONAL_ONLY for n in input_names)
    if not named:
        if required_kw:
            raise ModelImportError(
                f"{type(module).__name__}.forward takes keyword-only argument(s) "
                f"{', '.join(required_kw)}; expected input_names naming them, given {', '.join(input_names)}"
            )
        return False
    return list(input_names) != positional[: len(input_names)]


def _flatten(value: Any, found: list[Any], where: str) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if value is None:
        return
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(item, found, f"{where}[{key!r}]")
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _flatten(item, found, f"{where}[{i}]")
    else:
        raise ModelImportError(
            f"the module's output {where} is a {type(value).__name__}; expected tensors "
            "(a tensor, tuple, list or dict of them)"
        )


def _select(out: Any, output_names: Sequence[str] | None) -> tuple[Any, ...]:
    """``out`` as one tensor per output name (ModelImportError when the count differs); every
    tensor in order when no names are given."""
    if output_names is None:
        found_all: list[Any] = []
        _flatten(out, found_all, "")
        return tuple(found_all)
    if isinstance(out, Mapping) and all(n in out for n in output_names):
        picked: list[Any] = []
        for name in output_names:
            _flatten(out[name], picked, f"[{name!r}]")
        if len(picked) == len(output_names):
            return tuple(picked)
    found: list[Any] = []
    _flatten(out, found, "")
    if len(found) != len(output_names):
        keys = f" (keys: {', '.join(map(str, out))})" if isinstance(out, Mapping) else ""
        raise ModelImportError(
            f"the module returns {len(found)} tensor(s){keys}; expected one per output name, "
            f"given {len(output_names)} ({', '.join(output_names)})"
        )
    return tuple(found)


def _plain(out: Any, count: int | None) -> bool:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if isinstance(out, torch.Tensor):
        return count in (None, 1)
    return (
        type(out) in (tuple, list)
        and (count is None or len(out) == count)
        and all(isinstance(o, torch.Tensor) for o in out)
    )


_WRAPPER: Any = None


def _wrapper_class() -> Any:
    """The adapter class, defined once torch is imported (module level would import torch for every
    command)."""
    global _WRAPPER  # noqa: PLW0603 (a lazily defined class, cached)
    if _WRAPPER is None:
        import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

        class TorchSourceAdapter(torch.nn.Module):
            """Calls the user's module with the inputs bound as it takes them; returns a tuple."""

            def __init__(
                self, module: Any, keywords: Sequence[str] | None, outputs: Sequence[str] | None
            ) -> None:
                super().__init__()
                self.module = module
                self.keywords = list(keywords) if keywords is not None else None
                self.outputs = list(outputs) if outputs is not None else None

            def forward(self, *inputs: Any) -> tuple[Any, ...]:
                if self.keywords is None:
                    out = self.module(*inputs)
                else:
                    out = self.module(**dict(zip(self.keywords, inputs, strict=True)))
                return _select(out, self.outputs)

        _WRAPPER = TorchSourceAdapter
    return _WRAPPER


def adapt(
    module: Any,
    example_inputs: Sequence[Any],
    input_names: Sequence[str],
    output_names: Sequence[str] | None,
) -> Any:
    """``module``, or a wrapper when its inputs must go by keyword or its outputs are not one tensor
    per output name (runs the module once on the examples to see what it returns). ``output_names``
    None: any number of outputs, flattened."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if len(example_inputs) != len(input_names):
        raise ModelImportError(
            f"{len(example_inputs)} example input(s) for {len(input_names)} input name(s) "
            f"({', '.join(input_names)}); expected one each"
        )
    keywords = list(input_names) if keyword_binding(module, input_names) else None
    with torch.no_grad():
        out = (
            module(**dict(zip(input_names, example_inputs, strict=True)))
            if keywords
            else module(*example_inputs)
        )
    if keywords is None and _plain(out, None if output_names is None else len(output_names)):
        return module
    _select(out, output_names)  # the count, checked here in one line
    return _wrapper_class()(module, keywords, output_names).eval()


def dynamic_shapes(module: Any, axes: Sequence[Any]) -> tuple[Any, ...]:
    """``torch.export``'s ``dynamic_shapes`` for ``module`` (the adapter takes ``*inputs``: nested)."""
    if _WRAPPER is not None and isinstance(module, _WRAPPER):
        return (tuple(axes),)
    return tuple(axes)
