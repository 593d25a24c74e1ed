"""A tuned config written back into the build spec it came from (``tritonkit tune --write spec[:PATH]``).

Owns :func:`find_spec` (the ``*.yaml`` beside the repository's models whose build names the tuned model),
:func:`spec_values` (what of a config a spec can say: ``batching.max_batch_size``,
``batching.max_queue_delay_us``, ``batching.preferred_batch_sizes``, ``batching.queue.max_size``,
``instances.count`` and ``instances.kind``, and ``serving.instances.count`` where the spec has a
``serving`` section, and ``serving.jit_optimize`` for a native-backend version: true when the tuned
config captures the optimised plan (with ``serving.runner: native``, which that key requires; the section
made where the spec had none), false only where the spec said true, and ``serving.shape_buckets.<axis>``
for a version with shape buckets whose tuned edges differ from the spec's (or, where the spec names
none, from the built config's)) and :func:`write_spec`: the values set in place in the YAML text, so its comments and
key order stay (block-style mappings; a spec in flow style is rewritten whole, and then says so), the
result checked to load as exactly the intended data and to parse as a build spec, then written through
a temporary file and a rename. A spec has no way to say "no dynamic batcher": a config without one is
refused with one line, before anything is written. Also the tune's write-back itself (:func:`write_back`:
``config.pbtxt``, a new model beside it, and the spec) and the spec ``--write spec[:PATH]`` names
(:func:`spec_to_write`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import yaml

from tritonkit.atomic import write_text
from tritonkit.backends.native import BACKEND as NATIVE_BACKEND
from tritonkit.config import ModelConfig
from tritonkit.convert.spec.buildspec import load_spec, parse_spec
from tritonkit.errors import TritonKitError
from tritonkit.tune.apply import write_as_model, write_config
from tritonkit.tune.space import apply_point, jit_on
from tritonkit.tune.traffic import buckets_in

__all__ = ["Written", "find_spec", "spec_to_write", "spec_values", "write_back", "write_spec"]

Path_ = tuple[str, ...]


def builds(spec_path: Path, model: str) -> bool:
    """True when the spec at ``spec_path`` builds a model named ``model`` (any of its precisions)."""
    spec = load_spec(spec_path)
    return spec.name == model or any(spec.model_name(p) == model for p in spec.precisions)


def find_spec(repo: Path, model: str, given: str | None = None) -> Path:
    """The build spec of ``model``: ``given`` (checked to build it), else the one ``*.yaml`` in ``repo``
    that does; one line naming what was expected otherwise."""
    if given:
        path = Path(given)
        if not path.is_file():
            raise TritonKitError(f"--write spec:{given}: no such file; expected the build spec of `{model}`")
        if not builds(path, model):
            raise TritonKitError(
                f"--write spec:{given}: that spec does not build `{model}`; expected the spec whose "
                "name and precisions make that model"
            )
        return path
    found = []
    for path in sorted(Path(repo).glob("*.yaml")):
        try:
            if builds(path, model):
                found.append(path)
        except TritonKitError:
            continue
    if len(found) != 1:
        what = "none" if not found else ", ".join(str(p) for p in found)
        raise TritonKitError(
            f"--write spec: build specs in {repo} that build `{model}`: {what}; expected one "
            "(name it with --write spec:PATH)"
        )
    return found[0]


def spec_values(
    cfg: ModelConfig, data: Mapping[str, Any], base: ModelConfig | None = None
) -> dict[Path_, Any]:
    """The spec keys that make ``cfg``'s batching and instances (``data``: the spec as loaded; ``base``:
    the config the tune began with, whose shape-bucket edges the build wrote)."""
    dyn = cfg.dynamic_batching
    if cfg.max_batch_size > 0 and dyn is None:
        raise TritonKitError(
            f"the tuned config of `{cfg.name}` has no dynamic batcher (delay `off`), which a build spec cannot "
            "say; expected --delays-us without `off` for --write spec"
        )
    groups = cfg.instance_groups
    count = sum(g.count for g in groups) if groups else 1
    values: dict[Path_, Any] = {
        ("instances", "count"): count,
        ("instances", "kind"): groups[0].kind if groups else "KIND_CPU",
    }
    if cfg.max_batch_size > 0 and dyn is not None:
        policy = dyn.default_queue_policy
        values[("batching", "max_batch_size")] = cfg.max_batch_size
        values[("batching", "max_queue_delay_us")] = dyn.max_queue_delay_microseconds
        values[("batching", "preferred_batch_sizes")] = list(dyn.preferred_batch_size)
        values[("batching", "queue", "max_size")] = policy.max_queue_size if policy is not None else 0
    section = data.get("serving")
    serving: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    if isinstance(section, Mapping):  # an empty `serving: {}` too
        values[("serving", "instances", "count")] = count
    if cfg.backend == NATIVE_BACKEND and (jit_on(cfg) or serving.get("jit_optimize") is True):
        if jit_on(cfg) and serving.get("runner") != "native":  # the plan is the native backend's
            values[("serving", "runner")] = "native"
        values[("serving", "jit_optimize")] = jit_on(cfg)
    values.update(_edges(cfg, serving, base))
    return values


def _edges(cfg: ModelConfig, serving: Mapping[str, Any], base: ModelConfig | None) -> dict[Path_, Any]:
    """``serving.shape_buckets.<axis>`` for every axis whose tuned edges are not what the spec (or,
    where it names none, the built config) has."""
    tuned, built = buckets_in(cfg), buckets_in(base) if base is not None else None
    named = serving.get("shape_buckets")
    spec_axes: Mapping[str, Any] = named if isinstance(named, Mapping) else {}
    out: dict[Path_, Any] = {}
    for axis, edges in (tuned.axes if tuned is not None else {}).items():
        had = spec_axes.get(axis)
        if had is None and built is not None:
            had = list(built.axes.get(axis, ()))
        if had is None or list(had) != list(edges):
            out[("serving", "shape_buckets", axis)] = list(edges)
    return out


def _flow(value: Any) -> str:
    return (
        str(yaml.safe_dump(value, default_flow_style=True, width=10_000)).strip().removesuffix("...").strip()
    )


def _block(lines: list[str], start: int, end: int) -> tuple[int, int, int] | None:
    """(first, last + 1, indent) of the children of the mapping key at ``start`` (its block ends at
    ``end``); None when it has none yet."""
    children = [
        i for i in range(start + 1, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")
    ]
    if not children:
        return None
    indent = len(lines[children[0]]) - len(lines[children[0]].lstrip())
    return children[0], children[-1] + 1, indent


def _set(lines: list[str], path: Path_, value: Any, start: int, end: int, indent: int) -> None:
    """Set ``path`` (relative to the block ``lines[start:end]`` at ``indent``) to ``value`` in place."""
    key, rest = path[0], path[1:]
    pattern = re.compile(rf"^{' ' * indent}{re.escape(key)}:(?P<value>[^#]*?)(?P<comment>\s+#.*)?$")
    at = next((i for i in range(start, end) if pattern.match(lines[i])), None)
    if at is None:
        last = max(
            (i for i in range(start, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")),
            default=start - 1,
        )
        new = [f"{' ' * indent}{key}: {_flow(value)}"] if not rest else [f"{' ' * indent}{key}:"]
        lines[last + 1 : last + 1] = new
        if rest:
            _set(lines, rest, value, last + 2, last + 2, indent + 2)
        return
    match = pattern.match(lines[at])
    assert match is not None
    if not rest:
        comment = match.group("comment") or ""
        lines[at : _value_end(lines, at, end, indent)] = [f"{' ' * indent}{key}: {_flow(value)}{comment}"]
        return
    if match.group("value").strip():
        raise ValueError(f"`{key}` is written in flow style")
    stop = next(
        (
            i
            for i in range(at + 1, end)
            if lines[i].strip()
            and not lines[i].lstrip().startswith("#")
            and len(lines[i]) - len(lines[i].lstrip()) <= indent
        ),
        end,
    )
    block = _block(lines, at, stop)
    if block is None:
        _set(lines, rest, value, at + 1, at + 1, indent + 2)
    else:
        _set(lines, rest, value, block[0], block[1], block[2])


def _value_end(lines: list[str], at: int, end: int, indent: int) -> int:
    """The line after the value of the key at ``at``: a value in block style (deeper lines, or a list's
    ``- `` items at the key's own indent) ends at the next line as shallow as the key."""
    stop = at + 1
    for i in range(at + 1, end):
        text = lines[i]
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        depth = len(text) - len(text.lstrip())
        if depth < indent or (depth == indent and not text.lstrip().startswith("- ")):
            break
        stop = i + 1
    return stop


def _wanted(data: Mapping[str, Any], values: Mapping[Path_, Any]) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(dict(data))
    for path, value in values.items():
        node = out
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = value
    return out


def edited_text(text: str, values: Mapping[Path_, Any]) -> tuple[str, str]:
    """(the spec's text with ``values`` set, a note: empty when comments and order were kept)."""
    data = yaml.safe_load(text) or {}
    wanted = _wanted(data, values)
    lines = text.splitlines()
    try:
        for path, value in values.items():
            _set(lines, path, value, 0, len(lines), 0)
        edited = "\n".join(lines) + "\n"
        if yaml.safe_load(edited) == wanted:
            return edited, ""
    except (ValueError, yaml.YAMLError):
        pass
    note = "the spec's layout could not be edited in place: rewritten whole (its comments are gone)"
    return yaml.safe_dump(wanted, sort_keys=False), note


def write_spec(path: Path, cfg: ModelConfig, base: ModelConfig | None = None) -> tuple[str, str]:
    """Write ``cfg``'s batching, instances and shape-bucket edges into the spec at ``path`` (``base``:
    the config the tune began with); (unified diff, note)."""
    old = path.read_text(encoding="utf-8")
    data = yaml.safe_load(old) or {}
    new, note = edited_text(old, spec_values(cfg, data, base))
    parse_spec(yaml.safe_load(new), base_dir=path.parent)  # one line naming a bad key, nothing written
    write_text(path, new)
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"{path} (before)",
            f"{path} (tuned)",
        )
    )
    return diff, note


