"""RocketMQ's message rules (rocketbox_api/message_rules.py): the sidecar and the broker judge a
message alike, so that what the sidecar answers SPOOLED the broker takes when it is sent again.

Proves, on messages hypothesis draws (topics of every kind, tags, keys and message groups with
C0, DEL and C1 control characters, spaces, '|' and blanks; properties with every reserved name
and control characters; counts and sizes around their limits; delivery times around both bounds,
in 1971 and far past; bodies of 0, 1 and about BODY_BYTES_MAX bytes; app ids of every kind): the
sidecar's intake (the app's message converted as the sidecar converts it, then
sidecar/validation.py) and the broker (the producer's wire form through its gRPC validator, then
the store's validation of the message as the broker puts it) both take it, or both refuse it
naming the same field; and the store refuses nothing the gRPC validator took.

Then, one by one, the cases the two disagreed on: the reserved names only one side refused, C1
control characters, delivery times in 1971 and 40 days ago (and 30 days ago, which both take),
SCHEDULE_TOPIC topics; the reserved names hold RocketMQ's own set and the store's; DELAY, the
broker's one exception, is a delay level there and refused by the sidecar; the broker's defaults
are the table's; a fault quotes a value cut, however long it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.config import BrokerConfig
from broker.grpc_service.converter import to_inbound
from broker.grpc_service.protocol import ProtocolError
from broker.grpc_service.validator import validate_message as broker_validate
from broker.grpc_service.validator import validate_topic
from broker.store.codec.message import SYSTEM_PROPERTY_NAMES
from broker.store.config import MessageStoreConfig
from broker.store.validation import validate_message as store_validate
from broker.system_topic import park
from broker.timer_message import SCHEDULE_QUEUE_ID, SCHEDULE_TOPIC
from broker.topic_config import TopicMessageType
from outbox.entry import OutboxMessage
from rocketbox.broker_cli import broker as broker_command
from rocketbox_api.message_rules import (
    BODY_BYTES_MAX,
    DAY_MS,
    DELAY_LEVEL_MAX,
    DELIVERY_AHEAD_MS_MAX,
    DELIVERY_PAST_MS_MAX,
    KEYS_COUNT_MAX,
    MESSAGE_GROUP_BYTES_MAX,
    MESSAGE_ID_LENGTH_MAX,
    RESERVED_PROPERTY_NAMES,
    SHOWN_CHARS_MAX,
    USER_PROPERTIES_BYTES_MAX,
    USER_PROPERTIES_COUNT_MAX,
    message_fault,
)
from rocketbox_api.names import TOPIC_LENGTH_MAX
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.channels import Endpoint
from sidecar.converter import message_id_of, to_outbox_message
from sidecar.errors import SendRejectedError
from sidecar.message_id import MessageIdGenerator
from sidecar.producer import Producer, ProducerConfig
from sidecar.route import WritableQueue
from sidecar.validation import validate_message as sidecar_validate

EXAMPLES_MAX = 600
NOW_MS = time.time_ns() // 1_000_000
QUEUE_NUMS = 8
BORN_HOST = ("127.0.0.1", 40_000)
# 1971-01-01T00:00:00Z: the reported delivery time.
YEAR_1971_MS = 31_536_000_000
# What RocketMQ 5.3.3's MessageConst.STRING_HASH_SET holds: the names a RocketMQ proxy refuses.
ROCKETMQ_RESERVED = frozenset(
    {
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
        "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
        "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
        "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
        "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
        "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
        "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
        "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
    }
)  # fmt: skip
# The names the two sides disagreed on: each refused by one side only.
DRIFTED_NAMES = (
    "DELAY", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "CORRELATION_ID", "INSTANCE_ID",
    "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
)  # fmt: skip
C0_DEL_C1 = ("\x00", "\x01", "\t", "\n", "\x1f", "\x7f", "\x80", "\x85", "\x9f")
# Characters near every rule's edge: controls, separators, whitespace, multi-byte UTF-8.
SPECIAL = (*C0_DEL_C1, " ", "|", "%", "_", "-", "\u00a0", "\u3000", "é", "中", "\U0001f680")
# A wire field's name as the sidecar's API names it.
APP_FIELD = {"delivery_timestamp": "delivery_time"}


@dataclass(frozen=True)
class Verdict:
    taken: bool
    field: str = ""  # the field a refusal names


TAKEN = Verdict(True)


# -- the two sides -------------------------------------------------------------------------------
def sidecar_verdict(m: api.Message) -> tuple[Verdict, OutboxMessage]:
    """The app's message as the sidecar converts and checks it at intake."""
    om = to_outbox_message(m, message_id_of(m, MessageIdGenerator()), NOW_MS)
    try:
        sidecar_validate(om, NOW_MS)
    except SendRejectedError as e:
        return Verdict(False, e.field), om
    return TAKEN, om


