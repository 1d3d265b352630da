"""Message validation (broker/store/validation.py) and the config's own range checks.

Proves, on validate_message directly: a topic that is empty, longer than topic_length_max (127, or
a smaller configured limit, also for a topic already seen under a larger one) or has a character
outside %|a-zA-Z0-9_- is refused; so is a body over message_size_bytes_max, a queue_id outside
0..2**31-1, a C0/C1 control character in the tag, keys, a property name or value, a '|' in a tag,
the reserved __CRC32# property, an empty property name, properties over properties_length_max
(counted in UTF-8 bytes, CRC property included), and integers or hosts that do not fit the record
(flag, sysflag, reconsume_times, born_timestamp_ms, prepared_transaction_offset, born_host,
store_host). Each refusal is a MessageIllegalError whose .field names the field and whose .limit
names the limit; values exactly at a limit pass.

Proves, on MessageStoreConfig: each value out of range raises StoreConfigError naming the field;
the boundary values are accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.store.codec.message import (
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageExtBrokerInner,
)
from broker.store.config import (
    PROPERTIES_LENGTH_MAX,
    RECORD_FIXED_BYTES_MAX,
    MessageStoreConfig,
)
from broker.store.errors import StoreConfigError
from broker.store.validation import validate_message
from rocketbox_api.names import TOPIC_LENGTH_MAX
from tests.broker.store.validation_helpers import (
    CONTROL_CHARACTERS,
    MAX_BODY_BYTES,
    MAX_ONE_VALUE_BYTES,
    OUT_OF_WIDTH,
    bad_message,
    message,
    property_field,
    refusal,
    small_config,
    with_property,
)


@pytest.fixture
def config(tmp_path: Path) -> MessageStoreConfig:
    return small_config(tmp_path / "store")


# == topic ========================================================================================
def test_an_empty_topic_is_refused(config: MessageStoreConfig) -> None:
    error = refusal(message(topic=""), config)
    assert (error.field, error.limit) == ("topic", "1..127 characters")
    assert "is empty" in str(error)


def test_a_topic_over_127_characters_is_refused(config: MessageStoreConfig) -> None:
    error = refusal(message(topic="t" * 128), config)
    assert (error.field, error.limit) == ("topic", "topic_length_max=127")
    assert "128 characters" in str(error)
    validate_message(message(topic="t" * TOPIC_LENGTH_MAX), config)


def test_a_topic_over_a_smaller_configured_limit_is_refused(tmp_path: Path) -> None:
    config = small_config(tmp_path, topic_length_max=20)
    error = refusal(message(topic="t" * 21), config)
    assert (error.field, error.limit) == ("topic", "topic_length_max=20")
    validate_message(message(topic="t" * 20), config)


def test_a_topic_accepted_under_a_larger_limit_is_still_checked_against_a_smaller_one(
    tmp_path: Path,
) -> None:
    """Validation remembers topics it has accepted; that memory must not outlive the limit."""
    topic = "RememberedTopic-" + "x" * 14  # 30 characters
    validate_message(message(topic=topic), small_config(tmp_path / "a"))
    error = refusal(message(topic=topic), small_config(tmp_path / "b", topic_length_max=20))
    assert (error.field, error.limit) == ("topic", "topic_length_max=20")


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
    assert error.limit == f"message_size_bytes_max={MAX_BODY_BYTES}"
    assert "message_size_bytes_max" in str(error)
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
@pytest.mark.parametrize(("overrides", "field"), OUT_OF_WIDTH)
def test_a_field_that_does_not_fit_the_record_is_refused(
    config: MessageStoreConfig, overrides: dict[str, Any], field: str
) -> None:
    error = refusal(bad_message(**overrides), config)
    assert error.field == field


# == config ranges ================================================================================
@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        pytest.param(
            {"mapped_file_size_commit_log_bytes": 64 << 10},
            "mapped_file_size_commit_log_bytes",
            id="segment-smaller-than-the-largest-record",
        ),
        pytest.param({"disk_used_space_ratio_max": 0}, "disk_used_space_ratio_max", id="ratio-0"),
        pytest.param(
            {"disk_used_space_ratio_max": 1.5}, "disk_used_space_ratio_max", id="ratio-1.5"
        ),
        pytest.param(
            {"disk_used_space_ratio_max": -0.1}, "disk_used_space_ratio_max", id="ratio-negative"
        ),
        pytest.param({"topic_length_max": 0}, "topic_length_max", id="topic-0"),
        pytest.param({"topic_length_max": 128}, "topic_length_max", id="topic-128"),
        pytest.param({"properties_length_max": 0}, "properties_length_max", id="props-0"),
        pytest.param({"properties_length_max": 32768}, "properties_length_max", id="props-32768"),
        pytest.param({"message_size_bytes_max": 0}, "message_size_bytes_max", id="body-0"),
        pytest.param(
            {"mapped_file_size_consume_queue_entries": 0},
            "mapped_file_size_consume_queue_entries",
            id="cq-entries-0",
        ),
        pytest.param({"hash_slot_num": 0}, "hash_slot_num", id="slots-0"),
        pytest.param({"index_num_max": 1}, "index_num_max", id="index-1"),
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
        pytest.param({"disk_used_space_ratio_max": 1.0}, id="ratio-1"),
        pytest.param({"disk_used_space_ratio_max": 0.01}, id="ratio-small"),
        pytest.param({"topic_length_max": 1}, id="topic-1"),
        pytest.param({"topic_length_max": TOPIC_LENGTH_MAX}, id="topic-127"),
        pytest.param({"properties_length_max": 1}, id="props-1"),
        pytest.param({"properties_length_max": PROPERTIES_LENGTH_MAX}, id="props-32767"),
        pytest.param({"index_num_max": 2}, id="index-2"),
    ],
)
def test_config_values_at_the_boundaries_are_accepted(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    config = small_config(tmp_path, **overrides)
    for name, value in overrides.items():
        assert getattr(config, name) == value
