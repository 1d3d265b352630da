"""Telemetry at the front: a producer keeps working while the broker is away; a consumer's stream
is the broker's.

The app's first Settings decides what its stream is (docs/rocketmq-protocol.md §3):

- **A producer** (Settings with ``publishing``) is answered at once by the sidecar, as a broker
  would answer it (its Settings echoed, with the sidecar's body limit, message types validated,
  RocketMQ's default exponential back-off of 3 attempts, metric off): a Node client waits forever
  for that reply, and the sidecar, not the broker, is what its sends reach. Beside it the front
  keeps an upstream Telemetry stream to the home broker with the app's metadata (its client id:
  the broker must know the app as a producer of its topics) carrying the app's Settings, so that
  the broker can push ``recover_orphaned_transaction_command`` (and its other commands) down to
  the app; the app's own commands (stack traces, verify results) go up. The broker's Settings
  replies are dropped: the app has its own. An upstream that cannot be opened, or breaks, is
  opened again after a back-off (RECONNECT_INITIAL_MS doubling to RECONNECT_MAX_MS) while the
  app's stream stays open.
- **A consumer** (``subscription``) is passed through both ways: a consumer needs the broker's
  Settings (its group's FIFO flag, retry policy, poll time). When the upstream ends, the app's
  stream ends with its status, and the client opens a new one.

A Settings with neither is refused with INVALID_ARGUMENT, as the broker does. Limits:
STREAMS_MAX streams per front (RESOURCE_EXHAUSTED past it) and FRAMES_MAX frames buffered per
stream and direction; frames for a broker that is away are dropped past it, oldest first (they
answer commands of a stream that no longer exists).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketbox_api.rate_limited_log import RateLimitedLog
from sidecar.rocketmq_front.upstream import Metadata, Upstream, forwarded_metadata, remaining_s

LOG = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]

# Telemetry streams one front relays: every app client holds one.
STREAMS_MAX = 4_096
# Frames buffered per stream and direction: commands are rare (a few per transaction check).
FRAMES_MAX = 64
RECONNECT_INITIAL_MS = 100
RECONNECT_MAX_MS = 5_000
# An upstream that lived this long found the broker up: the next failure starts the back-off
# again from RECONNECT_INITIAL_MS.
RECONNECT_RESET_MS = 10_000
# The proxy's producer retry policy (docs/rocketmq-protocol.md §3.4): 3 attempts, 10 ms growing
# to 1 s.
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1_000


def _duration_ms(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def producer_settings_reply(client: pb.Settings, body_bytes_max: int) -> spb.TelemetryCommand:
    """What a broker answers a producer's Settings (the broker's ClientActivity,
    docs/rocketmq-protocol.md §3.4)."""
    reply = pb.Settings()
    reply.CopyFrom(client)
    reply.backoff_policy.CopyFrom(
        pb.RetryPolicy(
            max_attempts=PRODUCER_MAX_ATTEMPTS,
            exponential_backoff=pb.ExponentialBackoff(
                initial=_duration_ms(PRODUCER_BACKOFF_INITIAL_MS),
                max=_duration_ms(PRODUCER_BACKOFF_MAX_MS),
                multiplier=2.0,
            ),
        )
    )
    reply.publishing.max_body_size = body_bytes_max
    reply.publishing.validate_message_type = True
    reply.metric.Clear()
    reply.metric.on = False
    return spb.TelemetryCommand(status=pb.Status(code=pb.OK, message="OK"), settings=reply)


@dataclass(frozen=True, slots=True)
class _End:
    """How the app's stream ends."""

    code: grpc.StatusCode
    details: str = ""


class TelemetryRelay:
    def __init__(
        self, upstream: Upstream, body_bytes_max: int, streams_max: int = STREAMS_MAX
    ) -> None:
        if body_bytes_max <= 0:
            raise ValueError(
                f"body_bytes_max must be > 0 (a client sends nothing past it), got {body_bytes_max}"
            )
        self._upstream = upstream
        self._body_bytes_max = body_bytes_max
        self._streams_max = streams_max
        self.streams = 0
        self.log = RateLimitedLog(LOG, logging.WARNING)

    async def telemetry(
        self, requests: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[bytes]:
        if self.streams >= self._streams_max:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the front relays {self._streams_max} Telemetry streams (its limit)",
            )
        self.streams += 1
        session = _Session(self, forwarded_metadata(context), remaining_s(context))
        try:
            async for item in session.run(requests):
                if isinstance(item, _End):
                    if item.code != grpc.StatusCode.OK:
                        await context.abort(item.code, item.details)
                    return
                yield item
        finally:
            self.streams -= 1

    def settings_reply(self, settings: pb.Settings) -> bytes:
        reply: bytes = producer_settings_reply(settings, self._body_bytes_max).SerializeToString()
        return reply

    async def learn_routes(self, settings: pb.Settings) -> None:
        """The broker groups of the topics a client names, before its first call names one."""
        if settings.HasField("publishing"):
            topics = list(settings.publishing.topics)
        else:
            topics = [entry.topic for entry in settings.subscription.subscriptions]
        await self._upstream.directory.learn_topics(topics)

    def open(
        self, metadata: Metadata, timeout_s: float | None
    ) -> grpc.aio.StreamStreamCall[bytes, bytes]:
        return self._upstream.stream_stream("Telemetry")(metadata=metadata, timeout=timeout_s)


