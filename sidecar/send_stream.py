"""SendStream's flow: requests read and answered concurrently, a bounded number at a time, and
every request read answered before the stream ends.

At most ``in_flight_max`` requests are being answered at once: reading stops while that many are,
so an app that writes faster than the sidecar answers is held back by gRPC's flow control instead
of by the sidecar's memory. Answers wait in a queue of the same bound: answers the app does not
read hold their tasks, and so the reading. A request stream that breaks (an undecodable request)
ends the call with that error, after the answers of every request read before it.

A request's key (its request_id) is in flight from when it is read until its answer went out on
the stream: the app matches answers to requests by it, so a second request with a key in flight
would make two answers it cannot tell apart. Such a request is answered at once with
``refuse_duplicate`` (its own answer: the stream and the first request go on) and is never
handed to ``answer_one``, so its message is never sent. Its answer takes a slot and a place in
the queue like any other. Once the first answer went out, the key may be used again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Hashable
from typing import TypeVar

Request = TypeVar("Request")
Answer = TypeVar("Answer")


async def answer_stream(
    requests: AsyncIterator[Request],
    answer_one: Callable[[Request], Awaitable[Answer]],
    in_flight_max: int,
    key_of: Callable[[Request], Hashable],
    refuse_duplicate: Callable[[Request], Answer],
) -> AsyncGenerator[Answer, None]:
    """Each request's answer (``answer_one`` and ``refuse_duplicate`` answer for themselves:
    they must not raise), in the order they are ready. Close it with ``contextlib.aclosing``:
    the reader and the answers in flight are cancelled then."""
    slots = asyncio.Semaphore(in_flight_max)
    # None marks the end: every request read has put its answer before it. With each answer,
    # its request's key and whether the request holds it (a duplicate does not).
    answers: asyncio.Queue[tuple[Hashable, bool, Answer] | None] = asyncio.Queue(
        maxsize=in_flight_max
    )
    tasks: set[asyncio.Task[None]] = set()
    keys_in_flight: set[Hashable] = set()

    async def answer(request: Request, key: Hashable, holds_key: bool) -> None:
        try:
            result = await answer_one(request) if holds_key else refuse_duplicate(request)
            await answers.put((key, holds_key, result))
        finally:
            slots.release()

    async def read() -> None:
        broken: Exception | None = None
        try:
            async for request in requests:
                await slots.acquire()  # back-pressure: stop reading while the limit is in flight
                key = key_of(request)
                holds_key = key not in keys_in_flight
                keys_in_flight.add(key)
                task = asyncio.create_task(answer(request, key, holds_key))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except Exception as e:  # the request stream broke: answer what was read, then end
            broken = e
        if tasks:
            await asyncio.wait(set(tasks))
        await answers.put(None)
        if broken is not None:
            raise broken

    reader = asyncio.create_task(read())
    # Whatever the reader ends with is retrieved, also when the call is gone before it ended.
    reader.add_done_callback(_retrieve)
    try:
        while (item := await answers.get()) is not None:
            key, holds_key, result = item
            yield result
            # Resumed once gRPC wrote the answer: from now on the app may have it.
            if holds_key:
                keys_in_flight.discard(key)
        await reader  # re-raises a broken request stream, after every answer went out
    finally:
        reader.cancel()
        for task in list(tasks):
            task.cancel()


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
