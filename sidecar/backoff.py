"""The resend back-off: exponential with full jitter between ``backoff_initial_ms`` and
``backoff_max_ms``, by tenacity's ``wait_random_exponential`` (the AWS "full jitter" scheme,
which spreads a burst of entries that failed together instead of resending them in lockstep)."""

from __future__ import annotations

from tenacity import RetryCallState, wait_random_exponential


class Backoff:
    def __init__(self, initial_ms: int, max_ms: int) -> None:
        self._initial_ms = initial_ms
        self._wait = wait_random_exponential(multiplier=initial_ms / 1000.0, max=max_ms / 1000.0)

    def delay_ms(self, attempt: int) -> int:
        """The wait before resend number ``attempt`` (1 = the first resend)."""
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]  # tenacity's state wants a Retrying; the wait strategy reads only the attempt number
        state.attempt_number = attempt
        # Full jitter may draw ~0; a floor of the initial step keeps a failing broker from being
        # hammered by entries that drew short waits.
        return max(self._initial_ms, int(self._wait(state) * 1000))
