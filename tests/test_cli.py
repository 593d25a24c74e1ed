"""The `tritonkit` command as a user runs it: help, unknown commands, one-line errors without traceback."""

from __future__ import annotations

import subprocess
import sys

from tritonkit.cli import COMMANDS, build_parser


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonkit", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_every_listed_command_is_registered() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for name, _, _ in COMMANDS:
        assert name in help_text, f"`tritonkit {name}` is missing from --help"


def test_no_command_prints_usage_and_exits_2() -> None:
    result = _run()
    assert result.returncode == 2
    assert "usage: tritonkit" in result.stderr


def test_user_error_is_one_line_without_traceback(tmp_path: object) -> None:
    result = _run("serve", "--repo", "/nonexistent/repository")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "tritonkit serve: error: model repository /nonexistent/repository is not a directory; "
        "expected a folder of models"
    ]
