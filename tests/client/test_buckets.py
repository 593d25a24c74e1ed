"""Client-side shape buckets (issue 39, item 4): a config with ``shape_buckets`` and ``pad_at: client``
(what the TensorRT target writes) makes the client pad each request up to its edge and cut the
token-level outputs back to the request's own length, for ``Client``, ``AsyncClient`` and
``infer_batch``; a request above the last edge is refused before any bytes are sent, in one line.

Served by the real embedded tritonserver: a python-backend model that reports what it received
(``SEEN``: the length of the request on the axis, ``LAST``: its last token, the pad value where the
client padded) and a token-level output (``HIDDEN`` = IDS as FP32)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.python_models import model_source

from tritonkit.backends.runners.shape_buckets import PARAMETER, Buckets
from tritonkit.client import AsyncClient, Client
from tritonkit.client.buckets import InputTooLongError, cut_outputs, pad_request
from tritonkit.client.errors import InvalidInputError
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig, save
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

PROTOCOLS = ("http", "grpc")
BUCKETS = Buckets(
    axes={"seq": (4, 8, 16)},
    inputs={"IDS": {1: "seq"}, "MASK": {1: "seq"}},
    outputs={"HIDDEN": {1: "seq"}},
    pad={"IDS": 7},
    pad_at="client",
)

PADDED_MODEL_PY = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                ids = _numpy_in(request, "IDS")
                mask = _numpy_in(request, "MASK")
                assert ids.shape == mask.shape
                seen = np.full((ids.shape[0], 1), ids.shape[1], dtype=np.int64)
                out.append(pb_utils.InferenceResponse([
                    _tensor_out("SEEN", seen),
                    _tensor_out("LAST", ids[:, -1:].astype(np.int64)),
                    _tensor_out("HIDDEN", ids.astype(np.float32)),
                ]))
            return out
    """
)


def _padded_model(repo: Path, name: str, pad_at: str) -> None:
    buckets = Buckets(BUCKETS.axes, BUCKETS.inputs, BUCKETS.outputs, BUCKETS.pad, pad_at)
    config = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("IDS", "INT64", [-1]), TensorConfig("MASK", "INT64", [-1])],
        outputs=[
            TensorConfig("SEEN", "INT64", [1]),
            TensorConfig("LAST", "INT64", [1]),
            TensorConfig("HIDDEN", "FP32", [-1]),
        ],
        dynamic_batching=DynamicBatching(),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        parameters={PARAMETER: buckets.to_json()},
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(PADDED_MODEL_PY)
    save(config, repo / name / "config.pbtxt")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo = tmp_path_factory.mktemp("buckets") / "repo"
    _padded_model(repo, "padded", "client")
    _padded_model(repo, "served", "server")  # the server pads: the client only refuses
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as srv:
        yield srv


def _url(server: EmbeddedServer, protocol: str) -> str:
    return server.http_url if protocol == "http" else server.grpc_url


def _request(batch: int, length: int) -> dict[str, np.ndarray]:
    ids = np.arange(1, batch * length + 1, dtype=np.int64).reshape(batch, length)
    return {"IDS": ids, "MASK": np.ones_like(ids)}


def test_pad_request_pads_to_the_edge_and_cut_outputs_cuts_back() -> None:
    feeds = _request(2, 5)
    padded, lengths = pad_request(feeds, BUCKETS)
    assert lengths == {"seq": 5} and padded["IDS"].shape == (2, 8) and padded["MASK"].shape == (2, 8)
    assert (padded["IDS"][:, 5:] == 7).all() and (padded["MASK"][:, 5:] == 0).all()
    assert (padded["IDS"][:, :5] == feeds["IDS"]).all()
    at_edge = _request(1, 8)
    assert pad_request(at_edge, BUCKETS)[0]["IDS"] is at_edge["IDS"]  # nothing to pad: no copy
    cut = cut_outputs({"HIDDEN": np.zeros((2, 8), np.float32), "SEEN": np.zeros((2, 1))}, BUCKETS, lengths)
    assert cut["HIDDEN"].shape == (2, 5) and cut["SEEN"].shape == (2, 1)
    with pytest.raises(InputTooLongError) as info:
        pad_request(_request(1, 17), BUCKETS, "model `m`")
    assert re.fullmatch(
        r"model `m`: input `(IDS|MASK)` is 17 long on axis seq; the model takes at most 16 \(its last shape bucket\)",
        str(info.value),
    )
    with pytest.raises(InvalidInputError, match="disagree on axis seq: 5 and 6"):
        pad_request({"IDS": np.zeros((1, 5), np.int64), "MASK": np.zeros((1, 6), np.int64)}, BUCKETS)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_pads_to_the_bucket_and_cuts_the_answer(server: EmbeddedServer, protocol: str) -> None:
    with Client(_url(server, protocol), protocol, timeout=30) as client:
        for length, edge in ((1, 4), (5, 8), (8, 8), (16, 16)):
            feeds = _request(2, length)
            out = client.infer("padded", feeds)
            assert (out["SEEN"] == edge).all()  # the server received the padded shape
            assert (out["LAST"] == (7 if length < edge else feeds["IDS"][:, -1:])).all()
            assert out["HIDDEN"].shape == (2, length)  # cut back to the request's own length
            np.testing.assert_array_equal(out["HIDDEN"], feeds["IDS"].astype(np.float32))
        # infer_batch: chunks of max_batch_size, each padded and cut, joined
        big = _request(11, 6)
        joined = client.infer_batch("padded", big)
        assert joined["HIDDEN"].shape == (11, 6) and (joined["SEEN"] == 8).all()
        # pad_at server: the client sends the request as it is
        assert (client.infer("served", _request(1, 5))["SEEN"] == 5).all()


