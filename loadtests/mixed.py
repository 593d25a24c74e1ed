"""A hand-written locustfile: a mixed-model scenario with weights, for ``locust -f`` directly.

Three gRPC users for every HTTP one, two models, a ramp that stops at the latency knee::

    TRITON_HTTP=127.0.0.1:8000 TRITON_GRPC=127.0.0.1:8001 \\
        locust -f loadtests/mixed.py --headless --csv reports/mixed/locust

``tritonkit loadtest --model minilm_int8@3 --model minilm_fp16@1 ...`` builds the same kind of
run from the command line (and writes the full report); this file shows the building blocks.
"""

import os
from typing import ClassVar

from tritonkit.loadtest.scenarios import Ramp
from tritonkit.loadtest.shapes import shape_for
from tritonkit.loadtest.slo import SLO
from tritonkit.loadtest.users import TritonGrpcUser, TritonHttpUser

HTTP = os.environ.get("TRITON_HTTP", "127.0.0.1:8000")
GRPC = os.environ.get("TRITON_GRPC", "127.0.0.1:8001")


class MiniLMInt8Grpc(TritonGrpcUser):
    weight = 3
    http_url, grpc_url = HTTP, GRPC
    model = "minilm_int8"
    payload_source = "text"
    batch_mix: ClassVar[dict[int, float]] = {1: 0.8, 8: 0.2}


class MiniLMFp16Http(TritonHttpUser):
    weight = 1
    http_url, grpc_url = HTTP, GRPC
    model = "minilm_fp16"
    payload_source = "text"


MixedRamp = shape_for(
    Ramp(start_users=4, step_users=4, step_duration=20.0, max_users=32),
    SLO(p95_ms=100.0, max_failure_ratio=0.01),
)
