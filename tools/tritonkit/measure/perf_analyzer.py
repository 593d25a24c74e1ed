"""NVIDIA's perf_analyzer as a generator of record and as the cross-check of tritonkit's own figures.

Owns finding the binary (:func:`locate`: ``$TRITONKIT_PERF_ANALYZER``, the ``perf_analyzer`` wheel's
own binary, or ``perf_analyzer`` on ``PATH``; a binary that does not start here, such as the
manylinux_2_38 wheel on glibc 2.36, is a reason, not a crash), its command line for one level
(:func:`command`), reading its three outputs (:func:`parse_csv`: ``-f`` with ``--verbose-csv``;
:func:`parse_stdout`: the ``-v`` pass lines and summary; :func:`parse_export`: the
``--profile-export-file`` JSON's windows and request timestamps) into the project's
:class:`~tritonkit.measure.levels.LevelResult` (:func:`level_result`), and :class:`PerfAnalyzerMeasurer`,
whose ``measure(level)`` drops into :func:`~tritonkit.measure.levels.find_max` and every loop that
measures levels.

One perf_analyzer process measures one level (``--concurrency-range N:N`` or ``--request-rate-range R:R``):
its own ranges are linear and stop at the first unstable level, tritonkit's are powers of two and go on.
The windows and the stability rule are the user's flags passed on: ``--measurement-interval`` (or
``--measurement-mode count_windows``), ``--stability-percentage``, ``--max-trials``, ``--percentile 99``
(so a window's stability is judged on throughput and p99, as tritonkit judges it). perf_analyzer keeps
its own arithmetic: stable when max/min of the last 3 windows is within ``1 + pct`` (3 is fixed in
its source), percentiles as ``latencies[round(q * (n - 1))]`` in whole µs.

A level's figures are perf_analyzer's own: throughput and p50/p90/p95/p99 from its CSV, Triton's queue
and compute split from its server-side columns, the server's average time, request and execution counts
from its summary. The export (when asked for) adds the windows: each window's requests (those whose
answer arrived inside its boundaries, perf_analyzer's rule) give its throughput and percentiles, and the
last 3 windows' latencies give the level's sample count, mean, max and the p99's confidence interval.
A level perf_analyzer could not make stable is returned unstable with its pass lines as windows and no
successes, so it is never an answer. perf_analyzer's own generator check (its "not able to keep up"
warnings: client overhead over 50 %, or over 1 % of the requests delayed at a rate) marks a level
generator-limited; ``generator_cpu`` is its client overhead share.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonkit.errors import TritonKitError
from tritonkit.measure.levels import LevelResult, MeasureOptions, Window
from tritonkit.measure.loadgen import Level, Target
from tritonkit.measure.stats import ServerSplit, latency_percentiles, quantile_interval_us

__all__ = [
    "ENV",
    "STABILITY_WINDOWS",
    "Binary",
    "PerfAnalyzerError",
    "PerfAnalyzerMeasurer",
    "Stdout",
    "command",
    "cross_check",
    "cross_check_line",
    "level_result",
    "locate",
    "parse_csv",
    "parse_export",
    "parse_stdout",
]

#: the environment variable that names the binary (or a wrapper that starts it)
ENV = "TRITONKIT_PERF_ANALYZER"
#: perf_analyzer's stability window: the last 3 measurements (``load_parameters_.stability_window``)
STABILITY_WINDOWS = 3
#: perf_analyzer's exit status when a level did not become stable (``STABILITY_ERROR``)
STABILITY_ERROR = 2


class PerfAnalyzerError(TritonKitError):
    """perf_analyzer is missing, cannot do what was asked, or failed."""


@dataclasses.dataclass(frozen=True)
class Binary:
    """A perf_analyzer that starts here: its path and its ``--version`` line."""

    path: str
    version: str


def _wheel_binary() -> str | None:
    spec = importlib.util.find_spec("perf_analyzer")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / "bin" / "perf_analyzer"
    return str(path) if path.is_file() else None


@functools.lru_cache(maxsize=8)
def _probe(path: str) -> Binary | str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not installed here ({path} does not start: {exc})"
    line = next((x for x in (done.stdout + done.stderr).splitlines() if "Perf Analyzer" in x), "")
    if not line:  # `--version` exits 1 after printing it
        why = next((x.strip() for x in (done.stderr + done.stdout).splitlines() if x.strip()), "no output")
        return f"not installed here ({path} does not run here: {why})"
    return Binary(path, line.strip())


def locate() -> Binary | str:
    """The perf_analyzer to run, or why there is none (one line)."""
    named = os.environ.get(ENV)
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            return f"not installed (${ENV}={named} is not an executable file)"
        return _probe(named)
    # the wheel's own binary before its console script: that Python wrapper drops the exit status
    for path in (_wheel_binary(), shutil.which("perf_analyzer")):
        if path and os.access(path, os.X_OK):
            return _probe(path)
    return f"not installed (no ${ENV}, no perf_analyzer wheel or `perf_analyzer` on PATH)"


def command(
    binary: str,
    target: Target,
    level: Level,
    options: MeasureOptions,
    csv_path: str | os.PathLike[str],
    export_path: str | os.PathLike[str] | None = None,
) -> list[str]:
    """perf_analyzer's command line that measures ``level`` of ``target`` with ``options``' windows.

    Every flag is one of perf_analyzer 2.60's (``src/command_line_parser.cc``). Refused in one line:
    a stability rule over other than 3 windows (perf_analyzer's is fixed), shared memory (registering
    regions needs the admin key, which would be in perf_analyzer's argv for every ``ps`` to read).
    """
    if options.stability.count != STABILITY_WINDOWS:
        raise PerfAnalyzerError(
            f"perf_analyzer: stability over {options.stability.count} windows: expected "
            f"{STABILITY_WINDOWS} (perf_analyzer's rule is fixed at 3)"
        )
    if target.shared_memory != "none":
        raise PerfAnalyzerError(
            f"perf_analyzer: shared memory {target.shared_memory!r}: expected none (registering regions "
            "needs the admin key, which would be in perf_analyzer's command line)"
        )
    if options.max_windows < STABILITY_WINDOWS:
        raise PerfAnalyzerError(f"perf_analyzer: at most {options.max_windows} windows: expected >= 3")
    args = [binary, "-m", target.model]
    if target.version:
        args += ["-x", target.version]
    args += ["-u", target.url, "-i", target.protocol, "-b", str(target.batch_size)]
    if level.mode == "concurrency":
        args += ["--concurrency-range", f"{int(level.value)}:{int(level.value)}"]
    else:
        distribution = "poisson" if level.mode == "poisson" else "constant"
        args += [
            "--request-rate-range",
            f"{level.value:g}:{level.value:g}",
            "--request-distribution",
            distribution,
        ]
    window = options.window
    if window.count:
        args += ["--measurement-mode", "count_windows", "--measurement-request-count", str(window.count)]
    else:
        args += ["--measurement-interval", str(max(1, round(window.seconds * 1000)))]
    args += [
        "--stability-percentage", f"{options.stability.tolerance * 100:g}",
        "--max-trials", str(options.max_windows),
        "--percentile", "99",
        "-v",
        "-f", str(csv_path),
        "--verbose-csv",
    ]  # fmt: skip
    if export_path is not None:
        args += ["--profile-export-file", str(export_path)]
    if target.input_data:
        args += ["--input-data", str(target.input_data)]
    return args


def parse_csv(text: str) -> list[dict[str, float]]:
    """The rows of perf_analyzer's ``-f`` CSV, each ``{column: number}`` by its header's names
    (``Concurrency`` or ``Request Rate``, ``Inferences/Second``, ``Server Queue``, ``p99 latency``, ...).
    A cell that is not a number is left out (perf_analyzer writes numbers only)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split(",")]
    rows = []
    for line in lines[1:]:
        row: dict[str, float] = {}
        for name, cell in zip(header, line.split(","), strict=False):
            try:
                row[name] = float(cell)
            except ValueError:
                continue
        rows.append(row)
    return rows


