"""The Locust children: their command lines per role, the progress line read from Locust's history
CSV while it is being written, and a Locust that fails reported in one line with no child left."""

from __future__ import annotations

import io
from pathlib import Path

import psutil
import pytest

from tritonkit.errors import LoadTestError
from tritonkit.loadtest.options import stop_timeout
from tritonkit.loadtest.report.locust_csv import last_aggregated
from tritonkit.loadtest.supervise import LOCUSTFILE, Progress, locust_command, run_locust

HEADER = (
    "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,95%,Total Request Count,Total Failure Count\n"
)


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_locust_command_per_role(tmp_path: Path) -> None:
    config, report = tmp_path / "run_config.json", tmp_path / "report"
    standalone = locust_command(config, report, "standalone", 0, 0)
    assert _option(standalone, "-f") == str(LOCUSTFILE) and "--headless" in standalone
    assert _option(standalone, "--csv") == str(report / "locust") and "--csv-full-history" in standalone
    assert _option(standalone, "--html") == str(report / "locust.html")
    assert "--master" not in standalone and "--worker" not in standalone
    # a stopping user finishes the request it is in: the stop timeout outlasts the request timeout
    assert _option(standalone, "--stop-timeout") == str(stop_timeout(60.0)) == "65"
    longer = locust_command(config, report, "standalone", 0, 0, stop_timeout=stop_timeout(300.0))
    assert _option(longer, "--stop-timeout") == "305"
    master = locust_command(config, report, "master", 5557, 3)
    assert "--master" in master and _option(master, "--expect-workers") == "3"
    assert (
        _option(master, "--master-bind-host") == "127.0.0.1"
        and _option(master, "--master-bind-port") == "5557"
    )
    worker = locust_command(config, report, "worker", 5557, 3)
    assert "--worker" in worker and _option(worker, "--master-port") == "5557"
    assert "--csv" not in worker and "--html" not in worker  # only the master writes the report


def test_last_aggregated_skips_a_half_written_row(tmp_path: Path) -> None:
    history = tmp_path / "locust_stats_history.csv"
    assert last_aggregated(history) is None
    history.write_text(HEADER)
    assert last_aggregated(history) is None
    history.write_text(
        HEADER
        + "1,2,,Aggregated,10.0,0.0,3,5,20,0\n"
        + "2,4,,Aggregated,50.5,0.5,3,7,120,1\n"
        + "3,4,POST,probe_add:1,5"  # Locust is still writing this line
    )
    row = last_aggregated(history)
    assert row is not None and row["Timestamp"] == "2" and row["Requests/s"] == "50.5"


def test_progress_line_shows_the_latest_aggregated_row(tmp_path: Path) -> None:
    history = tmp_path / "locust_stats_history.csv"
    stream = io.StringIO()  # not a terminal: one line every 5 s
    progress = Progress(stream, 30, history)
    progress.update(5.0)
    # Locust's own Requests/s still reads 0 while requests have been counted: the line's rate is
    # the requests between rows over the seconds between them, (2500 - 100) / (4 - 1) s
    history.write_text(
        HEADER + "1,4,,Aggregated,0.0,0.0,3,7,100,0\n" + "4,4,,Aggregated,0.0,0.0,3,7,2500,1\n"
    )
    progress.update(7.0)  # under 5 s since the last line: nothing
    progress.update(10.0)
    progress.done()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[    5s/30s] starting users..."
    assert len(lines) == 2
    assert lines[1].split() == [
        "[",
        "10s/30s]",
        "users",
        "4",
        "800.0",
        "req/s",
        "p95",
        "7",
        "ms",
        "requests",
        "2,500",
        "failures",
        "1",
    ]


def test_progress_rate_is_per_interval_and_clock_stops_at_the_plan(tmp_path: Path) -> None:
    history = tmp_path / "locust_stats_history.csv"
    stream = io.StringIO()
    progress = Progress(stream, 24, history)
    history.write_text(HEADER + "1,4,,Aggregated,0.0,0.0,3,7,0,0\n" + "6,4,,Aggregated,90.0,0.0,3,7,500,0\n")
    progress.update(6.0)
    with history.open("a") as handle:
        handle.write("21,4,,Aggregated,90.0,0.0,3,7,3500,0\n")
    progress.update(21.0)
    progress.update(26.0)  # past the plan: users stopping, no new row yet
    lines = stream.getvalue().splitlines()
    assert "100.0 req/s" in lines[0] and "200.0 req/s" in lines[1]
    # no newer row: the last interval's rate again, and the clock stops at the plan's length
    assert lines[2].startswith("[   24s/24s] stopping users (+2s) ") and "200.0 req/s" in lines[2]
    single = io.StringIO()
    history.write_text(HEADER + "1,4,,Aggregated,0.0,0.0,3,7,40,0\n")
    Progress(single, 24, history).update(5.0)
    assert " - req/s" in single.getvalue()  # one row: no interval yet, so no rate is made up


def test_failing_locust_is_one_line_error(tmp_path: Path) -> None:
    # The locustfile cannot read its configuration: Locust exits with an error, no stats.
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(LoadTestError) as info:
        run_locust(tmp_path / "no_such_config.json", tmp_path, 5.0, progress=False)
    message = str(info.value)
    assert message.startswith("Locust exited with code ") and "\n" not in message
    assert "No such file or directory" in message and message.endswith(f"see {tmp_path / 'locust.log'}")
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # no child left
