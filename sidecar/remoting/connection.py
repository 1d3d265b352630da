"""One TCP connection to a NameServer or a broker, as RocketMQ's remoting clients use one:
requests are written as they come (those of one turn of the event loop in one write) and answers
matched to them by ``opaque``, in any order, so every lookup under way shares it
(sidecar/remoting/pool.py keeps one per address).

Its reader task is started by ``open`` and ended by ``close``, whoever holds the connection. Every
wait is bounded by the caller's deadline (a loop time). A frame past ``FRAME_BYTES_MAX``, a header
that does not decode or a connection that ends fails every request in flight on it, and the
connection is not used again (``failure``). So does a request that times out on a connection
that has read nothing since the request was written: a peer that went away without closing (its
host down, the network cut) is then told from a slow answer, and the next request opens a new
connection instead of waiting on a dead one until TCP gives up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sidecar.channels import Endpoint
from sidecar.remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingProtocolError,
)
from sidecar.remoting.protocol import RemotingCommand, decode, encode, frame_length

# Requests in flight on one connection at once; more wait for a slot, within their deadline.
# Every lookup under way shares the connection, each with a handful of requests on it.
REQUESTS_IN_FLIGHT_MAX = 256


class RemotingConnection:
    def __init__(
        self, address: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._slots = asyncio.Semaphore(REQUESTS_IN_FLIGHT_MAX)
        self._failure: RemotingError | None = None
        self._outgoing: list[bytes] = []
        self._reading: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        # Loop times: the last frame read, and since when no request has been in flight.
        self._read_at = loop.time()
        self.idle_since: float | None = loop.time()

    @classmethod
    async def open(cls, address: Endpoint, deadline: float) -> RemotingConnection:
        """A connection to ``address``, reading answers; RemotingConnectError when none is made
        by ``deadline``. The caller closes it."""
        try:
            async with asyncio.timeout_at(deadline):
                reader, writer = await asyncio.open_connection(address.host, address.port)
        except TimeoutError as e:
            raise RemotingConnectError(f"{address}: no connection by the deadline") from e
        except OSError as e:
            raise RemotingConnectError(f"{address}: cannot connect: {e}") from e
        connection = cls(address, reader, writer)
        connection._reading = asyncio.get_running_loop().create_task(connection._read_answers())
        return connection

    @property
    def failure(self) -> RemotingError | None:
        """Why the connection may not be used again; None while it may."""
        return self._failure

    async def invoke(self, command: RemotingCommand, deadline: float) -> RemotingCommand:
        """``command``'s answer; TimeoutError at ``deadline`` (the event loop's time)."""
        if self._failure is not None:
            raise self._failure
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[RemotingCommand] = loop.create_future()
        written_at = None
        try:
            async with asyncio.timeout_at(deadline):
                async with self._slots:
                    if self._failure is not None:
                        raise self._failure
                    self._pending[command.opaque] = answer
                    self.idle_since = None
                    written_at = loop.time()
                    self._queue(encode(command))
                    await self._writer.drain()
                    return await answer
        except TimeoutError as e:
            if written_at is None:
                raise TimeoutError(
                    f"{self.address}: no free slot for request {command.code} by the deadline "
                    f"({REQUESTS_IN_FLIGHT_MAX} in flight, REQUESTS_IN_FLIGHT_MAX)"
                ) from e
            self._pending.pop(command.opaque, None)
            if self._read_at < written_at:
                self._fail(
                    RemotingClosedError(f"{self.address}: nothing read since a request timed out")
                )
            raise TimeoutError(
                f"{self.address}: no answer to request {command.code} by the deadline"
            ) from e
        except (ConnectionError, OSError) as e:
            raise RemotingClosedError(f"{self.address}: writing a request failed: {e}") from e
        finally:
            self._pending.pop(command.opaque, None)
            if not self._pending:
                self.idle_since = loop.time()

    def _queue(self, frame: bytes) -> None:
        """Write ``frame`` with the others queued in this turn of the event loop, in one write:
        the lookups under way send many requests at once."""
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing.append(frame)

    def _flush(self) -> None:
        frames, self._outgoing = self._outgoing, []
        if self._failure is None:
            # A write that fails closes the transport: the reader then fails what is in flight.
            self._writer.write(b"".join(frames))

    async def _read_answers(self) -> None:
        """Match answers to requests until the connection ends or is closed; then every
        request still waiting fails."""
        name = str(self.address)
        failure: RemotingError = RemotingClosedError(f"{name}: the connection was closed")
        loop = asyncio.get_running_loop()
        try:
            while True:
                length = frame_length(await self._reader.readexactly(4), name)
                command = decode(await self._reader.readexactly(length), name)
                self._read_at = loop.time()
                if not command.is_response:
                    continue  # a server's own request (none is expected here) has no caller
                answer = self._pending.get(command.opaque)
                if answer is not None and not answer.done():
                    answer.set_result(command)
        except asyncio.IncompleteReadError:
            failure = RemotingClosedError(f"{name}: the connection ended")
        except (ConnectionError, OSError) as e:
            failure = RemotingClosedError(f"{name}: the connection failed: {e}")
        except RemotingProtocolError as e:
            failure = e
        finally:
            self._fail(failure)

    def _fail(self, failure: RemotingError) -> None:
        """Fail every request in flight; the connection is closed and not used again (a frame
        read after this point is read past, never matched)."""
        if self._failure is None:
            self._failure = failure
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(self._failure)
                answer.exception()  # its caller may have gone at its deadline: nothing to log
        self._writer.close()

    async def close(self) -> None:
        self._fail(RemotingClosedError(f"{self.address}: the connection was closed"))
        if self._reading is not None:
            self._reading.cancel()
            # wait, not await: the reader's own CancelledError must not be taken for the caller's.
            await asyncio.wait([self._reading])
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()


@contextlib.asynccontextmanager
async def connect(address: Endpoint, deadline: float) -> AsyncIterator[RemotingConnection]:
    """A connection to ``address`` for the block; RemotingConnectError when none is made by
    ``deadline``."""
    connection = await RemotingConnection.open(address, deadline)
    try:
        yield connection
    finally:
        await connection.close()
