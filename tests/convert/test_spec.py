"""Build specs: strict keys and types, precedence flags > TRITONKIT_* > spec > defaults, and the
committed flagship specs parse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tritonkit.convert.graph.flagship import SPEC_DIR, flagship_spec
from tritonkit.convert.spec.buildspec import apply_overrides, load_spec, parse_spec
from tritonkit.errors import SpecError

BASE = {"name": "m", "source": {"onnx": "m.onnx"}}


def test_defaults() -> None:
    spec = parse_spec(BASE)
    assert spec.precisions == ["fp32"] and spec.target == "portable"
    assert spec.int8.method == "minmax" and spec.batching.max_batch_size == 64
    assert spec.model_name("int8") == "m_int8"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**BASE, "int8": {"metod": "entropy"}}, "unknown spec key `int8.metod`; expected one of method,"),
        ({**BASE, "colour": 1}, "unknown spec key `colour`"),
        ({**BASE, "source": {"onnx": 3}}, "spec key `source.onnx`: expected str or null, got int 3"),
        ({**BASE, "batching": {"max_batch_size": "big"}}, "expected int or 'auto' or null, got str 'big'"),
        ({**BASE, "precisions": "fp16"}, "spec key `precisions`: expected list of str, got str 'fp16'"),
        ({**BASE, "precisions": ["fp64"]}, "spec key `precisions`: expected a non-empty list"),
        ({**BASE, "int8": {"method": "kl"}}, "spec key `int8.method`: expected one of 'minmax' | 'entropy'"),
        ({**BASE, "instances": {"count": True}}, "spec key `instances.count`: expected int, got bool True"),
        ({"source": {"onnx": "m.onnx"}}, "spec lacks required key `name`"),
        ({"name": "m", "source": {}}, "expected exactly one of `flagship`, `onnx` or `torch`; got none"),
        ([1, 2], "the spec: expected a mapping, got list"),
        ({**BASE, "calibration": {"samples": 0}}, "`calibration.samples`: expected an integer >= 1, got 0"),
    ],
)
def test_bad_specs_are_one_line(data: object, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_precedence_flags_over_env_over_spec() -> None:
    spec = parse_spec({**BASE, "target": "portable", "precisions": ["fp32"], "gpu": "T4"})
    env = {"TRITONKIT_TARGET": "onnxruntime", "TRITONKIT_PRECISION": "fp16,int8", "TRITONKIT_GPU": "A10"}
    from_env = apply_overrides(spec, {}, env)
    assert (from_env.target, from_env.precisions, from_env.requested_gpu) == (
        "onnxruntime",
        ["fp16", "int8"],
        "A10",
    )
    assert from_env.gpu == "T4"  # the spec's GPU stays the fallback behind detection
    from_flags = apply_overrides(spec, {"target": "tensorrt", "precision": "int8", "gpu": None}, env)
    assert (from_flags.target, from_flags.precisions, from_flags.requested_gpu) == (
        "tensorrt",
        ["int8"],
        "A10",
    )
    assert apply_overrides(spec, {"gpu": "h100"}, env).requested_gpu == "H100"
    untouched = apply_overrides(spec, {}, {})
    assert (untouched.target, untouched.precisions) == ("portable", ["fp32"])


def test_overrides_are_checked_like_spec_values() -> None:
    spec = parse_spec(BASE)
    with pytest.raises(
        SpecError, match=re.escape("TRITONKIT_MAX_BATCH_SIZE='lots' is not a valid `batching.max_batch_size`")
    ):
        apply_overrides(spec, {}, {"TRITONKIT_MAX_BATCH_SIZE": "lots"})
    # A bad override is named as the user gave it: the variable or the flag, not the spec key.
    with pytest.raises(SpecError, match=r"^environment variable TRITONKIT_TARGET: expected one of"):
        apply_overrides(spec, {}, {"TRITONKIT_TARGET": "tflite"})
    with pytest.raises(SpecError, match=r"^--instances: expected an integer >= 1, got 0$"):
        apply_overrides(spec, {"instances": 0}, {"TRITONKIT_INSTANCES": "2"})
    assert apply_overrides(spec, {}, {"TRITONKIT_MAX_BATCH_SIZE": "auto"}).batching.max_batch_size == "auto"
    with pytest.raises(Exception, match="unknown GPU profile 'K80'"):
        apply_overrides(spec, {"gpu": "K80"}, {})
    with pytest.raises(SpecError, match="unknown spec key `requested_gpu`"):
        parse_spec({**BASE, "requested_gpu": "T4"})


def test_yaml_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(SpecError, match="is not valid YAML at line"):
        load_spec(bad)
    with pytest.raises(SpecError, match="build spec not found"):
        load_spec(tmp_path / "missing.yaml")


def test_relative_paths_resolve_against_the_spec(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("name: m\nsource: {onnx: sub/m.onnx}\n", encoding="utf-8")
    spec = load_spec(tmp_path / "s.yaml")
    assert spec.resolve(spec.source.onnx or "") == tmp_path / "sub" / "m.onnx"


@pytest.mark.parametrize("name", ["minilm", "resnet50"])
def test_committed_flagship_specs_parse(name: str) -> None:
    spec = flagship_spec(name)
    assert spec.precisions == ["fp32", "fp16", "int8"]
    assert (SPEC_DIR / f"{name}.yaml").is_file()
    assert spec.source.synthetic is (name == "resnet50")
    reduced = flagship_spec(name, reduced=True)
    assert reduced.calibration.samples < spec.calibration.samples or name == "resnet50"
