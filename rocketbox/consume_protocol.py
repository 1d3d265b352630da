"""``rocketbox consume``'s side of apache.rocketmq.v2, which any endpoint serves (a rocketbox
broker, an Apache RocketMQ 5 proxy): the topic's route, receives that take each broker in turn,
and what a failure tells the operator.

Why each broker in turn: a ReceiveMessage is answered by the one broker its queue names (the
proxy pops only there), and the official SimpleConsumer's ``receive`` walks the route queue by
queue, so on a proxy with two brokers of eight queues each it would take up to nine empty
receives to hear from both. ``BrokerRotation`` asks each broker once a round (the client's own
request, receive and decoding: ``_receive_req`` and ``_receive``, the calls its ``receive``
makes), so "nothing arrived" is known after one empty round. Acks, Telemetry and Heartbeat are
the SimpleConsumer's own; ``wait_for_settings`` holds the first receive until the endpoint has
the consumer's Settings, as a proxy wants.

Failures (``consume_failure``): TOPIC_NOT_FOUND and CONSUMER_GROUP_NOT_FOUND say how to create
the topic or group on Apache RocketMQ (mqadmin) and on rocketbox; UNAVAILABLE and
DEADLINE_EXCEEDED are "unreachable"; UNIMPLEMENTED means the endpoint serves no v2 at all.
"""

from __future__ import annotations

from typing import Any

import click
import grpc
from rocketmq import SimpleConsumer
from rocketmq.grpc_protocol import Code, Permission, Resource, service_pb2, service_pb2_grpc
from rocketmq.v5.exception import ClientException
from rocketmq.v5.model import MessageQueue

from rocketbox import admin_client as admin
from rocketbox.admin_errors import MQADMIN_EQUIVALENTS, BrokerUnreachableError, NotServedError
from rocketbox.exit_codes import FAILED_EXIT_CODE

CONSUME_ERROR_EXIT_CODE = FAILED_EXIT_CODE
# RocketMQ's master broker id: a SimpleConsumer receives from masters only.
MASTER_BROKER_ID = 0
# A proxy polls at least this long whatever the request asks (its
# grpcClientConsumerMinLongPollingTimeoutMillis), and refuses a receive whose deadline leaves
# less (ILLEGAL_POLLING_TIME): a shorter --wait-s still gets a deadline that allows it.
PROXY_LONG_POLLING_MIN_S = 5
# How long a started consumer waits for the endpoint's answer to its Settings (Telemetry).
SETTINGS_WAIT_S = 10.0
_READABLE = frozenset({Permission.READ, Permission.READ_WRITE})
_UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class ConsumeError(click.ClickException):
    exit_code = CONSUME_ERROR_EXIT_CODE


def unreachable(text: str) -> BrokerUnreachableError:
    return BrokerUnreachableError(
        f"{text}; is `rocketbox up` (or `rocketbox broker`) running? Point --broker or "
        "ROCKETBOX_BROKER at it."
    )


def _how_to_create(kind: str, name: str) -> str:
    """How to create topic or group ``name``: RocketMQ's mqadmin command, and rocketbox's."""
    mqadmin = MQADMIN_EQUIVALENTS[(kind, "create")].replace(f"<{kind}>", name)
    return (
        f"create it on Apache RocketMQ with `{mqadmin}`, on a rocketbox broker with "
        f"`rocketbox {kind} create {name}`"
    )


def topic_not_found(endpoint: str, topic: str) -> ConsumeError:
    return ConsumeError(
        f"topic {topic} does not exist on {endpoint} (TOPIC_NOT_FOUND): send to it first where "
        f"topics are created on first use, or {_how_to_create('topic', topic)}"
    )


def group_not_found(endpoint: str, group: str) -> ConsumeError:
    return ConsumeError(
        f"consumer group {group} does not exist on {endpoint} (CONSUMER_GROUP_NOT_FOUND): "
        f"{_how_to_create('group', group)}"
    )


