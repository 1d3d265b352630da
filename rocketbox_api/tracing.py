"""W3C trace context in message properties, and the OpenTelemetry spans of rocketbox's own
operations on a message (the sidecar's spool, resend and bury, the broker's dead-lettering).

What travels: a message's trace context is two user properties, ``traceparent`` and
``tracestate``, named as the W3C header and OpenTelemetry's messaging conventions name them. Being
user properties, they are stored with the message in the outbox and at the broker and delivered to
its consumers, so a consumer's trace links to the producer's whatever happened in between.
``trace_properties`` reads them from a call's gRPC metadata, checked as W3C Trace Context says
(an invalid ``traceparent`` is ignored, and its ``tracestate`` with it).

Spans are optional: with ``opentelemetry`` not importable, ``MessageSpans.start`` yields None
and does nothing else. Otherwise spans come from the global TracerProvider, which the operator
configures (``OTEL_*`` variables, docs/tracing.md); until one is set the API's no-op provider
answers, and nothing below a span's start runs unless the span is recording. A batch operation
is one span with a link to each message's context (at most ``SPAN_LINKS_MAX``), as the messaging
conventions recommend for batches; an operation on one message is a child of its context.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: every span is a no-op
    trace = None  # type: ignore[assignment]  # the module's stand-in, tested before any use

if TYPE_CHECKING:
    from opentelemetry.trace import Span

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# W3C Trace Context's own limits on tracestate: what a vendor must propagate at least, and
# what a longer one may be cut to; rocketbox drops a longer one rather than cut it.
TRACESTATE_CHARS_MAX = 512
TRACESTATE_MEMBERS_MAX = 32
# Links on one batch span: a spool write (256 entries at most) or a resend batch (128) links
# each message up to this; OpenTelemetry's SDK keeps 128 links a span by default too.
SPAN_LINKS_MAX = 128
MESSAGING_SYSTEM = "rocketmq"

# version-trace_id-span_id-flags, lowercase hex; a later version may append "-<more>".
TRACEPARENT_FORMAT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?")
TRACESTATE_MEMBER = re.compile(
    r"[a-z0-9][_0-9a-z\-*/@]{0,255}=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
ZERO_TRACE_ID = "0" * 32
ZERO_SPAN_ID = "0" * 16


def valid_traceparent(value: str) -> bool:
    """W3C's traceparent: version 00 exactly as it is defined, a later one (not ff) read as far
    as 00 goes; neither id all zeros."""
    found = TRACEPARENT_FORMAT.fullmatch(value)
    if found is None:
        return False
    version, trace_id, span_id, more = found.groups()
    if version == "ff" or (version == "00" and more is not None):
        return False
    return trace_id != ZERO_TRACE_ID and span_id != ZERO_SPAN_ID


def valid_tracestate(value: str) -> bool:
    """W3C's tracestate: at most TRACESTATE_CHARS_MAX characters and TRACESTATE_MEMBERS_MAX
    ``key=value`` members (empty ones, between commas, allowed and not counted)."""
    if len(value) > TRACESTATE_CHARS_MAX:
        return False
    members = [m.strip(" \t") for m in value.split(",")]
    members = [m for m in members if m]
    return len(members) <= TRACESTATE_MEMBERS_MAX and all(
        TRACESTATE_MEMBER.fullmatch(m) for m in members
    )


def trace_properties(metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, str] | None:
    """The trace context a call's gRPC metadata carries, as the message properties to add;
    None when it carries no valid ``traceparent`` (W3C: an invalid one is ignored, and a
    ``tracestate`` without it). An invalid ``tracestate`` beside a valid parent is left out."""
    parents: list[str] = []
    states: list[str] = []
    for key, value in metadata or ():
        if key == TRACEPARENT and isinstance(value, str):
            parents.append(value)
        elif key == TRACESTATE and isinstance(value, str):
            states.append(value)
    # Two parents are two answers to one question: W3C has a receiver ignore them both.
    if len(parents) != 1 or not valid_traceparent(parents[0]):
        return None
    found = {TRACEPARENT: parents[0]}
    # Several tracestate fields are one list, joined with commas (RFC 9110, 5.3).
    state = ",".join(states)
    if state and valid_tracestate(state):
        found[TRACESTATE] = state
    return found


def with_trace(properties: dict[str, str], trace_context: Mapping[str, str]) -> None:
    """Adds the call's trace context to a message's properties unless the message has its own
    ``traceparent``: the app's properties are the app's, kept as sent."""
    if TRACEPARENT not in properties:
        for name, value in trace_context.items():
            properties.setdefault(name, value)


def traced_properties(
    user_properties: Mapping[str, str], trace_context: Mapping[str, str] | None
) -> dict[str, str]:
    """A message's properties: the app's, with the call's trace context (``with_trace``)."""
    properties = dict(user_properties)
    if trace_context is not None:
        with_trace(properties, trace_context)
    return properties


class MessageSpans:
    """Spans of one part of rocketbox (``scope``: its instrumentation scope name)."""

    def __init__(self, scope: str) -> None:
        self._scope = scope

    @contextmanager
    def start(
        self,
        name: str,
        kind: str = "INTERNAL",
        parent: Mapping[str, str] | None = None,
    ) -> Iterator[Span | None]:
        """A span named ``name`` of ``kind`` (a SpanKind's name), current for the block; it
        yields the span when it records, else None. ``parent``: a message's properties, whose
        trace context (if valid) is the span's parent; otherwise the current span is."""
        if trace is None:
            yield None
            return
        tracer = trace.get_tracer(self._scope)
        context = None
        if parent is not None and TRACEPARENT in parent:
            context = TraceContextTextMapPropagator().extract(parent, otel_context.get_current())
        with tracer.start_as_current_span(name, context=context, kind=trace.SpanKind[kind]) as span:
            yield span if span.is_recording() else None


def link_messages(span: Span, messages: Iterable[tuple[str, Mapping[str, str]]]) -> None:
    """A link from ``span`` to each message's trace context, ``(message id, properties)``, at most
    SPAN_LINKS_MAX of them; how many more had one is the span's ``rocketbox.links_omitted``."""
    assert trace is not None, "a recording span means OpenTelemetry is there"
    propagator = TraceContextTextMapPropagator()
    linked = omitted = 0
    for message_id, properties in messages:
        if TRACEPARENT not in properties:
            continue
        context = trace.get_current_span(propagator.extract(properties)).get_span_context()
        if not context.is_valid:
            continue
        if linked == SPAN_LINKS_MAX:
            omitted += 1
            continue
        span.add_link(context, {"messaging.message.id": message_id})
        linked += 1
    if omitted:
        span.set_attribute("rocketbox.links_omitted", omitted)


def message_attributes(span: Span, operation: str, topics: Iterable[str], count: int) -> None:
    """The messaging conventions' attributes of an operation on ``count`` messages: the topic
    when they share one, and the batch's size when it is one."""
    span.set_attribute("messaging.system", MESSAGING_SYSTEM)
    span.set_attribute("messaging.operation.name", operation)
    distinct = set(topics)
    if len(distinct) == 1:
        span.set_attribute("messaging.destination.name", distinct.pop())
    if count > 1:
        span.set_attribute("messaging.batch.message_count", count)
