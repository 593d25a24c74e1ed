"""What machine this is, for the pages that publish measurements (benchmarks, accuracy reports)."""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["cpu_model"]


@functools.cache
def cpu_model() -> str | None:
    """The CPU's marketing name from ``/proc/cpuinfo`` ("AMD EPYC ..."), or None where it is not there."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None