def spec_to_write(write: str, repo: Path | None, model: str) -> Path | None:
    """The build spec ``--write spec[:PATH]`` names (found beside the repository's models), or None."""
    if not (write == "spec" or write.startswith("spec:")):
        return None
    given = write.split(":", 1)[1] if ":" in write else None
    return find_spec(Path(repo or "."), model, given)


@dataclasses.dataclass
class Written:
    """What the tune wrote: ``where`` (``config.pbtxt``, a new model's folder, or nothing), the diffs."""

    where: str = ""
    diff: str = ""
    spec: str | None = None
    spec_diff: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)


class _WriteOptions(Protocol):
    model: str
    repo: Path | None
    write: str


def write_back(
    options: _WriteOptions,
    base: ModelConfig,
    winner: dict[str, Any] | None,
    verdict_writes: bool,
    spec_path: Path | None,
) -> Written:
    """The winner written only when the verdict says so (and ``--write`` is not ``none``)."""
    if winner is None or not verdict_writes or options.write == "none" or options.repo is None:
        return Written()
    model_dir = Path(options.repo) / options.model
    if not (model_dir / "config.pbtxt").exists():
        print(
            f"tritonkit tune: {model_dir}/config.pbtxt not found; the winner is in the report only",
            file=sys.stderr,
        )
        return Written()
    cfg = apply_point(base, winner["point"])
    if options.write.startswith("model:"):
        folder, diff = write_as_model(model_dir, options.write.split(":", 1)[1], cfg)
        return Written(str(folder), diff)
    out = Written(str(model_dir / "config.pbtxt"))
    if spec_path is not None:
        out.spec_diff, note = write_spec(spec_path, cfg, base)
        out.spec = str(spec_path)
        out.notes += [note] if note else []
        if cfg.platform == "tensorrt_plan" or cfg.backend == "tensorrt":
            out.notes.append(
                "target tensorrt: the build takes max_batch_size from the engine's optimization profiles, "
                "not from batching.max_batch_size; narrow tensorrt.profiles[].batch to change it"
            )
    out.diff = write_config(model_dir, cfg)
    return out
