"""perf_analyzer as tritonkit's generator of record and cross-check: the real binary against the real
embedded tritonserver.

The binary is NVIDIA's perf_analyzer 2.60.0 from its PyPI wheel (manylinux_2_38). On Debian 12 (glibc
2.36) ``scripts/perf_analyzer/setup.sh`` (``make perf-analyzer``, a prerequisite of ``make test``) runs it
through Debian trixie's C library, confined to ``.cache/perf_analyzer``; ``$TRITONKIT_PERF_ANALYZER``
names another. Without one, the tests that run it skip with the reason the script wrote.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.perf_analyzer_binary import SETUP, find
from tests.support.python_models import model_source

from tritonkit.cli import main
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig, save
from tritonkit.errors import TritonKitError
from tritonkit.measure import perf_analyzer as pa
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import Level, Target, WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

#: loose windows for a 2-core machine shared with the server: what is checked is what was read, not speed
#: (999 %: perf_analyzer found three 0.5 s windows of 1,258-1,607 req/s, p99 1.6-4.7 ms, unstable at 100 %)
LOOSE = MeasureOptions(window=WindowSpec(0.5), stability=StabilityRule(3, 9.99), max_windows=10)
FAST = ["--window-s", "0.3", "--stability-pct", "60", "--max-windows", "6", "--timeout-s", "10"]


@pytest.fixture(scope="module")
def binary() -> pa.Binary:
    found = find()
    if isinstance(found, str):
        pytest.skip(f"perf_analyzer: {found}")
    return found


@pytest.fixture
def on_path(binary: pa.Binary, monkeypatch: pytest.MonkeyPatch) -> Iterator[pa.Binary]:
    monkeypatch.setenv(pa.ENV, binary.path)
    yield binary


def test_one_level_read_into_the_level_record(
    server: EmbeddedServer, binary: pa.Binary, tmp_path: Path
) -> None:
    target = Target(server.grpc_url, "add", "grpc")
    with pa.PerfAnalyzerMeasurer(target, LOOSE, binary, keep=tmp_path) as measurer:
        result = measurer.measure(Level("concurrency", 2))
    assert result.stable and result.error == "" and result.throughput > 0, (result.error, result.windows)
    # the figures are perf_analyzer's own CSV row, the windows its export's requests
    row = pa.parse_csv((tmp_path / "c2.csv").read_text())[0]
    assert row["Concurrency"] == 2 and result.throughput == row["Inferences/Second"]
    assert (
        result.percentiles["p99_us"] == row["p99 latency"]
        and result.percentiles["p50_us"] == row["p50 latency"]
    )
    assert (
        result.server.queue_us == row["Server Queue"]
        and result.server.compute_infer_us == row["Server Compute Infer"]
    )
    stdout = pa.parse_stdout((tmp_path / "c2.log").read_text())
    assert len(result.windows) == len(stdout.passes) >= 3
    # each window rebuilt from the export is perf_analyzer's pass: same throughput (to its 6 digits)
    for window, (throughput, _) in zip(result.windows, stdout.passes, strict=True):
        assert window.throughput == pytest.approx(throughput, rel=1e-4)
    # the level's requests are its last 3 windows', as its summary counts them
    assert result.successes == stdout.request_count == sum(w.successes for w in result.windows[-3:])
    low, high = result.p99_ci_us
    assert low is not None and low <= result.percentiles["p99_us"] and (high is None or high >= low)
    assert result.server.inference_count == stdout.inference_count > 0
    assert 0 < result.server.average_batch <= 8
    assert result.summary()["p99_samples"] == result.successes


def test_an_unstable_level_is_never_an_answer(server: EmbeddedServer, binary: pa.Binary) -> None:
    strict = MeasureOptions(window=WindowSpec(0.1), stability=StabilityRule(3, 0.0), max_windows=3)
    with pa.PerfAnalyzerMeasurer(Target(server.http_url, "work"), strict, binary) as measurer:
        result = measurer.measure(Level("concurrency", 1))
    # 0 % agreement of three real windows: perf_analyzer reports no level (exit 2) and its passes remain
    assert not result.stable and result.successes == 0 and len(result.windows) == 3
    assert result.throughput > 0 and "stable" in result.error
    assert not result.within(None, require_stable=False)


def test_a_refused_request_is_one_error(server: EmbeddedServer, binary: pa.Binary) -> None:
    absent = Target(server.http_url, "no_such_model")
    failed = pytest.raises(pa.PerfAnalyzerError, match=r"perf_analyzer at c1 failed: .+")
    with pa.PerfAnalyzerMeasurer(absent, LOOSE, binary) as measurer, failed as caught:
        measurer.measure(Level("concurrency", 1))
    assert "\n" not in str(caught.value)


def test_profile_with_perf_analyzer_as_the_generator(
    server: EmbeddedServer, on_path: pa.Binary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["profile", "--model", "work", "--url", server.http_url, "--generator", "perf_analyzer",
         "--concurrency", "1,2", *FAST, "--csv", str(tmp_path / "p.csv"), "--json", str(tmp_path / "p.json")]
    )  # fmt: skip
    assert code == 0
    with (tmp_path / "p.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["level"] for r in rows] == ["1", "2"] and all(float(r["throughput"]) > 0 for r in rows)
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["generator"] == "perf_analyzer" and data["perf_analyzer"]["installed"]
    # a level perf_analyzer made stable has its samples; one it could not (this 2-core host is shared)
    # is in the report as UNSTABLE with none, never dropped
    assert all((lv["p99_samples"] > 0) == lv["stable"] for lv in data["levels"])
    assert "cross_check" not in data
    out = capsys.readouterr().out
    assert all(lv["stable"] for lv in data["levels"]) or "UNSTABLE" in out
    assert "generator: perf_analyzer (Perf Analyzer Version" in out and " c2 " in out


def test_compare_with_perf_analyzer_as_the_generator(
    server: EmbeddedServer, on_path: pa.Binary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["compare", "add", "work", "--url", server.http_url, "--generator", "perf_analyzer", "--rounds", "1",
         "--concurrency", "1", *FAST, "--json", str(tmp_path / "c.json")]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["generator"].startswith("perf_analyzer (Perf Analyzer Version")
    (round_,) = data["per_round"]
    assert set(round_) == {"add", "work"} and all(r["throughput"] > 0 for r in round_.values())
    captured = capsys.readouterr()
    assert captured.err.count("(generator: perf_analyzer (") == 2
    assert f"Generator: {data['generator']}." in captured.out


def test_every_profile_shows_perf_analyzer_beside_tritonkit(
    server: EmbeddedServer, on_path: pa.Binary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["profile", "--model", "add", "--url", server.grpc_url, "--protocol", "grpc", "--concurrency", "1",
         *FAST, "--accept-unstable", "--csv", str(tmp_path / "p.csv"), "--json", str(tmp_path / "p.json")]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "cross-check: perf_analyzer" in out and "  perf_analyzer c1: " in out and "tritonkit/PA" in out
    with (tmp_path / "p.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    data = json.loads((tmp_path / "p.json").read_text())
    check = data["cross_check"]["c1"]
    # perf_analyzer's own level: stable, or (this shared 2-core host) reported unstable with its passes
    assert check["stable"] or "no stable measurement" in check["error"], check
    assert float(row["pa_throughput"]) == check["throughput"] > 0
    ours = data["levels"][0]["throughput"]
    assert check["tritonkit_over_pa"] == pytest.approx(ours / check["throughput"], rel=1e-2)


def test_profile_says_perf_analyzer_is_not_installed(
    server: EmbeddedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(pa.ENV, str(tmp_path / "absent"))
    code = main(
        ["profile", "--model", "add", "--url", server.http_url, "--concurrency", "1", *FAST, "--accept-unstable",
         "--json", str(tmp_path / "p.json")]
    )  # fmt: skip
    assert code == 0
    assert "perf_analyzer: not installed" in capsys.readouterr().out
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["perf_analyzer"]["installed"] is False and "not installed" in data["perf_analyzer"]["reason"]
    # as the generator of record it is one line and a non-zero exit, before any level is measured
    code = main(
        ["profile", "--model", "add", "--url", server.http_url, "--generator", "perf_analyzer", *FAST]
    )
    err = capsys.readouterr().err
    assert (
        code != 0 and "--generator perf_analyzer: not installed" in err and len(err.strip().splitlines()) == 1
    )


def test_the_wheel_binary_as_is_on_an_older_c_library() -> None:
    """On Debian 12 the wheel's binary itself does not start (glibc 2.36 < 2.38): a reason, not a crash."""
    raw = SETUP / "pa" / "perf_analyzer"
    if not raw.is_file():
        pytest.skip("perf_analyzer: no unpacked wheel binary (scripts/perf_analyzer/setup.sh)")
    found = pa._probe(str(raw))
    if isinstance(found, pa.Binary):
        pytest.skip(f"perf_analyzer: this C library runs the wheel's binary as is ({found.version})")
    assert "GLIBC_2.38" in found and found.startswith("not installed here")


