"""Options of a run, checked before any server is touched: ``NAME[:VERSION][@WEIGHT]``, one-line
errors naming expected vs given, and nothing written when a check fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tritonkit.errors import LoadTestError
from tritonkit.loadtest import LoadTestOptions, ModelTarget, parse_model


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("minilm_int8", ModelTarget("minilm_int8")),
        ("minilm_int8:2", ModelTarget("minilm_int8", "2")),
        ("minilm_int8:2@3", ModelTarget("minilm_int8", "2", 3)),
        ("minilm_int8@5", ModelTarget("minilm_int8", "", 5)),
    ],
)
def test_parse_model(text: str, expected: ModelTarget) -> None:
    assert parse_model(text) == expected


def test_parse_model_with_batch_mix_and_source() -> None:
    target = parse_model("m", "1:0.8,8:0.2", "text")
    assert target.batch_mix == {1: 0.8, 8: 0.2} and target.source == "text"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("m:x", "model 'm:x': expected NAME[:VERSION][@WEIGHT]"),
        (":1", "model ':1': expected NAME[:VERSION][@WEIGHT]"),
        ("m@0", "model 'm@0': expected a whole weight >= 1 after '@', got '0'"),
        ("m@two", "model 'm@two': expected a whole weight >= 1 after '@', got 'two'"),
    ],
)
def test_parse_model_rejects(text: str, expected: str) -> None:
    with pytest.raises(LoadTestError) as info:
        parse_model(text)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"models": []}, "no model given; expected at least one --model"),
        ({"workers": -1}, "workers -1: expected a whole number >= 0"),
        ({"workers": 100_000}, "workers 100000: expected at most"),
        ({"http_transport": "curl"}, "HTTP transport 'curl': expected one of lean, tritonclient"),
        ({"ramp_steps": 0}, "ramp steps 0: expected at least 1"),
        ({"request_timeout": 0.0}, "request timeout 0.0: expected a positive number of seconds"),
    ],
)
def test_validate_rejects_before_writing_anything(
    tmp_path: Path, overrides: dict[str, Any], expected: str
) -> None:
    report = tmp_path / "report"
    fields: dict[str, Any] = {"models": [parse_model("m")], "report_dir": report, **overrides}
    with pytest.raises(LoadTestError) as info:
        LoadTestOptions(**fields).validate()
    assert str(info.value).startswith(expected), str(info.value)
    assert not report.exists()  # the report directory is made only once every value is right


def test_validate_normalises_duration_and_report_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    options = LoadTestOptions(models=[parse_model("m")], report_dir="out/run", duration="2m")
    options.validate()
    assert options.duration == 120.0
    assert options.report_dir == (tmp_path / "out" / "run").resolve() and Path(options.report_dir).is_dir()
    assert list(Path(options.report_dir).iterdir()) == []  # the write probe is gone
