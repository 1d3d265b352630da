"""A signature is good for the clock skew around the date it signs, and for nothing more: raw,
signed SendMessage calls to a real ``rocketbox broker --auth``.

A signature covers only ``x-mq-date-time``, so whoever captures one may send with it for as long
as the broker takes that date. Proves: a date 10, 15 and 30 minutes, 1, 5 and 13 hours old, or
15 minutes ahead (each a whole number of quarter hours off, or near one: what a broker that
forgave a time zone's offset would take) is refused UNAUTHORIZED, saying the date is not within
the skew, and nothing of it is stored; dates inside the skew, either side, are taken and stored
once each. The broker runs on this machine's clock; the offsets within the skew leave a minute's
margin to its bound, so a slow call does not cross it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.auth.authenticator import CLOCK_SKEW_S_DEFAULT
from rocketbox_api.signing import (
    AUTHORIZATION_HEADER,
    DATE_TIME_FORMAT,
    DATE_TIME_HEADER,
    authorization_value,
)
from tests.broker.auth.auth_broker import Users, auth_broker
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_producer import stored

pytestmark = pytest.mark.slow

TOPIC = "Replay"
USER, SECRET = "sender", "sender-secret-key"
USERS: Users = {USER: (SECRET, [(f"Topic:{TOPIC}", "PUB")])}
CALL_DEADLINE_S = 30.0
MINUTE_S = 60
HOUR_S = 3600
REPLAYED_OFFSETS_S = (
    -10 * MINUTE_S,
    -15 * MINUTE_S,
    -30 * MINUTE_S,
    -HOUR_S,
    -5 * HOUR_S,
    -13 * HOUR_S,
    15 * MINUTE_S,
)
# Inside the default skew, a minute short of its bound each way.
WITHIN_SKEW_OFFSETS_S = (-(CLOCK_SKEW_S_DEFAULT - MINUTE_S), 0, CLOCK_SKEW_S_DEFAULT - MINUTE_S)


@pytest.fixture
def broker_dir(tmp_path: Path) -> Path:
    return tmp_path / "broker"


@pytest.fixture
def broker(broker_dir: Path) -> Iterator[BrokerProcess]:
    with auth_broker(broker_dir, USERS, "--topic", f"{TOPIC}:1") as b:
        yield b


def signed_at(offset_s: int) -> tuple[tuple[str, str], ...]:
    """The metadata of a call signed as USER with a date ``offset_s`` from now (UTC)."""
    date = time.strftime(DATE_TIME_FORMAT, time.gmtime(time.time() + offset_s))
    return (
        ("x-mq-client-id", "replay-test"),
        (DATE_TIME_HEADER, date),
        (AUTHORIZATION_HEADER, authorization_value(USER, SECRET.encode(), date)),
    )


def send(broker: BrokerProcess, offset_s: int, message_id: str) -> spb.SendMessageResponse:
    message = pb.Message(
        topic=pb.Resource(name=TOPIC),
        system_properties=pb.SystemProperties(message_id=message_id, message_type=pb.NORMAL),
        body=f"signed {offset_s} s from now".encode(),
    )
    with grpc.insecure_channel(broker.endpoint) as channel:
        answer: spb.SendMessageResponse = service_pb2_grpc.MessagingServiceStub(
            channel
        ).SendMessage(
            spb.SendMessageRequest(messages=[message]),
            metadata=signed_at(offset_s),
            timeout=CALL_DEADLINE_S,
        )
    return answer


def test_a_signature_is_taken_within_the_skew_alone(
    broker: BrokerProcess, broker_dir: Path
) -> None:
    replayed = {offset_s: uuid.uuid4().hex.upper() for offset_s in REPLAYED_OFFSETS_S}
    for offset_s, message_id in replayed.items():
        answer = send(broker, offset_s, message_id)
        assert answer.status.code == Code.UNAUTHORIZED, (offset_s, answer.status)
        assert f"more than the {CLOCK_SKEW_S_DEFAULT} s allowed" in answer.status.message
        assert SECRET not in answer.status.message
    taken = {offset_s: uuid.uuid4().hex.upper() for offset_s in WITHIN_SKEW_OFFSETS_S}
    for offset_s, message_id in taken.items():
        answer = send(broker, offset_s, message_id)
        assert answer.status.code == Code.OK, (offset_s, answer.status)
    broker.stop()

    with stored(broker_dir) as store:
        for offset_s, message_id in replayed.items():
            assert store.query_message_by_id(message_id, TOPIC) == [], offset_s
        for offset_s, message_id in taken.items():
            assert len(store.query_message_by_id(message_id, TOPIC)) == 1, offset_s
        # The topic's one queue holds the taken sends and nothing else.
        assert store.get_max_offset_in_queue(TOPIC, 0) == len(taken)
