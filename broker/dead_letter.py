"""Dead-lettering: a message past its group's maximum delivery attempts (or one a consumer gave
up on, ForwardMessageToDeadLetterQueue) is copied to ``%DLQ%<group>``, as RocketMQ does.

The copy keeps the message's properties (its user properties, a W3C ``traceparent`` among
them), adds where it came from (``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``) and keeps its message id.
Each dead-lettering is one ``rocketbox.dead_letter`` span, a child of the message's own trace
context when it carries one (rocketbox_api/tracing.py): the trace of an order that went wrong
shows where it ended.
"""

from __future__ import annotations

import logging

from broker.group_config import dlq_topic
from broker.store.codec.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    MessageExt,
    MessageExtBrokerInner,
)
from broker.store.message_store import DefaultMessageStore
from broker.topic_config import TopicConfigManager
from rocketbox_api.tracing import MessageSpans, message_attributes

LOG = logging.getLogger(__name__)
SPANS = MessageSpans("rocketbox.broker")


async def dead_letter(
    store: DefaultMessageStore,
    topics: TopicConfigManager,
    group: str,
    msg: MessageExt,
    attempts: int,
) -> None:
    """Store a copy of ``msg`` in ``%DLQ%<group>`` (the topic made on first use); raises
    RuntimeError when the store refuses it."""
    with SPANS.start("rocketbox.dead_letter", parent=msg.properties) as span:
        if span is not None:
            message_attributes(span, "dead_letter", (msg.topic,), 1)
            span.set_attribute("messaging.message.id", msg.msg_id or "")
            span.set_attribute("messaging.consumer.group.name", group)
            span.set_attribute("rocketbox.dead_letter.topic", dlq_topic(group))
            span.set_attribute("rocketbox.delivery_attempts", attempts)
        props = msg.properties_for_copy()
        props[PROPERTY_RETRY_TOPIC] = msg.topic
        props[PROPERTY_ORIGIN_MESSAGE_ID] = msg.msg_id or ""
        # The DLQ is a topic like any other: consumers subscribe to it by name.
        topics.create(dlq_topic(group), 1, exist_ok=True, allow_system=True)
        copy = MessageExtBrokerInner(
            topic=dlq_topic(group),
            body=msg.body,
            properties=props,
            born_timestamp_ms=msg.born_timestamp_ms,
            born_host=msg.born_host,
            reconsume_times=attempts,
        )
        [result] = await store.async_put_messages([copy])
        if not result.ok:
            raise RuntimeError(f"dead-lettering {msg.msg_id} failed: {result.status.value}")
    LOG.info(
        "message %s of %s dead-lettered for group %s after %s attempts",
        msg.msg_id, msg.topic, group, attempts,
        extra={"message_id": msg.msg_id, "topic": msg.topic},
    )  # fmt: skip
