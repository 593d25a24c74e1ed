"""Co-location measured: groups of models served together by one server, each model's p99 against its budget.

Owns :class:`ServerSession` (one embedded ``tritonserver`` in explicit model-control mode over a folder
of links to every model of the fleet, the server ``tritonkit tune`` and ``loadtest`` start; a group is
put into service by loading its models with their tuned configs through the model-repository API and
unloading the rest), :func:`find_share` (the largest share of a group's targets one server carries
with every model within its budget: a level at the predicted share, then growing or shrinking by
``growth`` until the verdict changes, then ``refine`` geometric bisections) and :class:`ShareResult`
with the levels measured. A level counts only when every model holds its budget, none failed and the
generator kept its schedule (:mod:`tritonkit.fleet.openloop`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tritonkit.config import ModelConfig
from tritonkit.errors import TritonKitError
from tritonkit.fleet.openloop import GroupLevel, MeasureSettings, Stream, measure_streams
from tritonkit.measure.levels import wait_ready
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit.serve.endpoint import Endpoint, endpoint
from tritonkit.serve.sources import trusting
from tritonkit.tune.apply import RepositoryApi
from tritonkit.tune.plan import queue_at

__all__ = ["ServerSession", "ShareResult", "find_share"]


@dataclasses.dataclass
class ShareResult:
    """A group's measured share (0: no level held every budget) and every level measured on the way."""

    models: tuple[str, ...]
    share: float
    levels: list[GroupLevel]
    predicted: float

    @property
    def best(self) -> GroupLevel | None:
        ok = [lv for lv in self.levels if lv.ok]
        return max(ok, key=lambda lv: lv.share) if ok else None

    def queue_us_at(self, share: float) -> float:
        """Triton's queue time per request at ``share`` of the targets, linear between measured levels."""
        curve = sorted((lv.share, lv.queue_us()) for lv in self.levels if lv.ok)
        return queue_at(curve, share)

    def as_dict(self) -> dict[str, Any]:
        return {
            "models": list(self.models),
            "share": round(self.share, 5),
            "predicted_share": round(self.predicted, 5),
            "levels": [lv.as_dict() for lv in self.levels],
        }


def find_share(
    measure_at: Callable[[float], GroupLevel],
    start: float,
    *,
    growth: float = 1.5,
    max_levels: int = 7,
    refine: int = 2,
    floor_steps: int = 5,
) -> tuple[GroupLevel | None, list[GroupLevel]]:
    """The highest share whose level holds (or None), and every level measured, lowest share last tried."""
    if not start > 0 or growth <= 1:
        raise TritonKitError(f"share search from {start} by x{growth}: expected a start > 0 and growth > 1")
    levels: list[GroupLevel] = []

    def run(share: float) -> GroupLevel:
        level = measure_at(share)
        levels.append(level)
        return level

    good: GroupLevel | None = None
    bad: float | None = None
    share = start
    first = run(share)
    if first.ok:
        good = first
        while len(levels) < max_levels - refine:
            share *= growth
            level = run(share)
            if not level.ok:
                bad = share
                break
            good = level
    else:
        bad = share
        for _ in range(floor_steps):
            if len(levels) >= max_levels - refine:
                break
            share /= growth
            level = run(share)
            if level.ok:
                good = level
                break
            bad = share
    for _ in range(refine):
        if good is None or bad is None or len(levels) >= max_levels:
            break
        mid = math.sqrt(good.share * bad)
        level = run(mid)
        if level.ok:
            good = level
        else:
            bad = mid
    return good, levels


class ServerSession:
    """One explicit-mode embedded server over links to every model; :meth:`serve` puts a group in service."""

    def __init__(
        self,
        models: Mapping[str, Path],
        configs: Mapping[str, ModelConfig],
        settings: MeasureSettings = MeasureSettings(),  # noqa: B008 - frozen, never mutated
    ) -> None:
        self.models = dict(models)
        self.configs = dict(configs)
        self.settings = settings
        self.loaded: set[str] = set()
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.server: EmbeddedServer | None = None
        self._where: Endpoint | None = None
        self._stack = contextlib.ExitStack()
        self._api: RepositoryApi | None = None

    def __enter__(self) -> ServerSession:
        self._dir = tempfile.TemporaryDirectory(prefix="tritonkit-fleet-")
        root = Path(self._dir.name)
        for name, folder in self.models.items():
            os.symlink(Path(folder).resolve(), root / name, target_is_directory=True)
        try:
            # the view links the models' own folders: the server reads them where they are
            with trusting(Path(f) for f in self.models.values()):
                self._where = self._stack.enter_context(endpoint(repo=root, load=(), exit_timeout=1))
            self.server = self._where.server
            self._api = RepositoryApi(self._where.http, self._where.headers)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._api is not None:
            self._api.close()
        self._stack.close()  # stops the server
        if self._dir is not None:
            self._dir.cleanup()
        self._api, self.server, self._where, self._dir = None, None, None, None

    @property
    def url(self) -> str:
        if self._where is None:
            raise TritonKitError("the fleet's measurement server is not running")
        return self._where.url(self.settings.protocol)

    def serve(self, models: Sequence[str]) -> None:
        """Load exactly ``models`` (each with its tuned config), unloading every other."""
        if self._api is None or self.server is None:
            raise TritonKitError("the fleet's measurement server is not running")
        for name in sorted(self.loaded - set(models)):
            self._api.unload(name)
            self.loaded.discard(name)
        for name in models:
            if name not in self.loaded:
                self._api.load(name, self.configs[name])
                self.loaded.add(name)
        for name in models:
            wait_ready(self.url, self.settings.protocol, name, self.server.admin_headers, timeout=300)

    def level(self, streams: Sequence[Stream], share: float) -> GroupLevel:
        """Every stream at ``share`` x its rate, at once."""
        assert self.server is not None
        scaled = [dataclasses.replace(s, rate=s.rate * share) for s in streams]
        results, seconds = measure_streams(self.url, self.server.admin_headers, scaled, self.settings)
        return GroupLevel(share, results, seconds)

    def measure_group(
        self,
        streams: Sequence[Stream],
        predicted: float,
        on_level: Callable[[GroupLevel], None] | None = None,
        **search: Any,
    ) -> ShareResult:
        """Serve the streams' models together and find the group's share, starting from ``predicted``."""
        self.serve([s.model for s in streams])

        def at(share: float) -> GroupLevel:
            level = self.level(streams, share)
            if on_level is not None:
                on_level(level)
            return level

        best, levels = find_share(at, predicted, **search)
        return ShareResult(tuple(s.model for s in streams), best.share if best else 0.0, levels, predicted)
