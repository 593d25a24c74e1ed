"""The retry policy: which failures are retried, how long to wait between attempts, and the deadline.

Only failures where the server cannot have acted on the request are retried: UNAVAILABLE / 503
(not ready, shutting down), connection refused, and a connection closed or reset before an answer
arrived (a stale keep-alive connection to a restarted server). Invalid arguments, unknown models,
timeouts and internal errors are never retried. A full dynamic-batching queue is retried only when
``retry_queue_full=True``. Waits grow exponentially with *equal jitter* (a uniform draw in
``[backoff/2, backoff]``) so that many clients do not retry in lock step while the total wait has a
floor: the default policy waits at least 5.5 s over its attempts, enough to ride out a server restart, and every call is bounded by a
total deadline: a request either returns or raises, it is never dropped silently.
"""

from __future__ import annotations

import dataclasses
import random

from tritonkit.client.errors import QueueFullError, ServerUnavailableError, _CallError
from tritonkit.errors import ClientError

__all__ = ["RetryPolicy", "as_policy"]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a client retries.

    ``max_attempts`` counts the first try; ``deadline`` (seconds) bounds a call's attempts and
    waits together when the call has no ``timeout`` of its own (a call's ``timeout`` is always the
    total budget, retries included).
    """

    # 10 attempts from 0.1 s doubling to 2 s: at least 5.55 s (at most 11.1 s) of waiting in all,
    # so a call outlives a ~2 s server restart when its deadline allows.
    max_attempts: int = 10
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    deadline: float | None = 60.0
    retry_queue_full: bool = False

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ClientError(f"`max_attempts` must be >= 1, given {self.max_attempts}")
        if self.deadline is not None and not self.deadline > 0:
            raise ClientError(f"`deadline` must be > 0 seconds or None, given {self.deadline}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff or self.multiplier < 1:
            raise ClientError(
                "expected 0 <= `initial_backoff` <= `max_backoff` and `multiplier` >= 1, given "
                f"{self.initial_backoff}, {self.max_backoff}, {self.multiplier}"
            )

    def should_retry(self, err: _CallError, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based), which failed with ``err``, may be followed by another."""
        if attempt >= self.max_attempts:
            return False
        if isinstance(err, QueueFullError):
            return self.retry_queue_full
        return isinstance(err, ServerUnavailableError) and err.retryable

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt``: equal jitter over the exponential ceiling."""
        ceiling = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return (rng or random).uniform(ceiling / 2, ceiling)

    def min_total_backoff(self) -> float:
        """The least time all waits of a call can add up to (when the deadline does not cut them short)."""
        return sum(
            min(self.max_backoff, self.initial_backoff * self.multiplier ** (a - 1)) / 2
            for a in range(1, self.max_attempts)
        )


def as_policy(retries: int | RetryPolicy | None) -> RetryPolicy:
    """``retries`` as given to a client: a policy, a number of retries after the first try, or None (no retries)."""
    if isinstance(retries, RetryPolicy):
        return retries
    if retries is None:
        return RetryPolicy(max_attempts=1)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ClientError(f"`retries` must be a RetryPolicy or an int >= 0, given {retries!r}")
    return RetryPolicy(max_attempts=retries + 1)