def test_flags_perf_analyzer_cannot_honour_are_refused() -> None:
    target = Target("127.0.0.1:1", "m")
    four = MeasureOptions(stability=StabilityRule(4, 0.1))
    with pytest.raises(TritonKitError, match="stability over 4 windows: expected 3"):
        pa.command("pa", target, Level("concurrency", 1), four, "x.csv")
    shm = Target("127.0.0.1:1", "m", shared_memory="system")
    with pytest.raises(TritonKitError, match="shared memory 'system': expected none"):
        pa.command("pa", shm, Level("concurrency", 1), MeasureOptions(), "x.csv")
    args = pa.command(
        "pa", target, Level("poisson", 50), MeasureOptions(window=WindowSpec(1.0, 200)), "x.csv"
    )
    assert args[args.index("--request-rate-range") + 1] == "50:50"
    assert args[args.index("--request-distribution") + 1] == "poisson"
    assert args[args.index("--measurement-request-count") + 1] == "200"


#: a text-like model: token ids past its vocabulary of 1,000 are an error, as a real embedding's are
VOCAB = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                ids = _numpy_in(request, "input_ids")
                if ids.min() < 0 or ids.max() >= 1000:
                    error = pb_utils.TritonError(f"token id {int(ids.max())} past the vocabulary")
                    out.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                    continue
                out.append(pb_utils.InferenceResponse([_tensor_out("Y", ids.astype(np.float32))]))
            return out
    """
)


def test_perf_analyzer_sends_tritonkits_requests_not_its_own_random_data(
    tmp_path: Path, binary: pa.Binary
) -> None:
    repo = tmp_path / "repo"
    config = ModelConfig(
        name="vocab",
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("input_ids", "INT64", [6])],
        outputs=[TensorConfig("Y", "FP32", [6])],
        dynamic_batching=DynamicBatching(),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    (repo / "vocab" / "1").mkdir(parents=True)
    (repo / "vocab" / "1" / "model.py").write_text(VOCAB)
    save(config, repo / "vocab" / "config.pbtxt")
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        target = Target(server.grpc_url, "vocab", "grpc")
        with pa.PerfAnalyzerMeasurer(target, LOOSE, binary, export=False, keep=tmp_path / "kept") as measurer:
            result = measurer.measure(Level("concurrency", 1))
    # perf_analyzer's own random INT64 data is past any vocabulary: every request would have failed
    # (a loaded 2-core host may leave the level unstable: what is checked is that requests succeeded)
    assert result.throughput > 0 and "fail" not in result.error, result.error
    assert result.failures == 0 and all(w.failures == 0 for w in result.windows)
