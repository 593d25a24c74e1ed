"""What one ``tritonkit tune`` is asked to do: :class:`TuneOptions`, their checks and how its figures were measured.

Owns the options of :func:`tritonkit.tune.tuner.tune` (the server, the model and budget, the grid, the
search and finals, what is written, the measurement settings and the load generator of record:
``generator`` ``tritonkit`` or ``perf_analyzer``, chosen by :mod:`tritonkit.measure.generators`), their
checks (:meth:`TuneOptions.validate`: :class:`~tritonkit.errors.OptionError` naming the option) and the
``method`` record ``tune.json`` keeps (``tritonkit plan --check-knee`` measures again from it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tritonkit.errors import OptionError
from tritonkit.measure.generators import GENERATORS, label
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.perf_analyzer import Binary
from tritonkit.tune.space import DEFAULT_DELAYS_US

__all__ = ["TuneOptions"]


@dataclasses.dataclass
class TuneOptions:
    """Everything one tune needs. ``url`` None: the embedded server on ``repo`` (explicit model control)."""

    model: str
    latency_budget_ms: float
    report_dir: Path
    repo: Path | None = Path("model_repository")
    url: str | None = None
    http_url: str | None = None
    admin_key: str | None = None
    protocol: str = "http"
    min_throughput: float = 0.0
    search: str = "quick"
    resume: bool = False
    measure: MeasureOptions = dataclasses.field(default_factory=MeasureOptions)
    max_concurrency: int = 64
    refine: int = 1
    max_batch_sizes: Sequence[int] | None = None
    delays_us: Sequence[int | str] | None = None
    instances: Sequence[int] | None = None
    preferred: bool = True
    queue: bool = True
    #: a native-backend GPU version: try TorchScript's optimised plan too (the late ``jit_optimize`` axis)
    jit_optimize: bool = True
    gpu: bool = False
    write: str = "config"  # config | none | model:NAME | spec | spec:PATH (spec: config.pbtxt and the spec)
    shared_memory: str = "none"
    batch_size: int = 1
    plots: bool = True
    #: quick search moves only for a gain above this share: smaller differences are measurement noise
    min_gain: float = 0.03
    #: quick search starts each config's load search at the best config's concurrency so far (brute: at 1)
    warm_start: bool = True
    #: finals: up to this many configs within ``finals_within`` of the best are measured again
    #: ``final_rounds`` times at the concurrency the search found (fewer than 2: the search's best stands)
    finalists: int = 4
    final_rounds: int = 3
    finals_within: float = 0.10
    #: False: an unstable level may still be the best (reported as unstable); for noisy shared machines
    require_stable: bool = True
    stream: IO[str] | None = None
    #: a perf_analyzer ``--input-data`` JSON file of real requests (default: generated data)
    input_data: str | None = None
    #: wall-clock seconds for the whole tune (None: no limit); checked before each measurement
    time_budget_s: float | None = None
    #: the load generator of record: ``tritonkit`` or ``perf_analyzer`` (one process per level; each
    #: level's CSV, export and output kept in the report's ``perf_analyzer/`` folder)
    generator: str = "tritonkit"

    @property
    def writes_spec(self) -> bool:
        return self.write == "spec" or self.write.startswith("spec:")

    def grid_delays(self) -> Sequence[int | str] | None:
        """The delays to try: as given, else the default (without `off` when the spec is written)."""
        if self.delays_us is not None or not self.writes_spec:
            return self.delays_us
        return [d for d in DEFAULT_DELAYS_US if d != "off"]

    def method(self, binary: Binary | None = None) -> dict[str, Any]:
        """How every figure of this tune was measured (``tritonkit plan --check-knee`` measures the same
        way): ``generator`` is ``tritonkit`` or ``perf_analyzer``, ``generator_of_record`` says which
        build (perf_analyzer's ``binary``) or client."""
        m = self.measure
        return {
            "generator": self.generator,
            "generator_of_record": label(binary)
            if binary
            else "tritonkit (asyncio AsyncClient, closed loop)",
            "protocol": self.protocol,
            "shared_memory": self.shared_memory,
            "batch_size": self.batch_size,
            "window_s": m.window.seconds,
            "window_count": m.window.count,
            "stability_windows": m.stability.count,
            "stability_pct": round(m.stability.tolerance * 100, 3),
            "max_windows": m.max_windows,
            "workers": m.workers,
            "require_stable": self.require_stable,
            "max_concurrency": self.max_concurrency,
        }

    def validate(self) -> None:
        """Raise :class:`OptionError` naming the first option whose value cannot work."""
        self._check_choices()
        self._check_where()
        self._check_limits()
        if self.url is not None and not self.admin_key:
            raise OptionError(
                "admin_key", "not given", "the key of the restricted model-repository API with a url"
            )

    def _check_choices(self) -> None:
        """The budget, and the options that take one of a few values: search, generator, protocol, write."""
        if not self.latency_budget_ms > 0:
            raise OptionError("latency_budget_ms", self.latency_budget_ms, "a positive number of ms")
        if self.search not in ("quick", "brute"):
            raise OptionError("search", repr(self.search), "quick or brute")
        if self.generator not in GENERATORS:
            raise OptionError("generator", repr(self.generator), " or ".join(GENERATORS))
        if self.protocol not in ("http", "grpc"):
            raise OptionError("protocol", repr(self.protocol), "http or grpc")
        if self.write not in {"config", "none", "spec"} and not self.write.startswith(("model:", "spec:")):
            raise OptionError("write", repr(self.write), "config, none, model:NAME, spec or spec:PATH")
        if self.writes_spec and "off" in (self.delays_us or ()):
            raise OptionError(
                "delays_us",
                "with `off`",
                "no `off` with the build spec written: a build spec cannot say 'no dynamic batcher'",
            )

    def _check_where(self) -> None:
        """The model's repository (without a url), the HTTP endpoint beside a gRPC url."""
        if self.url is None and (self.repo is None or not (Path(self.repo) / self.model).is_dir()):
            raise OptionError("repo", self.repo, f"a model repository holding a folder `{self.model}`")
        if self.url is not None and self.protocol == "grpc" and not self.http_url:
            raise OptionError(
                "http_url", "not given", "the HTTP endpoint (model-repository API) of a gRPC url"
            )

    def _check_limits(self) -> None:
        """The finals' counts and share, and the time budget."""
        for name in ("finalists", "final_rounds"):
            if getattr(self, name) < 0:
                raise OptionError(name, getattr(self, name), "a whole number >= 0")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise OptionError("time_budget_s", self.time_budget_s, "a positive number of seconds")
        if not 0 <= self.finals_within <= 1:
            raise OptionError("finals_within", self.finals_within, "a share between 0 and 1")
