"""The sidecar's lookup by unique key (sidecar/remoting/lookup.py) against stand-in RocketMQ
remoting servers (standin.py): FOUND only for a record of the message's own id and topic;
NOT_FOUND only when every broker of the route was asked and answered with an index that had
caught up; UNKNOWN, never NOT_FOUND, for every failure on the way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from rocketbox_api.credentials import Credentials
from sidecar.channels import Endpoint
from sidecar.message_id import EPOCH_2021_S, MessageIdGenerator
from sidecar.remoting.lookup import (
    LookupResult,
    UniqKeyLookupConfig,
    Verdict,
    lookup_by_uniq_key,
    parse_namesrv_addrs,
)
from tests.rocketmq_remoting.standin import (
    HeldMessage,
    RemotingCluster,
    StandInNamesrv,
    remoting_cluster,
)
from tests.rocketmq_remoting.wire import ROCKETMQ

TOPIC = "Orders"
IDS = MessageIdGenerator()
# Short, so that a hanging or stuck broker ends a test soon; long for any answer of this machine.
LOOKUP_TIMEOUT_MS = 1_500
SYSTEM_ERROR = 1


def run(
    held: list[HeldMessage],
    scenario: Callable[[RemotingCluster], Awaitable[None]],
    broker_names: tuple[str, ...] = ("broker-a",),
) -> None:
    async def main() -> None:
        async with remoting_cluster(lambda: held, broker_names) as cluster:
            await scenario(cluster)

    asyncio.run(main())


async def lookup(
    cluster: RemotingCluster,
    message_id: str,
    topic: str = TOPIC,
    credentials: Credentials | None = None,
    namesrv: str | None = None,
) -> LookupResult:
    config = UniqKeyLookupConfig(
        parse_namesrv_addrs(namesrv or cluster.namesrv_addr), lookup_timeout_ms=LOOKUP_TIMEOUT_MS
    )
    return await lookup_by_uniq_key(config, topic, message_id, credentials)


def test_a_held_message_is_found_where_it_was_stored() -> None:
    m = HeldMessage(TOPIC, IDS.next_id(), queue_id=2, queue_offset=41)

    async def scenario(cluster: RemotingCluster) -> None:
        result = await lookup(cluster, m.message_id)
        assert (result.verdict, result.broker_name, result.queue_id, result.queue_offset) == (
            Verdict.FOUND, "broker-a", 2, 41,
        )  # fmt: skip
        assert cluster.namesrv.asked == [105]
        assert sorted(cluster.brokers["broker-a"].asked) == [12, 12, 12, 26, 28]

    run([m], scenario)


def test_a_message_no_broker_holds_is_not_found() -> None:
    async def scenario(cluster: RemotingCluster) -> None:
        assert (await lookup(cluster, IDS.next_id())).verdict is Verdict.NOT_FOUND

    run([HeldMessage(TOPIC, IDS.next_id())], scenario, ("broker-a", "broker-b"))


def test_a_message_is_found_on_the_second_broker_of_the_route() -> None:
    m = HeldMessage(TOPIC, IDS.next_id(), broker_name="broker-b", queue_offset=7)

    async def scenario(cluster: RemotingCluster) -> None:
        result = await lookup(cluster, m.message_id)
        assert (result.verdict, result.broker_name, result.queue_offset) == (
            Verdict.FOUND, "broker-b", 7,
        )  # fmt: skip

    run([m], scenario, ("broker-a", "broker-b"))


def test_the_same_id_in_another_topic_is_not_this_message() -> None:
    m = HeldMessage("Payments", IDS.next_id())

    async def scenario(cluster: RemotingCluster) -> None:
        cluster.brokers["broker-a"].collide = True  # the index hands back Payments' record too
        assert (await lookup(cluster, m.message_id)).verdict is Verdict.NOT_FOUND

    run([m], scenario)


def test_records_of_colliding_keys_are_not_taken_for_the_message() -> None:
    others = [HeldMessage(TOPIC, IDS.next_id(), queue_offset=n) for n in range(3)]
    wanted = HeldMessage(TOPIC, IDS.next_id(), queue_offset=3)

    async def scenario(cluster: RemotingCluster) -> None:
        cluster.brokers["broker-a"].collide = True
        assert (await lookup(cluster, IDS.next_id())).verdict is Verdict.NOT_FOUND
        result = await lookup(cluster, wanted.message_id)
        assert (result.verdict, result.queue_offset) == (Verdict.FOUND, 3)

    run([*others, wanted], scenario)


def test_a_delayed_message_waiting_under_the_timer_topic_is_found() -> None:
    m = HeldMessage(TOPIC, IDS.next_id(), queue_id=3, waiting=True)

    async def scenario(cluster: RemotingCluster) -> None:
        result = await lookup(cluster, m.message_id)
        assert (result.verdict, result.queue_id, result.queue_offset) == (Verdict.FOUND, 3, -1)
        assert (await lookup(cluster, m.message_id, topic="Other")).verdict is Verdict.NOT_FOUND

    run([m], scenario)


def test_the_time_range_covers_an_index_time_kept_in_whole_seconds() -> None:
    """With no clock skew allowed, a message stored in the same second as its id was stamped,
    whose index time (whole seconds after the index file's first record) is before the stamp,
    is found all the same."""
    stamped_s = int(time.time()) - 10
    message_id = f"01{'AB' * 6}0102{stamped_s - EPOCH_2021_S:08X}{1:08X}"
    first = HeldMessage(TOPIC, IDS.next_id(), store_timestamp_ms=stamped_s * 1000 - 300)
    m = HeldMessage(TOPIC, message_id, queue_offset=1, store_timestamp_ms=stamped_s * 1000 + 500)

    async def scenario(cluster: RemotingCluster) -> None:
        config = UniqKeyLookupConfig(
            parse_namesrv_addrs(cluster.namesrv_addr), LOOKUP_TIMEOUT_MS, clock_skew_max_ms=0
        )
        result = await lookup_by_uniq_key(config, TOPIC, m.message_id)
        assert (result.verdict, result.queue_offset) == (Verdict.FOUND, 1)

    run([first, m], scenario)


def test_a_lookup_waits_for_the_index_to_catch_up_with_the_commitlog() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster) -> None:
        broker = cluster.brokers["broker-a"]
        broker.undispatched = 2  # stored, not yet in the index
        assert (await lookup(cluster, m.message_id)).verdict is Verdict.FOUND
        assert broker.asked.count(28) == 3, "asked until the dispatcher was past the end"

    run([HeldMessage(TOPIC, IDS.next_id()), m], scenario)


def test_an_index_that_never_catches_up_answers_unknown_not_not_found() -> None:
    indexed, behind = HeldMessage(TOPIC, IDS.next_id()), HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster) -> None:
        broker = cluster.brokers["broker-a"]
        broker.undispatched, broker.dispatch_stuck = 1, True
        result = await lookup(cluster, behind.message_id)
        assert result.verdict is Verdict.UNKNOWN
        assert "the index stayed" in result.reason
        assert (await lookup(cluster, indexed.message_id)).verdict is Verdict.FOUND, (
            "what the index holds is found all the same"
        )

    run([indexed, behind], scenario)


@pytest.mark.parametrize("refusal", ["config", "runtime info", "timer topic", "schedule topic"])
def test_a_refused_question_leaves_found_standing_and_not_found_unknown(refusal: str) -> None:
    m = HeldMessage(TOPIC, IDS.next_id(), queue_offset=9)

    async def scenario(cluster: RemotingCluster) -> None:
        broker = cluster.brokers["broker-a"]
        if refusal == "config":
            broker.refused_codes.add(26)
        elif refusal == "runtime info":
            broker.refused_codes.add(28)
        else:
            broker.refused_topics.add(
                "rmq_sys_wheel_timer" if refusal == "timer topic" else "SCHEDULE_TOPIC_XXXX"
            )
        found = await lookup(cluster, m.message_id)
        assert (found.verdict, found.queue_offset) == (Verdict.FOUND, 9)
        missing = await lookup(cluster, IDS.next_id())
        assert missing.verdict is Verdict.UNKNOWN
        assert "code 16" in missing.reason

    run([m], scenario)


def test_a_broker_without_an_index_answers_unknown() -> None:
    async def scenario(cluster: RemotingCluster) -> None:
        cluster.brokers["broker-a"].index_enabled = False
        result = await lookup(cluster, IDS.next_id())
        assert result.verdict is Verdict.UNKNOWN
        assert "messageIndexEnable" in result.reason

    run([], scenario)


@pytest.mark.parametrize("fault", ["stopped", "error", "hang", "masterless"])
def test_one_broker_that_does_not_answer_makes_not_found_unknown(fault: str) -> None:
    on_a = HeldMessage(TOPIC, IDS.next_id(), broker_name="broker-a")

    async def scenario(cluster: RemotingCluster) -> None:
        broker_b = cluster.brokers["broker-b"]
        if fault == "stopped":
            await broker_b.stop()
        elif fault == "error":
            broker_b.answer_code = SYSTEM_ERROR
        elif fault == "hang":
            broker_b.hang = True
        else:
            cluster.namesrv.masterless.add("broker-b")
        result = await lookup(cluster, IDS.next_id())
        assert result.verdict is Verdict.UNKNOWN
        assert "broker-b" in result.reason
        assert (await lookup(cluster, on_a.message_id)).verdict is Verdict.FOUND

    run([on_a], scenario, ("broker-a", "broker-b"))


@pytest.mark.parametrize("fault", ["stopped", "error", "hang", "no-route"])
def test_a_namesrv_that_does_not_answer_makes_the_lookup_unknown(fault: str) -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster) -> None:
        namesrv = cluster.namesrv
        if fault == "stopped":
            await namesrv.stop()
        elif fault == "error":
            namesrv.answer_code = SYSTEM_ERROR
        elif fault == "hang":
            namesrv.hang = True
        else:
            namesrv.topics = {"Elsewhere"}
        assert (await lookup(cluster, m.message_id)).verdict is Verdict.UNKNOWN
        assert cluster.brokers["broker-a"].asked == [], "no route, no broker asked"

    run([m], scenario)


def test_one_namesrv_answering_of_two_is_enough() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())

    async def scenario(cluster: RemotingCluster) -> None:
        second = StandInNamesrv(cluster.brokers)
        await second.start()
        try:
            await cluster.namesrv.stop()
            both = f"{cluster.namesrv_addr};{second.address}"
            assert (await lookup(cluster, m.message_id, namesrv=both)).verdict is Verdict.FOUND
        finally:
            await second.stop()

    run([m], scenario)


def test_a_namesrv_writing_fastjson_keys_and_a_broker_answering_binary_headers() -> None:
    m = HeldMessage(TOPIC, IDS.next_id(), queue_offset=5)

    async def scenario(cluster: RemotingCluster) -> None:
        cluster.namesrv.fastjson_keys = True
        cluster.namesrv.serialization = ROCKETMQ
        cluster.brokers["broker-a"].serialization = ROCKETMQ
        result = await lookup(cluster, m.message_id)
        assert (result.verdict, result.queue_offset) == (Verdict.FOUND, 5)
        assert (await lookup(cluster, IDS.next_id())).verdict is Verdict.NOT_FOUND

    run([m], scenario)


def test_a_cluster_with_authentication_takes_signed_requests_only() -> None:
    m = HeldMessage(TOPIC, IDS.next_id())
    credentials = Credentials("sidecar", "secret-of-the-sidecar")

    async def scenario(cluster: RemotingCluster) -> None:
        for server in (cluster.namesrv, *cluster.brokers.values()):
            server.credentials = credentials
        assert (await lookup(cluster, m.message_id)).verdict is Verdict.UNKNOWN
        wrong = Credentials("sidecar", "not-the-secret")
        assert (await lookup(cluster, m.message_id, credentials=wrong)).verdict is Verdict.UNKNOWN
        signed = await lookup(cluster, m.message_id, credentials=credentials)
        assert signed.verdict is Verdict.FOUND

    run([m], scenario)


def test_bad_settings_are_refused_naming_the_field_and_limit() -> None:
    with pytest.raises(ValueError, match="1 to 16 NameServers"):
        parse_namesrv_addrs(";".join(f"ns{n}:9876" for n in range(17)))
    with pytest.raises(ValueError, match="1 to 16 NameServers"):
        parse_namesrv_addrs(" ; ")
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_namesrv_addrs("ns1:9876;ns2")
    assert parse_namesrv_addrs("ns1:9876; ns2:9877") == (
        Endpoint("ns1", 9876), Endpoint("ns2", 9877),
    )  # fmt: skip
    with pytest.raises(ValueError, match="lookup_timeout_ms must be >= 1"):
        UniqKeyLookupConfig((Endpoint("ns", 9876),), lookup_timeout_ms=0)
    with pytest.raises(ValueError, match="clock_skew_max_ms must be >= 0"):
        UniqKeyLookupConfig((Endpoint("ns", 9876),), clock_skew_max_ms=-1)
