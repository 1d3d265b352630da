"""Coalesced broker sends keep every message's own answer (real broker and sidecar processes;
the counts come from the sidecar's Prometheus endpoint):

- a SendBatch's plain messages leave as one SendMessage; when the broker refuses that request as
  a whole for one message, each is sent again alone and only that message is rejected, naming
  its field, while the others are stored once each;
- a coalesced request the broker cannot take spools all of its messages in one outbox write;
- FIFO messages are never coalesced: each group stays on one queue in request order while the
  plain messages around them coalesce;
- ``--no-coalesce`` sends every message as its own SendMessage.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocketbox_api.admin.v1 import broker_admin_pb2
from rocketbox_api.v1 import sidecar_pb2 as api
from tests.broker.broker_process import BrokerProcess
from tests.prometheus import metrics_port, sample, scrape
from tests.services import free_port
from tests.sidecar.sidecar_process import (
    BROKER_ARGS,
    SidecarProcess,
    message,
    outcome,
    stored_copies,
    wait_stored,
)

pytestmark = pytest.mark.slow

METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")
METRICS_ARGS = ("--metrics-listen=127.0.0.1:0",)
CALL_DEADLINE_S = 60.0
BROKER_BODY_BYTES_MAX = 2_048


def sends_to_broker(port: int) -> tuple[float, float]:
    """(SendMessage requests, messages in them) the sidecar's intake made."""
    samples = scrape(port)
    return (
        sample(samples, "rocketbox_sidecar_broker_send_messages_count"),
        sample(samples, "rocketbox_sidecar_broker_send_messages_sum"),
    )


def test_a_message_the_broker_refuses_is_the_only_one_rejected(tmp_path: Path) -> None:
    # The broker takes smaller bodies than RocketMQ's 4 MiB the sidecar checks: the refusal
    # can only come from the broker, for a request that carries good messages too.
    broker = BrokerProcess(
        tmp_path / "broker", *BROKER_ARGS, f"--message-size-bytes-max={BROKER_BODY_BYTES_MAX}"
    )
    sidecar = SidecarProcess(broker.endpoint, "memory://", *METRICS_ARGS)
    try:
        port = metrics_port(sidecar.output(), METRICS_LINE)
        messages = [message("Orders", f"good {i}".encode()) for i in range(20)]
        messages[7] = message("Orders", b"x" * (BROKER_BODY_BYTES_MAX + 1))
        with sidecar.client() as stub:
            batch = stub.SendBatch(api.SendBatchRequest(messages=messages), timeout=CALL_DEADLINE_S)
        outcomes = [outcome(r) for r in batch.results]
        assert outcomes == ["stored"] * 7 + ["rejected"] + ["stored"] * 12
        rejected = batch.results[7].rejected
        assert (rejected.code, rejected.field) == (3, "body")  # INVALID_ARGUMENT
        assert "MESSAGE_BODY_TOO_LARGE" in rejected.reason
        # One coalesced request of 20, refused whole; then each of the 20 alone.
        assert sends_to_broker(port) == (21, 40)
        for i, r in enumerate(batch.results):
            if i != 7:
                assert len(wait_stored(broker.endpoint, r.message_id)) == 1
        assert stored_copies(broker.endpoint, batch.results[7].message_id) == []
    finally:
        sidecar.stop()
        broker.kill()


def test_a_request_the_broker_cannot_take_is_spooled_in_one_write() -> None:
    sidecar = SidecarProcess(f"127.0.0.1:{free_port()}", "memory://", *METRICS_ARGS)
    try:
        port = metrics_port(sidecar.output(), METRICS_LINE)
        messages = [message("Orders", f"m{i}".encode()) for i in range(10)]
        with sidecar.client() as stub:
            batch = stub.SendBatch(api.SendBatchRequest(messages=messages), timeout=CALL_DEADLINE_S)
        assert [outcome(r) for r in batch.results] == ["spooled"] * 10
        assert {r.spooled.cause for r in batch.results} == {api.SPOOL_CAUSE_UNAVAILABLE}
        assert sends_to_broker(port) == (1, 10)
        samples = scrape(port)
        assert sample(samples, "rocketbox_outbox_put_entries_count") == 1
        assert sample(samples, "rocketbox_outbox_put_entries_sum") == 10
        assert sample(samples, "rocketbox_outbox_put_seconds_count") == 1
    finally:
        sidecar.stop()


def test_fifo_groups_keep_their_queue_and_order_while_plain_messages_coalesce(
    broker: BrokerProcess,
) -> None:
    sidecar = SidecarProcess(broker.endpoint, "memory://", *METRICS_ARGS)
    try:
        port = metrics_port(sidecar.output(), METRICS_LINE)
        messages: list[api.Message] = []
        for step in range(8):
            for group in ("a", "b", "c"):
                messages.append(message("Fifo", f"{group}:{step}".encode(), message_group=group))
                messages.append(message("Plain", f"plain {group}:{step}".encode()))
        with sidecar.client() as stub:
            batch = stub.SendBatch(api.SendBatchRequest(messages=messages), timeout=CALL_DEADLINE_S)
        assert {outcome(r) for r in batch.results} == {"stored"}
        # 24 FIFO messages alone, the 24 plain ones in one request.
        assert sends_to_broker(port) == (25, 48)
        for group in ("a", "b", "c"):
            # Where the broker put them: the answers name no queue (the broker picks it).
            copies = [
                only_copy(broker, r)
                for r, m in zip(batch.results, messages, strict=True)
                if m.HasField("message_group") and m.message_group == group
            ]
            assert len({c.queue_id for c in copies}) == 1, f"group {group} left its queue"
            offsets = [c.queue_offset for c in copies]
            assert offsets == sorted(set(offsets)), f"group {group} out of order: {offsets}"
    finally:
        sidecar.stop()


def only_copy(broker: BrokerProcess, result: api.SendResult) -> broker_admin_pb2.StoredMessage:
    """The one copy of a STORED message, at the offset its answer gave."""
    [copy] = wait_stored(broker.endpoint, result.message_id)
    assert copy.queue_offset == result.stored.queue_offset, "the answer has the broker's offset"
    return copy


def test_without_coalescing_each_message_is_its_own_request(broker: BrokerProcess) -> None:
    sidecar = SidecarProcess(broker.endpoint, "memory://", *METRICS_ARGS, "--no-coalesce")
    try:
        port = metrics_port(sidecar.output(), METRICS_LINE)
        messages = [message("Orders", f"m{i}".encode()) for i in range(10)]
        with sidecar.client() as stub:
            batch = stub.SendBatch(api.SendBatchRequest(messages=messages), timeout=CALL_DEADLINE_S)
        assert [outcome(r) for r in batch.results] == ["stored"] * 10
        assert sends_to_broker(port) == (10, 10)
    finally:
        sidecar.stop()
