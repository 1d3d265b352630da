"""What each apache.rocketmq.v2 call touches, for the ACL: the resources and the action on each
(RocketMQ's own mapping, abridged to PUB and SUB).

| call | needs |
|---|---|
| SendMessage, EndTransaction, RecallMessage | PUB on each topic |
| QueryRoute | PUB or SUB on the topic |
| consuming calls: Receive, Ack, ChangeInvisibleDuration, dead-lettering, | SUB on the topic and |
| QueryAssignment, Pull, UpdateOffset, GetOffset                           | the group            |
| QueryOffset | SUB on the topic |
| Heartbeat, NotifyClientTermination | SUB on the group, when one is named (a consumer) |
| Telemetry's Settings | PUB on each publishing topic; SUB on the subscription's group and topics |

Also the namespace's fall-back (``namespace_of``): the resource a request names first, whose
``resource_namespace`` counts when the metadata names none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.auth.acl import Action, ResourceType

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
PUB, SUB = (Action.PUB,), (Action.SUB,)
PUB_OR_SUB = (Action.PUB, Action.SUB)
# (resource type, stored name, any one of these actions suffices)
Need: TypeAlias = tuple[ResourceType, str, tuple[Action, ...]]


def _topic_and_group(topic: pb.Resource, group: pb.Resource) -> Iterator[Need]:
    yield TOPIC, topic.name, SUB
    yield GROUP, group.name, SUB


def _group_if_named(request: Any) -> Iterator[Need]:
    if request.HasField("group") and request.group.name:
        yield GROUP, request.group.name, SUB


def settings_needs(settings: pb.Settings) -> Iterator[Need]:
    for topic in settings.publishing.topics:
        yield TOPIC, topic.name, PUB
    if settings.HasField("subscription"):
        subscription = settings.subscription
        if subscription.group.name:
            yield GROUP, subscription.group.name, SUB
        for entry in subscription.subscriptions:
            yield TOPIC, entry.topic.name, SUB


NEEDS: dict[str, Callable[[Any], Iterator[Need]]] = {
    "QueryRoute": lambda r: iter(((TOPIC, r.topic.name, PUB_OR_SUB),)),
    "SendMessage": lambda r: ((TOPIC, name, PUB) for name in {m.topic.name for m in r.messages}),
    "EndTransaction": lambda r: iter(((TOPIC, r.topic.name, PUB),)),
    "RecallMessage": lambda r: iter(((TOPIC, r.topic.name, PUB),)),
    "Heartbeat": _group_if_named,
    "NotifyClientTermination": _group_if_named,
    "ReceiveMessage": lambda r: _topic_and_group(r.message_queue.topic, r.group),
    "PullMessage": lambda r: _topic_and_group(r.message_queue.topic, r.group),
    "UpdateOffset": lambda r: _topic_and_group(r.message_queue.topic, r.group),
    "GetOffset": lambda r: _topic_and_group(r.message_queue.topic, r.group),
    "QueryOffset": lambda r: iter(((TOPIC, r.message_queue.topic.name, SUB),)),
    "AckMessage": lambda r: _topic_and_group(r.topic, r.group),
    "ChangeInvisibleDuration": lambda r: _topic_and_group(r.topic, r.group),
    "ForwardMessageToDeadLetterQueue": lambda r: _topic_and_group(r.topic, r.group),
    "QueryAssignment": lambda r: _topic_and_group(r.topic, r.group),
    "SyncLiteSubscription": lambda r: _topic_and_group(r.topic, r.group),
}

# The resource each request names first (Telemetry: its Settings, read per command).
_FIRST: dict[str, Callable[[Any], pb.Resource]] = {
    "SendMessage": lambda r: r.messages[0].topic if r.messages else pb.Resource(),
    "ReceiveMessage": lambda r: r.message_queue.topic,
    "PullMessage": lambda r: r.message_queue.topic,
    "UpdateOffset": lambda r: r.message_queue.topic,
    "GetOffset": lambda r: r.message_queue.topic,
    "QueryOffset": lambda r: r.message_queue.topic,
    "Heartbeat": lambda r: r.group,
    "NotifyClientTermination": lambda r: r.group,
}


def namespace_of(method: str, request: Any) -> str:
    """The ``resource_namespace`` of the resource ``request`` names first; "" if none."""
    first = _FIRST.get(method)
    if first is not None:
        return str(first(request).resource_namespace)
    topic = getattr(request, "topic", None)
    return str(topic.resource_namespace) if isinstance(topic, pb.Resource) else ""
