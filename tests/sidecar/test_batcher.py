"""The coalescing batcher (sidecar/batcher.py) under arbitrary arrival schedules: every item gets
exactly its own answer; a request never carries more than its limits; no more requests are in
flight than allowed; items submitted in one turn of the loop share a request; an idle batcher
sends at once; and a failed request answers each of its items with the failure."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.batcher import InFlightBatcher


class Recorder:
    """A flush that answers each item with ``item * 10`` after ``delay`` turns of the loop."""

    def __init__(self, turns: int = 1) -> None:
        self.requests: list[list[int]] = []
        self.in_flight = 0
        self.in_flight_peak = 0
        self.turns = turns

    async def flush(self, items: Sequence[int]) -> list[int]:
        self.requests.append(list(items))
        self.in_flight += 1
        self.in_flight_peak = max(self.in_flight_peak, self.in_flight)
        try:
            for _ in range(self.turns):
                await asyncio.sleep(0)  # sleep: a flush takes this many turns of the loop
            return [i * 10 for i in items]
        finally:
            self.in_flight -= 1


@settings(max_examples=60, deadline=None)
@given(
    waves=st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=20), min_size=1, max_size=8),
    items_max=st.integers(1, 8),
    bytes_max=st.integers(50, 200),
    in_flight_max=st.integers(1, 3),
    turns=st.integers(0, 3),
)
def test_every_item_gets_its_own_answer_within_the_limits(
    waves: list[list[int]], items_max: int, bytes_max: int, in_flight_max: int, turns: int
) -> None:
    recorder = Recorder(turns)

    async def run() -> list[int]:
        batcher: InFlightBatcher[int, int] = InFlightBatcher(
            recorder.flush, items_max, bytes_max, in_flight_max, size_bytes=lambda i: i
        )
        tasks: list[asyncio.Task[int]] = []
        for wave in waves:  # each wave arrives in one turn; the next a turn later
            tasks += [asyncio.create_task(batcher.submit(i)) for i in wave]
            await asyncio.sleep(0)  # sleep: the next wave comes a turn of the loop later
        answers = await asyncio.gather(*tasks)
        assert batcher.idle
        return answers

    answers = asyncio.run(run())
    items = [i for wave in waves for i in wave]
    assert answers == [i * 10 for i in items]
    assert sorted(i for r in recorder.requests for i in r) == sorted(items)
    for request in recorder.requests:
        assert len(request) <= items_max
        # A lone item larger than bytes_max still leaves (alone): nothing is stuck.
        assert len(request) == 1 or sum(request) <= bytes_max
    assert recorder.in_flight_peak <= in_flight_max


def test_items_of_one_turn_share_a_request_and_later_ones_wait_for_it() -> None:
    recorder = Recorder(turns=2)

    async def run() -> None:
        batcher: InFlightBatcher[int, int] = InFlightBatcher(recorder.flush, 100, 10**6, 1)
        first = [asyncio.create_task(batcher.submit(i)) for i in range(5)]
        await asyncio.sleep(0)  # sleep: a turn, in which the first request leaves with all five
        await asyncio.sleep(0)  # sleep: a turn more: its flush (two turns) is still in flight
        later = [asyncio.create_task(batcher.submit(i)) for i in range(5, 8)]
        await asyncio.gather(*first, *later)

    asyncio.run(run())
    assert recorder.requests == [[0, 1, 2, 3, 4], [5, 6, 7]]


def test_an_idle_batcher_sends_a_lone_item_at_once() -> None:
    recorder = Recorder()

    async def run() -> int:
        batcher: InFlightBatcher[int, int] = InFlightBatcher(recorder.flush, 100, 10**6, 1)
        return await batcher.submit(7)

    assert asyncio.run(run()) == 70
    assert recorder.requests == [[7]]


def test_a_failed_request_answers_each_of_its_items_with_the_failure() -> None:
    async def failing(items: Sequence[int]) -> list[int]:
        raise ConnectionError(f"request of {len(items)} failed")

    async def run() -> list[int | BaseException]:
        batcher: InFlightBatcher[int, int] = InFlightBatcher(failing, 100, 10**6, 1)
        return await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)

    answers = asyncio.run(run())
    assert [str(a) for a in answers] == ["request of 3 failed"] * 3


def test_limits_must_be_positive() -> None:
    async def flush(items: Sequence[int]) -> list[int]:
        return list(items)

    with pytest.raises(ValueError, match="items_max"):
        InFlightBatcher(flush, 0, 1, 1)
