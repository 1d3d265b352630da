"""A master's side of HA replication (RocketMQ's HAService and GroupTransferService).

Listens on the HA address, serves each slave through an HAConnection, and keeps what the slaves
acknowledged. For a SYNC_MASTER, ``replica_wait`` is the store's hook after a put: the put's
answer waits until a slave acknowledged an offset at or past the put's end, at most
sync_flush_timeout_ms (then FLUSH_SLAVE_TIMEOUT); with no slave connected, or the nearest one
more than ha_max_gap_not_in_sync_bytes behind, it does not wait (SLAVE_NOT_AVAILABLE). Both
outcomes mean the message is stored here: never resent.

Everything here runs on the broker's event loop, as do the puts that wait.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable

from broker.config import BrokerConfig
from broker.ha.ha_connection import HAConnection
from broker.ha.protocol import cancel_and_wait
from broker.store.message_store import DefaultMessageStore
from broker.store.status import PutMessageResult, PutMessageStatus
from rocketbox_api.deadlines import wait_event, within

LOG = logging.getLogger(__name__)

# Slaves a master serves at once, and puts waiting for a slave's acknowledgement at once (the
# send workers bound them well below this).
HA_CONNECTIONS_MAX = 16
REPLICA_WAITERS_MAX = 65_536


class HAService:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore) -> None:
        self._config = config
        self._store = store
        self.connections: set[HAConnection] = set()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._data_event = asyncio.Event()
        # (end phy_offset, future) of the puts waiting, in offset order (puts append in order).
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._timeout_s = config.store.sync_flush_timeout_ms / 1000
        self.address = ""
        # Set once the broker's configs are loaded (broker/ha/slave_synchronize.py).
        self.config_source: Callable[[], bytes] | None = None
        # Moved by config_changed, from whichever thread changed a topic or a group.
        self._config_version = 0
        self._config_version_lock = threading.Lock()

    async def bind(self) -> str:
        """Bind the listener (port 0: a free one) without serving yet; returns HOST:PORT.
        Raises OSError when the address is taken."""
        host = self._config.ha_listen_host
        assert host is not None
        self._server = await asyncio.start_server(
            self._serve, host, self._config.ha_listen_port, start_serving=False
        )
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"{host}:{port}"
        return self.address

    async def start(self) -> None:
        assert self._server is not None
        await self._server.start_serving()
        LOG.info("HA service listening on %s", self.address)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for connection in self.connections:
            connection.close()  # its reads and writes end at once
        await cancel_and_wait(list(self._handlers))
        for _, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) >= HA_CONNECTIONS_MAX:
            LOG.warning("HA connection refused: HA_CONNECTIONS_MAX=%s slaves connected",
                        HA_CONNECTIONS_MAX)  # fmt: skip
            writer.close()
            return
        cfg = self._config
        connection = HAConnection(
            self, self._store.commit_log, reader, writer, cfg.ha_send_heartbeat_interval_ms,
            cfg.ha_housekeeping_interval_ms, cfg.ha_transfer_batch_bytes,
        )  # fmt: skip
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.connections.add(connection)
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)
            self._handlers.discard(task)

    # -- what connections report ---------------------------------------------------------------
    def on_ack(self, connection: HAConnection) -> None:
        acked = self.slave_ack_offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= acked:
            _, fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    async def wait_for_data(self, timeout_s: float) -> None:
        """Until a SYNC_MASTER's put appended, or ``timeout_s`` passed."""
        await wait_event(self._data_event, timeout_s)
        self._data_event.clear()

    def config_snapshot(self) -> bytes | None:
        return self.config_source() if self.config_source is not None else None

    def config_changed(self) -> None:
        """A topic or group was created, changed or deleted: every connection sends a snapshot
        before its next log bytes (ha_connection.py). Called on the thread that changed it,
        before any put can use the change."""
        with self._config_version_lock:
            self._config_version += 1

    @property
    def config_version(self) -> int:
        return self._config_version

    @property
    def slave_ack_offset(self) -> int:
        """The furthest offset a connected slave acknowledged (-1: none connected)."""
        return max((c.slave_ack_offset for c in self.connections), default=-1)

    # -- SYNC_MASTER ---------------------------------------------------------------------------
    async def replica_wait(self, results: list[PutMessageResult]) -> list[PutMessageResult]:
        """The store's hook after a SYNC_MASTER's put (DefaultMessageStore.replica_wait)."""
        end = -1
        for r in results:
            if r.status is PutMessageStatus.PUT_OK and r.append is not None:
                end = max(end, r.append.wrote_offset + r.append.wrote_bytes)
        if end < 0:
            return results  # nothing stored cleanly: nothing to wait for
        acked = self.slave_ack_offset
        if acked >= end:
            return results
        if acked < 0 or end - acked > self._config.ha_max_gap_not_in_sync_bytes:
            why = (
                "no slave is connected"
                if acked < 0
                else f"the nearest slave is {end - acked} bytes behind "
                f"(ha_max_gap_not_in_sync_bytes={self._config.ha_max_gap_not_in_sync_bytes})"
            )
            return _weakened(results, PutMessageStatus.SLAVE_NOT_AVAILABLE, f"stored; {why}")
        if len(self._waiters) >= REPLICA_WAITERS_MAX:
            return _weakened(
                results, PutMessageStatus.SLAVE_NOT_AVAILABLE,
                f"stored; REPLICA_WAITERS_MAX={REPLICA_WAITERS_MAX} puts already wait for a slave",
            )  # fmt: skip
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, fut))
        self._data_event.set()  # the connections send it now, not at their next poll
        try:
            await within(fut, self._timeout_s)
        except TimeoutError:
            with contextlib.suppress(ValueError):  # an ack may have taken it meanwhile
                self._waiters.remove((end, fut))
            return _weakened(
                results, PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                "stored, but no slave acknowledged it within sync_flush_timeout_ms="
                f"{self._config.store.sync_flush_timeout_ms}",
            )  # fmt: skip
        return results


def _weakened(
    results: list[PutMessageResult], status: PutMessageStatus, detail: str
) -> list[PutMessageResult]:
    return [
        PutMessageResult(status, r.append, detail=detail)
        if r.status is PutMessageStatus.PUT_OK
        else r
        for r in results
    ]
