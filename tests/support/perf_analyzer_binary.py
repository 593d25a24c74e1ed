"""The perf_analyzer binary the tests run, or why there is none (the reason a test that needs it skips with).

The binary is NVIDIA's perf_analyzer 2.60.0 from its PyPI wheel (manylinux_2_38). On Debian 12 (glibc
2.36) ``scripts/perf_analyzer/setup.sh`` (``make perf-analyzer``, a prerequisite of ``make test``) runs it
through Debian trixie's C library, confined to ``.cache/perf_analyzer``; ``$TRITONKIT_PERF_ANALYZER``
names another.
"""

from __future__ import annotations

import os
from pathlib import Path

from tritonkit.measure import perf_analyzer as pa

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / ".cache" / "perf_analyzer"


def find() -> pa.Binary | str:
    """The binary (as :func:`tritonkit.measure.perf_analyzer.locate` finds it when named), or the reason."""
    named = os.environ.get(pa.ENV) or str(SETUP / "bin" / "perf_analyzer")
    if not Path(named).exists():
        why = (SETUP / "UNAVAILABLE").read_text().strip() if (SETUP / "UNAVAILABLE").is_file() else ""
        return why or f"{named} missing: run `make perf-analyzer` (scripts/perf_analyzer/setup.sh)"
    saved = os.environ.get(pa.ENV)
    os.environ[pa.ENV] = named
    try:
        return pa.locate()
    finally:
        if saved is None:
            del os.environ[pa.ENV]
        else:
            os.environ[pa.ENV] = saved