@dataclasses.dataclass
class Stdout:
    """What perf_analyzer's ``-v`` output says about one level."""

    #: (throughput, p99 µs) of each measurement window ("Pass [n]")
    passes: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    #: the pass lines that failed ("Pass [n] cb::Error: ...")
    pass_errors: list[str] = dataclasses.field(default_factory=list)
    request_count: int = 0
    overhead_pct: float = 0.0
    delayed_pct: float = 0.0
    keep_up_warning: bool = False
    inference_count: int = 0
    execution_count: int = 0
    server_successes: int = 0
    server_request_us: float = 0.0
    unstable: bool = False


_PASS = re.compile(r"Pass \[\d+\] throughput: ([0-9.eE+-]+) infer/sec\. p99 latency: (\d+) usec")
_NUMBERS = {
    "request_count": re.compile(r"^\s*Request count: (\d+)", re.M),
    "overhead_pct": re.compile(r"Avg client overhead: ([0-9.]+)%"),
    "delayed_pct": re.compile(r"([0-9.]+)% of the requests were delayed"),
    "inference_count": re.compile(r"^\s*Inference count: (\d+)", re.M),
    "execution_count": re.compile(r"^\s*Execution count: (\d+)", re.M),
    "server_successes": re.compile(r"^\s*Successful request count: (\d+)", re.M),
    "server_request_us": re.compile(r"^\s*Avg request latency: (\d+) usec", re.M),
}


