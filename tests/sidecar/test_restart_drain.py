"""A sidecar that dies holding leases, restarted on its own outbox, with a real broker and real
sidecars on each durable backend (RocksDB, Redis, MySQL):

- SIGKILLed mid-drain of a spooled backlog, it leaves entries claimed with no outcome recorded
  (asserted: the kill did land mid-drain); restarted with the same --sidecar-id and a lease far
  longer than the test, it drains the rest without waiting out those leases (the deadline is a
  twentieth of the lease), and every message is in the broker exactly once: copies counted by
  message id in the commitlog;
- the precise case behind the duplicates: entries a dead run claimed and had already sent, but
  never marked delivered, are found in the broker's index and not sent again, while those it
  had not sent are sent, once each;
- that index check finds a message the broker acknowledged a moment before: the broker's
  lookup waits for its dispatcher (without the wait, about a third of such lookups missed).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import grpc
import pytest

from broker.store.codec.scan import ScanEndKind, SegmentScanner
from outbox import EntryState, OutboxEntry, OutboxMessage, SpoolCause, open_outbox
from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.channels import Endpoint
from sidecar.clock import now_ms
from sidecar.message_id import MessageIdGenerator
from sidecar.producer import Producer, ProducerConfig
from tests.broker.broker_process import BrokerProcess, small_store_config, wait_until
from tests.outbox.conftest import backend_url
from tests.prometheus import metrics_port, scrape, series
from tests.sidecar.sidecar_process import (
    CALL_DEADLINE_S,
    SidecarProcess,
    message,
    outcome,
    set_flow_control,
    stored_copies,
)

pytestmark = pytest.mark.slow

TOPIC = "Orders"
SIDECAR_ID = "restart-test"
# Far longer than the test: a drain that waited for the dead run's leases would time out.
LEASE_MS = 600_000
DRAIN_DEADLINE_S = LEASE_MS / 1000 / 20
BACKLOG = 3_000
BATCH = 500
# Killed once this many are stored: well into the drain, well before its end.
KILL_AT_STORED = BACKLOG // 10
METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
SIDECAR_ARGS = (
    f"--sidecar-id={SIDECAR_ID}",
    f"--lease-ms={LEASE_MS}",
    "--metrics-listen=127.0.0.1:0",
    "--outbox-stats-interval-ms=100",
)
SCAN_BATCH_MAX = 65_536
DURABLE_BACKENDS = ["rocksdb", "redis", "mysql"]


def stored_in_topic(broker_endpoint: str) -> int:
    """Messages the broker holds in TOPIC (0 before its first)."""
    with grpc.insecure_channel(broker_endpoint) as channel:
        stub = broker_admin_pb2_grpc.BrokerAdminStub(channel)
        try:
            described = stub.DescribeTopic(
                broker_admin_pb2.DescribeTopicRequest(topic=TOPIC), timeout=CALL_DEADLINE_S
            )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return 0
            raise
    return sum(q.max_queue_offset - q.min_queue_offset for q in described.queues)


def commitlog_copies(broker: BrokerProcess) -> Counter[str]:
    """Copies of each message id in the stopped broker's commitlog, every record read."""
    copies: Counter[str] = Counter()
    for segment in sorted(small_store_config(broker.data_dir).store_path_commit_log.iterdir()):
        data = segment.read_bytes()
        scanner = SegmentScanner(data, int(segment.name), len(data))
        for columns in scanner.batches(SCAN_BATCH_MAX):
            copies.update(i for i in columns.message_id.tolist() if i is not None)
        assert scanner.end is not None
        assert scanner.end.kind != ScanEndKind.CORRUPT, scanner.end
    return copies


def pending_gauge(sidecar: SidecarProcess) -> float | None:
    """The restarted sidecar's PENDING outbox gauge; None before its first stats pass."""
    found = series(scrape(metrics_port(sidecar.output(), METRICS_LINE)), "rocketbox_outbox_entries",
                   state="PENDING")  # fmt: skip
    return sum(found.values()) if found else None


