"""What every version of one model must share (its :class:`Signature`: how it is run and its I/O), the
fields in which two configs differ, and who last rewrote a model's config when it was not a build
(``<model>/config.origin.json``, written by ``tritonkit tune``'s write-back), so a refused rebuild can
name the field, its two values and that tune changed it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tritonkit.config import ModelConfig, to_pbtxt

__all__ = ["CONFIG_ORIGIN_FILE", "Signature", "changed_fields", "describe_differences", "origin_record"]

#: Beside ``config.pbtxt``: which tool last rewrote it outside a build, when, and what it changed.
CONFIG_ORIGIN_FILE = "config.origin.json"


def _tensors(items: list[Any]) -> tuple[str, ...]:
    return tuple(f"{t.name}:{t.data_type}{list(t.dims)}" for t in items)


@dataclass(frozen=True)
class Signature:
    """The fields every version of a model shares: Triton keeps one config per model."""

    backend: str
    platform: str
    max_batch_size: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, config: ModelConfig) -> Signature:
        return cls(
            config.backend or "",
            config.platform or "",
            config.max_batch_size,
            _tensors(config.inputs),
            _tensors(config.outputs),
        )

    def values(self) -> dict[str, str]:
        """Each field as it reads in a message (tensors as ``name:TYPE[dims]``)."""
        return {
            "backend": self.backend or "-",
            "platform": self.platform or "-",
            "max_batch_size": str(self.max_batch_size),
            "inputs": ", ".join(self.inputs) or "none",
            "outputs": ", ".join(self.outputs) or "none",
        }


def changed_fields(old: ModelConfig, new: ModelConfig) -> dict[str, tuple[str, str]]:
    """The signature fields in which ``new`` differs from ``old``: {field: (old value, new value)}."""
    before, after = Signature.of(old).values(), Signature.of(new).values()
    return {key: (before[key], after[key]) for key in before if before[key] != after[key]}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _origin(model_dir: Path) -> dict[str, Any] | None:
    """The origin record of the config now in ``model_dir`` (None: none, unreadable, or it describes an
    older config: the record names the config's hash)."""
    try:
        record = json.loads((model_dir / CONFIG_ORIGIN_FILE).read_text(encoding="utf-8"))
        current = _sha256((model_dir / "config.pbtxt").read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("config_sha256") != current:
        return None
    return record


def origin_record(model_dir: Path, old: ModelConfig | None, new: ModelConfig, writer: str) -> str:
    """The ``config.origin.json`` text once ``writer`` replaces the config ``old`` in ``model_dir`` (or
    writes a new model's, ``old`` None) by ``new``: the signature fields changed since the last build,
    each with the value the build wrote (earlier records of the same config carried over)."""
    earlier = _origin(model_dir) if old is not None else None
    changes = dict(earlier.get("changed", {})) if earlier is not None else {}
    for key, (before, after) in (changed_fields(old, new) if old is not None else {}).items():
        first = changes.get(key, {}).get("before", before) if isinstance(changes.get(key), dict) else before
        changes[key] = {"before": first, "after": after}
    changes = {k: v for k, v in changes.items() if isinstance(v, dict) and v.get("before") != v.get("after")}
    record = {
        "written_by": writer,
        "written": datetime.now(UTC).isoformat(timespec="seconds"),
        "config_sha256": _sha256(to_pbtxt(new).encode("utf-8")),
        "changed": changes,
    }
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def describe_differences(model_dir: Path, existing: ModelConfig, new: ModelConfig, proposed: str) -> str:
    """``max_batch_size: existing 32, spec 64; ...`` naming who changed a field outside a build."""
    origin = _origin(model_dir)
    changed = origin.get("changed", {}) if origin is not None else {}
    parts = []
    for key, (old, value) in changed_fields(existing, new).items():
        line = f"{key}: existing {old}, {proposed} {value}"
        if isinstance(changed, dict) and key in changed and origin is not None:
            before = changed[key].get("before") if isinstance(changed[key], dict) else None
            line += f" (changed from {before} by {origin.get('written_by')} on {origin.get('written')})"
        parts.append(line)
    return "; ".join(parts)
