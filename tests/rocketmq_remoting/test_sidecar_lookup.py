"""A real ``rocketbox sidecar`` process with ``--lookup-namesrv``, sending to an
``apache.rocketmq.v2`` endpoint without rocketbox's index lookup (a scripted broker serving
MessagingService alone, as a RocketMQ 5 proxy does), beside stand-in RocketMQ remoting servers
that hold what that broker stored:

- outbox entries that may already be stored: the one the brokers hold is settled by the lookup
  and not sent again (stored once); the one they do not hold is sent (stored once);
- with the NameServer unreachable the lookup cannot say, and the entry is resent unchecked:
  the message the broker held is stored a second time (at least once), and the log says why;
- the same with the stand-in RocketMQ 5 proxy (tests/rocketmq_proxy) as the v2 endpoint, its
  two brokers' messages held by two stand-in remoting brokers: each message stored once;
- ``--lookup-namesrv`` (and its variable) reaches the producer's configuration; a bad value is
  refused naming the address at fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from outbox.entry import OutboxEntry, OutboxMessage, SpoolCause
from outbox.factory import open_outbox
from rocketbox.cli import main
from rocketbox.envvars import commands_of
from sidecar.channels import Endpoint
from sidecar.clock import now_ms
from sidecar.message_id import MessageIdGenerator
from sidecar.producer import Producer, ProducerConfig
from sidecar.remoting import UniqKeyLookupConfig
from tests.rocketbox_process import wait_until
from tests.rocketmq_proxy import RocketMQProxy, rocketmq_proxy
from tests.rocketmq_proxy.sidecar_support import wait_stored_once
from tests.rocketmq_remoting.proxy_source import HeldByProxy
from tests.rocketmq_remoting.scripted import HeldByScripted, proxy_like_broker
from tests.rocketmq_remoting.standin import RemotingCluster, remoting_cluster
from tests.sidecar.scripted_broker import BROKER_NAME, ScriptedBroker
from tests.sidecar.sidecar_process import SidecarProcess

pytestmark = pytest.mark.slow
TOPIC = "Orders"
DELIVERY_DEADLINE_S = 30.0
IDS = MessageIdGenerator()


def spool_maybe_stored(outbox_url: str, messages: list[OutboxMessage]) -> None:
    """Entries whose sends were ambiguous, as a sidecar that died mid-send leaves them."""
    with open_outbox(outbox_url) as outbox:
        outbox.put([
            OutboxEntry(m, SpoolCause.AMBIGUOUS, created_ms=now_ms(), next_send_time_ms=0,
                        maybe_stored=True, last_error="AMBIGUOUS: DEADLINE_EXCEEDED")
            for m in messages
        ])  # fmt: skip


async def store_directly(broker: ScriptedBroker, m: OutboxMessage) -> None:
    producer = Producer(ProducerConfig(access_points=(broker.endpoint,)))
    try:
        await producer.send(m)
    finally:
        await producer.close()


def delivered(outbox_url: str, message_id: str) -> OutboxEntry:
    with open_outbox(outbox_url) as outbox:
        entry = outbox.get(message_id)
    assert entry is not None
    assert entry.receipt is not None, f"{message_id} marked delivered"
    return entry


def message(n: int) -> OutboxMessage:
    return OutboxMessage(topic=TOPIC, body=f"order {n}".encode(), message_id=IDS.next_id())


async def run_sidecar_until(
    broker: ScriptedBroker,
    cluster: RemotingCluster,
    outbox_url: str,
    done: Callable[[str], bool],
    what: str,
) -> str:
    """A sidecar over the outbox until ``done(its output)``; its output."""
    sidecar = await asyncio.to_thread(
        SidecarProcess, str(broker.endpoint), outbox_url, "--lookup-namesrv", cluster.namesrv_addr
    )
    try:
        await asyncio.to_thread(
            wait_until, lambda: done(sidecar.output()), DELIVERY_DEADLINE_S, what
        )
    finally:
        await asyncio.to_thread(sidecar.stop)
    return sidecar.output()


def test_a_maybe_stored_entry_the_cluster_holds_is_not_resent_and_one_it_lacks_is(
    tmp_path: Path,
) -> None:
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    held, lacking = message(1), message(2)

    async def main() -> None:
        async with (
            proxy_like_broker() as broker,
            remoting_cluster(HeldByScripted(broker)) as cluster,
        ):
            await store_directly(broker, held)
            spool_maybe_stored(outbox_url, [held, lacking])
            await run_sidecar_until(
                broker, cluster, outbox_url,
                lambda output: "was already stored; not resent" in output
                and lacking.message_id in broker.store_log,
                "the held message found, the lacking one resent",
            )  # fmt: skip
            assert broker.store_log.count(held.message_id) == 1, "not resent: stored once"
            assert broker.store_log.count(lacking.message_id) == 1
            assert 12 in cluster.brokers[BROKER_NAME].asked, "the broker was asked"

    asyncio.run(main())
    stored = delivered(outbox_url, held.message_id).receipt
    assert stored is not None
    assert stored.queue_offset == 0, "the receipt is where the cluster holds it"
    delivered(outbox_url, lacking.message_id)


def test_without_an_answer_from_the_cluster_the_entry_is_resent_unchecked(
    tmp_path: Path,
) -> None:
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    held = message(1)

    async def main() -> None:
        async with (
            proxy_like_broker() as broker,
            remoting_cluster(HeldByScripted(broker)) as cluster,
        ):
            await store_directly(broker, held)
            spool_maybe_stored(outbox_url, [held])
            await cluster.namesrv.stop()
            output = await run_sidecar_until(
                broker, cluster, outbox_url,
                lambda _: broker.store_log.count(held.message_id) == 2,
                "the held message resent unchecked: at least once",
            )  # fmt: skip
            assert "RocketMQ's index could not say whether" in output

    asyncio.run(main())
    delivered(outbox_url, held.message_id)


def test_against_the_stand_in_proxy_each_maybe_stored_message_is_stored_once(
    tmp_path: Path,
) -> None:
    """The v2 endpoint is the stand-in RocketMQ 5 proxy (its own process, two brokers behind
    it); the stand-in remoting brokers hold what it stored, each on the broker it chose."""
    # The proxy takes its write queues in turn, four a broker: eight reach both brokers.
    held = [message(n) for n in range(8)]
    lacking = [message(n) for n in range(8, 12)]
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"

    async def main(proxy: RocketMQProxy) -> None:
        async with remoting_cluster(HeldByProxy(proxy), ("broker-a", "broker-b")) as cluster:
            producer = Producer(ProducerConfig(access_points=(Endpoint.parse(proxy.endpoint),)))
            try:
                for m in held:
                    await producer.send(m)
            finally:
                await producer.close()
            assert {m.broker_name for m in proxy.stored(TOPIC)} == {"broker-a", "broker-b"}
            spool_maybe_stored(outbox_url, held + lacking)
            sidecar = await asyncio.to_thread(
                SidecarProcess, proxy.endpoint, outbox_url, "--lookup-namesrv",
                cluster.namesrv_addr,
            )  # fmt: skip
            try:
                await asyncio.to_thread(
                    wait_stored_once, proxy, TOPIC, [m.message_id for m in held + lacking]
                )
                await asyncio.to_thread(
                    wait_until,
                    lambda: sidecar.output().count("was already stored; not resent") == len(held),
                    DELIVERY_DEADLINE_S, "every held message settled by the lookup",
                )  # fmt: skip
            finally:
                await asyncio.to_thread(sidecar.stop)

    with rocketmq_proxy(tmp_path / "proxy", [TOPIC]) as proxy:
        asyncio.run(main(proxy))
    for m in held + lacking:
        delivered(outbox_url, m.message_id)


def test_lookup_namesrv_and_its_variable_are_parsed_and_a_bad_one_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = ["sidecar", "--broker", "127.0.0.1:8081", "--outbox", "memory://"]
    sidecar = commands_of(main)["sidecar"]

    def parsed(*args: str) -> UniqKeyLookupConfig | None:
        root = main.make_context("rocketbox", [*base, *args])
        params = sidecar.make_context("sidecar", [*base[1:], *args], parent=root).params
        lookup: UniqKeyLookupConfig | None = params["uniq_key_lookup"]
        return lookup

    assert parsed() is None
    lookup = parsed("--lookup-namesrv", "ns1:9876;ns2:9876")
    assert lookup is not None
    assert lookup.namesrv == (Endpoint("ns1", 9876), Endpoint("ns2", 9876))
    monkeypatch.setenv("ROCKETBOX_SIDECAR_LOOKUP_NAMESRV", "ns3:9876")
    from_env = parsed()
    assert from_env is not None
    assert from_env.namesrv == (Endpoint("ns3", 9876),)
    with pytest.raises(click.BadParameter, match="'ns2': expected HOST:PORT") as refused:
        parsed("--lookup-namesrv", "ns1:9876;ns2")
    assert refused.value.param is not None
    assert refused.value.param.name == "uniq_key_lookup"