def spool_backlog(sidecar: SidecarProcess) -> list[str]:
    """BACKLOG messages, every one SPOOLED (the broker's flow control is on)."""
    ids: list[str] = []
    with sidecar.client() as stub:
        for start in range(0, BACKLOG, BATCH):
            batch = [message(TOPIC, f"m{n}".encode()) for n in range(start, start + BATCH)]
            response: api.SendBatchResponse = stub.SendBatch(
                api.SendBatchRequest(messages=batch), timeout=CALL_DEADLINE_S
            )
            assert {outcome(r) for r in response.results} == {"spooled"}
            ids += [r.message_id for r in response.results]
    return ids


def read_only(url: str) -> str:
    """``url`` to read beside a holder (RocksDB); Redis and MySQL are shared anyway."""
    if not url.startswith("rocksdb:"):
        return url
    return f"{url}{'&' if '?' in url else '?'}read_only=true"


def leased_by_dead_run(url: str) -> list[OutboxEntry]:
    with open_outbox(read_only(url)) as outbox:
        return [
            e
            for e in outbox.scan_all(EntryState.PENDING)
            if (e.lease_owner or "").startswith(f"{SIDECAR_ID}/")
        ]


@pytest.mark.slow
@pytest.mark.parametrize("backend", DURABLE_BACKENDS)
def test_a_sidecar_killed_mid_drain_and_restarted_stores_each_message_once(
    broker: BrokerProcess, tmp_path: Path, backend: str
) -> None:
    with backend_url(backend, tmp_path) as url:
        set_flow_control(broker.endpoint, True)
        sidecar = SidecarProcess(broker.endpoint, url, *SIDECAR_ARGS)
        try:
            ids = spool_backlog(sidecar)
            set_flow_control(broker.endpoint, False)
            wait_until(
                lambda: stored_in_topic(broker.endpoint) >= KILL_AT_STORED,
                DRAIN_DEADLINE_S, "the drain to get going",
            )  # fmt: skip
        finally:
            sidecar.kill()
        stored_at_kill = stored_in_topic(broker.endpoint)
        assert stored_at_kill < BACKLOG, "the kill came after the drain: nothing was left"
        left = leased_by_dead_run(url)
        assert left, "the kill left no claimed entry: it did not land mid-drain"

        restarted = SidecarProcess(broker.endpoint, url, *SIDECAR_ARGS)
        try:
            wait_until(
                lambda: pending_gauge(restarted) == 0
                and stored_in_topic(broker.endpoint) >= BACKLOG,
                DRAIN_DEADLINE_S, "the restarted sidecar to drain the rest",
            )  # fmt: skip
        finally:
            restarted.stop()
        assert f"ended {len(left)} outbox leases an earlier run of {SIDECAR_ID} left" in (
            restarted.output()
        ), restarted.output()
        broker.stop()
        copies = commitlog_copies(broker)
        wrong = {i: copies[i] for i in ids if copies[i] != 1}
        assert not wrong, (
            f"{len(wrong)} of {BACKLOG} not stored exactly once (killed with {stored_at_kill} "
            f"stored and {len(left)} claimed, {sum(copies[e.message_id] > 0 for e in left)} of "
            f"those stored in the end): {dict(list(wrong.items())[:10])}"
        )
        assert sum(copies.values()) == BACKLOG


def send_directly(broker_endpoint: str, messages: list[OutboxMessage]) -> None:
    """What the dead run did before it was killed: these went to the broker."""

    async def send() -> None:
        host, port = broker_endpoint.rsplit(":", 1)
        producer = Producer(ProducerConfig(access_points=(Endpoint(host, int(port)),)))
        try:
            for m in messages:
                await producer.send(m)
        finally:
            await producer.close()

    asyncio.run(send())


