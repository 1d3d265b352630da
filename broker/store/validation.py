"""Input checks a message passes before the store encodes a byte of it.

Each failure raises MessageIllegalError naming the field and the limit, so the broker can map it
to the protocol's code (ILLEGAL_TOPIC, ILLEGAL_MESSAGE_TAG, ...) and the operator can read why.
The store turns these into a PutMessageStatus; nothing of a refused message is written.

The store checks what it must to write a sound record, whoever puts it (a client's message, the
timer's, a dead letter's), with the characters of RocketMQ's message rules
(rocketbox_api/message_rules.py): the broker's edge has already applied the rest of that table
to a client's message, so the store refuses none that the edge took.
"""

from __future__ import annotations

from broker.store.codec.encode import encode_host
from broker.store.codec.layout import (
    CRC32_RESERVED_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
)
from broker.store.codec.message import (
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    MessageExtBrokerInner,
)
from broker.store.config import MessageStoreConfig
from broker.store.errors import MessageIllegalError
from rocketbox_api.message_rules import CONTROL_CHARACTERS, shown
from rocketbox_api.names import STORED_TOPIC_PATTERN

# RocketMQ's topic charset; '%' marks system topics (%RETRY%, %DLQ%), '|' namespaced ones.
TOPIC_PATTERN = STORED_TOPIC_PATTERN  # one rule, rocketbox_api/names.py says why '|' is in it
QUEUE_ID_MAX = 2**31 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
PORT_MAX = 65535


# Topics already found valid; bounded, since topic names come from clients.
_VALID_TOPICS: set[tuple[str, int]] = set()
VALID_TOPICS_CACHED_MAX = 10_000


def validate_message(msg: MessageExtBrokerInner, config: MessageStoreConfig) -> None:
    topic = msg.topic
    if (topic, config.topic_length_max) not in _VALID_TOPICS:
        _validate_topic(topic, config)
        if len(_VALID_TOPICS) >= VALID_TOPICS_CACHED_MAX:
            _VALID_TOPICS.clear()
        _VALID_TOPICS.add((topic, config.topic_length_max))
    _validate_rest(msg, config)


def _validate_topic(topic: str, config: MessageStoreConfig) -> None:
    if not topic:
        raise MessageIllegalError("topic", f"1..{config.topic_length_max} characters", "is empty")
    if len(topic) > config.topic_length_max:
        raise MessageIllegalError(
            "topic",
            f"topic_length_max={config.topic_length_max}",
            f"is {len(topic)} characters long",
        )
    if not TOPIC_PATTERN.fullmatch(topic):
        raise MessageIllegalError(
            "topic", "characters %|a-zA-Z0-9_-", f"{shown(topic)} has a character outside the set"
        )


def _validate_rest(msg: MessageExtBrokerInner, config: MessageStoreConfig) -> None:
    if len(msg.body) > config.message_size_bytes_max:
        raise MessageIllegalError(
            "body",
            f"message_size_bytes_max={config.message_size_bytes_max}",
            f"is {len(msg.body)} bytes",
        )
    if not 0 <= msg.queue_id <= QUEUE_ID_MAX:
        raise MessageIllegalError("queue_id", f"0..{QUEUE_ID_MAX}", f"is {msg.queue_id}")
    # Fields the record stores in fixed-width slots: checked here, because a value that does
    # not fit must be refused before the put lock, not fail half-way through a batch. One
    # chained comparison on the common path; the loop below only names the culprit.
    if not (
        INT32_MIN <= msg.flag <= INT32_MAX
        and INT32_MIN <= msg.sysflag <= INT32_MAX
        and INT32_MIN <= msg.reconsume_times <= INT32_MAX
        and INT64_MIN <= msg.born_timestamp_ms <= INT64_MAX
        and INT64_MIN <= msg.prepared_transaction_offset <= INT64_MAX
    ):
        for slot_name, number, low, high in (
            ("flag", msg.flag, INT32_MIN, INT32_MAX),
            ("sysflag", msg.sysflag, INT32_MIN, INT32_MAX),
            ("reconsume_times", msg.reconsume_times, INT32_MIN, INT32_MAX),
            ("born_timestamp_ms", msg.born_timestamp_ms, INT64_MIN, INT64_MAX),
            ("prepared_transaction_offset", msg.prepared_transaction_offset, INT64_MIN, INT64_MAX),
        ):
            if not low <= number <= high:
                raise MessageIllegalError(slot_name, f"{low}..{high}", f"is {number}")
    for host_name, host in (("born_host", msg.born_host), ("store_host", msg.store_host)):
        if not 0 <= host[1] <= PORT_MAX:
            raise MessageIllegalError(host_name, f"port 0..{PORT_MAX}", f"port is {host[1]}")
        try:
            encode_host(host)  # cached: a broker sees few distinct hosts
        except ValueError as e:
            detail = f"{shown(host[0])} is not one"
            raise MessageIllegalError(host_name, "an IP address", detail) from e
    props_len = CRC32_RESERVED_LENGTH
    for name, value in msg.properties.items():
        field = _property_field(name)
        if not name:
            raise MessageIllegalError(field, "non-empty names", "has an empty name")
        if name == PROPERTY_CRC32:
            raise MessageIllegalError(field, "reserved by the store", "is set by the store")
        # C0 and C1 control characters: they break log lines, terminals and the properties
        # framing.
        for text in (name, value):
            if CONTROL_CHARACTERS.search(text):
                raise MessageIllegalError(
                    field, "no control characters", f"contains a control character in {shown(text)}"
                )
        if name == PROPERTY_TAGS and "|" in value:
            raise MessageIllegalError(field, "no '|' in a tag", f"tag {shown(value)} contains '|'")
        props_len += len(name.encode()) + len(value.encode()) + 2
    if props_len > config.properties_length_max:
        raise MessageIllegalError(
            "properties",
            f"properties_length_max={config.properties_length_max} bytes",
            f"encode to {props_len} bytes",
        )
    # Separators are control characters, so the checks above already keep them out.
    assert NAME_VALUE_SEPARATOR < " "
    assert PROPERTY_SEPARATOR < " "


def _property_field(name: str) -> str:
    if name == PROPERTY_TAGS:
        return "tag"
    if name == PROPERTY_KEYS:
        return "keys"
    return f"properties[{shown(name)}]"
