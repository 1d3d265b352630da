"""A call's own gRPC metadata (``send``/``send_batch``'s ``metadata``, e.g. a W3C trace context)
as the sidecar receives it, from ``Client`` and ``AsyncClient``: sent beside the client's own
(its token), on Send and SendBatch alike. The sidecar here is a recording stand-in of this
process: what is proved is what goes over the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc
from rocketbox_client import AsyncClient, Client, Message, Stored
from tests.otel_spans import TRACEPARENT, TRACESTATE

TRACE = (("traceparent", TRACEPARENT), ("tracestate", TRACESTATE))
TOKEN = "s3cret-token"


class Recorder(sidecar_pb2_grpc.SidecarServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    """Answers every message STORED, keeping each call's metadata (its keys in order)."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str]]] = []  # each call's, sorted: gRPC keeps no order

    def _record(self, context: Any) -> None:
        wanted = ("authorization", "traceparent", "tracestate")
        self.calls.append(sorted((k, v) for k, v in context.invocation_metadata() if k in wanted))

    def Send(self, request: Any, context: Any) -> Any:  # noqa: N802 - the API's method name
        self._record(context)
        return api.SendResponse(result=stored(request.message.message_id))

    def SendBatch(self, request: Any, context: Any) -> Any:  # noqa: N802 - the API's method name
        self._record(context)
        return api.SendBatchResponse(results=[stored(m.message_id) for m in request.messages])


def stored(message_id: str) -> api.SendResult:
    return api.SendResult(message_id=message_id, stored=api.Stored(durable=True, attempts=1))


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, str]]:
    r = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    sidecar_pb2_grpc.add_SidecarServiceServicer_to_server(r, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield r, f"127.0.0.1:{port}"
    server.stop(None)


def expected(token: str | None) -> list[tuple[str, str]]:
    own = [("authorization", f"Bearer {token}")] if token else []
    return sorted([*own, *TRACE])


@pytest.mark.parametrize("token", [None, TOKEN])
def test_the_client_sends_a_calls_metadata_beside_its_own(
    recorder: tuple[Recorder, str], token: str | None
) -> None:
    r, endpoint = recorder
    with Client(endpoint, token=token) as client:
        assert isinstance(client.send(Message("Orders", b"one"), metadata=TRACE), Stored)
        [result] = client.send_batch([Message("Orders", b"two")], metadata=TRACE)
        assert isinstance(result, Stored)
        client.send(Message("Orders", b"plain"))
    own = [("authorization", f"Bearer {token}")] if token else []
    assert r.calls == [expected(token), expected(token), own]


@pytest.mark.parametrize("token", [None, TOKEN])
def test_the_async_client_sends_a_calls_metadata_beside_its_own(
    recorder: tuple[Recorder, str], token: str | None
) -> None:
    r, endpoint = recorder

    async def run() -> None:
        async with AsyncClient(endpoint, token=token) as client:
            assert isinstance(await client.send(Message("Orders", b"one"), metadata=TRACE), Stored)
            [result] = await client.send_batch([Message("Orders", b"two")], metadata=TRACE)
            assert isinstance(result, Stored)

    asyncio.run(run())
    assert r.calls == [expected(token), expected(token)]
