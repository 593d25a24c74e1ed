"""Conversion: golden config.pbtxt files, round trips, lossless unknown fields, parse errors, files."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonkit import config
from tritonkit.config import DynamicBatching, ModelConfig, TensorConfig
from tritonkit.errors import ConfigError


def test_golden_pbtxt_matches(golden: tuple[ModelConfig, Path], update_golden: bool) -> None:
    cfg, path = golden
    if update_golden:
        path.write_text(config.to_pbtxt(cfg))
    assert config.problems(cfg) == []
    assert config.to_pbtxt(cfg) == path.read_text()


def test_golden_is_what_the_schema_prints(golden: tuple[ModelConfig, Path]) -> None:
    # The golden text is protobuf's own rendering of the message: parse it with the schema alone
    # and print it again, no tritonkit code involved.
    _, path = golden
    text = path.read_text()
    pb = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert text_format.MessageToString(pb, use_short_repeated_primitives=True) == text


def test_pbtxt_to_dataclass_to_pbtxt_is_identical(golden: tuple[ModelConfig, Path]) -> None:
    _, path = golden
    text = path.read_text()
    assert config.to_pbtxt(config.from_pbtxt(text)) == text


def test_dataclass_to_pbtxt_to_dataclass_is_equal(golden: tuple[ModelConfig, Path]) -> None:
    cfg, _ = golden
    assert config.from_pbtxt(config.to_pbtxt(cfg)) == cfg
    assert config.from_proto(config.to_proto(cfg)) == cfg
    assert config.from_dict(config.to_dict(cfg)) == cfg


HAND_WRITTEN = """
# written the way Triton's docs write configs: comments, [ ] lists, fields in any order
name: "resnet"
platform: "tensorrt_plan"
max_batch_size: 8
input [
  { name: "input" data_type: TYPE_FP16 format: FORMAT_NCHW dims: [ 3, 224, 224 ] }
]
output [ { name: "prob" data_type: TYPE_FP16 dims: [ 1000 ] } ]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] rate_limiter { priority: 2 } } ]
dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2 default_priority_level: 1 }
model_transaction_policy { decoupled: false }
optimization { priority: PRIORITY_MAX cuda { graphs: true busy_wait_events: true } }
batch_input [ { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "n" data_type: TYPE_INT32 } ]
ensemble_scheduling { }
metric_tags { key: "team" value: "search" }
"""


def test_hand_written_config_parses_into_typed_fields() -> None:
    text = HAND_WRITTEN.replace("ensemble_scheduling { }\n", "")
    cfg = config.from_pbtxt(text)
    assert (cfg.name, cfg.platform, cfg.backend, cfg.max_batch_size) == ("resnet", "tensorrt_plan", None, 8)
    assert cfg.inputs[0].data_type == "FP16" and cfg.inputs[0].dims == [3, 224, 224]
    assert cfg.instance_groups[0].kind == "KIND_GPU" and cfg.instance_groups[0].gpus == [0]
    assert cfg.dynamic_batching == DynamicBatching(
        max_queue_delay_microseconds=100, priority_levels=2, default_priority_level=1
    )
    assert cfg.optimization is not None and cfg.optimization.cuda is not None
    assert cfg.optimization.cuda.graphs and cfg.optimization.cuda.busy_wait_events


def test_unmodelled_fields_survive_a_read_and_save(tmp_path: Path) -> None:
    # Fields this package does not model, at several depths, must come back out unchanged.
    text = HAND_WRITTEN.replace("ensemble_scheduling { }\n", "")
    cfg = config.from_pbtxt(text)
    assert cfg.inputs[0].extra == {"format": "FORMAT_NCHW"}
    assert cfg.instance_groups[0].extra == {"rate_limiter": {"priority": 2}}
    assert cfg.optimization is not None and cfg.optimization.extra == {"priority": "PRIORITY_MAX"}
    assert set(cfg.extra) == {"batch_input", "metric_tags", "model_transaction_policy"}
    saved = config.save(cfg, tmp_path / "config.pbtxt", check=False)
    original = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert text_format.Parse(saved.read_text(), model_config_pb2.ModelConfig()) == original


def test_unmodelled_extra_can_be_set_in_code() -> None:
    cfg = ModelConfig(
        "seq",
        backend="python",
        max_batch_size=4,
        inputs=[TensorConfig("X", "FP32", [1])],
        outputs=[TensorConfig("Y", "FP32", [1])],
        extra={"sequence_batching": {"max_sequence_idle_microseconds": 5_000_000}},
    )
    assert config.to_proto(cfg).sequence_batching.max_sequence_idle_microseconds == 5_000_000


def test_extra_block_presence_is_kept() -> None:
    # `ensemble_scheduling { }` carries no modelled value, but its presence selects the scheduler.
    cfg = config.from_pbtxt(HAND_WRITTEN.replace("dynamic_batching", "# dynamic_batching"))
    assert config.to_proto(cfg).HasField("ensemble_scheduling")


def test_data_types_use_short_names_and_bytes_is_type_string() -> None:
    cfg = config.from_pbtxt('name: "t" input { name: "s" data_type: TYPE_STRING dims: 1 }')
    assert cfg.inputs[0].data_type == "BYTES"
    assert config.to_proto(cfg).input[0].data_type == model_config_pb2.TYPE_STRING


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'name: "m"\nmax_batch_size: 8\nmax_batch_sise: 4',
            r'at line 3, column 1: Message type "inference.ModelConfig" has no field named "max_batch_sise"$',
        ),
        (
            'name: "m"\ninput { name: "x" data_type: TYPE_FP33 }',
            r"at line 2, column 30: .*has no value named TYPE_FP33; expected one of TYPE_INVALID, TYPE_BOOL, ",
        ),
        ('name: "m"\nmax_batch_size: "eight"', r"at line 2, column 17: .*Couldn't parse integer"),
        ('name: "m"\ninput { name: "x"', r'at line 2, column 15: Expected "}"$'),
    ],
)
def test_parse_errors_are_one_line_config_errors_with_position(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.from_pbtxt(text)
    message = str(info.value)
    assert message.startswith("invalid config.pbtxt ")
    assert re.search(expected, message), message
    assert "\n" not in message


def test_schema_rejection_names_the_field() -> None:
    cfg = ModelConfig(
        "m",
        backend="python",
        inputs=[TensorConfig("X", "FP32", [1])],
        outputs=[TensorConfig("Y", "FP32", [1], optional=True)],
    )
    with pytest.raises(ConfigError, match=r'ModelOutput" has no field named "optional"') as info:
        config.to_proto(cfg)
    assert "\n" not in str(info.value)


def test_unknown_dtype_in_code_is_config_error() -> None:
    cfg = ModelConfig("m", backend="python", inputs=[TensorConfig("X", "FLOAT", [1])])
    with pytest.raises(ConfigError, match="unknown data type 'FLOAT'; expected one of BOOL, "):
        config.to_pbtxt(cfg)


def test_save_writes_0644_and_load_reads_back(tmp_path: Path) -> None:
    cfg = ModelConfig(
        "m",
        backend="python",
        inputs=[TensorConfig("X", "FP32", [2])],
        outputs=[TensorConfig("Y", "FP32", [2])],
    )
    target = config.save(cfg, tmp_path / "config.pbtxt")
    assert [p.name for p in tmp_path.iterdir()] == ["config.pbtxt"]
    assert target.stat().st_mode & 0o777 == 0o644
    assert config.load(target) == cfg
    assert config.load(tmp_path) == cfg  # a model directory works too


_FAILING_SAVE = """
import resource, signal, sys
from tritonkit import config
from tritonkit.errors import ConfigError
cfg = config.load(sys.argv[1])
cfg.name = "m" * 400  # a config text longer than the file-size limit below
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    config.save(cfg, sys.argv[1], check=False)
except ConfigError as exc:
    print(exc)
    sys.exit(3)