def consume_failure(
    e: BaseException, endpoint: str, topic: str, group: str
) -> click.ClickException:
    """What a failed v2 call (a status the client raised, or a gRPC error) tells the operator;
    ``topic`` and ``group`` as stored (NAMESPACE%NAME)."""
    if isinstance(e, ClientException):
        if e.code == Code.TOPIC_NOT_FOUND:
            return topic_not_found(endpoint, topic)
        if e.code == Code.CONSUMER_GROUP_NOT_FOUND:
            return group_not_found(endpoint, group)
        code = Code.Name(e.code) if e.code in Code.values() else str(e.code)
        return ConsumeError(f"{endpoint} answered {code}: {e.args[0] if e.args else ''}")
    if isinstance(e, grpc.RpcError):
        status, details = e.code(), e.details() or ""
        if status in _UNREACHABLE_CODES:
            return unreachable(f"{endpoint}: {status.name}: {details}")
        if status is grpc.StatusCode.UNIMPLEMENTED:
            return NotServedError(
                f"{endpoint} does not serve apache.rocketmq.v2.MessagingService: point --broker "
                "at a rocketbox broker or an Apache RocketMQ proxy"
            )
        return ConsumeError(f"{endpoint} answered {status.name}: {details}")
    return ConsumeError(f"{endpoint}: {e}")


def broker_queues(consumer: SimpleConsumer, endpoint: str, topic: str) -> list[MessageQueue]:
    """QueryRoute for ``topic`` as the consumer asks it (its client id, signature, namespace):
    one readable master queue of each broker, in the route's order. Raises the answer's status
    as the client would (ClientException), or the gRPC error: an unknown topic or an endpoint
    that is no v2 one fails here, at once, where the client's own route look-ups only log."""
    config = consumer.client_configuration
    request = service_pb2.QueryRouteRequest(
        topic=Resource(name=topic, resource_namespace=config.namespace),
        endpoints=config.rpc_endpoints.endpoints,
    )
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answer = stub.QueryRoute(request, timeout=admin.CALL_DEADLINE_S, metadata=consumer.sign())
    if answer.status.code != Code.OK:
        raise ClientException(answer.status.message, answer.status.code)
    first: dict[str, Any] = {}
    for queue in answer.message_queues:
        if queue.permission in _READABLE and queue.broker.id == MASTER_BROKER_ID:
            first.setdefault(queue.broker.name, queue)
    if not first:
        raise ClientException(f"no readable queue of topic {topic}", Code.FORBIDDEN)
    return [MessageQueue(queue) for queue in first.values()]


def wait_for_settings(consumer: SimpleConsumer) -> None:
    """Returns once the endpoint has answered the started ``consumer``'s Settings: a proxy
    refuses a receive from a client whose Settings it does not hold yet (INTERNAL_SERVER_ERROR),
    and the SimpleConsumer, unlike the PushConsumer, does not wait for them. An endpoint that
    never answers Settings is given SETTINGS_WAIT_S, then the receives go ahead."""
    consumer._init_settings_event.wait(SETTINGS_WAIT_S)  # set by its reset_setting


class BrokerRotation:
    """Receives for one topic of a started SimpleConsumer, each broker of the route in turn."""

    def __init__(self, consumer: SimpleConsumer, topic: str, queues: list[MessageQueue]) -> None:
        assert queues, "a route with no readable queue is refused by broker_queues"
        self._consumer = consumer
        self._topic = topic
        self._queues = queues
        self._next = 0

    @property
    def brokers(self) -> int:
        return len(self._queues)

    def receive(self, max_messages: int, invisible_duration_s: int, wait_s: int) -> list[Any]:
        """The next broker's messages (rocketmq.v5.model.Message), waiting up to ``wait_s`` (a
        proxy: up to PROXY_LONG_POLLING_MIN_S at least)."""
        queue = self._queues[self._next]
        self._next = (self._next + 1) % len(self._queues)
        consumer = self._consumer
        request = consumer._receive_req(
            self._topic, queue, max_messages, False, invisible_duration_s, wait_s
        )
        poll_s = max(wait_s, PROXY_LONG_POLLING_MIN_S)
        timeout_s = consumer.client_configuration.request_timeout + poll_s
        messages: list[Any] = consumer._receive(queue, request, timeout_s)
        return messages
