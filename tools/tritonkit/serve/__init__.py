"""Serving: the embedded ``tritonserver`` (``embedded``, with ``install``, ``options``, ``process``,
``tritonlog``, the HTTP ``guard`` and the gRPC one); the code Triton runs inside it is :mod:`tritonkit.backends`."""

from __future__ import annotations

from tritonkit.serve.embedded import EmbeddedServer, find_triton
from tritonkit.serve.options import ADMIN_HEADER, ServerOptions

__all__ = ["ADMIN_HEADER", "EmbeddedServer", "ServerOptions", "find_triton"]
