"""A small closed-loop load on the embedded server (HTTP keep-alive or gRPC), counting every request
as succeeded, failed or unanswered, and noting whether it was sent before a fault."""

from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import grpc

from .support import GOOD_JSON, grpc_good_request, grpc_stub

_SUCCESS = re.compile(r'nv_inference_request_success\{model="add_one",version="1"\} (\d+)')


@dataclass
class Counts:
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    #: requests sent before the fault that failed (an accepted request lost, for a drain)
    failed_before_fault: int = 0
    succeeded_after_fault: int = 0
    first_errors: list[str] = field(default_factory=list)


class Load:
    """``threads`` users sending add_one requests until :meth:`stop`."""

    def __init__(
        self, protocol: str, http_port: int, grpc_url: str, metrics_url: str, threads: int = 4
    ) -> None:
        self.protocol = protocol
        self.http_port = http_port
        self.grpc_url = grpc_url
        self.metrics_url = metrics_url
        self.counts = Counts()
        self.fault_at: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._user, daemon=True) for _ in range(threads)]
        self._poller = threading.Thread(target=self._poll, daemon=True)
        #: (Triton's success counter, the client's succeeded count) at the last /metrics read
        self.last_poll: tuple[int, int] | None = None

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        self._poller.start()
        return self

    def fault(self) -> None:
        self.fault_at = time.monotonic()

    def stop(self, timeout: float = 30.0) -> int:
        """Stop the users; the number of threads still stuck in a call (unanswered requests)."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._poller.join(5)
        return sum(thread.is_alive() for thread in self._threads)

    def _note(self, sent_at: float, ok: bool, error: str = "") -> None:
        before = self.fault_at is None or sent_at < self.fault_at
        with self._lock:
            if ok:
                self.counts.succeeded += 1
                self.counts.succeeded_after_fault += not before
            else:
                self.counts.failed += 1
                self.counts.failed_before_fault += before
                if len(self.counts.first_errors) < 3:
                    self.counts.first_errors.append(error[:80])

    def _user(self) -> None:
        connection: http.client.HTTPConnection | None = None
        channel, stub = grpc_stub(self.grpc_url)
        request = grpc_good_request()
        try:
            while not self._stop.is_set():
                with self._lock:
                    self.counts.sent += 1
                sent_at = time.monotonic()
                if self.protocol == "grpc":
                    try:
                        stub.ModelInfer(request, timeout=20)
                        self._note(sent_at, True)
                    except grpc.RpcError as exc:
                        self._note(sent_at, False, f"{exc.code().name}")  # type: ignore[attr-defined]
                        time.sleep(0.05)
                    continue
                try:
                    if connection is None:
                        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=20)
                    connection.request("POST", "/v2/models/add_one/infer", GOOD_JSON)
                    response = connection.getresponse()
                    response.read()
                    self._note(sent_at, response.status == 200, f"HTTP {response.status}")
                    if response.status != 200 or response.getheader("Connection", "") == "close":
                        connection.close()
                        connection = None
                except (OSError, http.client.HTTPException) as exc:
                    self._note(sent_at, False, type(exc).__name__)
                    if connection is not None:
                        connection.close()
                    connection = None
                    time.sleep(0.05)
        finally:
            channel.close()
            if connection is not None:
                connection.close()

    def _poll(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                client = self.counts.succeeded
            try:
                with urllib.request.urlopen(self.metrics_url, timeout=2) as response:
                    match = _SUCCESS.search(response.read().decode())
                if match:
                    self.last_poll = (int(match.group(1)), client)
            except OSError:
                pass
            time.sleep(0.1)
