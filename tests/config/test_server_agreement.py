"""The real Triton server reads configs written by this package the way the package means them, and
refuses the configs its validation refuses (tritonserver 2.51 from the nvidia-pytriton wheel)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonkit import config
from tritonkit.config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from tritonkit.errors import ModelLoadError
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

AddModel = Callable[[Path, ModelConfig], Path]


def served_config() -> ModelConfig:
    return ModelConfig(
        name="add_one",
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("Y", "FP32", [4])],
        dynamic_batching=DynamicBatching(
            max_queue_delay_microseconds=1500,
            preferred_batch_size=[2, 4],
            default_queue_policy=QueuePolicy(
                max_queue_size=64,
                default_timeout_microseconds=2_000_000,
                allow_timeout_override=True,
                timeout_action="DELAY",
            ),
        ),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=2)],
        model_warmup=[
            ModelWarmup("zeros", batch_size=2, inputs={"X": WarmupInput("FP32", [4], zero_data=True)})
        ],
        version_policy=VersionPolicy.latest(1),
        parameters={"note": "written by tritonkit.config"},
        response_cache=True,
    )


def test_server_reports_the_config_it_was_given(tmp_path: Path, add_model: AddModel) -> None:
    cfg = served_config()
    assert config.problems(cfg) == []
    add_model(tmp_path, cfg)
    with EmbeddedServer(tmp_path, ServerOptions(response_cache_bytes=1 << 20, exit_timeout=1)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            seen = client.get_model_config(cfg.name)
            x = np.arange(8, dtype=np.float32).reshape(2, 4)
            request = httpclient.InferInput("X", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            y = client.infer(cfg.name, [request]).as_numpy("Y")
        finally:
            client.close()
    # The server's raw JSON view, field by field.
    assert seen["name"] == "add_one" and seen["backend"] == "python"
    assert seen["max_batch_size"] == 8
    assert [(t["name"], t["data_type"], t["dims"]) for t in seen["input"]] == [("X", "TYPE_FP32", [4])]
    batching = seen["dynamic_batching"]
    assert batching["preferred_batch_size"] == [2, 4]
    assert batching["max_queue_delay_microseconds"] == 1500
    assert batching["default_queue_policy"] == {
        "timeout_action": "DELAY",
        "default_timeout_microseconds": 2_000_000,
        "allow_timeout_override": True,
        "max_queue_size": 64,
    }
    assert [(g["kind"], g["count"]) for g in seen["instance_group"]] == [("KIND_CPU", 2)]
    assert seen["response_cache"] == {"enable": True}
    # Parsed back through this package, the server's view equals what was written, apart from the
    # fields Triton fills in itself (instance group names, defaults it states explicitly).
    back = config.from_dict(seen)
    assert back.dynamic_batching == cfg.dynamic_batching
    assert back.inputs == cfg.inputs and back.outputs == cfg.outputs
    assert (back.max_batch_size, back.version_policy, back.parameters, back.response_cache) == (
        cfg.max_batch_size,
        cfg.version_policy,
        cfg.parameters,
        cfg.response_cache,
    )
    assert [w.inputs for w in back.model_warmup] == [w.inputs for w in cfg.model_warmup]
    np.testing.assert_array_equal(y, x + 1)


def _base(name: str, **changes: object) -> ModelConfig:
    cfg = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("Y", "FP32", [4])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    for key, value in changes.items():
        setattr(cfg, key, value)
    return cfg


# Configs that break one rule each which Triton 2.51 itself enforces at load time.
REFUSED = [
    _base("zero_dim", inputs=[TensorConfig("X", "FP32", [0])]),
    _base("no_dims", inputs=[TensorConfig("X", "FP32", [])]),
    _base("reshape_size", inputs=[TensorConfig("X", "FP32", [4], reshape=[3])]),
    _base("preferred_over_max", dynamic_batching=DynamicBatching(preferred_batch_size=[16])),
    _base("priority_range", dynamic_batching=DynamicBatching(priority_levels=2, default_priority_level=3)),
    _base("cpu_with_gpus", instance_groups=[InstanceGroup(kind="KIND_CPU", gpus=[0])]),
    _base("cpu_with_profile", instance_groups=[InstanceGroup(kind="KIND_CPU", profile=["0"])]),
    _base("latest_zero", version_policy=VersionPolicy.latest(0)),
]


def test_server_refuses_what_validation_refuses(tmp_path: Path, add_model: AddModel) -> None:
    repo = tmp_path / "repo"
    for cfg in REFUSED:
        assert len(config.problems(cfg)) == 1, (cfg.name, config.problems(cfg))
        add_model(repo, cfg)
    log = tmp_path / "tritonserver.log"
    with pytest.raises(ModelLoadError):
        EmbeddedServer(repo, ServerOptions(log_file=log)).start()
    lines = log.read_text(errors="replace").splitlines()
    for cfg in REFUSED:
        failed = [
            line
            for line in lines
            if f"model directory '{cfg.name}'" in line
            or f"failed to load '{cfg.name}'" in line
            or f"failed to load model '{cfg.name}'" in line
        ]
        assert failed, f"Triton did not refuse {cfg.name}: {config.problems(cfg)}"