def parse_stdout(text: str) -> Stdout:
    """perf_analyzer's ``-v`` output of one level (its stderr may be appended: the stability line)."""
    out = Stdout(passes=[(float(t), float(p)) for t, p in _PASS.findall(text)])
    out.pass_errors = re.findall(r"Pass \[\d+\] cb::Error: (.*)", text)
    for name, pattern in _NUMBERS.items():
        match = pattern.search(text)
        if match:
            kind = type(getattr(out, name))
            setattr(out, name, kind(float(match.group(1))) if kind is int else float(match.group(1)))
    out.keep_up_warning = "not able to keep up" in text
    out.unstable = "Failed to obtain stable measurement" in text
    return out


@dataclasses.dataclass
class ExportWindow:
    """One measurement window of the export: its length and the latencies of the requests it counts."""

    wall_s: float
    latencies_ns: list[int]


def parse_export(data: Mapping[str, Any]) -> dict[float, list[ExportWindow]]:
    """The windows of each experiment of a ``--profile-export-file`` JSON, by its level's value.

    A request belongs to the window its last answer arrived in (perf_analyzer's own rule); its
    latency is that answer's timestamp minus its start, in ns (the clock is the system clock)."""
    out: dict[float, list[ExportWindow]] = {}
    for entry in data.get("experiments", []):
        value = float(entry["experiment"]["value"])
        bounds = [int(b) for b in entry.get("window_boundaries", [])]
        windows = [ExportWindow((hi - lo) / 1e9, []) for lo, hi in itertools.pairwise(bounds)]
        for request in entry.get("requests", []):
            answers = request.get("response_timestamps") or []
            if not answers:
                continue
            end, start = int(answers[-1]), int(request["timestamp"])
            for window, (lo, hi) in zip(windows, itertools.pairwise(bounds), strict=True):
                if lo <= end <= hi:
                    window.latencies_ns.append(end - start)
                    break
        out[value] = windows
    return out


