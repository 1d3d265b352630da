"""A trace context an app sends arrives at its consumer after an outage, with real processes: a
broker, a sidecar over a RocksDB outbox (serving its RocketMQ front too), the app's
rocketbox_client and the official Python client's SimpleConsumer.

It proves: with the broker under flow control, messages sent with W3C
``traceparent``/``tracestate`` gRPC metadata, through rocketbox.v1 Send, SendBatch and
SendStream and the RocketMQ front's SendMessage, are SPOOLED; once the broker takes sends again
the resend pool delivers them, and the consumer receives each with the app's trace context in
its properties. A message with its own ``traceparent`` property keeps it as the app sent it; an
invalid ``traceparent`` in the metadata is ignored (the message is taken, without one). The
sidecar, its SDK configured from ``OTEL_TRACES_EXPORTER=console`` (rocketbox/tracing_setup.py),
prints its spool and resend spans, linked to the app's trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2

from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from rocketbox_client import Client, Message, Spooled
from tests.broker.broker_process import BrokerProcess
from tests.otel_spans import TRACE_ID_HEX, TRACEPARENT, TRACESTATE
from tests.sidecar.rocketmq_front.front_send_process import (
    FrontSidecar,
    consume,
    raw_message,
    raw_metadata,
    raw_stub,
)
from tests.sidecar.sidecar_process import CALL_DEADLINE_S, set_flow_control

pytestmark = pytest.mark.slow

TOPIC = "Traced"
TRACE_METADATA = (("traceparent", TRACEPARENT), ("tracestate", TRACESTATE))
APPS_OWN = "the app's own, kept as sent"
FRONT_MESSAGE_ID = "01" + "CD" * 16
# What a message of each body must carry at its consumer (None: no such property).
EXPECTED: dict[bytes, tuple[str | None, str | None]] = {
    b"send": (TRACEPARENT, TRACESTATE),
    b"batch plain": (TRACEPARENT, TRACESTATE),
    b"batch own": (APPS_OWN, None),
    b"invalid metadata": (None, None),
    b"front": (TRACEPARENT, TRACESTATE),
    b"stream": (TRACEPARENT, TRACESTATE),
}


def send_through_the_client(endpoint: str) -> list[str]:
    """Every rocketbox.v1 way of sending, each with trace metadata; all SPOOLED."""
    with Client(endpoint, timeout_s=CALL_DEADLINE_S) as client:
        results: list[Any] = [client.send(Message(TOPIC, b"send"), metadata=TRACE_METADATA)]
        own = Message(TOPIC, b"batch own", properties={"traceparent": APPS_OWN})
        results += client.send_batch([Message(TOPIC, b"batch plain"), own], metadata=TRACE_METADATA)
        invalid = (("traceparent", "00-not-a-trace-context-01"), ("tracestate", TRACESTATE))
        results.append(client.send(Message(TOPIC, b"invalid metadata"), metadata=invalid))
    assert all(isinstance(r, Spooled) for r in results), results
    return [r.message_id for r in results]


def send_through_a_stream(endpoint: str) -> str:
    """rocketbox.v1 SendStream with trace metadata (the generated stub: the client library
    batches over SendBatch): SPOOLED."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
        request = api.SendStreamRequest(
            request_id=1, message=api.Message(topic=TOPIC, body=b"stream")
        )
        [response] = stub.SendStream(
            iter([request]), timeout=CALL_DEADLINE_S, metadata=TRACE_METADATA
        )
    assert response.result.HasField("spooled"), response
    return str(response.result.message_id)


def send_through_the_front(endpoint: str) -> str:
    """The RocketMQ front's SendMessage with trace metadata: SPOOLED (OK, offset -1)."""
    with raw_stub(endpoint) as stub:
        response = stub.SendMessage(
            service_pb2.SendMessageRequest(
                messages=[raw_message(TOPIC, FRONT_MESSAGE_ID, body=b"front")]
            ),
            timeout=CALL_DEADLINE_S,
            metadata=(*raw_metadata(), *TRACE_METADATA),
        )
    [entry] = response.entries
    assert entry.offset == -1, response
    return FRONT_MESSAGE_ID


def test_a_trace_context_reaches_the_consumer_after_spool_and_resend(
    broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sidecar's spans on its output, exported soon after they end.
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    sidecar = FrontSidecar(broker.endpoint, f"rocksdb://{tmp_path / 'outbox'}")
    try:
        set_flow_control(broker.endpoint, True)
        ids = send_through_the_client(sidecar.endpoint)
        ids.append(send_through_a_stream(sidecar.endpoint))
        ids.append(send_through_the_front(sidecar.rocketmq_endpoint))
        set_flow_control(broker.endpoint, False)
        delivered = consume(broker.endpoint, "TraceReaders", TOPIC, set(ids))
    finally:
        sidecar.stop()  # its SDK flushes what it holds as it exits
    by_body = {copies[0].body: copies[0].properties for copies in delivered.values()}
    assert set(by_body) == set(EXPECTED)
    for body, (traceparent, tracestate) in EXPECTED.items():
        properties = by_body[body]
        assert properties.get("traceparent") == traceparent, body
        assert properties.get("tracestate") == tracestate, body
    spans = sidecar.output()
    for name in ("rocketbox.spool", "rocketbox.resend", "rocketbox.resend.send"):
        assert f'"name": "{name}"' in spans, f"no {name} span:\n{spans}"
    assert f'"trace_id": "0x{TRACE_ID_HEX}"' in spans, "no link to the app's trace"
