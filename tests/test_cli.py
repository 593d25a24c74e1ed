"""The `tritonkit` command as a user runs it: help, unknown commands, one-line errors without traceback."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tritonkit import cli
from tritonkit.cli import COMMANDS, build_parser
from tritonkit.serve.options import DEFAULT_LOG_MAX_BYTES, DEFAULT_MAX_BODY_BYTES


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonkit", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_every_listed_command_is_registered() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for name, _, _ in COMMANDS:
        assert name in help_text, f"`tritonkit {name}` is missing from --help"


@pytest.mark.parametrize("name", [name for name, _, _ in COMMANDS])
def test_every_command_module_imports_and_registers(name: str) -> None:
    parser = build_parser(name)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert callable(subparsers.choices[name].get_default("func")), f"`tritonkit {name}` sets no func"


def test_help_imports_no_command_module_nor_heavy_library() -> None:
    code = (
        "import sys; from tritonkit.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'locust', 'tensorrt')"
        " or m.startswith('tritonkit.commands.'))\n"
        "print('LOADED', heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout
    for name, _, _ in COMMANDS:
        assert name in result.stdout


def test_a_command_whose_module_cannot_import_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        cli, "COMMANDS", (*COMMANDS, ("ghost", "tritonkit.commands.no_such_module", "missing"))
    )
    assert "ghost" in build_parser().format_help()  # listed without importing it
    assert cli.main(["ghost"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "tritonkit ghost: error: `tritonkit ghost` cannot start: module 'tritonkit.commands.no_such_module' "
        "is not installed (needed by tritonkit.commands.no_such_module)"
    ]


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


def test_serve_size_flags_are_mib_with_the_servers_byte_defaults() -> None:
    args = build_parser("serve").parse_args(["serve", "--repo", "r", "--max-inflight-mb", "0.5"])
    assert (
        args.max_body_mb * 2**20 == DEFAULT_MAX_BODY_BYTES
        and args.log_max_mb * 2**20 == DEFAULT_LOG_MAX_BYTES
    )
    assert args.max_inflight_mb == 0.5
    assert build_parser("serve").parse_args(["serve", "--repo", "r"]).max_inflight_mb is None