def _window(wall_s: float, latencies: Sequence[int]) -> Window:
    return Window(
        wall_s=wall_s,
        successes=len(latencies),
        failures=0,
        sent=len(latencies),
        late=0,
        dropped=0,
        throughput=len(latencies) / wall_s if wall_s > 0 else 0.0,
        percentiles=latency_percentiles(latencies),
        generator_cpu=0.0,
        server=ServerSplit(),
        latencies_ns=list(latencies),
    )


def _pass_window(throughput: float, p99_us: float, wall_s: float) -> Window:
    percentiles = {**latency_percentiles([]), "p99_us": p99_us}
    return Window(wall_s, 0, 0, 0, 0, 0, throughput, percentiles, 0.0, ServerSplit())


def level_result(
    level: Level,
    row: Mapping[str, float] | None,
    stdout: Stdout,
    windows: Sequence[ExportWindow] | None,
    options: MeasureOptions,
    error: str = "",
) -> LevelResult:
    """One level as the project's record, from perf_analyzer's CSV ``row`` (None: it reported none),
    its ``stdout`` and the export's ``windows`` of this level (None: no export)."""
    window_s = options.window.seconds
    late = stdout.delayed_pct / 100.0
    limited = stdout.keep_up_warning or (level.mode != "concurrency" and late > options.max_late_share)
    if row is None:
        passes = [_pass_window(t, p, window_s) for t, p in stdout.passes]
        last = stdout.passes[-STABILITY_WINDOWS:]
        throughput = sum(t for t, _ in last) / len(last) if last else 0.0
        percentiles = {**latency_percentiles([]), "p99_us": max((p for _, p in last), default=0.0)}
        return LevelResult(
            level=level, stable=False, windows=passes, throughput=throughput, percentiles=percentiles,
            failures=len(stdout.pass_errors), successes=0, generator_limited=limited,
            generator_cpu=stdout.overhead_pct / 100.0, late_share=late, server=ServerSplit(),
            error=error or ("perf_analyzer: no stable measurement" if stdout.unstable else "perf_analyzer: no result"),
        )  # fmt: skip
    kept = [lat for w in (windows or [])[-STABILITY_WINDOWS:] for lat in w.latencies_ns]
    own = latency_percentiles(kept)
    percentiles = {
        **{f"p{q}_us": float(row.get(f"p{q} latency", 0.0)) for q in (50, 90, 95, 99)},
        "mean_us": own["mean_us"],
        "max_us": own["max_us"],
    }
    server = ServerSplit(
        requests=stdout.server_successes,
        queue_us=row.get("Server Queue", 0.0),
        compute_input_us=row.get("Server Compute Input", 0.0),
        compute_infer_us=row.get("Server Compute Infer", 0.0),
        compute_output_us=row.get("Server Compute Output", 0.0),
        total_us=stdout.server_request_us,
        inference_count=stdout.inference_count,
        execution_count=stdout.execution_count,
    )
    return LevelResult(
        level=level,
        stable=True,
        windows=[_window(w.wall_s, w.latencies_ns) for w in windows or []],
        throughput=row.get("Inferences/Second", 0.0),
        percentiles=percentiles,
        failures=0,
        successes=stdout.request_count or len(kept),
        generator_limited=limited,
        generator_cpu=stdout.overhead_pct / 100.0,
        late_share=late,
        server=server,
        error=error,
        p99_ci_us=quantile_interval_us(kept) if kept else (None, None),
    )


