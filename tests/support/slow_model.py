"""A python-backend model that sleeps 20 ms per execution (not per request), for the tests whose subject
needs two configs far apart: with a 500 µs batcher it serves several times what it serves without one at
eight requests in flight, a difference the sleep sets, not the machine's tail."""

from __future__ import annotations

from pathlib import Path

from tests.support.python_models import model_source

from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig, to_pbtxt


def sleeping_add_source(seconds: float) -> str:
    """A python-backend ``model.py``: OUT = X + 1 after sleeping ``seconds`` per execution (not per request)."""
    return model_source(
        f"""
    class TritonPythonModel:
        def execute(self, requests):
            time.sleep({seconds!r})
            out = []
            for request in requests:
                x = _numpy_in(request, "X")
                out.append(pb_utils.InferenceResponse([_tensor_out("OUT", (x + 1).astype(np.float32))]))
            return out
    """,
        "import time",
    )


SLOW_MODEL_PY = sleeping_add_source(0.02)


def slow_repository(root: Path, name: str = "slow", *, batching: bool) -> Path:
    """A repository with one model that sleeps 20 ms per execution; ``batching``: a 500 µs batcher."""
    repo = root / "repo"
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(SLOW_MODEL_PY)
    config = ModelConfig(
        name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("OUT", "FP32", [4])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=500) if batching else None,
    )
    (repo / name / "config.pbtxt").write_text(to_pbtxt(config))
    return repo
