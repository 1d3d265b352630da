"""One TCP connection to a NameServer or a broker, as RocketMQ's remoting clients use one:
requests are written as they come and answers matched to them by ``opaque``, in any order.

A connection lives inside one ``connect`` block (the lookup that opened it): its reader task is
started there and ended there, and nothing is kept between lookups, so no idle connection is
ever met closed by the server (a broker closes channels idle for two minutes). Every wait is
bounded by the caller's deadline (a loop time). A frame past ``FRAME_BYTES_MAX``, a header that
does not decode or a connection that ends fails every request in flight on it, and the
connection is not used again.
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

# Requests in flight on one connection at once: a lookup sends a handful to each broker.
REQUESTS_IN_FLIGHT_MAX = 64


class RemotingConnection:
    def __init__(
        self, address: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._failure: RemotingError | None = None

    async def invoke(self, command: RemotingCommand, deadline: float) -> RemotingCommand:
        """``command``'s answer; TimeoutError at ``deadline`` (the event loop's time)."""
        if self._failure is not None:
            raise self._failure
        if len(self._pending) >= REQUESTS_IN_FLIGHT_MAX:
            raise RemotingProtocolError(
                f"{self.address}: {REQUESTS_IN_FLIGHT_MAX} requests in flight already "
                "(REQUESTS_IN_FLIGHT_MAX)"
            )
        answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[command.opaque] = answer
        try:
            async with asyncio.timeout_at(deadline):
                self._writer.write(encode(command))
                await self._writer.drain()
                return await answer
        except TimeoutError as e:
            raise TimeoutError(
                f"{self.address}: no answer to request {command.code} by the deadline"
            ) from e
        except (ConnectionError, OSError) as e:
            raise RemotingClosedError(f"{self.address}: writing a request failed: {e}") from e
        finally:
            self._pending.pop(command.opaque, None)

    async def read_answers(self) -> None:
        """Match answers to requests until the connection ends or is cancelled; then every
        request still waiting fails."""
        name = str(self.address)
        failure: RemotingError = RemotingClosedError(f"{name}: the connection was closed")
        try:
            while True:
                length = frame_length(await self._reader.readexactly(4), name)
                command = decode(await self._reader.readexactly(length), name)
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
            self._failure = failure
            for answer in self._pending.values():
                if not answer.done():
                    answer.set_exception(failure)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()


@contextlib.asynccontextmanager
async def connect(address: Endpoint, deadline: float) -> AsyncIterator[RemotingConnection]:
    """A connection to ``address`` for the block; RemotingConnectError when none is made by
    ``deadline``."""
    try:
        async with asyncio.timeout_at(deadline):
            reader, writer = await asyncio.open_connection(address.host, address.port)
    except TimeoutError as e:
        raise RemotingConnectError(f"{address}: no connection by the deadline") from e
    except OSError as e:
        raise RemotingConnectError(f"{address}: cannot connect: {e}") from e
    connection = RemotingConnection(address, reader, writer)
    reading = asyncio.get_running_loop().create_task(connection.read_answers())
    try:
        yield connection
    finally:
        reading.cancel()
        # wait, not await: the reader's own CancelledError must not be taken for the caller's.
        await asyncio.wait([reading])
        await connection.close()
