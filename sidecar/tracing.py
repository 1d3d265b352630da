"""The sidecar's trace context and spans (rocketbox_api/tracing.py says what travels and how).

A call's trace context is read from its gRPC metadata once per call, by the handler itself
(``call_trace``): no interceptor, and a call without one costs a scan of its few metadata
entries, each message a comparison with None. Spans are for the operations that happen off
the hot path, each a batch or one message:

| span | when | to the messages' traces |
|---|---|---|
| ``rocketbox.spool`` | one outbox write of spooled entries (spool_writer.py) | a link each |
| ``rocketbox.resend`` | one resend job of the pool: a batch, or one entry | a link each |
| ``rocketbox.resend.send`` | the job's SendMessage to the broker, with retries | its child |
| ``rocketbox.bury`` | an entry buried (dead) by the pool | a child of its |

A send that stores at once records no span: it costs one call, and a span per message would
cost it more than the rest of the sidecar's own work.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import grpc

from outbox.entry import OutboxEntry
from rocketbox_api.tracing import MessageSpans, link_messages, message_attributes, trace_properties

SPANS = MessageSpans("rocketbox.sidecar")


def call_trace(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str] | None:
    """The trace context the call's metadata carries, as message properties (None: none)."""
    return trace_properties(context.invocation_metadata())


def _messages(entries: Sequence[OutboxEntry]) -> Iterator[tuple[str, Mapping[str, str]]]:
    return ((e.message_id, e.message.properties) for e in entries)


@contextmanager
def spool_span(entries: Sequence[OutboxEntry]) -> Iterator[None]:
    """``rocketbox.spool``: one shared outbox write of ``entries``, with their causes."""
    with SPANS.start("rocketbox.spool") as span:
        if span is not None:
            message_attributes(span, "spool", (e.message.topic for e in entries), len(entries))
            span.set_attribute("rocketbox.spool.cause", _joined(e.cause.value for e in entries))
            if len(entries) == 1:
                span.set_attribute("messaging.message.id", entries[0].message_id)
            link_messages(span, _messages(entries))
        yield


@contextmanager
def resend_span(job: Sequence[OutboxEntry]) -> Iterator[None]:
    """``rocketbox.resend``: one resend job of the pool (one entry, or a topic's batch)."""
    with SPANS.start("rocketbox.resend") as span:
        if span is not None:
            message_attributes(span, "resend", (e.message.topic for e in job), len(job))
            span.set_attribute("rocketbox.resend.attempt", max(e.attempts for e in job) + 1)
            if len(job) == 1:
                span.set_attribute("messaging.message.id", job[0].message_id)
            link_messages(span, _messages(job))
        yield


@contextmanager
def resend_send_span(job: Sequence[OutboxEntry]) -> Iterator[None]:
    """``rocketbox.resend.send``: the job's SendMessage to the broker (the producer's retries
    included), a child of its ``rocketbox.resend``."""
    with SPANS.start("rocketbox.resend.send", "PRODUCER") as span:
        if span is not None:
            message_attributes(span, "send", (e.message.topic for e in job), len(job))
            span.set_attribute("messaging.operation.type", "send")
        yield


@contextmanager
def bury_span(entry: OutboxEntry, error: str) -> Iterator[None]:
    """``rocketbox.bury``: the entry buried, a child of its own trace context."""
    with SPANS.start("rocketbox.bury", parent=entry.message.properties) as span:
        if span is not None:
            message_attributes(span, "bury", (entry.message.topic,), 1)
            span.set_attribute("messaging.message.id", entry.message_id)
            span.set_attribute("rocketbox.spool.cause", entry.cause.value)
            span.set_attribute("rocketbox.bury.reason", error)
        yield


def _joined(values: Iterator[str]) -> str:
    """Distinct values, sorted, comma-separated: one cause for most writes."""
    return ",".join(sorted(set(values)))