class _Session:
    """One app stream: its frames both ways, and the task that keeps its upstream."""

    def __init__(self, relay: TelemetryRelay, metadata: Metadata, timeout_s: float | None) -> None:
        self._relay = relay
        self._metadata = metadata
        self._timeout_s = timeout_s
        self._to_app: asyncio.Queue[bytes] = asyncio.Queue(FRAMES_MAX)
        self._to_broker: asyncio.Queue[bytes] = asyncio.Queue(FRAMES_MAX)
        self._end: asyncio.Future[_End] = asyncio.get_running_loop().create_future()
        self._pub_sub: str | None = None
        self._settings = b""  # a producer's latest Settings, the first frame of every upstream
        self._upstream_task: asyncio.Task[None] | None = None
        self._learn_task: asyncio.Task[None] | None = None

    async def run(self, requests: AsyncIterator[bytes]) -> AsyncIterator[bytes | _End]:
        reader = asyncio.create_task(self._read(requests))
        getter: asyncio.Task[bytes] | None = None
        try:
            while True:
                getter = asyncio.create_task(self._to_app.get())
                waits: set[asyncio.Future[Any]] = {getter, self._end}
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                    continue
                yield self._end.result()
                return
        finally:
            for task in (getter, reader, self._upstream_task, self._learn_task):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task

    def _finish(self, end: _End) -> None:
        if not self._end.done():
            self._end.set_result(end)

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for frame in requests:
                command = spb.TelemetryCommand.FromString(frame)
                if command.HasField("settings"):
                    await self._on_settings(frame, command.settings)
                elif self._pub_sub is not None:
                    self._up(frame)
                # before the first Settings there is no stream to relay it on: dropped
            self._finish(_End(grpc.StatusCode.OK))
        except DecodeError as e:
            self._finish(
                _End(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"a TelemetryCommand that cannot be decoded: {e}",
                )
            )
        except grpc.aio.AioRpcError:
            self._finish(_End(grpc.StatusCode.CANCELLED))  # the app went away
        except Exception as e:  # a bug of the front: the stream ends, logged
            self._relay.log.log("Telemetry relay failed: %s", e, exc_info=e)
            self._finish(_End(grpc.StatusCode.INTERNAL, "internal error of the sidecar's front"))

    async def _on_settings(self, frame: bytes, settings: pb.Settings) -> None:
        pub_sub = settings.WhichOneof("pub_sub")
        if pub_sub is None or (self._pub_sub is not None and pub_sub != self._pub_sub):
            self._finish(
                _End(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "settings carry no publishing or subscription, or changed between them",
                )
            )
            return
        if pub_sub == "publishing":
            self._settings = frame
            await self._to_app.put(self._relay.settings_reply(settings))
        if self._pub_sub is None:
            self._pub_sub = pub_sub
            self._learn_task = asyncio.create_task(self._relay.learn_routes(settings))
            keep = (
                self._producer_upstream()
                if pub_sub == "publishing"
                else self._consumer_upstream(frame)
            )
            self._upstream_task = asyncio.create_task(keep)
        else:
            self._up(frame)

    def _up(self, frame: bytes) -> None:
        if self._to_broker.full():
            self._to_broker.get_nowait()
            self._relay.log.log(
                "Telemetry frames for the broker past %d: the oldest dropped", FRAMES_MAX
            )
        self._to_broker.put_nowait(frame)

    async def _producer_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        delay_ms = RECONNECT_INITIAL_MS
        while True:
            opened = loop.time()
            try:
                code, details = await self._relay_upstream(self._settings, producer=True)
                LOG.debug("a producer's upstream Telemetry ended: %s %s", code, details)
            except grpc.aio.AioRpcError as e:
                self._relay.log.log(
                    "a producer's upstream Telemetry failed: %s %s", e.code().name, e.details()
                )
            except Exception as e:  # a bug (or a broker's frame we cannot read): open it again
                self._relay.log.log("a producer's upstream Telemetry failed: %s", e, exc_info=e)
            if (loop.time() - opened) * 1000 >= RECONNECT_RESET_MS:
                delay_ms = RECONNECT_INITIAL_MS
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = min(delay_ms * 2, RECONNECT_MAX_MS)

    async def _consumer_upstream(self, settings: bytes) -> None:
        try:
            code, details = await self._relay_upstream(settings, producer=False)
        except grpc.aio.AioRpcError as e:
            code, details = e.code(), e.details() or ""
        except Exception as e:  # a bug (or a broker's frame we cannot read): the app reconnects
            self._relay.log.log("a consumer's upstream Telemetry failed: %s", e, exc_info=e)
            code, details = grpc.StatusCode.INTERNAL, "internal error of the sidecar's front"
        self._finish(_End(code, details))

    async def _relay_upstream(self, first: bytes, producer: bool) -> tuple[grpc.StatusCode, str]:
        """One upstream stream, from its first frame to its end (its status)."""
        call = self._relay.open(self._metadata, None if producer else self._timeout_s)
        pump = asyncio.create_task(self._pump(call))
        try:
            with contextlib.suppress(asyncio.InvalidStateError):  # ended first: its status says why
                await call.write(first)
                while True:
                    frame = await call.read()
                    if not isinstance(frame, bytes):  # grpc.aio.EOF
                        break
                    if producer and not _for_the_app(frame):
                        continue
                    await self._to_app.put(frame)
            return await call.code(), await call.details()
        finally:
            pump.cancel()
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump

    async def _pump(self, call: grpc.aio.StreamStreamCall[bytes, bytes]) -> None:
        while True:
            await call.write(await self._to_broker.get())


def _for_the_app(frame: bytes) -> bool:
    """A broker's frame a producer's app must see: a command, never a Settings reply (the app
    has the sidecar's) nor a bare status."""
    command = spb.TelemetryCommand.FromString(frame).WhichOneof("command")
    return command is not None and command != "settings"