"""


def test_failed_save_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    # A real write failure half-way (the kernel refuses bytes past RLIMIT_FSIZE), in a child process
    # so the limit binds nothing else: the old file must be intact and the temp file gone.
    old = ModelConfig(
        "m",
        backend="python",
        inputs=[TensorConfig("X", "FP32", [2])],
        outputs=[TensorConfig("Y", "FP32", [2])],
    )
    target = config.save(old, tmp_path / "config.pbtxt")
    before = target.read_bytes()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_SAVE, str(target)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith(f"cannot write {str(target)!r}: File too large"), done.stdout
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.pbtxt"]


def test_invalid_config_is_not_written(tmp_path: Path) -> None:
    cfg = ModelConfig("m", backend="python", max_batch_size=0, dynamic_batching=DynamicBatching())
    old = ModelConfig(
        "m",
        backend="python",
        inputs=[TensorConfig("X", "FP32", [2])],
        outputs=[TensorConfig("Y", "FP32", [2])],
    )
    target = config.save(old, tmp_path / "config.pbtxt")
    before = target.read_text()
    with pytest.raises(ConfigError, match=r"^model `m`: `input` is empty"):
        config.save(cfg, target)
    assert target.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.pbtxt"]


def test_save_into_missing_directory_is_config_error(tmp_path: Path) -> None:
    cfg = ModelConfig(
        "m",
        backend="python",
        inputs=[TensorConfig("X", "FP32", [2])],
        outputs=[TensorConfig("Y", "FP32", [2])],
    )
    with pytest.raises(ConfigError, match="does not exist"):
        config.save(cfg, tmp_path / "nope" / "config.pbtxt")


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model config not found: .*expected a config\.pbtxt file"):
        config.load(tmp_path / "config.pbtxt")
    bad = tmp_path / "config.pbtxt"
    bad.write_text("name: 3")
    with pytest.raises(ConfigError, match=r"config\.pbtxt: invalid config\.pbtxt at line 1"):
        config.load(bad)


def test_from_proto_rejects_other_types() -> None:
    with pytest.raises(
        ConfigError, match=r"expected a tritonclient\.grpc\.model_config_pb2\.ModelConfig, given dict"
    ):
        config.from_proto({"name": "m"})


def test_dataclasses_are_plain_values() -> None:
    cfg = ModelConfig("m", backend="python", inputs=[TensorConfig("X", "FP32", [2])])
    copy = dataclasses.replace(cfg, max_batch_size=4)
    assert copy != cfg and copy.inputs == cfg.inputs
