"""The server guard (rocketbox_api/server_guard.py) on a real grpc.aio server in this process,
serving rocketbox.v1.SidecarService through a servicer written to misbehave on demand.

Proves: bytes that are not the request type, and a string field of invalid UTF-8, are answered
INVALID_ARGUMENT naming the type, on unary and streaming methods; on a request stream the frames
before the bad one are answered first. A handler's unexpected exception is answered INTERNAL, or
with the server's fault reply where it gives one (before any response of a stream), never
UNKNOWN; an abort keeps its code; a method left unimplemented is UNIMPLEMENTED. However many bad
calls come, the guard writes one line per kind within its interval and grpc none (no traceback
per request). RateLimitedLog: one line per interval, the next one counting those left out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message

from rocketbox_api.rate_limited_log import RateLimitedLog
from rocketbox_api.server_guard import ServerGuard
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc

SERVICE = "/rocketbox.v1.SidecarService"
CALL_DEADLINE_S = 10.0
BAD_CALLS = 50
# Longer than any test runs: "one line per interval" is then exactly one line.
LOG_INTERVAL_S = 3600.0
# A SendRequest (field 1) and a SendStreamRequest (field 2) whose message's topic, a string,
# holds bytes that are not UTF-8.
BAD_UTF8 = b"\x0a\x04\x0a\x02\xff\xfe"
BAD_UTF8_FRAME = b"\x12\x04\x0a\x02\xff\xfe"
NOT_PROTOBUF = b"\x0a\x05\x0a"  # a length that runs past the end


def identity(raw: bytes) -> bytes:
    return raw


class Misbehaving(sidecar_pb2_grpc.SidecarServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    """Send: topic "boom" raises, "abort" aborts NOT_FOUND, any other is answered. SendStream
    answers each request; topic "boom" raises. SendBatch is the generated default."""

    async def Send(self, request: api.SendRequest, context: Any) -> api.SendResponse:  # noqa: N802 - the protocol's method name
        if request.message.topic == "boom":
            raise RuntimeError("a bug")
        if request.message.topic == "abort":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        return api.SendResponse(result=api.SendResult(message_id=request.message.topic))

    async def SendStream(  # noqa: N802 - the protocol's method name
        self, requests: AsyncIterator[api.SendStreamRequest], context: Any
    ) -> AsyncIterator[api.SendStreamResponse]:
        async for r in requests:
            if r.message.topic == "boom":
                raise RuntimeError("a bug in a stream")
            yield api.SendStreamResponse(request_id=r.request_id)


def send_reply(method: MethodDescriptor, reason: str) -> Message | None:
    if method.name != "Send":
        return None
    return api.SendResponse(result=api.SendResult(message_id=f"fault: {reason}"))


async def serving(guard: ServerGuard, body: Callable[[grpc.aio.Channel], Awaitable[None]]) -> None:
    server = grpc.aio.server(interceptors=[guard])
    sidecar_pb2_grpc.add_SidecarServiceServicer_to_server(Misbehaving(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await body(channel)
    finally:
        await server.stop(None)


def run(guard: ServerGuard, body: Callable[[grpc.aio.Channel], Awaitable[None]]) -> None:
    asyncio.run(serving(guard, body))


def raw_unary(channel: grpc.aio.Channel, method: str) -> Any:
    return channel.unary_unary(
        f"{SERVICE}/{method}", request_serializer=identity, response_deserializer=identity
    )


def stream(channel: grpc.aio.Channel) -> Any:
    return channel.stream_stream(
        f"{SERVICE}/SendStream", request_serializer=identity, response_deserializer=identity
    )


def frame(request_id: int, topic: str) -> bytes:
    return api.SendStreamRequest(
        request_id=request_id, message=api.Message(topic=topic)
    ).SerializeToString()


async def read_all(call: Any, answers: list[int]) -> None:
    async for raw in call:
        answers.append(api.SendStreamResponse.FromString(raw).request_id)


def no_grpc_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.name.startswith("grpc") and r.levelno >= logging.WARNING]
    assert not loud, [r.getMessage() for r in loud]


def test_undecodable_requests_are_invalid_argument_naming_the_type_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = ServerGuard(log_interval_s=LOG_INTERVAL_S)
    codes: list[tuple[grpc.StatusCode, str]] = []

    async def body(channel: grpc.aio.Channel) -> None:
        for raw in [NOT_PROTOBUF, BAD_UTF8] * (BAD_CALLS // 2):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await raw_unary(channel, "Send")(raw, timeout=CALL_DEADLINE_S)
            codes.append((refused.value.code(), refused.value.details() or ""))
        good = api.SendRequest(message=api.Message(topic="fine")).SerializeToString()
        answer = await raw_unary(channel, "Send")(good, timeout=CALL_DEADLINE_S)
        assert api.SendResponse.FromString(answer).result.message_id == "fine"

    with caplog.at_level(logging.INFO):
        run(guard, body)
    assert {code for code, _ in codes} == {grpc.StatusCode.INVALID_ARGUMENT}
    details = {d for _, d in codes}
    assert all("could not be decoded as rocketbox.v1.SendRequest" in d for d in details)
    assert any("UTF-8" in d for d in details), details
    assert guard.undecodable_log.events == BAD_CALLS
    lines = [r for r in caplog.records if r.name == "rocketbox_api.server_guard"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.WARNING
    assert lines[0].exc_info is None, "no traceback for a client's bad bytes"
    no_grpc_tracebacks(caplog)


def test_a_request_stream_answers_the_frames_before_an_undecodable_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers: list[int] = []

    async def body(channel: grpc.aio.Channel) -> None:
        frames = [frame(1, "a"), frame(2, "b"), BAD_UTF8_FRAME, frame(4, "d")]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read_all(stream(channel)(iter(frames)), answers)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "rocketbox.v1.SendStreamRequest" in (refused.value.details() or "")

    run(ServerGuard(), body)
    assert answers == [1, 2]
    no_grpc_tracebacks(caplog)


def test_a_handler_fault_is_internal_or_the_fault_reply_never_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = ServerGuard(send_reply, LOG_INTERVAL_S)

    async def body(channel: grpc.aio.Channel) -> None:
        boom = api.SendRequest(message=api.Message(topic="boom")).SerializeToString()
        for _ in range(BAD_CALLS):
            answer = await raw_unary(channel, "Send")(boom, timeout=CALL_DEADLINE_S)
            reply = api.SendResponse.FromString(answer)
            assert reply.result.message_id.startswith("fault: internal error")
            assert "RuntimeError: a bug" in reply.result.message_id
        answers: list[int] = []
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await read_all(stream(channel)(iter([frame(1, "a"), frame(2, "boom")])), answers)
        assert answers == [1]
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        assert "RuntimeError: a bug in a stream" in (failed.value.details() or "")

    with caplog.at_level(logging.INFO):
        run(guard, body)
    assert guard.fault_log.events == BAD_CALLS + 1
    lines = [r for r in caplog.records if r.name == "rocketbox_api.server_guard"]
    assert len(lines) == 1, "one line within the interval, with its traceback"
    assert lines[0].levelno == logging.ERROR
    assert lines[0].exc_info is not None
    no_grpc_tracebacks(caplog)


def test_aborts_keep_their_code_and_unimplemented_methods_are_unimplemented(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = ServerGuard()

    async def body(channel: grpc.aio.Channel) -> None:
        aborted = api.SendRequest(message=api.Message(topic="abort")).SerializeToString()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await raw_unary(channel, "Send")(aborted, timeout=CALL_DEADLINE_S)
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.NOT_FOUND, "no such thing")
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await raw_unary(channel, "SendBatch")(b"", timeout=CALL_DEADLINE_S)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED

    run(guard, body)
    assert guard.fault_log.events == 0
    no_grpc_tracebacks(caplog)


def test_rate_limited_log_writes_one_line_per_interval_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = RateLimitedLog(logging.getLogger("test.limited"), logging.WARNING, 10.0, lambda: now[0])
    written = []
    with caplog.at_level(logging.INFO, logger="test.limited"):
        for t in range(25):
            now[0] = float(t)
            written.append(log.log("bad request %d", t))
    assert [t for t, w in enumerate(written) if w] == [0, 10, 20]
    assert [r.getMessage() for r in caplog.records] == [
        "bad request 0",
        "bad request 10 (9 more like it since the last such line were not logged)",
        "bad request 20 (9 more like it since the last such line were not logged)",
    ]
    assert log.events == 25
