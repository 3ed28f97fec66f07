"""Back-off for retryable provider errors (DESIGN.md §8): how long the run loop waits before it
calls the model again, and the `watchdog_fired` reason it records for the wait.

Kept apart from the loop so the policy is a plain value a caller can set and a test can check.
"""

from __future__ import annotations

from dataclasses import dataclass

from runfold.providers.base import ProviderError


@dataclass(frozen=True)
class RetryPolicy:
    """Back-off for retryable provider errors (408/429/5xx/cut streams, DESIGN.md §8):
    attempt n waits `min(cap_ms, base_ms · 2^(n-1))` ms scaled by a random factor in [0.5, 1]
    ("equal jitter"), or the provider's `retry_after_ms` when it is longer (capped at
    `cap_ms`); at most `max_attempts` attempts in all."""

    base_ms: int = 500
    cap_ms: int = 30_000
    max_attempts: int = 5
    refused_attempts: int = 2
    """Attempts in all when nothing answered at the URL (connection refused): one retry covers
    a server still starting, more would only delay the answer that the URL is wrong."""

    def attempts_for(self, err: ProviderError) -> int:
        """How many attempts in all the loop makes for a call failing with `err`."""
        return min(self.max_attempts, self.refused_attempts) if err.refused else self.max_attempts

    def delay_ms(self, attempt: int, retry_after_ms: int | None, rand: float) -> int:
        """The wait in ms after failed attempt `attempt` (1-based); `rand` in [0, 1)."""
        ceiling = min(self.cap_ms, self.base_ms * (1 << min(attempt - 1, 30)))
        delay = int(ceiling * (0.5 + rand / 2))
        if retry_after_ms is not None:
            delay = max(delay, min(retry_after_ms, self.cap_ms))
        return delay


def backoff_reason(err: ProviderError) -> str:
    """The `watchdog_fired.reason` of a back-off after `err`: `connection_refused` when nothing
    answered, `http_<status>`, or `stream_cut` when the provider gave no status."""
    if err.refused:
        return "connection_refused"
    return f"http_{err.status}" if err.status is not None else "stream_cut"
