"""Shared parts of the fault suite: the scale (reduced inside ``make test``, full under ``make faults``
with ``TRITONKIT_FAULTS=full``), the result recorder and the report written at the end of the session
when ``TRITONKIT_FAULTS_REPORT`` names a file."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tritonkit_bench import faults

FULL = os.environ.get("TRITONKIT_FAULTS", "") == "full"
_RESULTS = Path(os.environ.get("TRITONKIT_FAULTS_RESULTS", f"/tmp/tritonkit-faults-{os.getpid()}.jsonl"))
_START = time.monotonic()


@dataclass(frozen=True)
class Scale:
    """Counts and durations of one form of the suite."""

    form: str
    load_s: float  # load before a kill
    idle_connections: int
    slow_loris: int
    overload_s: float


@pytest.fixture(scope="session")
def fault_scale() -> Scale:
    if FULL:
        return Scale("full", load_s=3.0, idle_connections=5000, slow_loris=200, overload_s=10.0)
    return Scale("reduced", load_s=1.0, idle_connections=300, slow_loris=20, overload_s=3.0)


Record = Callable[..., None]


@pytest.fixture(scope="session")
def record() -> Iterator[Record]:
    """``record(section, case, passed, **numbers)`` appends one result for the report."""

    def append(section: str, case: str, passed: bool, **numbers: object) -> None:
        with _RESULTS.open("a") as out:
            out.write(faults.Result(section, case, bool(passed), dict(numbers)).to_json() + "\n")

    yield append


def pytest_sessionstart(session: pytest.Session) -> None:
    _RESULTS.unlink(missing_ok=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    report = os.environ.get("TRITONKIT_FAULTS_REPORT")
    if report and _RESULTS.exists():
        form = "full" if FULL else "reduced"
        faults.write(_RESULTS, Path(report), form=form, duration_s=time.monotonic() - _START)
    _RESULTS.unlink(missing_ok=True)
