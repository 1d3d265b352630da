"""One request's answer, taken by every lookup that may take it instead of asking again.

What a lookup may take is said by when the request went out: an answer to a request sent at or
after ``not_before`` (the event loop's time). A lookup that needs the state of things since it
began (a route it may trust "not found" from, where a broker's commitlog ended) passes its own
start; one content with a recent answer (a route to look for a copy on, a broker's settings)
passes its start less how old the answer may be. The time kept is taken before the request is
written, so the server read its state no earlier than that.

So at most one request is in flight per shared answer and per ``not_before`` that the last one
does not meet: concurrent lookups (a drain resends many entries at once) share one. The request
runs in the lookup that started it, bounded by that lookup's deadline; the others wait for it
within their own. Its failure is theirs too (each then answers "cannot say"); a failed answer is
not kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from sidecar.remoting.errors import RemotingClosedError

T = TypeVar("T")


class SharedAnswer(Generic[T]):
    def __init__(self) -> None:
        # (answer, when its request was sent), both the last answered and the one under way.
        self._last: tuple[T, float] | None = None
        self._in_flight: tuple[asyncio.Future[T], float] | None = None

    async def get(
        self, ask: Callable[[], Awaitable[T]], not_before: float, deadline: float
    ) -> tuple[T, float]:
        """An answer to a request sent at or after ``not_before``, and when it was sent: the
        last one, the one under way, or ``ask()``'s now. TimeoutError at ``deadline`` while
        waiting for another lookup's request."""
        if self._last is not None and self._last[1] >= not_before:
            return self._last
        if self._in_flight is not None and self._in_flight[1] >= not_before:
            future, sent_at = self._in_flight
            async with asyncio.timeout_at(deadline):
                # shield: this waiter's deadline must not cancel the request others wait on.
                return await asyncio.shield(future), sent_at
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        future = loop.create_future()
        self._in_flight = (future, sent_at)
        try:
            answer = await ask()
        except Exception as e:
            future.set_exception(e)
            future.exception()  # no other lookup may be waiting: nothing to log
            raise
        except BaseException:
            future.set_exception(RemotingClosedError("the lookup asking for the others ended"))
            future.exception()
            raise
        finally:
            if self._in_flight is not None and self._in_flight[0] is future:
                self._in_flight = None
        future.set_result(answer)
        if self._last is None or sent_at >= self._last[1]:
            self._last = (answer, sent_at)
        return answer, sent_at