@pytest.mark.slow
@pytest.mark.parametrize("backend", DURABLE_BACKENDS)
def test_entries_a_dead_run_sent_but_never_marked_are_not_sent_again(
    broker: BrokerProcess, tmp_path: Path, backend: str
) -> None:
    ids = MessageIdGenerator()
    messages = [OutboxMessage(TOPIC, f"d{n}".encode(), ids.next_id()) for n in range(20)]
    with backend_url(backend, tmp_path) as url:
        with open_outbox(url) as outbox:
            start_ms = now_ms()
            outbox.put(
                [OutboxEntry(m, SpoolCause.UNAVAILABLE, start_ms, start_ms) for m in messages]
            )
            dead_run = f"{SIDECAR_ID}/0123456789ab"
            assert len(outbox.claim_due(now_ms(), 100, LEASE_MS, dead_run)) == len(messages)
        sent, unsent = messages[:10], messages[10:]
        send_directly(broker.endpoint, sent)

        sidecar = SidecarProcess(broker.endpoint, url, f"--sidecar-id={SIDECAR_ID}",
                                 f"--lease-ms={LEASE_MS}")  # fmt: skip
        try:
            wait_until(
                lambda: all(stored_copies(broker.endpoint, m.message_id) for m in unsent),
                DRAIN_DEADLINE_S, "the entries the dead run never sent to be sent",
            )  # fmt: skip
            wait_until(
                lambda: sidecar.output().count("was already stored; not resent") == len(sent),
                DRAIN_DEADLINE_S, "the ones it had sent to be found in the broker's index",
            )  # fmt: skip
        finally:
            sidecar.stop()
        assert f"ended {len(messages)} outbox leases" in sidecar.output()
        for m in messages:
            assert len(stored_copies(broker.endpoint, m.message_id)) == 1, m.message_id
        with open_outbox(url) as outbox:
            assert outbox.stats(now_ms()).pending == 0
            assert all(outbox.get(m.message_id).receipt is not None for m in messages)  # type: ignore[union-attr]  # every message was delivered: the loop above waited for it


LOOKUPS = 300


def test_a_message_the_broker_acknowledged_is_found_by_the_next_index_lookup(
    broker: BrokerProcess,
) -> None:
    """The resend pool's index check (Producer.lookup_stored) right after a SEND_OK: the index
    is built by the broker's dispatcher a moment after the store answers, and the lookup waits
    for it, so that "not found" never sends a stored message twice."""
    ids = MessageIdGenerator()
    messages = [OutboxMessage(TOPIC, f"l{n}".encode(), ids.next_id()) for n in range(LOOKUPS)]

    async def send_then_look_up() -> list[str]:
        host, port = broker.endpoint.rsplit(":", 1)
        producer = Producer(ProducerConfig(access_points=(Endpoint(host, int(port)),)))
        missed: list[str] = []
        try:
            for m in messages:
                await producer.send(m)
                lookup = await producer.lookup_stored(m.message_id, m.topic)
                assert lookup.offered
                if lookup.copy is None:
                    missed.append(m.message_id)
        finally:
            await producer.close()
        return missed

    assert asyncio.run(send_then_look_up()) == []


def test_a_namespaced_sidecar_finds_its_messages_under_their_stored_topic(
    broker: BrokerProcess,
) -> None:
    """The admin service names a namespaced topic as stored (NAMESPACE%TOPIC): the lookup must
    compare with that, or every resend of a stored message would be a duplicate."""
    ids = MessageIdGenerator()
    messages = [OutboxMessage(TOPIC, f"n{n}".encode(), ids.next_id()) for n in range(3)]

    async def send_then_look_up() -> list[bool]:
        host, port = broker.endpoint.rsplit(":", 1)
        config = ProducerConfig(access_points=(Endpoint(host, int(port)),), namespace="shop")
        producer = Producer(config)
        try:
            for m in messages:
                await producer.send(m)
            return [
                (await producer.lookup_stored(m.message_id, m.topic)).copy is not None
                for m in messages
            ]
        finally:
            await producer.close()

    assert asyncio.run(send_then_look_up()) == [True, True, True]
