"""How a load test ends early: the server found dead (:class:`ServerWatch`) or Ctrl-C, as one :class:`Stop`.

:class:`ServerWatch` asks Triton's liveness endpoint (``/v2/health/live`` on its HTTP port) while the load
is on; a server that refuses connections, resets them or says it is not live on :data:`MISSES`
consecutive probes is dead, from the first of them. A probe that times out is no evidence either way (a
server this loaded may answer its health endpoint late): the users' own request timeouts show it. The
watch is armed only when the endpoint answered before the load began (a gRPC run's guessed HTTP port may
be closed: then nothing is watched). :mod:`.supervise` then stops Locust the way the end of its plan
does, and the report says when and why the run ended.
"""

from __future__ import annotations

import dataclasses
import http.client
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["INTERRUPTED", "MISSES", "SERVER_DIED", "ServerWatch", "Stop"]

#: :attr:`Stop.reason` values
SERVER_DIED, INTERRUPTED = "server_died", "interrupted"
#: consecutive failed probes that make a server dead
MISSES = 2
#: seconds between probes, and a probe's timeout
INTERVAL_S, TIMEOUT_S = 0.5, 2.0


@dataclasses.dataclass(frozen=True)
class Stop:
    """Why and when (``time.time()``) a run was stopped before its plan ended."""

    reason: str
    at: float
    detail: str

    def record(self, started_at: float) -> dict[str, Any]:
        """The report's ``stopped`` entry: the reason, seconds into the run, the detail."""
        return {"reason": self.reason, "at_s": round(self.at - started_at, 1), "detail": self.detail}


class ServerWatch:
    """Probes ``http://<http>/v2/health/live``; :meth:`poll` returns a :class:`Stop` once the server is dead."""

    def __init__(self, http: str) -> None:
        self.url = f"http://{http}/v2/health/live"
        self._next = 0.0
        #: (time of the first failed probe in the current run of failures, failures so far, the last one's text)
        self._misses: tuple[float, int, str] | None = None
        self.armed = self.probe() is None

    def probe(self) -> str | None:
        """None when the server says it is live; else what failed (``""``: timed out, no evidence)."""
        try:
            with urllib.request.urlopen(self.url, timeout=TIMEOUT_S) as answer:
                return None if answer.status == 200 else f"answered HTTP {answer.status}"
        except urllib.error.HTTPError as exc:
            return f"answered HTTP {exc.code} (not live)"
        except urllib.error.URLError as exc:
            return _failure(exc.reason if isinstance(exc.reason, OSError) else OSError(str(exc.reason)))
        except OSError as exc:
            return _failure(exc)
        except http.client.HTTPException as exc:
            return f"answered no HTTP ({type(exc).__name__})"

    def poll(self) -> Stop | None:
        """Probe when the last probe is :data:`INTERVAL_S` old; a :class:`Stop` once the server is dead."""
        now = time.monotonic()
        if not self.armed or now < self._next:
            return None
        self._next = now + INTERVAL_S
        failed = self.probe()
        if failed is None:
            self._misses = None
        elif failed:
            first, count, _ = self._misses or (time.time(), 0, "")
            self._misses = (first, count + 1, failed)
            if count + 1 >= MISSES:
                return Stop(SERVER_DIED, first, f"its liveness endpoint {self.url}: {failed}")
        return None


def _failure(error: OSError) -> str:
    if isinstance(error, TimeoutError):
        return ""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, ConnectionResetError):
        return "connection reset"
    return str(error) or type(error).__name__
