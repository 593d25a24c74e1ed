"""Which load generator measures a level: tritonkit's own or NVIDIA's perf_analyzer, chosen in one place.

Owns :data:`GENERATORS`, :class:`LevelMeasurer` (what both measurers are to every loop that measures
levels: ``measure(level)``, ``loaded()``, a ``with`` block), :func:`generator_problem` (why perf_analyzer
cannot measure as the other settings ask), :func:`choose` (the perf_analyzer binary, or one line saying
why there is none, before any server starts), :func:`measurer_of` (the measurer of a target for that
choice) and :func:`label` (how a report names it). ``tritonkit profile``, ``compare``, ``tune`` (its
trials, baseline and finals), ``plan --check-knee`` and the tunes a fleet plan runs all choose here.
"""

from __future__ import annotations

import os
from typing import Protocol

from tritonkit.errors import TritonKitError
from tritonkit.measure.capacity import AUTO
from tritonkit.measure.levels import LevelResult, MeasureOptions, Measurer
from tritonkit.measure.loadgen import Level, Target
from tritonkit.measure.perf_analyzer import (
    STABILITY_WINDOWS,
    Binary,
    PerfAnalyzerError,
    PerfAnalyzerMeasurer,
    locate,
)

__all__ = ["GENERATORS", "LevelMeasurer", "choose", "generator_problem", "label", "measurer_of"]

#: the load generators of record: tritonkit's own (:mod:`.loadgen`) and perf_analyzer (:mod:`.perf_analyzer`)
GENERATORS = ("tritonkit", "perf_analyzer")


class LevelMeasurer(Protocol):
    """A measurer of levels of one model (:class:`~tritonkit.measure.levels.Measurer` or
    :class:`~tritonkit.measure.perf_analyzer.PerfAnalyzerMeasurer`)."""

    measurements: int
    discarded: int

    def __enter__(self) -> LevelMeasurer: ...

    def __exit__(self, *exc: object) -> None: ...

    def loaded(self) -> None: ...

    def measure(self, level: Level) -> LevelResult: ...


def generator_problem(
    generator: str, *, stability_windows: int, shared_memory: str, workers: int
) -> str | None:
    """Why ``generator`` cannot measure as the other settings ask (None: it can); only perf_analyzer has
    limits: its stability rule is fixed at 3 windows, shared memory would put the admin key in its argv,
    and it sizes its own threads."""
    if generator != "perf_analyzer":
        return None
    if stability_windows != STABILITY_WINDOWS:
        return f"--stability-windows {stability_windows}: perf_analyzer's rule is fixed at 3 windows"
    if shared_memory != "none":
        return f"--shared-memory {shared_memory}: perf_analyzer would need the admin key in its argv"
    if workers not in (AUTO, 1):
        return f"--workers {workers}: perf_analyzer sizes its own threads (leave --workers out)"
    return None


def choose(generator: str, options: MeasureOptions, shared_memory: str = "none") -> Binary | None:
    """The perf_analyzer binary that measures with ``options`` (None: tritonkit's generator), or
    :class:`~tritonkit.measure.perf_analyzer.PerfAnalyzerError` in one line (``--generator perf_analyzer:
    not installed (...)``, or the setting it cannot honour)."""
    if generator not in GENERATORS:
        raise TritonKitError(f"--generator {generator!r}: expected one of {', '.join(GENERATORS)}")
    if generator == "tritonkit":
        return None
    problem = generator_problem(
        generator,
        stability_windows=options.stability.count,
        shared_memory=shared_memory,
        workers=options.workers,
    )
    if problem is not None:
        raise PerfAnalyzerError(f"--generator perf_analyzer: {problem}")
    found = locate()
    if isinstance(found, str):
        raise PerfAnalyzerError(f"--generator perf_analyzer: {found}")
    return found


def measurer_of(
    binary: Binary | None,
    target: Target,
    options: MeasureOptions,
    *,
    keep: str | os.PathLike[str] | None = None,
) -> LevelMeasurer:
    """The measurer of ``target``: perf_analyzer's ``binary`` (each level's CSV and output kept in
    ``keep`` when given, not its export: that holds every request's tensors), or tritonkit's generator
    when ``binary`` is None."""
    if binary is None:
        return Measurer(target, options)
    return PerfAnalyzerMeasurer(target, options, binary, keep=keep, keep_export=False)


def label(binary: Binary | None) -> str:
    """The generator as a report names it: ``perf_analyzer (Perf Analyzer Version ...)`` or ``tritonkit``."""
    return f"perf_analyzer ({binary.version})" if binary is not None else "tritonkit"
