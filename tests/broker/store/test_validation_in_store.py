"""What the store does with a message validation (broker/store/validation.py) refuses, and with
one it accepts.

Proves, through a real DefaultMessageStore on tmp_path: every refused message answers
MESSAGE_ILLEGAL (PROPERTIES_SIZE_EXCEEDED for oversized properties only) with .illegal set and
leaves no trace: max_phy_offset, the queue's max offset and the index are unchanged, and the next
good message lands at phy_offset 0. In a batch, the good messages around a bad one are stored,
in order, and each refused answer stands at its message's place, first, last or side by side. A
message at every limit at once is stored and reads back intact, also in the smallest segment the
config allows. What the store accepts, it keeps: a put answered PUT_OK
reads back, also after a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from broker.store.codec.message import (
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
)
from broker.store.config import (
    PROPERTIES_LENGTH_MAX,
    RECORD_FIXED_BYTES_MAX,
    MessageStoreConfig,
)
from broker.store.errors import StoreConfigError
from broker.store.message_store import DefaultMessageStore
from broker.store.status import PutMessageResult, PutMessageStatus
from rocketbox_api.names import TOPIC_LENGTH_MAX
from tests.broker.store.validation_helpers import (
    DISPATCH_TIMEOUT_S,
    MAX_BODY_BYTES,
    MAX_ONE_VALUE_BYTES,
    OUT_OF_WIDTH_IN_THE_STORE,
    STORE_HOST,
    TOPIC,
    bad_message,
    message,
    property_field,
    small_config,
    with_property,
)


@pytest.fixture
def config(tmp_path: Path) -> MessageStoreConfig:
    return small_config(tmp_path / "store")


@pytest.fixture
def store(config: MessageStoreConfig) -> Iterator[DefaultMessageStore]:
    """A started store on ``config``; shut down at teardown, even when the test fails."""
    store = DefaultMessageStore(config, STORE_HOST)
    store.start()
    yield store
    store.shutdown()  # a no-op when the test already shut it down


# == through the store: a refusal leaves no trace =================================================
# Each case builds a fresh message: a test never sees another test's message.
REFUSED = [
    pytest.param(lambda: bad_message(topic=""), "topic", id="empty-topic"),
    pytest.param(lambda: bad_message(topic="t" * 128), "topic", id="long-topic"),
    pytest.param(lambda: bad_message(topic="bad topic"), "topic", id="topic-character"),
    pytest.param(lambda: bad_message(body=b"\0" * (MAX_BODY_BYTES + 1)), "body", id="large-body"),
    pytest.param(lambda: bad_message(queue_id=-1), "queue_id", id="negative-queue-id"),
    pytest.param(lambda: with_property(PROPERTY_TAGS, "Tag\nA"), "tag", id="tag-newline"),
    pytest.param(lambda: with_property(PROPERTY_TAGS, "A|B"), "tag", id="tag-bar"),
    pytest.param(lambda: with_property(PROPERTY_KEYS, "k1\x00k2"), "keys", id="keys-nul"),
    pytest.param(lambda: with_property("na\x01me", "v"), property_field("na\x01me"), id="name-soh"),
    pytest.param(lambda: with_property("name", "v\x85"), property_field("name"), id="value-nel"),
    pytest.param(
        lambda: with_property(PROPERTY_CRC32, "0123456789"),
        property_field(PROPERTY_CRC32),
        id="reserved-crc",
    ),
]


def properties_too_long() -> MessageExtBrokerInner:
    return bad_message(properties={"k": "v" * (MAX_ONE_VALUE_BYTES + 1)})


def assert_refused(result: PutMessageResult, status: PutMessageStatus, field: str) -> None:
    assert result.status is status, result.detail
    assert not result.ok
    assert result.append is None
    assert result.illegal is not None
    assert result.illegal.field == field
    assert result.detail == str(result.illegal)


def assert_no_trace_then_good_put_lands_at_zero(
    store: DefaultMessageStore, refused: MessageExtBrokerInner
) -> None:
    assert store.max_phy_offset == 0
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S)
    assert store.get_max_offset_in_queue(refused.topic, refused.queue_id) == 0
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0

    [good] = store.put_messages([message(body=b"the first good one")])

    assert good.status is PutMessageStatus.PUT_OK
    assert good.append is not None
    assert (good.append.wrote_offset, good.append.queue_offset) == (0, 0)
    assert store.max_phy_offset == good.append.wrote_bytes
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S)
    got = store.get_message(TOPIC, 0, 0, 32)
    assert [m.body for m in got.messages] == [b"the first good one"]
    assert store.query_message_by_id("BAD-ID") == []
    assert [m.body for m in store.query_message_by_id("GOOD-ID")] == [b"the first good one"]


@pytest.mark.parametrize(("make", "field"), REFUSED)
def test_an_illegal_message_is_answered_message_illegal_and_writes_nothing(
    store: DefaultMessageStore, make: Callable[[], MessageExtBrokerInner], field: str
) -> None:
    refused = make()
    [result] = store.put_messages([refused])
    assert_refused(result, PutMessageStatus.MESSAGE_ILLEGAL, field)
    assert_no_trace_then_good_put_lands_at_zero(store, refused)


def test_oversized_properties_are_answered_properties_size_exceeded_and_write_nothing(
    store: DefaultMessageStore,
) -> None:
    refused = properties_too_long()
    [result] = store.put_messages([refused])
    assert_refused(result, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "properties")
    assert_no_trace_then_good_put_lands_at_zero(store, refused)


def test_an_empty_property_name_is_answered_message_illegal_not_size_exceeded(
    store: DefaultMessageStore,
) -> None:
    refused = with_property("", "value")
    [result] = store.put_messages([refused])
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL, result.detail
    assert result.illegal is not None
    assert result.illegal.limit == "non-empty names"
    assert_no_trace_then_good_put_lands_at_zero(store, refused)


@pytest.mark.parametrize(("overrides", "field"), OUT_OF_WIDTH_IN_THE_STORE)
def test_a_field_that_does_not_fit_the_record_is_answered_message_illegal_and_writes_nothing(
    store: DefaultMessageStore, overrides: dict[str, Any], field: str
) -> None:
    refused = bad_message(**overrides)
    [result] = store.put_messages([refused])
    assert_refused(result, PutMessageStatus.MESSAGE_ILLEGAL, field)
    assert_no_trace_then_good_put_lands_at_zero(store, refused)


def assert_batch_keeps_the_good_ones(
    store: DefaultMessageStore,
    bad: MessageExtBrokerInner,
    bad_status: PutMessageStatus,
    bad_field: str,
) -> None:
    results = store.put_messages([message(body=b"first"), bad, message(body=b"third")])

    statuses = [r.status for r in results]
    assert statuses == [PutMessageStatus.PUT_OK, bad_status, PutMessageStatus.PUT_OK]
    first, refused, third = results
    assert_refused(refused, bad_status, bad_field)
    assert first.append is not None
    assert third.append is not None
    assert (first.append.wrote_offset, first.append.queue_offset) == (0, 0)
    assert third.append.wrote_offset == first.append.wrote_bytes
    assert third.append.queue_offset == 1
    assert store.max_phy_offset == first.append.wrote_bytes + third.append.wrote_bytes
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S)
    got = store.get_message(TOPIC, 0, 0, 32)
    assert [m.body for m in got.messages] == [b"first", b"third"]
    assert store.query_message_by_id("BAD-ID") == []


@pytest.mark.parametrize(("make", "field"), REFUSED)
def test_a_batch_stores_the_good_messages_around_an_illegal_one(
    store: DefaultMessageStore, make: Callable[[], MessageExtBrokerInner], field: str
) -> None:
    assert_batch_keeps_the_good_ones(store, make(), PutMessageStatus.MESSAGE_ILLEGAL, field)


def test_each_refused_answer_stands_where_its_message_stood(store: DefaultMessageStore) -> None:
    # Refused first, last and side by side: the store places each answer by counting the
    # messages before it, so every position is checked.
    batch = [
        bad_message(topic=""),
        message(body=b"second"),
        bad_message(queue_id=-1),
        properties_too_long(),
        message(body=b"fifth"),
        bad_message(topic="bad topic"),
    ]

    results = store.put_messages(batch)

    assert [r.status for r in results] == [
        PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.PUT_OK,
        PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
        PutMessageStatus.PUT_OK,
        PutMessageStatus.MESSAGE_ILLEGAL,
    ]
    assert [r.illegal.field if r.illegal else None for r in results] == [
        "topic",
        None,
        "queue_id",
        "properties",
        None,
        "topic",
    ]
    assert store.wait_dispatched(DISPATCH_TIMEOUT_S)
    got = store.get_message(TOPIC, 0, 0, 32)
    assert [m.body for m in got.messages] == [b"second", b"fifth"]


def test_a_batch_stores_the_good_messages_around_oversized_properties(
    store: DefaultMessageStore,
) -> None:
    assert_batch_keeps_the_good_ones(
        store, properties_too_long(), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "properties"
    )


@pytest.mark.parametrize(("overrides", "field"), OUT_OF_WIDTH_IN_THE_STORE)
def test_a_batch_stores_the_good_messages_around_a_field_that_does_not_fit(
    store: DefaultMessageStore, overrides: dict[str, Any], field: str
) -> None:
    """Today the out-of-range value fails inside the append: the batch raises after the first
    good message is written (stored, but never acknowledged) and the third is never stored."""
    assert_batch_keeps_the_good_ones(
        store, bad_message(**overrides), PutMessageStatus.MESSAGE_ILLEGAL, field
    )


# == through the store: what is accepted is kept =================================================
def largest_message(
    topic_length: int, body_bytes: int, properties_bytes: int
) -> MessageExtBrokerInner:
    """A message at every limit at once, with IPv6 hosts (the larger record layout)."""
    value_bytes = properties_bytes - 20 - 1 - 2
    return MessageExtBrokerInner(
        topic="T" * topic_length,
        body=bytes(range(256)) * (body_bytes // 256) + b"\xff" * (body_bytes % 256),
        queue_id=2**31 - 1,
        properties={"k": "v" * value_bytes},
        born_host=("2001:db8::1", 40000),
        store_host=("2001:db8::2", 10911),
    )


def assert_reads_back(stored: MessageExt | None, sent: MessageExtBrokerInner) -> None:
    assert stored is not None
    assert (stored.topic, stored.body, stored.queue_id) == (sent.topic, sent.body, sent.queue_id)
    assert stored.user_properties == sent.properties
    assert (stored.born_host, stored.store_host) == (sent.born_host, sent.store_host)


def test_a_message_at_every_limit_is_stored_and_reads_back(store: DefaultMessageStore) -> None:
    sent = largest_message(TOPIC_LENGTH_MAX, MAX_BODY_BYTES, PROPERTIES_LENGTH_MAX)
    [result] = store.put_messages([sent])
    assert result.status is PutMessageStatus.PUT_OK, result.detail
    assert result.append is not None
    assert_reads_back(store.look_message_by_offset(result.append.wrote_offset), sent)


def test_the_smallest_segment_the_config_allows_holds_the_largest_message(
    tmp_path: Path,
) -> None:
    body_bytes, topic_length, properties_bytes = 4096, 100, 2000
    segment_bytes = RECORD_FIXED_BYTES_MAX + body_bytes + topic_length + properties_bytes
    config = small_config(
        tmp_path,
        mapped_file_size_commit_log_bytes=segment_bytes,
        message_size_bytes_max=body_bytes,
        topic_length_max=topic_length,
        properties_length_max=properties_bytes,
    )
    with pytest.raises(StoreConfigError, match="mapped_file_size_commit_log_bytes"):
        replace(config, mapped_file_size_commit_log_bytes=segment_bytes - 1)
    sent = largest_message(topic_length, body_bytes, properties_bytes)

    with DefaultMessageStore(config, STORE_HOST) as store:
        results = store.put_messages([sent, sent])

        assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 2
        offsets = [r.append.wrote_offset for r in results if r.append is not None]
        assert offsets == [0, segment_bytes]  # one record a segment, never spanning two
        for offset in offsets:
            assert_reads_back(store.look_message_by_offset(offset), sent)


def test_a_put_answered_put_ok_reads_back_also_after_a_restart(
    store: DefaultMessageStore, config: MessageStoreConfig
) -> None:
    """A sysflag that claims IPv6 hosts the message does not have (one carried over from an
    IPv6-born message, say) must not make the store write a record it cannot read: today the
    record is written with 8-byte hosts under the v6 bits, reads back as None, and recovery
    truncates the log there, dropping it and every acknowledged message after it."""
    claims_v6 = message(
        body=b"claims v6",
        sysflag=MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG,
        born_host=("192.0.2.1", 40000),
    )
    after = message(body=b"after it")

    results = store.put_messages([claims_v6, after])

    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 2
    offsets = [r.append.wrote_offset for r in results if r.append is not None]
    end = store.max_phy_offset
    assert [m.body for m in map(store.look_message_by_offset, offsets) if m] == [
        b"claims v6",
        b"after it",
    ]
    store.shutdown()

    with DefaultMessageStore(config, STORE_HOST) as reopened:
        assert reopened.max_phy_offset == end
        assert [m.body for m in map(reopened.look_message_by_offset, offsets) if m] == [
            b"claims v6",
            b"after it",
        ]
