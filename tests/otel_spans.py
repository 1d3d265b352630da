"""OpenTelemetry's in-memory exporter for the tests that read spans.

The global TracerProvider can be set once per process, so the first test that asks installs an
SDK provider whose processor exports only while a test holds ``recorded_spans``: the spans of
other tests in the same process are dropped, not kept for the rest of the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

# A sampled producer's context, as an app's tracer would send it.
TRACE_ID_HEX = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID_HEX = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID_HEX}-{SPAN_ID_HEX}-01"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


class _WhileRecording(SimpleSpanProcessor):
    """Exports a span only while a test records."""

    recording = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.recording:
            super().on_end(span)


_EXPORTER = InMemorySpanExporter()
_PROCESSOR = _WhileRecording(_EXPORTER)
_installed = False


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """The spans that end in this block, in the exporter yielded."""
    global _installed  # noqa: PLW0603 - the process's one provider, installed once
    if not _installed:
        provider = TracerProvider()
        provider.add_span_processor(_PROCESSOR)
        trace.set_tracer_provider(provider)
        _installed = True
    _EXPORTER.clear()
    _PROCESSOR.recording = True
    try:
        yield _EXPORTER
    finally:
        _PROCESSOR.recording = False
        _EXPORTER.clear()


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def the_producer() -> SpanContext:
    return SpanContext(
        int(TRACE_ID_HEX, 16), int(SPAN_ID_HEX, 16), is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )  # fmt: skip


def linked(span: ReadableSpan) -> dict[str, tuple[int, int]]:
    """The span's links: message id → (trace id, span id) of the context it links to."""
    return {
        str((link.attributes or {})["messaging.message.id"]): (
            link.context.trace_id, link.context.span_id,
        )
        for link in span.links
    }  # fmt: skip
