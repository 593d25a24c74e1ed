"""The generator sized to the host and the request, and a level it limited never taken as an answer.

The sizing rule is a pure function (tested on its own); the rest runs against the real embedded
tritonserver: a level is made generator-limited deterministically by a tiny CPU budget (every window of
every process is over it) or by a rule on the processes it was measured with (the real measurement, then
the limit judged from its capacity), never by mocking the server or its clients.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.measure_server import build_repository

from tritonkit.cli import main
from tritonkit.config import from_pbtxt
from tritonkit.measure.capacity import (
    AUTO,
    auto_processes,
    connections,
    generator_cores,
    is_local,
    parse_workers,
    per_process,
    pools,
)
from tritonkit.measure.levels import (
    GeneratorLimitedError,
    LevelResult,
    MeasureOptions,
    Measurer,
    find_max,
    generator_line,
)
from tritonkit.measure.loadgen import Level, LoadGenerator, Target, WindowSpec
from tritonkit.measure.stats import StabilityRule
from tritonkit.serve.embedded import EmbeddedServer
from tritonkit.tune.tuner import TuneOptions, tune

KB = 1024
#: every window of every generator process is over this share of a core
TINY_CPU = 1e-6


def _options(**extra: object) -> MeasureOptions:
    base: dict[str, object] = {
        "window": WindowSpec(0.2), "stability": StabilityRule(2, 1.0), "max_windows": 2,
    }  # fmt: skip
    return MeasureOptions(**{**base, **extra})  # type: ignore[arg-type]


def test_the_sizing_rule_follows_the_host_the_server_and_the_request() -> None:
    # cores: all but one on a load host of its own; beside the server, half (at most 8 kept for it)
    assert [generator_cores(n, local=False) for n in (1, 2, 16, 128)] == [1, 1, 15, 127]
    assert [generator_cores(n, local=True) for n in (1, 2, 4, 16, 128)] == [1, 1, 2, 8, 120]
    # what one process carries shrinks with the request
    assert (per_process(264), per_process(64 * KB), per_process(786 * KB)) == (16, 8, 4)
    image, tiny = 786 * KB, 264
    # a lone request keeps one process (the blocking one-request path), whatever the host
    assert auto_processes("concurrency", 1, image, 64) == 1
    # no more processes than requests in flight, nor than the host leaves
    assert [auto_processes("concurrency", c, image, 8) for c in (2, 3, 4, 8, 16, 64, 256)] == [
        1,
        1,
        1,
        2,
        4,
        8,
        8,
    ]
    assert [auto_processes("concurrency", c, tiny, 8) for c in (2, 16, 17, 64, 256)] == [1, 1, 2, 4, 8]
    assert auto_processes("concurrency", 64, image, generator_cores(16, local=True)) == 8
    assert auto_processes("concurrency", 64, image, generator_cores(2, local=True)) == 1
    # an open loop by its rate: 2,000/s a process for small requests, 500/s for large ones
    assert [auto_processes("rate", r, tiny, 8) for r in (100.0, 2000.0, 2001.0, 50_000.0)] == [1, 1, 2, 8]
    assert auto_processes("poisson", 1000.0, image, 8) == 2
    # connections: HTTP one per request in flight, in pools of 100; gRPC one channel
    assert (connections(8, "http"), connections(8, "grpc"), pools(100, "http"), pools(101, "http")) == (
        8, 1, 1, 2,
    )  # fmt: skip
    assert pools(256, "grpc") == 1
    # the flag, and where the server is
    assert (parse_workers("auto"), parse_workers("AUTO"), parse_workers("3")) == (AUTO, AUTO, 3)
    for bad in ("0", "-1", "many"):
        with pytest.raises(Exception, match=f"--workers {bad}: expected auto or a whole number >= 1"):
            parse_workers(bad)
    assert is_local("127.0.0.1:8000") and is_local("localhost:8001") and is_local("http://[::1]:8000")
    assert not is_local("10.1.2.3:8000") and not is_local("triton.example.com:8001")


def test_auto_sizes_each_level_and_spawns_only_what_a_level_needs(server: EmbeddedServer) -> None:
    target = Target(server.http_url, "add", headers=server.admin_headers)
    with LoadGenerator(target, AUTO, max_processes=3) as generator:
        assert generator.ceiling == 3 and generator.request_bytes() == 16  # one row of 4 FP32
        assert [generator.processes_for(Level("concurrency", c)) for c in (1, 2, 16, 17, 64)] == [
            1,
            1,
            1,
            2,
            3,
        ]
        assert generator.more(Level("concurrency", 1), 1) is None  # a lone request has nothing to split
        assert generator.more(Level("concurrency", 4), 1) == 2
        assert generator.processes_for(Level("concurrency", 8)) == 2  # at least what a lower level grew to
        assert generator.processes_for(Level("concurrency", 2)) == 1  # a lower level than it: the rule's
        assert (
            generator.more(Level("concurrency", 4), 2) == 3
            and generator.more(Level("concurrency", 4), 3) is None
        )
        assert generator._procs == []  # nothing spawned before a level needs it
    with LoadGenerator(target, 2) as fixed:
        assert (
            fixed.processes_for(Level("concurrency", 64)) == 2
            and fixed.more(Level("concurrency", 64), 2) is None
        )


def test_a_limited_level_is_measured_again_with_more_processes_then_refused(server: EmbeddedServer) -> None:
    target = Target(server.http_url, "work", headers=server.admin_headers)
    options = _options(workers=AUTO, max_processes=2, max_generator_cpu=TINY_CPU)
    with Measurer(target, options) as measurer:
        result = measurer.measure(Level("concurrency", 4))
        assert measurer.remeasured == 1 and measurer.measurements == 2
        # measured with one process (this one's loop), limited, then with two processes: limited again
        assert [t["processes"] for t in result.limited_tries] == [1]
        assert result.capacity.processes == 2 and result.capacity.auto and result.generator_limited
        assert result.successes > 0 and result.failures == 0
        summary = result.summary()["generator"]
        assert (
            summary["processes"] == 2
            and summary["connections"] == 2
            and summary["limited_tries"][0]["processes"] == 1
        )
        assert "generator 2 processes (measured again: the generator limited it with 1 at" in generator_line(
            result
        )
        with pytest.raises(GeneratorLimitedError) as raised:
            find_max(measurer.measure, 1000.0, start=4, limit=4, refine=0, require_stable=False)
    message = str(raised.value)
    assert message.startswith("the generator, not the server, limited concurrency 4 (2 processes at ")
    assert message.endswith(
        "rerun with --url on a separate load host (this host has no more cores for it) or more --workers"
    )


class _NeedsTwo(Measurer):
    """The real measurement, judged limited while it ran on fewer than two processes."""

    def _measure_with(self, generator: LoadGenerator, level: Level, processes: int) -> LevelResult:
        result = super()._measure_with(generator, level, processes)
        result.generator_limited = result.capacity.processes < 2
        return result


def test_a_level_grown_to_enough_processes_is_the_answer(server: EmbeddedServer) -> None:
    target = Target(server.grpc_url, "work", "grpc", headers=server.admin_headers)
    with _NeedsTwo(target, _options(workers=AUTO, max_processes=4)) as measurer:
        best, levels = find_max(measurer.measure, 1000.0, start=2, limit=4, refine=0, require_stable=False)
    assert best is not None and not best.generator_limited
    assert [(r.level.value, r.capacity.processes, len(r.limited_tries)) for r in levels] == [
        (2, 2, 1),
        (4, 2, 0),
    ]
    # c2 was measured on 1 process, limited, then on 2; c4 started on the 2 a lower level needed
    assert all(r.successes > 0 and r.failures == 0 for r in levels)


def test_given_workers_are_not_grown_and_the_line_names_the_flag(server: EmbeddedServer) -> None:
    target = Target(server.http_url, "work", headers=server.admin_headers)
    with Measurer(target, _options(workers=1, max_generator_cpu=TINY_CPU)) as measurer:
        with pytest.raises(
            GeneratorLimitedError,
            match=r"limited concurrency 2 \(1 process at .* CPU\); rerun with more --workers \(or --workers auto\)",
        ):
            find_max(measurer.measure, 1000.0, start=2, limit=2, refine=0, require_stable=False)
        assert measurer.remeasured == 0


def test_profile_refuses_a_limited_level_in_one_line(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--url", server.http_url, "--admin-key", server.admin_key, "--model", "work", "--window-s", "0.2",
              "--stability-windows", "2", "--max-windows", "2"]  # fmt: skip
    rc = main(["profile", *common, "--concurrency", "2", "--workers", "1", "--max-generator-cpu", "0.0001"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "tritonkit profile: error: the generator, not the server, limited concurrency 2 (1 process at "
    )
    with pytest.raises(SystemExit) as usage:  # argparse: one line and the usage
        main(["profile", *common, "--workers", "0"])
    assert usage.value.code == 2
    assert "argument --workers: expected auto or a whole number >= 1" in capsys.readouterr().err


def test_tune_stops_at_a_limited_level_and_writes_no_winner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = build_repository(tmp_path)
    config_path = repo / "add" / "config.pbtxt"
    before = config_path.read_text()
    report = tmp_path / "report"
    rc = main([
        "tune", "--repo", str(repo), "--model", "add", "--latency-budget-ms", "1000", "--report", str(report),
        "--window-s", "0.1", "--stability-windows", "2", "--max-windows", "2", "--max-generator-cpu", "0.0001",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "tritonkit tune: error: the generator, not the server, limited concurrency 1 (1 process at "
    )
    assert config_path.read_text() == before and from_pbtxt(before).name == "add"
    assert not (report / "tune.json").exists()  # no report of a winner the generator measured
    # the library says the same: the error, nothing written
    options = TuneOptions(
        "add", 1000.0, tmp_path / "lib", repo=repo, search="brute", max_concurrency=2, refine=0, instances=(1,),
        delays_us=("off",), max_batch_sizes=(8,), preferred=False, queue=False, require_stable=False, finalists=0,
        measure=_options(max_generator_cpu=TINY_CPU),
    )  # fmt: skip
    with pytest.raises(GeneratorLimitedError):
        tune(options)
    assert config_path.read_text() == before and not (tmp_path / "lib" / "tune.json").exists()
