"""A tritonserver that exits during start-up is named by the line that tells why: Triton's option parser
prints its usage and the refused option without an error line, and the log pump's last lines are read
only after it copied them (the reason is often the last line Triton writes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.python_models import ADD_ONE, write_python_model

from tritonkit.errors import ServerError
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit.serve.tritonlog import startup_failure

USAGE = [
    "Usage: tritonserver [options]",
    "",
    "Server:",
    "  --id <string>",
    "\tIdentifier for this server.",
    "",
]


def test_a_refused_option_is_the_reason_not_the_usage() -> None:
    lines = [*USAGE, 'Bad option: "--model-control-mode".', "invalid argument for --model-control-mode", ""]
    error = startup_failure(1, lines, None)
    assert str(error) == (
        "tritonserver exited with code 1 during start-up: "
        'Bad option: "--model-control-mode". invalid argument for --model-control-mode'
    )
    unknown = ["/opt/bin/tritonserver: unrecognized option '--no-such-flag'", *USAGE]
    assert str(startup_failure(1, unknown, None)).endswith(": unrecognized option '--no-such-flag'")


def test_without_an_error_line_the_last_lines_are_named() -> None:
    lines = ["I1126 13:00:00.000 1 server.cc:1] starting", "", "something went away", "   "]
    assert str(startup_failure(1, lines, None)).endswith(
        "no error line in the log; its last lines: I1126 13:00:00.000 1 server.cc:1] starting | something went away"
    )
    assert str(startup_failure(1, [], None)).endswith("during start-up: its log is empty")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--no-such-flag"], "unrecognized option '--no-such-flag'"),
        (["--exit-timeout-secs=soon"], 'Bad option: "--exit-timeout-secs". Invalid option value. Got soon'),
    ],
)
def test_the_real_server_refusing_an_option_says_which(tmp_path: Path, args: list[str], reason: str) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "add_one", ADD_ONE)
    with (
        pytest.raises(ServerError) as refused,
        EmbeddedServer(repo, ServerOptions(extra_args=args, exit_timeout=1)),
    ):
        pass
    assert str(refused.value) == f"tritonserver exited with code 1 during start-up: {reason}"
