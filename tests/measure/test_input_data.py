"""perf_analyzer's ``--input-data`` JSON files (perf_analyzer docs/input_data.md, "Real Input Data"), read
by ``tritonkit profile``, ``tune``, ``compare`` and ``loadtest``: the docs' own examples parsed, and real
runs against a model that refuses every request whose rows are not the file's."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.lone_levels import lone_levels
from tests.support.python_models import model_source

from tritonkit.cli import main
from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig, to_pbtxt
from tritonkit.config.tensors import TensorSpec
from tritonkit.errors import LoadTestError
from tritonkit.measure.input_data import requests
from tritonkit.measure.loadgen import Target, WindowSpec
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

FAST = ["--window-s", "0.15", "--stability-pct", "60", "--max-windows", "3", "--timeout-s", "10"]

# The docs' first example: a model with inputs INPUT0 and INPUT1, shape [4, 4], INT32, four entries.
DOCS_INT32 = {"data": [{"INPUT0": [1] * 16, "INPUT1": [1] * 16} for _ in range(4)]}
# The docs' "shape" example: INPUT, shape [-1, -1], INT32; the third entry leans on the default shape.
DOCS_SHAPES = {
    "data": [
        {"INPUT": {"content": [1] * 16, "shape": [2, 8]}},
        {"INPUT": {"content": [1] * 16, "shape": [8, 2]}},
        {"INPUT": {"content": [1] * 16, "shape": [4, 4]}},
    ]
}

STRICT_MODEL_PY = model_source(
    """
    ROWS = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                x = _numpy_in(request, "X")
                known = all(any(np.array_equal(row, r) for r in ROWS) for row in x)
                if known:
                    out.append(pb_utils.InferenceResponse([_tensor_out("OUT", (x + 1).astype(np.float32))]))
                else:
                    out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("not the file's rows")))
            return out
    """
)


def _file(tmp_path: Path, data: object, name: str = "input.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_the_docs_examples_become_requests(tmp_path: Path) -> None:
    inputs = [TensorSpec("INPUT0", "INT32", (4, 4)), TensorSpec("INPUT1", "INT32", (4, 4))]
    found = requests(_file(tmp_path, DOCS_INT32), inputs, max_batch_size=0)
    assert len(found) == 4 and all(
        r["INPUT0"].shape == (4, 4) and r["INPUT0"].dtype == np.int32 for r in found
    )
    shaped = requests(_file(tmp_path, DOCS_SHAPES, "s.json"), [TensorSpec("INPUT", "INT32", (-1, -1))], 0)
    assert [r["INPUT"].shape for r in shaped] == [(2, 8), (8, 2), (4, 4)]


def test_b64_contents_for_numbers_and_strings(tmp_path: Path) -> None:
    floats = base64.b64encode(np.array([1, 2, 3, 4], dtype="<f4").tobytes()).decode()
    words = b"".join(struct.pack("<I", len(w)) + w for w in (b"hello", b"triton"))
    data = {
        "data": [
            {
                "X": {"b64": floats},
                "TEXT": {"content": {"b64": base64.b64encode(words).decode()}, "shape": [2]},
            }
        ]
    }
    inputs = [TensorSpec("X", "FP32", (-1, 4)), TensorSpec("TEXT", "BYTES", (-1, -1))]
    (request,) = requests(_file(tmp_path, data), inputs, max_batch_size=8, batch_size=1)
    assert request["X"].tolist() == [[1.0, 2.0, 3.0, 4.0]] and request["TEXT"].tolist() == [
        [b"hello", b"triton"]
    ]


def test_a_batch_stacks_consecutive_entries_round_robin(tmp_path: Path) -> None:
    data = {"data": [{"X": [1, 2, 3, 4]}, {"X": [5, 6, 7, 8]}, {"X": [9, 9, 9, 9]}]}
    found = requests(
        _file(tmp_path, data), [TensorSpec("X", "FP32", (-1, 4))], max_batch_size=8, batch_size=2
    )
    assert [r["X"][:, 0].tolist() for r in found] == [[1, 5], [5, 9], [9, 1]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"data": [{"Y": [1, 2, 3, 4]}]},
            "entry 0: inputs ['Y']; expected ['X'] (missing ['X']) (unknown ['Y'])",
        ),
        ({"data": [{"X": [1, 2, 3]}]}, "entry 0, input `X`: 3 elements, expected 4 for shape [4]"),
        ({"data": [[{"X": [1, 2, 3, 4]}]]}, "sequence streams (lists of entries) are not supported"),
        ({"rows": []}, 'expected {"data": [ {"INPUT": ...}, ... ]}'),
        ({"data": [{"X": {"b64": "!!"}}]}, "`b64` is not valid base64"),
    ],
)
def test_a_bad_file_is_one_line_naming_entry_and_input(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(LoadTestError) as caught:
        requests(_file(tmp_path, data), [TensorSpec("X", "FP32", (-1, 4))], max_batch_size=8)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo = tmp_path_factory.mktemp("strict")
    (repo / "strict" / "1").mkdir(parents=True)
    (repo / "strict" / "1" / "model.py").write_text(STRICT_MODEL_PY)
    config = ModelConfig(
        "strict", backend="python", max_batch_size=8, inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("OUT", "FP32", [4])], instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )  # fmt: skip
    (repo / "strict" / "config.pbtxt").write_text(to_pbtxt(config))
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        yield server


def _rows_file(tmp_path: Path) -> Path:
    # written as the docs show: a flat list, and a content with its shape
    return _file(tmp_path, {"data": [{"X": [1, 2, 3, 4]}, {"X": {"content": [5, 6, 7, 8], "shape": [4]}}]})


def test_profile_sends_the_file_s_requests(strict: EmbeddedServer, tmp_path: Path) -> None:
    base = ["profile", "--model", "strict", "--url", strict.http_url, f"--admin-key={strict.admin_key}",
            "--concurrency", "2", "--batch-size", "2", *FAST]  # fmt: skip
    assert (
        main([*base, "--input-data", str(_rows_file(tmp_path)), "--json", str(tmp_path / "file.json")]) == 0
    )
    (level,) = json.loads((tmp_path / "file.json").read_text())["levels"]
    assert level["successes"] > 0 and level["failures"] == 0  # every request was the file's rows
    assert main([*base, "--json", str(tmp_path / "generated.json")]) == 0
    (generated,) = json.loads((tmp_path / "generated.json").read_text())["levels"]
    assert generated["successes"] == 0 and generated["failures"] > 0  # generated data: refused


def test_loadtest_sends_the_file_s_requests(
    strict: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["loadtest", "--model", "strict", "--url", strict.http_url, f"--admin-key={strict.admin_key}",
            "--metrics-url", strict.metrics_url, "--users", "2", "--duration", "2s", "--no-plots",
            "--batch-mix", "1:1,2:1", "--report", str(tmp_path / "lt")]  # fmt: skip
    assert main([*args, "--input-data", str(_rows_file(tmp_path))]) == 0
    summary = json.loads((tmp_path / "lt" / "summary.json").read_text())
    assert summary["requests"] > 0 and summary["failures"] == 0
    assert main(args) == 3  # generated data: every request refused, the failure gate breaks
    assert json.loads((tmp_path / "lt" / "summary.json").read_text())["failures"] > 0
    assert main([*args, "--input-data", str(tmp_path / "missing.json")]) == 1
    assert "--input-data" in capsys.readouterr().err


def test_each_window_goes_on_through_the_file(strict: EmbeddedServer, tmp_path: Path) -> None:
    """The requests of a level cycle through the file's entries across windows: a window does not start
    again at the first entry (windows of one answer each would then all send it)."""
    rows = _file(tmp_path, {"data": [{"X": [1, 2, 3, 4]}, {"X": [9, 9, 9, 9]}, {"X": [5, 6, 7, 8]}]})
    target = Target(strict.http_url, "strict", headers=strict.admin_headers, input_data=str(rows))
    _, windows, _ = lone_levels(target, [(WindowSpec(count=1), 6)])
    # entries 0, 1, 2, 0, 1, 2: the second of every three is refused by the model
    assert [w.failures for w in windows] == [0, 1, 0, 0, 1, 0]
