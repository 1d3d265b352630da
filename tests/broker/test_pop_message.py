"""Pop consumption's state, in process over a real store: the cursor and expiry heap of concurrent
groups, the in-flight window, invisibility changes, and progress across a restart.

The clock of invisibility is the service's ``_now_ms``, set by each test so that expiry is exact
and no test sleeps; everything else (the store, its files, its dispatch) is real. A Hypothesis
model drives random receives, acks, invisibility changes and clock steps, and checks the rules a
consumer relies on after every step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import pop_message
from broker.arrival import MessageArrivalNotifier
from broker.background import BackgroundTasks
from broker.group_config import GroupConfig
from broker.pop_message import INFLIGHT_WINDOW_ENTRIES, Delivery, PopMessageService
from broker.pop_state import EXPIRY_HEAP_FLOOR, EXPIRY_HEAP_SLACK, InvalidReceiptHandleError
from broker.store.codec.message import MessageExtBrokerInner
from broker.store.config import KIB, MessageStoreConfig
from broker.store.message_store import DefaultMessageStore
from broker.topic_config import TopicConfigManager

TOPIC = "PopTopic"
GROUP = GroupConfig("PopGroup")
INVISIBLE_MS = 10_000
DISPATCH_DEADLINE_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(pop_message, "_now_ms", lambda: c.now_ms)
    return c


def open_store(root: Path) -> DefaultMessageStore:
    store = DefaultMessageStore(
        MessageStoreConfig(
            store_path_root_dir=root / "store",
            mapped_file_size_commit_log_bytes=1024 * KIB,
            message_size_bytes_max=64 * KIB,
            mapped_file_size_consume_queue_entries=8_192,
            clean_resource_interval_ms=3_600_000,
        )
    )
    store.start()
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    s = open_store(tmp_path)
    yield s
    s.shutdown()


def put(store: DefaultMessageStore, count: int, queue_id: int = 0, tag: str = "") -> None:
    props = {"TAGS": tag} if tag else {}
    results = store.put_messages(
        [
            MessageExtBrokerInner(topic=TOPIC, body=b"m%d" % i, queue_id=queue_id, properties=props)
            for i in range(count)
        ]
    )
    assert all(r.ok for r in results), results
    assert store.wait_dispatched(DISPATCH_DEADLINE_S), "the store did not dispatch in time"


def service(store: DefaultMessageStore, root: Path) -> PopMessageService:
    config = root / "config"
    config.mkdir(exist_ok=True)
    return PopMessageService(store, TopicConfigManager(config, 1), config, MessageArrivalNotifier())


async def receive(
    pop: PopMessageService, batch: int = 32, queues: tuple[int, ...] = (0,)
) -> list[Delivery]:
    return await pop.receive(GROUP, TOPIC, queues, None, batch, INVISIBLE_MS, 0)


def offset_of(d: Delivery) -> int:
    return d.message.queue_offset


async def drain(pop: PopMessageService) -> list[Delivery]:
    """Everything a run of receives hands out until one comes back empty."""
    out: list[Delivery] = []
    while batch := await receive(pop):
        out += batch
    return out


def test_a_receive_hands_out_at_most_the_window_and_acks_open_it(
    store: DefaultMessageStore, tmp_path: Path, clock: Clock
) -> None:
    async def run() -> None:
        put(store, INFLIGHT_WINDOW_ENTRIES + 10)
        pop = service(store, tmp_path)
        first = await drain(pop)
        assert [offset_of(d) for d in first] == list(range(INFLIGHT_WINDOW_ENTRIES))
        assert pop.progress.inflight_count(GROUP.group_name, TOPIC, 0) == INFLIGHT_WINDOW_ENTRIES
        for d in first[5:10]:  # out of order: the window does not move
            pop.ack(GROUP.group_name, TOPIC, d.receipt_handle)
        assert await receive(pop) == []
        for d in first[:5]:  # the first five: the window moves by ten
            pop.ack(GROUP.group_name, TOPIC, d.receipt_handle)
        assert pop.progress.consume_offset(GROUP.group_name, TOPIC, 0) == 10
        more = await drain(pop)
        assert [offset_of(d) for d in more] == list(
            range(INFLIGHT_WINDOW_ENTRIES, INFLIGHT_WINDOW_ENTRIES + 10)
        )

    asyncio.run(run())


def test_expired_messages_come_back_oldest_first_with_the_next_attempt(
    store: DefaultMessageStore, tmp_path: Path, clock: Clock
) -> None:
    async def run() -> None:
        put(store, 6)
        pop = service(store, tmp_path)
        early = await receive(pop, batch=3)
        clock.now_ms += 1_000
        late = await receive(pop, batch=3)
        assert [offset_of(d) for d in early + late] == list(range(6))
        pop.ack(GROUP.group_name, TOPIC, early[1].receipt_handle)
        clock.now_ms += INVISIBLE_MS - 1_000  # the early ones expired, the late ones not yet
        again = await receive(pop)
        assert [(offset_of(d), d.attempt) for d in again] == [(0, 2), (2, 2)]
        # A handle of a message handed out again is stale; the new one is current.
        with pytest.raises(InvalidReceiptHandleError):
            pop.ack(GROUP.group_name, TOPIC, early[0].receipt_handle)
        pop.ack(GROUP.group_name, TOPIC, again[0].receipt_handle)
        # Expired but not yet handed out again: its handle still acks.
        clock.now_ms += 1_000
        pop.ack(GROUP.group_name, TOPIC, late[0].receipt_handle)
        assert [offset_of(d) for d in await receive(pop)] == [4, 5]

    asyncio.run(run())


def test_invisibility_changes_move_a_message_on_the_heap(
    store: DefaultMessageStore, tmp_path: Path, clock: Clock
) -> None:
    async def run() -> None:
        put(store, 2)
        pop = service(store, tmp_path)
        a, b = await receive(pop)
        longer = pop.change_invisible_duration(
            GROUP.group_name, TOPIC, a.receipt_handle, 5 * INVISIBLE_MS
        )
        clock.now_ms += INVISIBLE_MS  # b expired; a was made invisible for longer
        assert [offset_of(d) for d in await receive(pop)] == [offset_of(b)]
        now = pop.change_invisible_duration(GROUP.group_name, TOPIC, longer.receipt_handle, 0)
        [again] = await receive(pop)
        assert (offset_of(again), again.attempt) == (offset_of(a), 2)
        with pytest.raises(InvalidReceiptHandleError):
            pop.ack(GROUP.group_name, TOPIC, now.receipt_handle)

    asyncio.run(run())


def test_many_invisibility_changes_keep_the_heap_bounded(
    store: DefaultMessageStore, tmp_path: Path, clock: Clock
) -> None:
    async def run() -> None:
        put(store, 4)
        pop = service(store, tmp_path)
        handles = [d.receipt_handle for d in await receive(pop)]
        for i in range(5_000):
            k = i % len(handles)
            handles[k] = pop.change_invisible_duration(
                GROUP.group_name, TOPIC, handles[k], INVISIBLE_MS
            ).receipt_handle
        state = pop.progress.state(GROUP.group_name, TOPIC, 0)
        assert len(state.expiries) <= EXPIRY_HEAP_SLACK * len(handles) + EXPIRY_HEAP_FLOOR + 1
        clock.now_ms += INVISIBLE_MS
        assert sorted(offset_of(d) for d in await receive(pop)) == [0, 1, 2, 3]

    asyncio.run(run())


def test_out_of_order_acks_survive_a_restart_and_filtered_tags_count_as_done(
    tmp_path: Path, clock: Clock
) -> None:
    async def first_run(store: DefaultMessageStore) -> None:
        put(store, 3, tag="keep")
        put(store, 2, tag="skip")
        put(store, 3, tag="keep")
        pop = service(store, tmp_path)
        async with asyncio.TaskGroup() as group:
            await pop.start(BackgroundTasks(group))
            got = await pop.receive(GROUP, TOPIC, (0,), frozenset({"keep"}), 32, INVISIBLE_MS, 0)
            assert [offset_of(d) for d in got] == [0, 1, 2, 5, 6, 7]
            for d in got:
                if offset_of(d) % 2:
                    pop.ack(GROUP.group_name, TOPIC, d.receipt_handle)
            await pop.stop()

    async def second_run(store: DefaultMessageStore) -> None:
        pop = service(store, tmp_path)
        async with asyncio.TaskGroup() as group:
            await pop.start(BackgroundTasks(group))
            got = await drain(pop)  # in flight is forgotten; acked and filtered stay done
            assert [offset_of(d) for d in got] == [0, 2, 6]
            await pop.stop()

    store = open_store(tmp_path)
    try:
        asyncio.run(first_run(store))
    finally:
        store.shutdown()
    store = open_store(tmp_path)
    try:
        asyncio.run(second_run(store))
    finally:
        store.shutdown()


@pytest.mark.parametrize("orderly", [False, True])
def test_a_gap_of_blank_entries_does_not_hold_the_ack_offset(
    store: DefaultMessageStore, tmp_path: Path, clock: Clock, orderly: bool
) -> None:
    """A put beyond a queue's end (logged) fills the gap with blank entries, which hold no
    message: acking every message moves the ack offset past them."""

    async def run() -> None:
        put(store, 3)
        cq = store.consume_queue_store.find(TOPIC, 0)
        assert cq is not None
        last = cq.get(2)
        assert last is not None
        phy_offset, size, tag_code = last
        cq.put_message_position_info(phy_offset, size, tag_code, 10)  # blanks at 3..9
        group = GroupConfig("GapGroup", consume_message_orderly=orderly)
        pop = service(store, tmp_path)
        got = await pop.receive(group, TOPIC, (0,), None, 32, INVISIBLE_MS, 0)
        assert [offset_of(d) for d in got] == [0, 1, 2, 2]  # offset 10 points at message 2
        for d in got:
            pop.ack(group.group_name, TOPIC, d.receipt_handle)
        assert pop.progress.consume_offset(group.group_name, TOPIC, 0) == 11

    asyncio.run(run())


# -- the model --------------------------------------------------------------------------------
MODEL_MESSAGES = 40
MODEL_QUEUES = (0, 1)

step = st.one_of(
    st.tuples(st.just("receive"), st.integers(1, 8)),
    st.tuples(st.just("ack"), st.integers(0, 10_000)),
    st.tuples(st.just("change"), st.integers(0, 10_000), st.sampled_from([0, 500, 20_000])),
    st.tuples(st.just("tick"), st.sampled_from([100, 5_000, INVISIBLE_MS])),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, max_size=60))
def test_random_receives_acks_and_changes_keep_the_delivery_rules(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[object, ...]]
) -> None:
    """After every step: a message is never handed out while a handle of it is current and
    invisible, nor after it was acked; attempts count up by one. At the end, once every
    invisibility has run out, receives hand out exactly the messages never acked."""
    root = tmp_path_factory.mktemp("pop-model")
    store = open_store(root)
    clock = Clock()
    original = pop_message._now_ms
    pop_message._now_ms = lambda: clock.now_ms
    try:
        asyncio.run(_model_run(store, root, clock, steps))
    finally:
        pop_message._now_ms = original
        store.shutdown()


async def _model_run(
    store: DefaultMessageStore, root: Path, clock: Clock, steps: list[tuple[object, ...]]
) -> None:
    for q in MODEL_QUEUES:
        put(store, MODEL_MESSAGES // len(MODEL_QUEUES), queue_id=q)
    pop = service(store, root)
    group = GROUP.group_name
    current: dict[tuple[int, int], tuple[str, int]] = {}  # (queue, offset) -> (handle, until)
    attempts: dict[tuple[int, int], int] = {}
    acked: set[tuple[int, int]] = set()

    def key(d: Delivery) -> tuple[int, int]:
        return d.message.queue_id, d.message.queue_offset

    for kind, *values in steps:
        args = [int(v) for v in values if isinstance(v, int)]
        if kind == "receive":
            for d in await pop.receive(GROUP, TOPIC, MODEL_QUEUES, None, args[0], INVISIBLE_MS, 0):
                k = key(d)
                assert k not in acked, f"{k} handed out after its ack"
                held = current.get(k)
                assert held is None or held[1] <= clock.now_ms, f"{k} handed out while invisible"
                assert d.attempt == attempts.get(k, 0) + 1
                attempts[k] = d.attempt
                current[k] = (d.receipt_handle, d.invisible_until_ms)
        elif kind in ("ack", "change") and current:
            k = sorted(current)[args[0] % len(current)]
            handle = current[k][0]
            if kind == "ack":
                pop.ack(group, TOPIC, handle)
                acked.add(k)
                del current[k]
            else:
                d = pop.change_invisible_duration(group, TOPIC, handle, args[1])
                current[k] = (d.receipt_handle, d.invisible_until_ms)
        elif kind == "tick":
            clock.now_ms += args[0]
    clock.now_ms += 30_000  # every invisibility has run out
    rest: set[tuple[int, int]] = set()
    while batch := await pop.receive(GROUP, TOPIC, MODEL_QUEUES, None, 32, INVISIBLE_MS, 0):
        for d in batch:
            assert key(d) not in rest, f"{key(d)} handed out twice in the final drain"
            rest.add(key(d))
    every = {(q, o) for q in MODEL_QUEUES for o in range(MODEL_MESSAGES // len(MODEL_QUEUES))}
    assert rest == every - acked
