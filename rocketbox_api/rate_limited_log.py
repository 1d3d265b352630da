"""A log line that cannot flood: at most one per ``interval_s`` for one kind of event.

What a client can provoke at will (malformed requests, a bug one request shape triggers) must not
write a line per request: 7,000 bad calls would bury every other line. The events between two
lines are counted, and the next line says how many were left out, so nothing goes unseen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

# Often enough that an operator sees a fault within seconds, rarely enough that a client sending
# thousands of bad requests a second costs a handful of lines a minute.
LOG_INTERVAL_S_DEFAULT = 10.0


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        interval_s: float = LOG_INTERVAL_S_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval_s = interval_s
        self._clock = clock
        self._next_s = float("-inf")
        self._suppressed = 0
        # Sync gRPC handlers run on the server's thread pool, the rest on the event loop.
        self._lock = threading.Lock()
        self.events = 0

    def log(self, msg: str, *args: object, exc_info: BaseException | None = None) -> bool:
        """Write the line unless one was written within the interval; True when written."""
        with self._lock:
            self.events += 1
            now = self._clock()
            if now < self._next_s:
                self._suppressed += 1
                return False
            self._next_s = now + self._interval_s
            suppressed, self._suppressed = self._suppressed, 0
        if suppressed:
            msg += " (%d more like it since the last such line were not logged)"
            args = (*args, suppressed)
        self._logger.log(self._level, msg, *args, exc_info=exc_info)
        return True
