"""rocketbox_api/deadlines.py: waits with a deadline that a cancel always ends.

The case they exist for: the awaited thing finishes and a cancel of the waiting task arrives
within the next few turns of the loop, before the task resumes. Python 3.11's
``asyncio.wait_for`` returned the result there and the task ran on; these must raise
CancelledError at every one of those turns.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from rocketbox_api.deadlines import wait_event, within

# Turns of the loop between the event being set and the cancel: 3.11's wait_for lost the cancel
# at 0, 1 and 2; every later turn is a plain cancel of a resumed task.
TURNS_MAX = 4
# Only reached if a cancel was lost: the task would then run until its own wait's deadline.
ENDED_DEADLINE_S = 5.0
LONG_WAIT_S = 60.0


async def ended_by_a_cancel_as_it_wakes(wait_once: object, turns: int) -> bool:
    """Run a loop of waits on an event; set the event, let ``turns`` turns pass, cancel the
    loop: True when the cancel ended it."""
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            if wait_once is wait_event:
                await wait_event(event, LONG_WAIT_S)
            else:
                with contextlib.suppress(TimeoutError):
                    await within(event.wait(), LONG_WAIT_S)
            event.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # sleep: a turn of the loop, after which the task waits
    event.set()
    for _ in range(turns):
        await asyncio.sleep(0)  # sleep: the turns between the wake-up and the cancel
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=ENDED_DEADLINE_S)
    if not done:
        task.cancel()  # once more, so that the test does not leave it running
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    return task.cancelled()


@pytest.mark.parametrize("turns", range(TURNS_MAX))
@pytest.mark.parametrize("wait_once", [wait_event, within], ids=["wait_event", "within"])
def test_a_cancel_that_meets_the_wake_up_ends_the_waiting_task(
    wait_once: object, turns: int
) -> None:
    assert asyncio.run(ended_by_a_cancel_as_it_wakes(wait_once, turns))


def test_wait_event_says_whether_the_event_came() -> None:
    async def main() -> tuple[bool, bool]:
        event = asyncio.Event()
        timed_out = await wait_event(event, 0.01)
        asyncio.get_running_loop().call_soon(event.set)
        return timed_out, await wait_event(event, LONG_WAIT_S)

    assert asyncio.run(main()) == (False, True)


def test_within_returns_the_result_or_times_out_cancelling_what_it_waited_on() -> None:
    async def main() -> tuple[int, bool]:
        async def answer() -> int:
            await asyncio.sleep(0)  # sleep: a turn of the loop before the answer
            return 42

        result = await within(answer(), LONG_WAIT_S)
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await within(never, 0.01)
        return result, never.cancelled()

    assert asyncio.run(main()) == (42, True)
