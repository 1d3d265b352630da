"""Messages, configs and refusal checks the validation tests share (test_validation.py,
test_validation_in_store.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.store.codec.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    HostAddress,
    MessageExtBrokerInner,
)
from broker.store.config import (
    PROPERTIES_LENGTH_MAX,
    MessageStoreConfig,
)
from broker.store.errors import MessageIllegalError
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
        "message_size_bytes_max": MAX_BODY_BYTES,
        "mapped_file_size_consume_queue_entries": 1000,
        "hash_slot_num": 1000,
        "index_num_max": 4000,
        **overrides,
    }
    return MessageStoreConfig(root, **fields)


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


def property_field(name: str) -> str:
    return f"properties[{name!r}]"


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


# One of each kind through the store: an int32, an int64 and a host.
OUT_OF_WIDTH_IN_THE_STORE = [
    p
    for p in OUT_OF_WIDTH
    if p.id in ("flag-over-int32", "born-ts-over-int64", "born-host-not-an-ip")
]
assert len(OUT_OF_WIDTH_IN_THE_STORE) == 3
