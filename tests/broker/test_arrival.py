"""Long-poll wake-ups without a thundering herd: an arrival wakes one waiting receive per consumer
group and every pull waiter; a burst of records costs one wake; a wake whose waiter went away is
passed on; and over a real store, one message wakes one of a group's waiting receives."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.arrival import EVERY_WAITER, MessageArrivalNotifier
from broker.group_config import GroupConfig
from broker.pop_message import PopMessageService
from broker.store.codec.check import DispatchRequest
from broker.store.codec.message import MessageExtBrokerInner
from broker.store.message_store import DefaultMessageStore
from broker.topic_config import TopicConfigManager
from tests.broker.test_pop_message import open_store

TOPIC = "ArrivalTopic"
WAIT_S = 30.0  # the waits here end by a wake; this only bounds a failing test
DEADLINE_S = 10.0


async def until(condition: Callable[[], object], what: str) -> None:
    """Yield to the loop until ``condition()`` holds (a deadline, not a sleep-and-hope)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        await asyncio.sleep(0.001)


def test_an_arrival_wakes_one_receive_per_group_and_every_pull_waiter() -> None:
    async def run() -> None:
        arrivals = MessageArrivalNotifier()
        a = [asyncio.create_task(arrivals.wait(TOPIC, WAIT_S, "GroupA")) for _ in range(4)]
        b = [asyncio.create_task(arrivals.wait(TOPIC, WAIT_S, "GroupB")) for _ in range(2)]
        pulls = [asyncio.create_task(arrivals.wait(TOPIC, WAIT_S)) for _ in range(3)]
        await until(lambda: arrivals.waiting(TOPIC, "GroupA") == 4, "four waiters of GroupA")
        await until(lambda: arrivals.waiting(TOPIC, EVERY_WAITER) == 3, "three pull waiters")
        arrivals.notify(TOPIC)
        await until(lambda: all(t.done() for t in pulls), "every pull waiter woken")
        await until(lambda: sum(t.done() for t in a + b) == 2, "one waiter of each group woken")
        assert a[0].done(), "the longest waiting is woken first"
        assert b[0].done(), "the longest waiting is woken first"
        assert arrivals.waiting(TOPIC, "GroupA") == 3
        assert arrivals.waiting(TOPIC, "GroupB") == 1
        arrivals.notify(TOPIC, "GroupA")  # a full batch passes the wake on, in its group only
        await until(a[1].done, "the next waiter of GroupA woken")
        assert arrivals.waiting(TOPIC, "GroupB") == 1
        arrivals.wake_all()
        await asyncio.gather(*a, *b, *pulls)
        assert arrivals.closing

    asyncio.run(run())


def test_a_wake_whose_waiter_was_cancelled_is_passed_on() -> None:
    async def run() -> None:
        arrivals = MessageArrivalNotifier()
        first = asyncio.create_task(arrivals.wait(TOPIC, WAIT_S, "G"))
        second = asyncio.create_task(arrivals.wait(TOPIC, WAIT_S, "G"))
        await until(lambda: arrivals.waiting(TOPIC, "G") == 2, "two waiters")
        arrivals.notify(TOPIC)
        first.cancel()  # its client went away before the wake ran
        with pytest.raises(asyncio.CancelledError):
            await first
        await until(second.done, "the wake passed on to the second waiter")
        arrivals.wake_all()

    asyncio.run(run())


def test_a_burst_of_records_from_another_thread_costs_one_wake() -> None:
    async def run() -> None:
        arrivals = MessageArrivalNotifier()
        arrivals._loop = asyncio.get_running_loop()
        waiters = [asyncio.create_task(arrivals.wait(TOPIC, WAIT_S, "G")) for _ in range(3)]
        await until(lambda: arrivals.waiting(TOPIC, "G") == 3, "three waiters")
        request = DispatchRequest(
            topic=TOPIC,
            queue_id=0,
            commit_log_offset=0,
            msg_size=100,
            tags_code=0,
            store_timestamp_ms=0,
            consume_queue_offset=0,
            keys="",
            uniq_key=None,
            sysflag=0,
            prepared_transaction_offset=0,
            properties={},
        )

        def burst() -> None:
            for _ in range(100):
                arrivals._on_arrival(request)

        thread = threading.Thread(target=burst)
        thread.start()
        thread.join()
        await until(lambda: sum(t.done() for t in waiters) >= 1, "a waiter woken")
        for _ in range(5):  # every wake the burst queued ran in one pass; their waiters end
            await asyncio.sleep(0)  # sleep: turns of the loop, in which no second waiter may end
        assert sum(t.done() for t in waiters) == 1
        arrivals.wake_all()
        await asyncio.gather(*waiters)

    asyncio.run(run())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    s = open_store(tmp_path)
    yield s
    s.shutdown()


def test_one_message_wakes_one_of_a_groups_waiting_receives(
    store: DefaultMessageStore, tmp_path: Path
) -> None:
    async def run() -> None:
        arrivals = MessageArrivalNotifier()
        arrivals.attach(store)
        config = tmp_path / "config"
        config.mkdir()
        pop = PopMessageService(store, TopicConfigManager(config, 1), config, arrivals)
        group = GroupConfig("Waiting")
        receives = [
            asyncio.create_task(pop.receive(group, TOPIC, (0,), None, 32, 60_000, 30_000))
            for _ in range(4)
        ]
        await until(lambda: arrivals.waiting(TOPIC, "Waiting") == 4, "four receives waiting")
        [result] = store.put_messages([MessageExtBrokerInner(topic=TOPIC, body=b"one")])
        assert result.ok
        await until(lambda: any(t.done() for t in receives), "a receive woken")
        [done] = [t for t in receives if t.done()]
        assert [d.message.body for d in done.result()] == [b"one"]
        assert arrivals.waiting(TOPIC, "Waiting") == 3, "the others were not woken"
        arrivals.wake_all()
        rest = await asyncio.gather(*(t for t in receives if t is not done))
        assert rest == [[], [], []]

    asyncio.run(run())
