"""What machine this is, for the pages that publish measurements (benchmarks, accuracy reports)."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

__all__ = ["cpu_model", "description"]


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


def description() -> str:
    """CPU model, core count, memory, OS and Python of this machine, as benchmark pages and reports name it."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    memory = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release().split('-')[0]}, "
        f"Python {platform.python_version()}"
    )
