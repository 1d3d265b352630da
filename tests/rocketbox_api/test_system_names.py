"""The topics and consumer groups RocketMQ keeps for itself (rocketbox_api/message_rules.py's
SYSTEM_TOPIC_NAMES, SYSTEM_TOPIC_PREFIXES and SYSTEM_GROUP_PREFIXES), refused by every edge that
takes a name, from the one table.

Proves: the table holds RocketMQ's TopicValidator set (TBW102 among it); the sidecar's intake and
the broker's gRPC edge refuse each such topic naming the topic (ILLEGAL_TOPIC, as RocketMQ's proxy
answers), also as a namespace's topic; the gRPC edge refuses a group of RocketMQ's system prefix
or of a retry or dead-letter topic's prefix (ILLEGAL_CONSUMER_GROUP), in a namespace too, and the
broker's group table refuses to create one; names that only look alike are taken. Then, against
a real broker: the official Python Producer sending to TBW102 is refused ILLEGAL_TOPIC and the
topic is not auto-created; the official SimpleConsumer in group ``%RETRY%x`` or ``CID_RMQ_SYS_x``
is refused ILLEGAL_CONSUMER_GROUP; ``rocketbox topic create TBW102`` and ``rocketbox group create
%RETRY%x`` are refused naming the name, and so are a broker's ``--topic TBW102`` and ``--group
CID_RMQ_SYS_x``, before its store opens, without a traceback. (The sidecar refusing them while
its broker is down: tests/sidecar/test_rules_while_broker_down.py.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import Code

from broker.group_config import validate_group_name
from broker.grpc_service.protocol import ProtocolError
from broker.grpc_service.validator import validate_group, validate_topic
from broker.store.errors import MessageIllegalError
from outbox.entry import OutboxMessage
from rocketbox_api.message_rules import SYSTEM_TOPIC_NAMES, group_fault, topic_fault
from sidecar.errors import SendRejectedError
from sidecar.validation import validate_message
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_consumer import simple_consumer
from tests.broker.grpc_service.test_producer import message, producer
from tests.rocketbox_process import rocketbox_cli

# RocketMQ 5.3's TopicValidator.SYSTEM_TOPIC_SET: what its proxy answers "cannot access system
# topic" (ILLEGAL_TOPIC).
ROCKETMQ_SYSTEM_TOPICS = frozenset(
    {
        "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
    }
)  # fmt: skip
SYSTEM_TOPICS = [*sorted(ROCKETMQ_SYSTEM_TOPICS), "rmq_sys_x", "shop%TBW102", "shop%rmq_sys_x"]
SYSTEM_GROUPS = ["%RETRY%x", "%DLQ%x", "CID_RMQ_SYS_x", "shop%CID_RMQ_SYS_x"]
# Alike, but no system name: RocketMQ takes each.
ALIKE_TOPICS = ["TBW1020", "tbw102", "TBW102-orders", "shop%Orders", "BenchmarkTests"]
ALIKE_GROUPS = ["readers", "shop%readers", "CID_RMQ_SYSx", "RETRY-readers", "cid_rmq_sys_x"]


def test_the_table_holds_rocketmqs_system_topics() -> None:
    assert ROCKETMQ_SYSTEM_TOPICS <= SYSTEM_TOPIC_NAMES


def sidecar_refusal(topic: str) -> SendRejectedError | None:
    try:
        validate_message(OutboxMessage(topic=topic, body=b"b", message_id="id-1"))
    except SendRejectedError as e:
        return e
    return None


def broker_refusal(check: Callable[[str], None], name: str) -> ProtocolError | None:
    try:
        check(name)
    except ProtocolError as e:
        return e
    return None


@pytest.mark.parametrize("topic", SYSTEM_TOPICS)
def test_the_sidecar_and_the_broker_refuse_a_system_topic_naming_it(topic: str) -> None:
    sidecar = sidecar_refusal(topic)
    assert sidecar is not None, topic
    assert (sidecar.field, sidecar.reason) == ("topic", f"{topic!r} is a system topic")
    broker = broker_refusal(validate_topic, topic)
    assert broker is not None, topic
    assert broker.code == Code.ILLEGAL_TOPIC
    assert broker.message == f"topic: {topic!r} is a system topic"
    # A consumer may read a dead-letter topic, never these.
    assert broker_refusal(lambda t: validate_topic(t, allow_dead_letter=True), topic) is not None


@pytest.mark.parametrize("topic", ALIKE_TOPICS)
def test_a_topic_only_alike_is_taken_by_both(topic: str) -> None:
    assert topic_fault(topic) is None
    assert sidecar_refusal(topic) is None
    assert broker_refusal(validate_topic, topic) is None


@pytest.mark.parametrize("group", SYSTEM_GROUPS)
def test_the_broker_refuses_a_system_group_naming_it(group: str) -> None:
    refused = broker_refusal(validate_group, group)
    assert refused is not None, group
    assert refused.code == Code.ILLEGAL_CONSUMER_GROUP
    assert refused.message == (
        f"group: {group!r} is a system group (limit: no prefix of CID_RMQ_SYS_, %RETRY%, %DLQ%)"
    )
    with pytest.raises(MessageIllegalError, match="is a system group"):
        validate_group_name(group)


@pytest.mark.parametrize("group", ALIKE_GROUPS)
def test_a_group_only_alike_is_taken(group: str) -> None:
    assert group_fault(group) is None
    assert broker_refusal(validate_group, group) is None
    validate_group_name(group)


# -- a real broker, the official clients and the CLI ---------------------------------------------
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Topics created on first use: TBW102 must not be one."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker"), "--auto-create-topic", "--topic", "Orders")
    yield b
    b.stop()


@pytest.mark.slow
def test_the_official_producer_sending_to_tbw102_is_refused(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    # The client asks the topic's route first; refused, it logs the status and raises.
    with (
        pytest.raises(Exception, match="route"),
        producer(broker.endpoint, ("TBW102",)) as p,
    ):
        p.send(message("TBW102", b"to a system topic"))
    assert f"{Code.ILLEGAL_TOPIC}, topic: 'TBW102' is a system topic" in caplog.text
    with producer(broker.endpoint, ("Orders",)) as p:
        assert p.send(message("Orders", b"beside it")).message_id
    listed = rocketbox_cli("topic", "list", broker=broker.endpoint)
    assert listed.returncode == 0, listed
    assert "Orders" in listed.stdout
    assert "TBW102" not in listed.stdout, "a system topic was created on first use"


@pytest.mark.parametrize("group", ["%RETRY%x", "CID_RMQ_SYS_x"])
@pytest.mark.slow
def test_the_official_consumer_in_a_system_group_is_refused(
    broker: BrokerProcess, group: str
) -> None:
    with (
        pytest.raises(Exception) as refused,  # noqa: PT011 - the client's own class
        simple_consumer(broker.endpoint, group, "Orders", 1) as c,
    ):
        c.receive(1, 10)
    assert getattr(refused.value, "code", None) == Code.ILLEGAL_CONSUMER_GROUP, refused.value
    assert f"{group!r} is a system group" in str(refused.value)


@pytest.mark.slow
def test_the_admin_cli_refuses_to_create_a_system_topic_or_group(broker: BrokerProcess) -> None:
    topic = rocketbox_cli("topic", "create", "TBW102", broker=broker.endpoint)
    assert topic.returncode != 0, topic
    assert "'TBW102' is a system topic" in topic.stderr, topic
    group = rocketbox_cli("group", "create", "%RETRY%x", broker=broker.endpoint)
    assert group.returncode != 0, group
    assert "'%RETRY%x' is a system group" in group.stderr, group


@pytest.mark.parametrize(
    ("option", "said"),
    [(("--topic", "TBW102"), "topic: 'TBW102' is a system topic"),
     (("--group", "CID_RMQ_SYS_x"), "group: 'CID_RMQ_SYS_x' is a system group")],
    ids=["topic", "group"],
)  # fmt: skip
@pytest.mark.slow
def test_a_broker_asked_to_create_a_system_name_at_start_refuses_it(
    tmp_path: Path, option: tuple[str, str], said: str
) -> None:
    data_dir = tmp_path / "data"
    done = rocketbox_cli("broker", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *option)
    assert done.returncode == 2, done
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not data_dir.exists()
