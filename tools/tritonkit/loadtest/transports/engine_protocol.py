"""The pipe protocol between a Locust process and its gRPC engine process (:mod:`.grpc_engine`).

Frames are fixed-size binary headers (``struct``) so that both sides pay a few microseconds per
request; many frames travel in one ``write``. Kept in its own module, free of gevent and gRPC,
because both sides import it.

Locust → engine
    ``P`` payload: u32 payload id, u32 spec length, u32 body length, spec JSON, serialized
    ``ModelInferRequest`` (without ``id``). ``R`` request: u32 request id, u32 payload id.
Engine → Locust
    ``r`` result: u32 request id, u32 response bytes, f64 seconds, u16 error length, error text
    (empty on success). ``E`` fatal: u16 length, text; the engine exits after it. ``C`` (last
    frame, on a clean exit): f64 CPU seconds the engine used since its first request.
"""

from __future__ import annotations

import struct

__all__ = [
    "CPU",
    "CPU_FRAME",
    "FATAL",
    "FATAL_HEAD",
    "PAYLOAD",
    "PAYLOAD_HEAD",
    "REQUEST",
    "REQUEST_FRAME",
    "RESULT",
    "RESULT_HEAD",
]

PAYLOAD = b"P"
REQUEST = b"R"
RESULT = b"r"
FATAL = b"E"
CPU = b"C"

PAYLOAD_HEAD = struct.Struct("<cIII")
REQUEST_FRAME = struct.Struct("<cII")
RESULT_HEAD = struct.Struct("<cIIdH")
FATAL_HEAD = struct.Struct("<cH")
CPU_FRAME = struct.Struct("<cd")
