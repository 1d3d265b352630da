"""The checks a message passes at intake, before anything is sent or spooled.

They are RocketMQ's message rules, the one table the broker checks too
(rocketbox_api/message_rules.py), applied here so that a message the broker would refuse forever
is refused at once, even while the broker is down: such a message must be REJECTED, never
spooled. Each error names the field and the limit.

``validate_message`` checks the message as intake sees it; ``validate_timestamp`` checks what
only the protobuf form has (a Timestamp's seconds and nanos), for the converter, before it
converts.
"""

from __future__ import annotations

from outbox.entry import OutboxMessage
from rocketbox_api.message_rules import message_fault, topic_fault
from rocketbox_api.names import namespaced
from rocketbox_api.protobuf_ranges import NANOS_MAX, TIMESTAMP_SECONDS_MAX, TIMESTAMP_SECONDS_MIN
from sidecar import clock
from sidecar.errors import SendRejectedError


def validate_timestamp(field: str, seconds: int, nanos: int) -> None:
    """A google.protobuf.Timestamp's fields, checked before it is converted (converter.py): the
    conversion itself refuses a timestamp outside the range with an error naming no field."""
    if not TIMESTAMP_SECONDS_MIN <= seconds <= TIMESTAMP_SECONDS_MAX:
        raise SendRejectedError(
            field,
            f"seconds is {seconds}; google.protobuf.Timestamp allows {TIMESTAMP_SECONDS_MIN:,} "
            f"to {TIMESTAMP_SECONDS_MAX:,} (years 0001 to 9999)",
        )
    if not 0 <= nanos <= NANOS_MAX:
        raise SendRejectedError(
            field,
            f"nanos is {nanos}; google.protobuf.Timestamp allows 0 to {NANOS_MAX:,}",
        )


def validate_message(m: OutboxMessage, now_ms: int | None = None, namespace: str = "") -> None:
    """Raise SendRejectedError naming the first field that RocketMQ would refuse. The limits are
    RocketMQ's defaults: a broker configured below them may still refuse what passes here.

    ``namespace``: the sidecar's own; the broker checks the topic as it stores it,
    ``NAMESPACE%TOPIC``, so its length counts the namespace too."""
    fault = topic_fault(namespaced(namespace, m.topic))
    if fault is None:
        delivery_ms = m.delivery_timestamp_ms
        if now_ms is None:
            now_ms = clock.now_ms() if delivery_ms is not None else 0
        fault = message_fault(
            body_bytes=len(m.body),
            tag=m.tag,
            keys=m.keys,
            message_group=m.message_group,
            delivery_ms=delivery_ms,
            properties=m.properties,
            message_id=m.message_id,
            now_ms=now_ms,
        )
    if fault is not None:
        raise SendRejectedError(fault.field, fault.reason)
