"""Model health measured, not assumed: each python-backend model is asked to answer within a deadline.

Triton 2.51 answers ``/v2/health/ready`` and model-ready with 200 while a model's python stub is stopped
(SIGSTOP) or hung: readiness there checks only that the stub process exists, and every infer then fails
after about a second with "Stub process is not healthy". :class:`HealthMonitor` runs one thread per
python-backend model on Triton's private HTTP port. Every ``interval`` seconds it reads the model's
success counter (statistics API): when it rose by more than the monitor's own probes, real traffic was
answered and nothing is sent. Otherwise it sends one tiny infer (zeros of the config's shapes, batch 1;
a one-request sequence for sequence models) and gives it ``deadline`` seconds. No answer in time, or
Triton's "not healthy"/"not ready" error, makes the model unresponsive until a probe is answered again.
An error the model itself raised still proves its stub answered.

Ensembles (no stub of their own) and decoupled models (not callable through ``/infer``) are not probed.
Probes of an idle model count in Triton's inference statistics (two a second at most).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import secrets
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["HealthMonitor", "probe_request"]

_DTYPE_BYTES = {
    "BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
    "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8, "BYTES": 4,
}  # fmt: skip
_DEAD = ("not healthy", "not ready", "Stub process")


def probe_request(config: Mapping[str, Any]) -> tuple[bytes, int] | None:
    """An infer body (JSON header + zero bytes) and its header length for ``config`` (Triton's JSON
    form of the model config), or None when the model cannot be probed through ``/infer``."""
    if config.get("platform") == "ensemble" or config.get("backend") != "python":
        return None
    if config.get("model_transaction_policy", {}).get("decoupled"):
        return None
    batch = int(config.get("max_batch_size", 0)) > 0
    inputs, payload = [], b""
    for spec in config.get("input", []):
        if spec.get("optional"):
            continue
        datatype = str(spec.get("data_type", "TYPE_FP32")).removeprefix("TYPE_")
        datatype = "BYTES" if datatype == "STRING" else datatype
        shape = [1] * batch + [max(1, int(d)) for d in spec.get("dims", [])]
        size = math.prod(shape) * _DTYPE_BYTES.get(datatype, 8)  # BYTES: empty strings, 4 bytes each
        inputs.append(
            {
                "name": spec["name"],
                "datatype": datatype,
                "shape": shape,
                "parameters": {"binary_data_size": size},
            }
        )
        payload += b"\0" * size
    request: dict[str, Any] = {"inputs": inputs, "parameters": {"binary_data_output": True}}
    if "sequence_batching" in config:
        request["parameters"].update(
            sequence_id=secrets.randbelow(1 << 62) + 1, sequence_start=True, sequence_end=True
        )
    header = json.dumps(request).encode()
    return header + payload, len(header)


class HealthMonitor:
    """Probe the python-backend models of the Triton at ``127.0.0.1:port`` (see the module's docstring)."""

    def __init__(
        self,
        port: int,
        *,
        headers: Mapping[str, str] | None = None,
        interval: float = 0.5,
        deadline: float = 1.0,
    ) -> None:
        self.port = port
        self.headers = dict(headers or {})
        self.interval, self.deadline = interval, deadline
        self._reasons: dict[str, str] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _call(
        self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.deadline)
        try:
            connection.request(method, path, body=body, headers={**self.headers, **(headers or {})})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def start(self) -> list[str]:
        """Find the models to probe and start one thread per model; returns their names."""
        status, index = self._call("POST", "/v2/repository/index", b"{}")
        names = [m["name"] for m in json.loads(index) if m.get("state") == "READY"] if status == 200 else []
        probed = []
        for name in sorted(set(names)):
            with contextlib.suppress(OSError, ValueError, KeyError):
                status, raw = self._call("GET", f"/v2/models/{name}/config")
                request = probe_request(json.loads(raw)) if status == 200 else None
                if request is not None:
                    thread = threading.Thread(
                        target=self._watch, args=(name, request), name=f"tritonkit-health-{name}", daemon=True
                    )
                    self._threads.append(thread)
                    probed.append(name)
        for thread in self._threads:
            thread.start()
        return probed

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.deadline + self.interval + 1)
        self._threads = []

    def reason(self, model: str | None = None) -> str | None:
        """Why ``model`` (any model when None) cannot serve now, or None."""
        reasons = dict(self._reasons)
        if model is not None:
            return reasons.get(model)
        return next(iter(reasons.values()), None)

    def _successes(self, name: str) -> int | None:
        try:
            status, raw = self._call("GET", f"/v2/models/{name}/stats")
            stats = json.loads(raw)["model_stats"] if status == 200 else None
        except (OSError, ValueError, KeyError):
            return None
        if not stats:
            return None
        return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)

    def _probe(self, name: str, request: tuple[bytes, int]) -> str | None:
        body, header_length = request
        headers = {"Inference-Header-Content-Length": str(header_length)}
        try:
            status, raw = self._call("POST", f"/v2/models/{name}/infer", body, headers)
        except TimeoutError:
            return f"model `{name}` did not answer a probe within {self.deadline:g} s (its stub is stopped or hung)"
        except OSError as exc:
            return f"model `{name}` could not be probed: {exc}"
        text = raw.decode(errors="replace")
        if status != 200 and any(marker in text for marker in _DEAD):
            with contextlib.suppress(ValueError, AttributeError):
                text = str(json.loads(text).get("error", text))
            return f"model `{name}` cannot serve: {text.strip()[:160]}"
        return None  # answered (a model's own error is an answer too)

    def _watch(self, name: str, request: tuple[bytes, int]) -> None:
        last: int | None = None  # the success counter when first read; own: probes answered since
        own = 0
        while not self._stop.wait(self.interval):
            count = self._successes(name)
            if count is not None and last is not None and count - last > own:
                self._reasons.pop(name, None)  # real requests were answered since the last look
                last, own = count, 0
                continue
            if last is None:
                last = count
            reason = self._probe(name, request)
            if self._stop.is_set():
                return
            if reason is None:
                self._reasons.pop(name, None)
                own += 1
            else:
                self._reasons[name] = reason
