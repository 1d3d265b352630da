"""Message validation (broker/store/validation.py), the config's own range checks, and what the
store does with a message it refuses.

Proves, on validate_message directly: a topic that is empty, longer than max_topic_length (127, or
a smaller configured limit, also for a topic already seen under a larger one) or has a character
outside %|a-zA-Z0-9_- is refused; so is a body over max_message_size_bytes, a queue_id outside
0..2**31-1, a C0/C1 control character in the tag, keys, a property name or value, a '|' in a tag,
the reserved __CRC32# property, an empty property name, properties over properties_length_max
(counted in UTF-8 bytes, CRC property included), and integers or hosts that do not fit the record
(flag, sysflag, reconsume_times, born_timestamp_ms, prepared_transaction_offset, born_host,
store_host). Each refusal is a MessageIllegalError whose .field names the field and whose .limit
names the limit; values exactly at a limit pass.

Proves, through a real DefaultMessageStore on tmp_path: every refused message answers
MESSAGE_ILLEGAL (PROPERTIES_SIZE_EXCEEDED for oversized properties only) with .illegal set and
leaves no trace: max_phy_offset, the queue's max offset and the index are unchanged, and the next
good message lands at phy_offset 0. In a batch, the good messages around a bad one are stored,
in order. A message at every limit at once is stored and reads back intact, also in the
smallest segment the config allows. What the store accepts, it keeps: a put answered PUT_OK
reads back, also after a restart.

Proves, on MessageStoreConfig: each value out of range raises StoreConfigError naming the field;
the boundary values are accepted.
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
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    HostAddress,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
)
from broker.store.config import (
    PROPERTIES_LENGTH_MAX,
    RECORD_FIXED_BYTES_MAX,
    TOPIC_LENGTH_MAX,
    MessageStoreConfig,
)
from broker.store.errors import MessageIllegalError, StoreConfigError
from broker.store.message_store import DefaultMessageStore
from broker.store.status import PutMessageResult, PutMessageStatus
from broker.store.validation import validate_message

TOPIC = "TopicTest"
MAX_BODY_BYTES = 64 << 10
# A property "k" with a value of this many bytes makes the properties exactly
# PROPERTIES_LENGTH_MAX long: the CRC property (20) + "k" + "\x01" + value + "\x02".
MAX_ONE_VALUE_BYTES = PROPERTIES_LENGTH_MAX - 20 - 1 - 2
DISPATCH_TIMEOUT_S = 10.0
CONTROL_CHARACTERS = ["\x00", "\x01", "\x02", "\t", "\n", "\x1f", "\x7f", "\x85", "\x9f"]
STORE_HOST: HostAddress = ("10.0.0.1", 10911)


def small_config(root: Path, **overrides: Any) -> MessageStoreConfig:
    fields: dict[str, Any] = {
        "mapped_file_size_commit_log_bytes": 1 << 20,
        "max_message_size_bytes": MAX_BODY_BYTES,
        "mapped_file_size_consume_queue_entries": 1000,
        "max_hash_slot_num": 1000,
        "max_index_num": 4000,
        **overrides,
    }
    return MessageStoreConfig(root, **fields)


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


def message(uniq_key: str = "GOOD-ID", **overrides: Any) -> MessageExtBrokerInner:
    """A valid message with a tag, keys, an id and a user property; fields overridden."""
    fields: dict[str, Any] = {
        "topic": TOPIC,
        "body": b"hello",
        "queue_id": 0,
        "properties": {
            PROPERTY_TAGS: "TagA",
            PROPERTY_KEYS: "order-1 order-2",
            PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key,
            "colour": "red",
        },
        **overrides,
    }
    return MessageExtBrokerInner(**fields)


def bad_message(**overrides: Any) -> MessageExtBrokerInner:
    return message(uniq_key="BAD-ID", **overrides)


def with_property(name: str, value: str) -> MessageExtBrokerInner:
    msg = bad_message()
    msg.properties[name] = value
    return msg


def refusal(msg: MessageExtBrokerInner, config: MessageStoreConfig) -> MessageIllegalError:
    with pytest.raises(MessageIllegalError) as caught:
        validate_message(msg, config)
    error = caught.value
    # The message an operator reads names both the field and the limit.
    assert str(error).startswith(f"{error.field}: ")
    assert str(error).endswith(f"(limit: {error.limit})")
    assert error.retriable is False
    return error


# == topic ========================================================================================
def test_an_empty_topic_is_refused(config: MessageStoreConfig) -> None:
    error = refusal(message(topic=""), config)
    assert (error.field, error.limit) == ("topic", "1..127 characters")
    assert "is empty" in str(error)


def test_a_topic_over_127_characters_is_refused(config: MessageStoreConfig) -> None:
    error = refusal(message(topic="t" * 128), config)
    assert (error.field, error.limit) == ("topic", "max_topic_length=127")
    assert "128 characters" in str(error)
    validate_message(message(topic="t" * TOPIC_LENGTH_MAX), config)


def test_a_topic_over_a_smaller_configured_limit_is_refused(tmp_path: Path) -> None:
    config = small_config(tmp_path, max_topic_length=20)
    error = refusal(message(topic="t" * 21), config)
    assert (error.field, error.limit) == ("topic", "max_topic_length=20")
    validate_message(message(topic="t" * 20), config)


def test_a_topic_accepted_under_a_larger_limit_is_still_checked_against_a_smaller_one(
    tmp_path: Path,
) -> None:
    """Validation remembers topics it has accepted; that memory must not outlive the limit."""
    topic = "RememberedTopic-" + "x" * 14  # 30 characters
    validate_message(message(topic=topic), small_config(tmp_path / "a"))
    error = refusal(message(topic=topic), small_config(tmp_path / "b", max_topic_length=20))
    assert (error.field, error.limit) == ("topic", "max_topic_length=20")


@pytest.mark.parametrize(
    "topic",
    ["a b", "a/b", "a.b", "a:b", "a#b", "tópico", "主题", "a\n", "a\x00b", "a\u200bb", " "],
)
def test_a_topic_with_a_character_outside_the_set_is_refused(
    config: MessageStoreConfig, topic: str
) -> None:
    error = refusal(message(topic=topic), config)
    assert (error.field, error.limit) == ("topic", "characters %|a-zA-Z0-9_-")
    assert repr(topic) in str(error)


@pytest.mark.parametrize("topic", ["%RETRY%group_1", "%DLQ%g", "ns|Topic", "A-b_9", "x"])
def test_system_and_namespaced_topics_are_accepted(config: MessageStoreConfig, topic: str) -> None:
    validate_message(message(topic=topic), config)


# == body and queue id ============================================================================
def test_a_body_over_max_message_size_bytes_is_refused(config: MessageStoreConfig) -> None:
    error = refusal(message(body=b"\0" * (MAX_BODY_BYTES + 1)), config)
    assert error.field == "body"
    assert error.limit == f"max_message_size_bytes={MAX_BODY_BYTES}"
    assert "max_message_size_bytes" in str(error)
    assert "65536" in str(error)
    assert f"{MAX_BODY_BYTES + 1} bytes" in str(error)


def test_a_body_of_exactly_max_message_size_bytes_is_accepted(config: MessageStoreConfig) -> None:
    validate_message(message(body=b"\0" * MAX_BODY_BYTES), config)


@pytest.mark.parametrize("queue_id", [-1, -(2**31), 2**31, 2**40])
def test_a_queue_id_outside_0_to_int_max_is_refused(
    config: MessageStoreConfig, queue_id: int
) -> None:
    error = refusal(message(queue_id=queue_id), config)
    assert (error.field, error.limit) == ("queue_id", "0..2147483647")
    assert str(queue_id) in str(error)


@pytest.mark.parametrize("queue_id", [0, 2**31 - 1])
def test_queue_ids_at_the_bounds_are_accepted(config: MessageStoreConfig, queue_id: int) -> None:
    validate_message(message(queue_id=queue_id), config)


# == properties ===================================================================================
def property_field(name: str) -> str:
    return f"properties[{name!r}]"


@pytest.mark.parametrize("char", CONTROL_CHARACTERS, ids=[hex(ord(c)) for c in CONTROL_CHARACTERS])
@pytest.mark.parametrize(
    ("place", "field"),
    [
        pytest.param(lambda c: with_property(PROPERTY_TAGS, f"Tag{c}A"), "tag", id="tag"),
        pytest.param(lambda c: with_property(PROPERTY_KEYS, f"k1{c}k2"), "keys", id="keys"),
        pytest.param(
            lambda c: with_property(f"na{c}me", "value"),
            None,  # the field names the offending name itself
            id="user-property-name",
        ),
        pytest.param(
            lambda c: with_property("name", f"va{c}lue"),
            property_field("name"),
            id="user-property-value",
        ),
        pytest.param(
            lambda c: with_property(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, f"ID{c}1"),
            property_field(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            id="message-id",
        ),
    ],
)
def test_a_control_character_in_tag_keys_or_properties_is_refused(
    config: MessageStoreConfig,
    place: Callable[[str], MessageExtBrokerInner],
    field: str | None,
    char: str,
) -> None:
    error = refusal(place(char), config)
    assert error.field == (field or property_field(f"na{char}me"))
    assert error.limit == "no control characters"


@pytest.mark.parametrize("char", [" ", "~", "\xa0", "é", "标", "\U0001f680"])
def test_printable_unicode_around_the_control_ranges_is_accepted(
    config: MessageStoreConfig, char: str
) -> None:
    msg = message()
    msg.properties.update(
        {PROPERTY_TAGS: f"Tag{char}", PROPERTY_KEYS: f"k{char}1", f"n{char}": f"v{char}"}
    )
    validate_message(msg, config)


def test_a_bar_in_a_tag_is_refused(config: MessageStoreConfig) -> None:
    error = refusal(with_property(PROPERTY_TAGS, "TagA|TagB"), config)
    assert (error.field, error.limit) == ("tag", "no '|' in a tag")
    # Only tags are subscription expressions; elsewhere '|' is an ordinary character.
    validate_message(with_property(PROPERTY_KEYS, "a|b"), config)
    validate_message(with_property("filter", "a|b"), config)


def test_the_reserved_crc_property_is_refused(config: MessageStoreConfig) -> None:
    error = refusal(with_property(PROPERTY_CRC32, "0123456789"), config)
    assert (error.field, error.limit) == (property_field(PROPERTY_CRC32), "reserved by the store")


def test_an_empty_property_name_is_refused_as_that_property(config: MessageStoreConfig) -> None:
    """Its field is the property's, like every other per-property refusal: the bare field
    "properties" means the size limit, which the store answers PROPERTIES_SIZE_EXCEEDED."""
    error = refusal(with_property("", "value"), config)
    assert (error.field, error.limit) == (property_field(""), "non-empty names")


def test_properties_over_properties_length_max_are_refused(config: MessageStoreConfig) -> None:
    msg = message(properties={"k": "v" * (MAX_ONE_VALUE_BYTES + 1)})
    error = refusal(msg, config)
    assert error.field == "properties"
    assert error.limit == f"properties_length_max={PROPERTIES_LENGTH_MAX} bytes"
    assert f"encode to {PROPERTIES_LENGTH_MAX + 1} bytes" in str(error)


def test_properties_of_exactly_properties_length_max_are_accepted(
    config: MessageStoreConfig,
) -> None:
    validate_message(message(properties={"k": "v" * MAX_ONE_VALUE_BYTES}), config)


def test_properties_length_counts_utf8_bytes_not_characters(config: MessageStoreConfig) -> None:
    two_byte_chars = MAX_ONE_VALUE_BYTES // 2  # "é" is 2 bytes in UTF-8
    assert MAX_ONE_VALUE_BYTES % 2 == 0
    validate_message(message(properties={"k": "é" * two_byte_chars}), config)
    error = refusal(message(properties={"k": "é" * (two_byte_chars + 1)}), config)
    assert error.field == "properties"


def test_properties_over_a_smaller_configured_limit_are_refused(tmp_path: Path) -> None:
    config = small_config(tmp_path, properties_length_max=100)
    validate_message(message(properties={"k": "v" * (100 - 23)}), config)
    error = refusal(message(properties={"k": "v" * (100 - 22)}), config)
    assert (error.field, error.limit) == ("properties", "properties_length_max=100 bytes")


# == fields that must fit the record ==============================================================
# Python ints are unbounded; the record holds signed 32- and 64-bit integers (codec/layout.py). A
# value that does not fit must be refused here, not fail in the middle of an append.
OUT_OF_WIDTH = [
    pytest.param({"flag": 2**31}, "flag", id="flag-over-int32"),
    pytest.param({"flag": -(2**31) - 1}, "flag", id="flag-under-int32"),
    pytest.param({"sysflag": 2**31}, "sysflag", id="sysflag-over-int32"),
    pytest.param({"reconsume_times": 2**31}, "reconsume_times", id="reconsume-over-int32"),
    pytest.param({"born_timestamp_ms": 2**63}, "born_timestamp_ms", id="born-ts-over-int64"),
    pytest.param(
        {"prepared_transaction_offset": 2**63},
        "prepared_transaction_offset",
        id="prepared-offset-over-int64",
    ),
    pytest.param({"born_host": ("not-an-ip", 1)}, "born_host", id="born-host-not-an-ip"),
    pytest.param({"store_host": ("300.1.1.1", 1)}, "store_host", id="store-host-not-an-ip"),
]


@pytest.mark.parametrize(("overrides", "field"), OUT_OF_WIDTH)
def test_a_field_that_does_not_fit_the_record_is_refused(
    config: MessageStoreConfig, overrides: dict[str, Any], field: str
) -> None:
    error = refusal(bad_message(**overrides), config)
    assert error.field == field


# One of each kind through the store: an int32, an int64 and a host.
OUT_OF_WIDTH_IN_THE_STORE = [
    p
    for p in OUT_OF_WIDTH
    if p.id in ("flag-over-int32", "born-ts-over-int64", "born-host-not-an-ip")
]
assert len(OUT_OF_WIDTH_IN_THE_STORE) == 3


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
        max_message_size_bytes=body_bytes,
        max_topic_length=topic_length,
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


# == config ranges ================================================================================
@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        pytest.param(
            {"mapped_file_size_commit_log_bytes": 64 << 10},
            "mapped_file_size_commit_log_bytes",
            id="segment-smaller-than-the-largest-record",
        ),
        pytest.param({"disk_max_used_space_ratio": 0}, "disk_max_used_space_ratio", id="ratio-0"),
        pytest.param(
            {"disk_max_used_space_ratio": 1.5}, "disk_max_used_space_ratio", id="ratio-1.5"
        ),
        pytest.param(
            {"disk_max_used_space_ratio": -0.1}, "disk_max_used_space_ratio", id="ratio-negative"
        ),
        pytest.param({"max_topic_length": 0}, "max_topic_length", id="topic-0"),
        pytest.param({"max_topic_length": 128}, "max_topic_length", id="topic-128"),
        pytest.param({"properties_length_max": 0}, "properties_length_max", id="props-0"),
        pytest.param({"properties_length_max": 32768}, "properties_length_max", id="props-32768"),
        pytest.param({"max_message_size_bytes": 0}, "max_message_size_bytes", id="body-0"),
        pytest.param(
            {"mapped_file_size_consume_queue_entries": 0},
            "mapped_file_size_consume_queue_entries",
            id="cq-entries-0",
        ),
        pytest.param({"max_hash_slot_num": 0}, "max_hash_slot_num", id="slots-0"),
        pytest.param({"max_index_num": 1}, "max_index_num", id="index-1"),
        pytest.param(
            {"flush_interval_commit_log_ms": 0}, "flush_interval_commit_log_ms", id="flush-0"
        ),
        pytest.param({"sync_flush_timeout_ms": 0}, "sync_flush_timeout_ms", id="sync-timeout-0"),
        pytest.param(
            {"group_commit_requests_max": 0}, "group_commit_requests_max", id="group-commit-0"
        ),
        pytest.param({"file_reserved_hours": 0}, "file_reserved_hours", id="reserved-hours-0"),
        pytest.param({"delete_files_batch_max": 0}, "delete_files_batch_max", id="delete-0"),
    ],
)
def test_a_config_value_out_of_range_is_refused_by_name(
    tmp_path: Path, overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(StoreConfigError) as caught:
        small_config(tmp_path, **overrides)
    assert named in str(caught.value)
    assert caught.value.retriable is False


def test_the_segment_size_error_says_how_large_the_largest_record_is(tmp_path: Path) -> None:
    largest = RECORD_FIXED_BYTES_MAX + MAX_BODY_BYTES + TOPIC_LENGTH_MAX + PROPERTIES_LENGTH_MAX
    with pytest.raises(StoreConfigError, match=f"{largest} bytes"):
        small_config(tmp_path, mapped_file_size_commit_log_bytes=largest - 1)
    small_config(tmp_path, mapped_file_size_commit_log_bytes=largest)


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"disk_max_used_space_ratio": 1.0}, id="ratio-1"),
        pytest.param({"disk_max_used_space_ratio": 0.01}, id="ratio-small"),
        pytest.param({"max_topic_length": 1}, id="topic-1"),
        pytest.param({"max_topic_length": TOPIC_LENGTH_MAX}, id="topic-127"),
        pytest.param({"properties_length_max": 1}, id="props-1"),
        pytest.param({"properties_length_max": PROPERTIES_LENGTH_MAX}, id="props-32767"),
        pytest.param({"max_index_num": 2}, id="index-2"),
    ],
)
def test_config_values_at_the_boundaries_are_accepted(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    config = small_config(tmp_path, **overrides)
    for name, value in overrides.items():
        assert getattr(config, name) == value