def _first_error(text: str) -> str:
    """perf_analyzer's own error line (its stderr), for a failed run."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("error:", "Error:", "Failed", "Usage:")) or "Error" in line:
            return line
    return lines[-1] if lines else "no output"


class PerfAnalyzerMeasurer:
    """Measures levels of one model with perf_analyzer: one process per level, files in a private folder.

    ``export``: also ask for the profile export (every request's timestamps, inputs and outputs: large
    for large tensors), which gives the windows, the sample count and the p99's interval. ``keep``: a
    folder that receives each level's CSV, export and output (``<label>.csv``, ``.json``, ``.log``; a
    level measured again ``<label>-2.csv``, ...), each result naming its CSV (``source``); ``keep_export``
    False keeps the CSV and output only (the export holds every request's tensors).
    """

    def __init__(
        self,
        target: Target,
        options: MeasureOptions | None = None,
        binary: Binary | None = None,
        *,
        export: bool = True,
        keep: str | os.PathLike[str] | None = None,
        keep_export: bool = True,
    ) -> None:
        found = binary if binary is not None else locate()
        if isinstance(found, str):
            raise PerfAnalyzerError(f"perf_analyzer: {found}")
        self.binary = found
        self.target = target
        self.options = options or MeasureOptions()
        self.export = export
        self.keep = Path(keep) if keep is not None else None
        self.keep_export = keep_export
        self.measurements = 0
        self.discarded = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> PerfAnalyzerMeasurer:
        self._dir = tempfile.TemporaryDirectory(prefix="tritonkit-pa-")
        if not self.target.input_data:
            # perf_analyzer's own random data is not tritonkit's: token ids past a vocabulary, for one,
            # fail a text model's requests (on a GPU, a device-side assert). Both send the same requests.
            path = Path(self._dir.name) / "tritonkit-requests.json"
            try:
                write_input_data(self.target, path)
            except TritonKitError:  # no model to read: perf_analyzer's own first request says so
                return self
            self.target = dataclasses.replace(self.target, input_data=str(path))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def loaded(self) -> None:
        """A config was just put into service: perf_analyzer's own warm-up and first windows absorb it."""

    def _timeout(self) -> float:
        window = self.options.window
        per = window.seconds if not window.count else 60.0
        return (self.options.max_windows + 2) * (per + self.target.timeout_s) + 60.0

    def measure(self, level: Level) -> LevelResult:
        """Run perf_analyzer at ``level`` and read what it wrote."""
        if self._dir is None:
            raise PerfAnalyzerError("PerfAnalyzerMeasurer used outside its `with` block")
        self.measurements += 1
        folder = Path(self._dir.name) / f"{self.measurements:03d}-{level.label().replace('/', 'per')}"
        folder.mkdir()
        csv_path, export_path = folder / "pa.csv", folder / "pa.json"
        args = command(
            self.binary.path, self.target, level, self.options, csv_path, export_path if self.export else None
        )
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=self._timeout(), check=False)
        except subprocess.TimeoutExpired:
            raise PerfAnalyzerError(
                f"perf_analyzer at {level.label()}: no result within {self._timeout():.0f} s"
            ) from None
        output = done.stdout + done.stderr
        stdout = parse_stdout(output)
        rows = parse_csv(csv_path.read_text()) if csv_path.is_file() else []
        windows: list[ExportWindow] | None = None
        if self.export and export_path.is_file():
            windows = parse_export(json.loads(export_path.read_text())).get(float(level.value))
        source = self._keep(level, folder, output)
        if done.returncode not in (0, STABILITY_ERROR) or (done.returncode and not stdout.unstable):
            reason = _first_error(done.stderr or done.stdout)
            if not stdout.passes:
                raise PerfAnalyzerError(f"perf_analyzer at {level.label()} failed: {reason}")
            result = level_result(level, None, stdout, None, self.options, f"perf_analyzer: {reason}")
        else:
            result = level_result(level, rows[0] if rows else None, stdout, windows, self.options)
        result.source = source
        return result

    def _keep(self, level: Level, folder: Path, output: str) -> str:
        """Copy the level's files into ``keep`` (``<label>.*``; ``<label>-2.*`` and on when a level is
        measured again, so none is overwritten); the CSV's path as ``<keep's name>/<file>``, the log's where
        perf_analyzer wrote no CSV (a level it could not make stable: its pass lines are the figures; "": none kept)."""
        if self.keep is None:
            return ""
        self.keep.mkdir(parents=True, exist_ok=True)
        label = level.label().replace("/", "per")
        name, again = label, 1
        while any((self.keep / f"{name}.{suffix}").exists() for suffix in ("log", "csv", "json")):
            again += 1
            name = f"{label}-{again}"
        (self.keep / f"{name}.log").write_text(output)
        for suffix in ("csv", "json") if self.keep_export else ("csv",):
            if (folder / f"pa.{suffix}").is_file():
                shutil.copyfile(folder / f"pa.{suffix}", self.keep / f"{name}.{suffix}")
        csv = self.keep / f"{name}.csv"
        return f"{self.keep.name}/{csv.name if csv.is_file() else f'{name}.log'}"