def _settled_count(client: Client, model: str) -> int:
    """The model's inference count once it stops moving: Triton counts a request after its answer is
    sent, so a read right after an answer can miss it (seen under `make test` on a loaded host)."""
    last = client.statistics(model)[0].inference_count
    for _ in range(50):
        time.sleep(0.05)
        now = client.statistics(model)[0].inference_count
        if now == last:
            return now
        last = now
    return last


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_too_long_request_is_refused_before_sending(server: EmbeddedServer, protocol: str) -> None:
    with Client(_url(server, protocol), protocol, timeout=30) as client:
        for model in ("padded", "served"):
            client.infer(model, _request(1, 3))
            before = _settled_count(client, model)
            with pytest.raises(InputTooLongError) as info:
                client.infer(model, _request(1, 17))
            message = str(info.value)
            assert "\n" not in message
            assert re.fullmatch(
                f"model `{model}`: input `(IDS|MASK)` is 17 long on axis seq; the model takes at most 16 "
                r"\(its last shape bucket\)",
                message,
            )
            assert _settled_count(client, model) == before  # nothing reached Triton


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_async_client_pads_and_cuts_alike(server: EmbeddedServer, protocol: str) -> None:
    async def run() -> None:
        async with AsyncClient(_url(server, protocol), protocol, timeout=30) as client:
            answers = await asyncio.gather(*(client.infer("padded", _request(1, n)) for n in (2, 6, 12)))
            assert [a["HIDDEN"].shape for a in answers] == [(1, 2), (1, 6), (1, 12)]
            assert [int(a["SEEN"][0, 0]) for a in answers] == [4, 8, 16]
            joined = await client.infer_batch("padded", _request(10, 3))
            assert joined["HIDDEN"].shape == (10, 3)
            with pytest.raises(InputTooLongError, match="is 20 long on axis seq"):
                await client.infer("padded", _request(1, 20))

    asyncio.run(run())


LOCUST_SCRIPT = """
import json, sys
from tritonkit.measure.payloads import fetch_model_spec, make_payloads
from tritonkit.loadtest.users import HttpLeanClient, bucketed

class Events:
    def __init__(self):
        self.seen = []
    def fire(self, **event):
        self.seen.append(event["exception"])

class Environment:
    def __init__(self):
        self.events = type("E", (), {"request": Events()})()

url = sys.argv[1]
spec = fetch_model_spec(url, "padded", "")
payloads = bucketed(make_payloads(spec, {1: 1.0, 3: 1.0}, variable_dim=5))
env = Environment()
user = HttpLeanClient(env, url, payloads, 10.0)
for index in range(len(payloads.payloads)):
    user.infer(index)
user.close()
print(json.dumps({
    "shapes": sorted({tuple(p.inputs["IDS"].shape) for p in payloads.payloads}),
    "failures": [repr(e) for e in env.events.request.seen if e is not None],
    "requests": len(env.events.request.seen),
}))
"""


def test_locust_users_send_payloads_padded_to_their_bucket(server: EmbeddedServer) -> None:
    before = Client(server.http_url, "http", timeout=30).statistics("padded")[0].inference_count
    result = subprocess.run(  # Locust's users monkey-patch with gevent: their own process
        [sys.executable, "-c", LOCUST_SCRIPT, server.http_url],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["shapes"] == [[1, 8], [3, 8]]  # length 5, sent at the edge 8
    assert answer["failures"] == [] and answer["requests"] == 8
    after = Client(server.http_url, "http", timeout=30).statistics("padded")[0].inference_count
    assert after - before == 16  # 4 payloads of batch 1 and 4 of batch 3 reached Triton
