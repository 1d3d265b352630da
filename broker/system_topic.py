"""Messages parked under a system topic and later put back under their real topic.

Delayed messages wait under ``SCHEDULE_TOPIC_XXXX`` and transactional half messages under
``RMQ_SYS_TRANS_HALF_TOPIC`` (RocketMQ's design): both keep their real topic and queue as the
``REAL_TOPIC`` / ``REAL_QID`` properties, and both come back as a copy with the same message id.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.store.codec.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    MessageExt,
    MessageExtBrokerInner,
)


def park(
    inner: MessageExtBrokerInner, system_topic: str, system_queue_id: int, real_queue_id: int
) -> None:
    """Turn a message for its topic into the copy that waits under ``system_topic``."""
    inner.properties[PROPERTY_REAL_TOPIC] = inner.topic
    inner.properties[PROPERTY_REAL_QUEUE_ID] = str(real_queue_id)
    inner.topic = system_topic
    inner.queue_id = system_queue_id


def real_topic_of(msg: MessageExt) -> str:
    return msg.properties.get(PROPERTY_REAL_TOPIC, "")


def unparked_copy(msg: MessageExt, drop: Iterable[str] = ()) -> MessageExtBrokerInner:
    """The message for its real topic and queue, without the parking properties (and ``drop``)."""
    props = msg.properties_for_copy()
    real_topic = props.pop(PROPERTY_REAL_TOPIC, "")
    real_queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0"))
    for name in drop:
        props.pop(name, None)
    return MessageExtBrokerInner(
        topic=real_topic,
        body=msg.body,
        queue_id=real_queue_id,
        flag=msg.flag,
        properties=props,
        born_timestamp_ms=msg.born_timestamp_ms,
        born_host=msg.born_host,
    )
