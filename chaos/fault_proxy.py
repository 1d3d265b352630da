"""A TCP fault proxy: what the network between the sidecar and the broker can do to them.

``FaultProxy(target_host, target_port)`` listens on 127.0.0.1 (a free port, ``.port``) and
forwards each connection to the target, in an asyncio loop of its own thread. ``set_fault``
returns once the fault is in force, on every open connection and every new one:

The faults are chaos/faults.py's.

Bytes dropped by a blackhole or a half-open link are gone, as Toxiproxy drops them: once the
fault lifts, the connection goes on and its endpoints' protocols (HTTP/2 framing, keepalive,
deadlines) find out what they lost. An error on either side of a forwarded connection resets the
other side, so a peer's RST goes through.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import random
import socket
import struct
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from chaos.faults import Direction, Fault, FaultKind
from rocketbox_api.deadlines import within

# One read from a socket; also the largest chunk a latency schedules as one.
CHUNK_BYTES_MAX = 64 * 1024
# Chunks read but not yet delivered, per direction of a connection (latency holds them).
LINK_QUEUE_CHUNKS_MAX = 256
# Connections open at once; one more is reset at once.
LINKS_MAX = 1_024
CONNECT_DEADLINE_S = 5.0
START_DEADLINE_S = 10.0
STOP_DEADLINE_S = 10.0
FAULT_DEADLINE_S = 10.0
LISTEN_BACKLOG = 128
# SO_LINGER on, 0 s: close() sends RST and drops what was unsent.
_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass(slots=True)
class FaultProxyStats:
    """What the proxy did so far (``FaultProxy.stats()`` hands out a copy)."""

    accepted: int = 0
    links_open: int = 0
    # Connections reset by the proxy: by Fault.reset, a lifted blackhole, a peer's error, a
    # target that refused, or LINKS_MAX.
    resets: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    bytes_dropped: int = 0


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    writer.transport.abort()


async def _closed(writer: asyncio.StreamWriter) -> None:
    # The error that closed it (if any) is why it closed: nothing more to say about it here.
    with contextlib.suppress(Exception):
        await writer.wait_closed()


class _Link:
    """One client connection, and its connection to the target (none under a blackhole)."""

    def __init__(
        self, proxy: FaultProxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.proxy = proxy
        self.client = (reader, writer)
        self.target: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.was_reset = False
        # Accepted under a blackhole: it never connects to the target.
        self.blackholed = False
        self._task: asyncio.Task[None] | None = None

    def writers(self) -> list[asyncio.StreamWriter]:
        return [self.client[1]] + ([self.target[1]] if self.target is not None else [])

    async def run(self) -> None:
        self._task = asyncio.current_task()
        proxy = self.proxy
        try:
            if proxy.fault.kind is FaultKind.RESET or len(proxy.links) > LINKS_MAX:
                self.reset()
                return
            self.blackholed = proxy.fault.kind is FaultKind.BLACKHOLE
            if not self.blackholed:
                try:
                    self.target = await within(
                        asyncio.open_connection(proxy.target_host, proxy.target_port),
                        CONNECT_DEADLINE_S,
                    )
                except (OSError, TimeoutError):
                    # The target refuses or is away: its client learns so at once, as it would
                    # connecting directly.
                    self.reset()
                    return
            if self.target is None:
                await self._swallow(self.client[0])
            else:
                await asyncio.gather(
                    self._pump(self.client[0], self.target[1], Direction.UP),
                    self._pump(self.target[0], self.client[1], Direction.DOWN),
                )
        except asyncio.CancelledError:
            # Cancelled by reset() or by the proxy's stop: the link is over either way.
            pass
        finally:
            for writer in self.writers():
                writer.close()
            await asyncio.gather(*(_closed(w) for w in self.writers()))
            proxy.links.discard(self)
            proxy.counts.links_open = len(proxy.links)

    def reset(self) -> None:
        """RST to both sides; the link's tasks end."""
        if self.was_reset:
            return
        self.was_reset = True
        self.proxy.counts.resets += 1
        for writer in self.writers():
            _reset(writer)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    def abort(self) -> asyncio.Task[None] | None:
        """The proxy stops: both sides closed at once, the link's task cancelled (and returned,
        to be awaited)."""
        for writer in self.writers():
            writer.transport.abort()
        if self._task is not None:
            self._task.cancel()
        return self._task

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        """A blackholed connection without a target: read and drop until its client goes."""
        with contextlib.suppress(OSError):
            while data := await reader.read(CHUNK_BYTES_MAX):
                self.proxy.counts.bytes_dropped += len(data)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: Direction
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(LINK_QUEUE_CHUNKS_MAX)
        deliver = asyncio.create_task(self._deliver(queue, writer, direction))
        due_s = 0.0
        try:
            while True:
                try:
                    data = await reader.read(CHUNK_BYTES_MAX)
                except OSError:
                    # The source reset: so does the other side, unless this direction is cut.
                    if not self.proxy.fault.drops(direction):
                        self.reset()
                    return
                if not data:
                    break
                due_s = max(due_s, loop.time() + self.proxy.delay_s())
                await queue.put((due_s, data))
            await queue.put(None)
            await deliver
        finally:
            deliver.cancel()

    async def _deliver(
        self,
        queue: asyncio.Queue[tuple[float, bytes] | None],
        writer: asyncio.StreamWriter,
        direction: Direction,
    ) -> None:
        loop = asyncio.get_running_loop()
        counts = self.proxy.counts
        while (item := await queue.get()) is not None:
            due_s, data = item
            if (wait_s := due_s - loop.time()) > 0:
                await asyncio.sleep(wait_s)
            # The fault in force when a chunk goes out is the one that decides its fate.
            if self.proxy.fault.drops(direction):
                counts.bytes_dropped += len(data)
                continue
            if writer.is_closing():
                self.reset()
                return
            # Counted before it is handed over: its receiver may read it (and the counts) while
            # write() still runs in this thread.
            if direction is Direction.UP:
                counts.bytes_up += len(data)
            else:
                counts.bytes_down += len(data)
            writer.write(data)
            try:
                await writer.drain()
            except OSError:
                self.reset()
                return
        # The source closed: half-close the destination, unless this direction is cut.
        if not self.proxy.fault.drops(direction) and not writer.is_closing():
            with contextlib.suppress(OSError):
                if writer.can_write_eof():
                    writer.write_eof()


