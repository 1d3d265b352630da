"""The lookup's connections: one per NameServer or broker address, kept open and shared by every
lookup under way (each request is matched to its answer by opaque, connection.py).

A connection is opened when first asked for (concurrent askers wait for the one being opened,
within their deadlines), replaced when it has failed (ended, bad frame, silent past a deadline),
and closed once no request has been in flight on it for ``CONNECTION_IDLE_MAX_MS``: below the
``serverChannelMaxIdleTimeSeconds`` (120 s) after which a NameServer or broker closes an idle
channel itself, so that a request is never written to a connection the server is closing. The
sweeper that closes idle connections is the pool's own task, running while the pool holds any;
``close`` ends it and every connection.
"""

from __future__ import annotations

import asyncio

from sidecar.channels import Endpoint
from sidecar.remoting.connection import RemotingConnection
from sidecar.remoting.errors import RemotingClosedError, RemotingConnectError

CONNECTION_IDLE_MAX_MS = 60_000


class ConnectionPool:
    def __init__(self, idle_max_ms: int = CONNECTION_IDLE_MAX_MS) -> None:
        if idle_max_ms < 1:
            raise ValueError(f"idle_max_ms must be >= 1, got {idle_max_ms}")
        self._idle_max_s = idle_max_ms / 1000.0
        self._connections: dict[Endpoint, RemotingConnection] = {}
        self._opening: dict[Endpoint, asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def addresses(self) -> tuple[Endpoint, ...]:
        """The addresses a connection is open to."""
        return tuple(a for a, c in self._connections.items() if c.failure is None)

    async def connection(self, address: Endpoint, deadline: float) -> RemotingConnection:
        """The open connection to ``address``, opened now if there is none; RemotingConnectError
        when none is made by ``deadline`` (a loop time)."""
        current = self._usable(address)
        if current is not None:
            return current
        lock = self._opening.setdefault(address, asyncio.Lock())
        try:
            async with asyncio.timeout_at(deadline):
                await lock.acquire()
        except TimeoutError as e:
            raise RemotingConnectError(f"{address}: no connection by the deadline") from e
        try:
            current = self._usable(address)
            if current is not None:
                return current
            stale = self._connections.pop(address, None)
            if stale is not None:
                await stale.close()
            connection = await RemotingConnection.open(address, deadline)
            if self._closed:
                await connection.close()
                raise RemotingClosedError(f"{address}: the lookup's connections are closed")
            self._connections[address] = connection
            if self._sweeper is None:
                self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
            return connection
        finally:
            lock.release()

    def _usable(self, address: Endpoint) -> RemotingConnection | None:
        if self._closed:
            raise RemotingClosedError(f"{address}: the lookup's connections are closed")
        connection = self._connections.get(address)
        if connection is None or connection.failure is not None:
            return None
        # Taken for a request: not idle now, whatever the sweeper would have said a moment ago.
        if connection.idle_since is not None:
            connection.idle_since = asyncio.get_running_loop().time()
        return connection

    async def _sweep(self) -> None:
        """Close connections idle for the limit, and failed ones, until none is left."""
        loop = asyncio.get_running_loop()
        try:
            while self._connections:
                now = loop.time()
                wake_at = now + self._idle_max_s
                for address, connection in list(self._connections.items()):
                    idle_since = connection.idle_since
                    if connection.failure is not None or (
                        idle_since is not None and now - idle_since >= self._idle_max_s
                    ):
                        if self._connections.get(address) is connection:
                            del self._connections[address]
                        await connection.close()
                    elif idle_since is not None:
                        wake_at = min(wake_at, idle_since + self._idle_max_s)
                await asyncio.sleep(max(0.0, wake_at - loop.time()))
        finally:
            self._sweeper = None

    async def close(self) -> None:
        """End the sweeper and close every connection; the pool opens none after this."""
        self._closed = True
        sweeper = self._sweeper
        if sweeper is not None:
            sweeper.cancel()
            # wait, not await: the sweeper's own CancelledError must not be taken for the caller's.
            await asyncio.wait([sweeper])
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.close()