_PRODUCER = Producer(ProducerConfig(access_points=(Endpoint("127.0.0.1", 1),)))
_QUEUE = WritableQueue("any", 0, "broker-a", Endpoint("127.0.0.1", 1), frozenset())


def as_sent(om: OutboxMessage) -> pb.Message:
    """The producer's wire form, with what it leaves out because intake refuses it (an empty
    message group, a FIFO message's delivery time) put back: the broker judges the message the
    app gave."""
    wire = _PRODUCER._to_wire(om, _QUEUE)
    sp = wire.system_properties
    if om.message_group is not None and not sp.HasField("message_group"):
        sp.message_group = om.message_group
    if om.delivery_timestamp_ms is not None and not sp.HasField("delivery_timestamp"):
        sp.delivery_timestamp.FromMilliseconds(om.delivery_timestamp_ms)
    return wire


def broker_verdict(wire: pb.Message, store_config: MessageStoreConfig) -> Verdict:
    """The broker's gRPC validator with its default limits, then the store's validation of the
    message as SendMessageService puts it (a delayed one parked for the timer)."""
    broker = BrokerConfig(store=store_config)
    try:
        validate_topic(wire.topic.name)
        kind = broker_validate(
            wire, store_config.message_size_bytes_max, broker.delay_ms_max, QUEUE_NUMS, NOW_MS
        )
    except ProtocolError as e:
        field = e.message.partition(":")[0]
        return Verdict(False, APP_FIELD.get(field, field))
    assert kind is not TopicMessageType.TRANSACTION
    inbound = to_inbound(wire, BORN_HOST, kind, NOW_MS)
    if inbound.deliver_ms is not None and inbound.deliver_ms > NOW_MS:
        park(inbound.inner, SCHEDULE_TOPIC, SCHEDULE_QUEUE_ID, wire.system_properties.queue_id)
    store_validate(inbound.inner, store_config)  # raises: the store refused what the edge took
    return TAKEN


@pytest.fixture(scope="module")
def store_config(tmp_path_factory: pytest.TempPathFactory) -> MessageStoreConfig:
    return MessageStoreConfig(tmp_path_factory.mktemp("store"))


def verdicts(m: api.Message, store_config: MessageStoreConfig) -> tuple[Verdict, Verdict]:
    sidecar, om = sidecar_verdict(m)
    return sidecar, broker_verdict(as_sent(om), store_config)


# -- what hypothesis draws ------------------------------------------------------------------------
T = TypeVar("T")