class FaultProxy:
    """An asyncio TCP proxy to ``target_host:target_port`` on 127.0.0.1:``.port``, in its own
    thread; ``seed`` makes the jitter of a latency fault repeatable.

    ``target_port`` 0 is the port the proxy binds: for a target on another loopback address
    (127.0.0.2) that must listen on the same port as the proxy, a broker whose routes advertise
    its own port while its clients are to reach it through the proxy.
    """

    def __init__(self, target_host: str, target_port: int, *, seed: int = 0) -> None:
        if not 0 <= target_port < 65536:
            raise ValueError(f"target_port must be within 0..65535, not {target_port}")
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.fault = Fault.none()
        # Touched only in the proxy's loop, but for the copies stats() hands out.
        self.counts = FaultProxyStats()
        self.links: set[_Link] = set()
        self._random = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("the fault proxy is already started")
        loop = asyncio.new_event_loop()
        started: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._serve,
            args=(loop, started),
            daemon=True,
            name=f"fault proxy to {self.target_host}:{self.target_port}",
        )
        self._thread.start()
        self.port = started.result(START_DEADLINE_S)
        return self

    def stop(self) -> None:
        """Close the listener and every connection; the thread ends."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(STOP_DEADLINE_S)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(STOP_DEADLINE_S)
        self._loop = self._thread = None

    def set_fault(self, fault: Fault) -> None:
        """From any thread; returns once ``fault`` is in force (resets done)."""
        if self._loop is None:
            raise RuntimeError("the fault proxy is not started")
        asyncio.run_coroutine_threadsafe(self._apply(fault), self._loop).result(FAULT_DEADLINE_S)

    def stats(self) -> FaultProxyStats:
        return dataclasses.replace(self.counts)

    def delay_s(self) -> float:
        fault = self.fault
        if fault.kind is not FaultKind.LATENCY:
            return 0.0
        jitter_ms = self._random.uniform(-fault.jitter_ms, fault.jitter_ms)
        return max(0.0, fault.latency_ms + jitter_ms) / 1000

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- in the proxy's loop ------------------------------------------------------------------
    def _serve(
        self, loop: asyncio.AbstractEventLoop, started: concurrent.futures.Future[int]
    ) -> None:
        asyncio.set_event_loop(loop)
        try:
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, "127.0.0.1", 0, backlog=LISTEN_BACKLOG)
                )
            except OSError as e:
                started.set_exception(e)
                return
            port = int(self._server.sockets[0].getsockname()[1])
            # Before anyone can know the port, so before any connection.
            self.target_port = self.target_port or port
            started.set_result(port)
            loop.run_forever()
        finally:
            loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(self, reader, writer)
        self.links.add(link)
        self.counts.accepted += 1
        self.counts.links_open = len(self.links)
        await link.run()

    async def _apply(self, fault: Fault) -> None:
        self.fault = fault
        if fault.kind is FaultKind.RESET:
            doomed = list(self.links)
        elif fault.kind is FaultKind.BLACKHOLE:
            doomed = []
        else:
            # Accepted under a blackhole: never connected, nothing to go on with.
            doomed = [link for link in self.links if link.blackholed]
        for link in doomed:
            link.reset()
        await asyncio.gather(*(_closed(w) for link in doomed for w in link.writers()))

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        # Each link's task ends (closing its sockets) before the loop stops.
        tasks = [task for link in list(self.links) if (task := link.abort()) is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