def write_input_data(target: Target, path: Path, count: int = 4) -> None:
    """tritonkit's generated requests for ``target`` (its seed, batch size and variable dims) as a
    perf_analyzer ``--input-data`` file: each tensor's bytes in ``b64``, its shape without the batch."""
    from tritonkit.measure.payloads import fetch_model_spec, make_payloads  # noqa: PLC0415 (only without data)

    spec = fetch_model_spec(target.url, target.model, target.version, protocol=target.protocol)
    made = make_payloads(
        spec, {target.batch_size: 1.0}, per_batch=count, seed=target.seed, variable_dim=target.variable_dim
    )
    entries = []
    for payload in made.payloads:
        entry: dict[str, Any] = {}
        for name, array in payload.inputs.items():
            shape = list(array.shape[1:] if spec.max_batch_size > 0 else array.shape)
            if array.dtype == object:
                entry[name] = {
                    "content": [bytes(v).decode("utf-8", "replace") for v in array.reshape(-1)],
                    "shape": shape,
                }
            else:
                one = array[:1] if spec.max_batch_size > 0 else array
                entry[name] = {"b64": base64.b64encode(one.tobytes()).decode(), "shape": shape}
        entries.append(entry)
    path.write_text(json.dumps({"data": entries}), encoding="utf-8")


def cross_check(ours: LevelResult, theirs: LevelResult | str) -> dict[str, Any]:
    """perf_analyzer's figure beside tritonkit's at one level (``theirs``: its result, or why none)."""
    if isinstance(theirs, str):
        return {"level": ours.level.label(), "error": theirs}
    ratio = ours.throughput / theirs.throughput if theirs.throughput > 0 else None
    p50 = theirs.p50_ms if theirs.stable else None  # an unstable level's pass lines carry no p50
    return {
        "level": theirs.level.label(),
        "stable": theirs.stable,
        "generator_limited": theirs.generator_limited,
        "throughput": round(theirs.throughput, 3),
        "p50_ms": None if p50 is None else round(p50, 4),
        "p99_ms": round(theirs.p99_ms, 4),
        "tritonkit_over_pa": None if ratio is None else round(ratio, 3),
        "p50_diff_ms": None if p50 is None else round(ours.p50_ms - p50, 4),
        **({"error": theirs.error} if theirs.error else {}),
    }


def cross_check_line(record: Mapping[str, Any]) -> str:
    """One terminal line of :func:`cross_check`'s record."""
    if "throughput" not in record:
        return f"  perf_analyzer {record['level']}: {record['error']}"
    verdict = "" if record["stable"] else ", UNSTABLE"
    if record["generator_limited"]:
        verdict += ", GENERATOR-LIMITED"
    ratio, p50, diff = record["tritonkit_over_pa"], record["p50_ms"], record["p50_diff_ms"]
    return (
        f"  perf_analyzer {record['level']}: {record['throughput']:.1f} req/s, "
        f"p50 {'-' if p50 is None else f'{p50:.3f}'} ms, p99 {record['p99_ms']:.3f} ms{verdict}; tritonkit/PA "
        f"{'-' if ratio is None else f'{ratio:.2f}'}, p50 {'-' if diff is None else f'{diff:+.3f}'} ms"
    )