def mostly(valid: st.SearchStrategy[T], edges: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """``valid`` more often than ``edges``: each field breaks a rule seldom enough that the
    fields checked after it are reached too."""
    return st.sampled_from((False, False, True)).flatmap(lambda edge: edges if edge else valid)


def text(max_size: int, min_size: int = 0) -> st.SearchStrategy[str]:
    characters = st.one_of(st.sampled_from(SPECIAL), st.characters(codec="utf-8"))
    return st.text(characters, min_size=min_size, max_size=max_size)


TOPICS = mostly(
    st.just("Orders"),
    st.one_of(
        st.sampled_from(
            ["t" * TOPIC_LENGTH_MAX, "t" * (TOPIC_LENGTH_MAX + 1), "", "a b", "ns|T", "é",
             "Orders\n", "Orders\x85", "%DLQ%g", "%RETRY%g", "rmq_sys_x", "RMQ_SYS_X",
             "SCHEDULE_TOPIC_X", "%ns%Orders", "TBW102", "ns%TBW102", "BenchmarkTest",
             "ns%rmq_sys_x"]
        ),
        st.text(st.sampled_from("%abZ09_-| é"), min_size=1, max_size=8),
    ),
)  # fmt: skip
BODY_BYTES = mostly(
    st.integers(1, 16), st.sampled_from([0, BODY_BYTES_MAX - 1, BODY_BYTES_MAX, BODY_BYTES_MAX + 1])
)
TAGS = mostly(st.sampled_from([None, "TagA"]), text(6))
KEYS = mostly(
    st.lists(st.sampled_from(["order-1", "k"]), max_size=3),
    st.one_of(
        st.lists(text(8), max_size=4),
        st.lists(st.just("k"), min_size=KEYS_COUNT_MAX - 1, max_size=KEYS_COUNT_MAX + 1),
    ),
)
GROUPS = mostly(
    st.sampled_from([None, None, "g-1"]),
    st.one_of(
        text(6),
        st.text(st.sampled_from("gé中"), min_size=MESSAGE_GROUP_BYTES_MAX // 3 - 1, max_size=66),
    ),
)
# Offsets from now: both bounds, each side of them, and between.
EDGES_MS = (DELIVERY_AHEAD_MS_MAX, -DELIVERY_PAST_MS_MAX)
DELIVERY_MS = mostly(
    st.none(),
    st.one_of(
        st.sampled_from([NOW_MS + e + d for e in EDGES_MS for d in (-1, 0, 1)]),
        st.integers(
            NOW_MS - DELIVERY_PAST_MS_MAX - DAY_MS, NOW_MS + DELIVERY_AHEAD_MS_MAX + DAY_MS
        ),
        st.sampled_from([YEAR_1971_MS, NOW_MS - 40 * DAY_MS, NOW_MS - 10**13, 0, -1]),
    ),
)
PROPERTY_NAMES = st.one_of(
    st.sampled_from(sorted(RESERVED_PROPERTY_NAMES - {"DELAY"})),
    st.sampled_from(["", "region", "traceparent", "Keys", "uniq_key"]),
    text(6, min_size=1),
)
# A DELAY level the broker refuses (its valid levels are test_delay_is_the_brokers_exception's).
BAD_DELAY_LEVELS = st.sampled_from(["0", str(DELAY_LEVEL_MAX + 1), "²", "x", "", " 1", "01x"])
MESSAGE_IDS = mostly(
    st.sampled_from([None, "app-id-1"]),
    st.one_of(
        text(8),
        st.sampled_from(
            ["x" * MESSAGE_ID_LENGTH_MAX, "x" * (MESSAGE_ID_LENGTH_MAX + 1), " ", "a b"]
        ),
    ),
)


@st.composite
def edge_properties(draw: st.DrawFn) -> dict[str, str]:
    props = draw(st.dictionaries(PROPERTY_NAMES, text(6), max_size=5))
    if draw(st.booleans()):
        props["DELAY"] = draw(BAD_DELAY_LEVELS)
    many = draw(st.sampled_from([0, 0, USER_PROPERTIES_COUNT_MAX, USER_PROPERTIES_COUNT_MAX + 1]))
    props.update({f"p{i}": "v" for i in range(many - len(props))})
    if draw(st.booleans()):
        # Near the byte budget, so that the tag, keys and other properties tip it or not.
        props["filler"] = "v" * draw(st.integers(USER_PROPERTIES_BYTES_MAX - 64, 16_400))
    return props


PROPERTIES = mostly(st.sampled_from([{}, {"region": "eu"}]), edge_properties())


@st.composite
def app_messages(draw: st.DrawFn) -> api.Message:
    m = api.Message(
        topic=draw(TOPICS),
        body=b"b" * draw(BODY_BYTES),
        keys=draw(KEYS),
        user_properties=draw(PROPERTIES),
    )
    for name, value in (("tag", draw(TAGS)), ("message_group", draw(GROUPS)),
                        ("message_id", draw(MESSAGE_IDS))):  # fmt: skip
        if value is not None:
            setattr(m, name, value)
    deliver_ms = draw(DELIVERY_MS)
    if deliver_ms is not None:
        m.delivery_time.FromMilliseconds(deliver_ms)
    return m


@settings(
    max_examples=EXAMPLES_MAX,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(m=app_messages())
def test_the_sidecar_and_the_broker_give_the_same_verdict(
    m: api.Message, store_config: MessageStoreConfig
) -> None:
    sidecar, broker = verdicts(m, store_config)
    event(f"refused: {sidecar.field}" if not sidecar.taken else "taken")
    assert sidecar == broker, (sidecar, broker)


# -- the reported drift, one case at a time ------------------------------------------------------
def app_message(
    topic: str = "Orders",
    *,
    keys: tuple[str, ...] = (),
    delivery_ms: int | None = None,
    user_properties: dict[str, str] | None = None,
    optional: dict[str, str] | None = None,
) -> api.Message:
    """A message with the ``optional`` fields (tag, message_group, message_id) given set."""
    m = api.Message(topic=topic, body=b"payload", keys=keys, user_properties=user_properties)
    for name, value in (optional or {}).items():
        setattr(m, name, value)
    if delivery_ms is not None:
        m.delivery_time.FromMilliseconds(delivery_ms)
    return m


REFUSED_BY_BOTH = {
    **{
        f"reserved-{name}": (app_message(user_properties={name: "1"}), "user_properties")
        for name in DRIFTED_NAMES
        if name != "DELAY"
    },
    **{
        f"{field}-{ord(c):#04x}": (app_message(optional={field: value}), field)
        for c in ("\x85", "\x9f", "\x80")
        for field, value in (("tag", f"a{c}"), ("message_group", f"g{c}"), ("message_id", f"i{c}"))
    },
    "keys-C1": (app_message(keys=("k\x85",)), "keys"),
    "property-name-C1": (app_message(user_properties={"k\x85": "v"}), "user_properties"),
    "property-value-C1": (app_message(user_properties={"k": "v\x9f"}), "user_properties"),
    "delivery-1971": (app_message(delivery_ms=YEAR_1971_MS), "delivery_time"),
    "delivery-40-days-ago": (app_message(delivery_ms=NOW_MS - 40 * DAY_MS), "delivery_time"),
    "delivery-past-bound-by-1-ms": (
        app_message(delivery_ms=NOW_MS - DELIVERY_PAST_MS_MAX - 1),
        "delivery_time",
    ),
    "schedule-topic": (app_message(topic="SCHEDULE_TOPIC_XXXX"), "topic"),
    "33-keys": (app_message(keys=("k",) * (KEYS_COUNT_MAX + 1)), "keys"),
    "id-with-a-space": (app_message(optional={"message_id": "a b"}), "message_id"),
}


@pytest.mark.parametrize(("m", "field"), REFUSED_BY_BOTH.values(), ids=REFUSED_BY_BOTH.keys())
def test_what_one_side_refused_both_refuse_naming_the_field(
    m: api.Message, field: str, store_config: MessageStoreConfig
) -> None:
    assert verdicts(m, store_config) == (Verdict(False, field), Verdict(False, field))


@pytest.mark.parametrize(
    "offset_ms", [0, -DELIVERY_PAST_MS_MAX, -DAY_MS, DELIVERY_AHEAD_MS_MAX], ids=str
)
def test_a_delivery_time_within_both_bounds_is_taken_by_both(
    offset_ms: int, store_config: MessageStoreConfig
) -> None:
    m = app_message(delivery_ms=NOW_MS + offset_ms)
    assert verdicts(m, store_config) == (TAKEN, TAKEN)


def test_the_reserved_names_hold_rocketmqs_and_the_stores() -> None:
    assert ROCKETMQ_RESERVED <= RESERVED_PROPERTY_NAMES
    assert SYSTEM_PROPERTY_NAMES <= RESERVED_PROPERTY_NAMES
    assert set(DRIFTED_NAMES) <= RESERVED_PROPERTY_NAMES


def test_delay_is_the_brokers_exception_and_the_sidecar_refuses_it(
    store_config: MessageStoreConfig,
) -> None:
    """rocketbox's broker takes RocketMQ's delay levels as a DELAY property; a RocketMQ proxy
    refuses the name, and the sidecar, which may send to one, refuses it at once."""
    for level in range(1, DELAY_LEVEL_MAX + 1):
        m = app_message(user_properties={"DELAY": str(level)})
        assert verdicts(m, store_config) == (Verdict(False, "user_properties"), TAKEN), level


@pytest.mark.parametrize("value", ["0", str(DELAY_LEVEL_MAX + 1), "²", ""])
def test_a_delay_that_is_no_level_is_refused_by_both(
    value: str, store_config: MessageStoreConfig
) -> None:
    m = app_message(user_properties={"DELAY": value})
    refused = Verdict(False, "user_properties")
    assert verdicts(m, store_config) == (refused, refused)


def test_the_brokers_defaults_are_the_tables(tmp_path: Path) -> None:
    store = MessageStoreConfig(tmp_path)
    assert store.message_size_bytes_max == BODY_BYTES_MAX
    assert store.topic_length_max == TOPIC_LENGTH_MAX
    assert BrokerConfig(store=store).delay_ms_max == DELIVERY_AHEAD_MS_MAX
    [option] = [p for p in broker_command.params if p.name == "message_size_bytes_max"]
    assert option.default == BODY_BYTES_MAX


def test_a_fault_quotes_a_value_cut_however_long() -> None:
    key = "k " * 50_000
    fault = message_fault(
        body_bytes=1, tag=None, keys=[key], message_group=None, delivery_ms=None,
        properties={}, message_id="id", now_ms=NOW_MS,
    )  # fmt: skip
    assert fault is not None
    assert fault.field == "keys"
    assert len(fault.reason) < 2 * SHOWN_CHARS_MAX + 100, fault.reason
    assert f"({len(key)} characters)" in fault.reason
