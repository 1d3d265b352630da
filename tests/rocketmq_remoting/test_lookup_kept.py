"""What one ``UniqKeyLookup`` keeps between lookups (sidecar/remoting/: pool.py, shared.py, the
route cache, the brokers' shared answers), against stand-in RocketMQ remoting servers: one
connection per address, reused, replaced when it failed, closed when idle; a copy found on the
kept route without asking the NameServer; "not found" never judged on a route older than the
lookup (a broker that joined since is asked, one that could not say asked again); a broker's
settings asked once per connection; its progress shared by lookups under way, never taken from
before a lookup began."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sidecar.message_id import MessageIdGenerator
from sidecar.remoting import UniqKeyLookup, UniqKeyLookupConfig, Verdict
from sidecar.remoting.lookup import parse_namesrv_addrs
from sidecar.remoting.shared import SharedAnswer
from tests.rocketmq_remoting.standin import (
    HeldMessage,
    RemotingCluster,
    StandInBroker,
    remoting_cluster,
)

TOPIC = "Orders"
IDS = MessageIdGenerator()
LOOKUP_TIMEOUT_MS = 1_500
CONDITION_DEADLINE_S = 10.0
CONCURRENT_LOOKUPS = 20


def run(
    held: list[HeldMessage],
    scenario: Callable[[RemotingCluster, UniqKeyLookup], Awaitable[None]],
    broker_names: tuple[str, ...] = ("broker-a",),
    connection_idle_max_ms: int = 60_000,
) -> None:
    async def main() -> None:
        async with remoting_cluster(lambda: held, broker_names) as cluster:
            config = UniqKeyLookupConfig(
                parse_namesrv_addrs(cluster.namesrv_addr),
                lookup_timeout_ms=LOOKUP_TIMEOUT_MS,
                connection_idle_max_ms=connection_idle_max_ms,
            )
            async with UniqKeyLookup(config) as lookup:
                await scenario(cluster, lookup)

    asyncio.run(main())


async def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + CONDITION_DEADLINE_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"not {what} in time"
        await asyncio.sleep(0.01)


async def verdict(lookup: UniqKeyLookup, message_id: str) -> Verdict:
    return (await lookup.lookup(TOPIC, message_id)).verdict


def test_lookups_share_one_connection_per_address() -> None:
    held = [HeldMessage(TOPIC, IDS.next_id(), broker_name=b) for b in ("broker-a", "broker-b")]

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        for m in held:
            assert await verdict(lookup, m.message_id) is Verdict.FOUND
        assert await verdict(lookup, IDS.next_id()) is Verdict.NOT_FOUND
        ids = [held[n % 2].message_id if n % 3 else IDS.next_id() for n in range(30)]
        results = await asyncio.gather(*(lookup.lookup(TOPIC, i) for i in ids))
        assert [r.verdict for r in results] == [
            Verdict.FOUND if n % 3 else Verdict.NOT_FOUND for n in range(30)
        ]
        for server in (cluster.namesrv, *cluster.brokers.values()):
            assert server.accepted == 1, f"{server.address}: one connection, kept"
        assert len(lookup.connected) == 3

    run(held, scenario, ("broker-a", "broker-b"))


def test_a_copy_is_found_on_the_kept_route_without_asking_the_namesrv() -> None:
    held = [HeldMessage(TOPIC, IDS.next_id(), queue_offset=n) for n in range(3)]

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        for m in held:
            result = await lookup.lookup(TOPIC, m.message_id)
            assert (result.verdict, result.queue_offset) == (Verdict.FOUND, m.queue_offset)
        assert cluster.namesrv.asked == [105], "the route asked once, then kept"

    run(held, scenario)


def test_not_found_on_a_kept_route_is_judged_on_a_route_asked_since() -> None:
    """A broker group that joined the topic after the route was kept holds the message: the kept
    route does not list it, and "not found" there would be wrong."""
    on_b = HeldMessage(TOPIC, IDS.next_id(), broker_name="broker-b", queue_offset=4)

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        assert await verdict(lookup, IDS.next_id()) is Verdict.NOT_FOUND  # the route kept
        joined = StandInBroker("broker-b", lambda: [on_b])
        await joined.start()
        try:
            cluster.brokers["broker-b"] = joined  # the stand-in NameServer routes to it now
            result = await lookup.lookup(TOPIC, on_b.message_id)
            assert (result.verdict, result.broker_name, result.queue_offset) == (
                Verdict.FOUND, "broker-b", 4,
            )  # fmt: skip
            assert cluster.namesrv.asked == [105, 105], "asked again after a miss"
            assert await verdict(lookup, IDS.next_id()) is Verdict.NOT_FOUND
            assert joined.asked.count(12) == 6, "the new broker asked by both lookups"
        finally:
            await joined.stop()

    run([], scenario)


def test_a_broker_that_could_not_say_on_the_kept_route_is_asked_again() -> None:
    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        broker = cluster.brokers["broker-a"]
        assert await verdict(lookup, IDS.next_id()) is Verdict.NOT_FOUND  # the route kept
        broker.fail_next = 1  # the next lookup's first request: where the commitlog ends
        assert await verdict(lookup, IDS.next_id()) is Verdict.NOT_FOUND
        assert broker.asked.count(28) == 3, "asked again with the route asked since"

    run([], scenario)


def test_a_namesrv_gone_leaves_copies_found_and_not_found_unknown() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        assert await verdict(lookup, m.message_id) is Verdict.FOUND
        await cluster.namesrv.stop()
        assert await verdict(lookup, m.message_id) is Verdict.FOUND, "on the kept route"
        missing = await lookup.lookup(TOPIC, IDS.next_id())
        assert missing.verdict is Verdict.UNKNOWN
        assert "no route" in missing.reason

    run([m], scenario)


def test_a_connection_the_broker_closed_is_opened_again() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        broker = cluster.brokers["broker-a"]
        assert await verdict(lookup, m.message_id) is Verdict.FOUND
        await broker.stop()
        await eventually(lambda: len(lookup.connected) == 1, "the closed connection dropped")
        await broker.start()  # a restart, on the same port
        assert await verdict(lookup, m.message_id) is Verdict.FOUND
        assert broker.accepted == 2
        assert broker.asked.count(26) == 2, "its settings asked again on the new connection"

    run([m], scenario)


def test_a_connection_silent_past_a_deadline_is_not_used_again() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        broker = cluster.brokers["broker-a"]
        broker.hang = True
        assert await verdict(lookup, m.message_id) is Verdict.UNKNOWN
        broker.hang = False
        assert await verdict(lookup, m.message_id) is Verdict.FOUND
        assert broker.accepted == 2, "a new connection after the silent one"

    run([m], scenario)


def test_idle_connections_are_closed() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        broker = cluster.brokers["broker-a"]
        assert await verdict(lookup, m.message_id) is Verdict.FOUND
        await eventually(lambda: lookup.connected == (), "idle connections closed")
        await eventually(
            lambda: cluster.namesrv.open_connections + broker.open_connections == 0,
            "the servers' ends closed",
        )
        assert await verdict(lookup, m.message_id) is Verdict.FOUND
        assert (cluster.namesrv.accepted, broker.accepted) == (1, 2), "the kept route used"

    run([m], scenario, connection_idle_max_ms=100)


def test_settings_are_asked_once_and_progress_once_per_lookup() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        broker = cluster.brokers["broker-a"]
        for _ in range(3):
            assert await verdict(lookup, m.message_id) is Verdict.FOUND
        assert broker.asked.count(26) == 1, "messageIndexEnable kept"
        assert broker.asked.count(28) == 3, "where the commitlog ends: asked since each began"

    run([m], scenario)


def test_lookups_under_way_share_the_route_and_the_progress() -> None:
    held = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster, lookup: UniqKeyLookup) -> None:
        ids = [held.message_id if n % 2 else IDS.next_id() for n in range(CONCURRENT_LOOKUPS)]
        results = await asyncio.gather(*(lookup.lookup(TOPIC, i) for i in ids))
        assert [r.verdict for r in results] == [
            Verdict.FOUND if n % 2 else Verdict.NOT_FOUND for n in range(CONCURRENT_LOOKUPS)
        ]
        broker = cluster.brokers["broker-a"]
        assert broker.asked.count(12) == 3 * CONCURRENT_LOOKUPS
        assert broker.asked.count(28) == 1, "one progress request for the lookups under way"
        assert broker.asked.count(26) == 1
        # The first route went out after the first lookup began, before the others did: those
        # that found nothing ask for one again, together.
        assert cluster.namesrv.asked.count(105) <= 2

    run([held], scenario)


def test_a_shared_answer_is_never_one_asked_before_not_before() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        shared: SharedAnswer[int] = SharedAnswer()
        asked: list[int] = []
        release = asyncio.Event()

        async def ask() -> int:
            asked.append(len(asked))
            await release.wait()
            return len(asked)

        deadline = loop.time() + CONDITION_DEADLINE_S
        first = loop.create_task(shared.get(ask, loop.time(), deadline))
        await eventually(lambda: asked == [0], "the first request under way")
        later = loop.time()
        joined = loop.create_task(shared.get(ask, later - 1, deadline))
        fresh = loop.create_task(shared.get(ask, later, deadline))
        await eventually(lambda: asked == [0, 1], "a second request for the later one")
        release.set()
        (a, a_at), (j, j_at), (f, f_at) = await asyncio.gather(first, joined, fresh)
        assert (a, j, f) == (2, 2, 2)
        assert a_at == j_at < later <= f_at
        assert await shared.get(ask, later, deadline) == (f, f_at), "the last answer kept"

        async def fails() -> int:
            raise TimeoutError("no answer")

        with pytest.raises(TimeoutError):
            await shared.get(fails, loop.time(), deadline)
        assert await shared.get(ask, f_at, deadline) == (f, f_at), "a failure is not kept"

    asyncio.run(main())
