"""One slave's connection to its master (RocketMQ's HAConnection).

The slave's first report says where its log ends; the master streams its commitlog from there in
frames (protocol.py) and a heartbeat frame when it has nothing to send for
ha_send_heartbeat_interval_ms. Every report is the slave's acknowledgement: its offset is what
a SYNC_MASTER's puts wait on. A connection that reports nothing for ha_housekeeping_interval_ms
is closed.

A slave whose log ends past this master's end holds bytes the master lacks (the master lost its
tail, or the slave replicated another master): appending after them would make a log that is no
one's. The master refuses it, says so, and closes; an operator moves that slave's store aside
(it then copies the master from its oldest segment).

Configs go before the bytes that need them: a connection's first frame is a config snapshot, and
after every topic or group change of the master (``config_version``) a fresh snapshot goes before
any more log bytes. A slave therefore never holds a message of a topic it has no config for (a
SYNC_MASTER's acknowledged send included), and a group's settings reach a connected slave
within a transfer poll of their change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from broker.ha.protocol import CONFIG_FRAME, CONFIG_REQUEST, REPORT, HAError, frame
from broker.store.commit_log import CommitLog
from rocketbox_api.deadlines import within

LOG = logging.getLogger(__name__)

# How often an idle connection looks for new bytes in the log: puts do not wake it (that would
# cost every put); a SYNC_MASTER's do (ha_service.py).
HA_TRANSFER_POLL_MS = 20


class ConnectionOwner(Protocol):
    """What a connection tells its HAService and waits on."""

    def on_ack(self, connection: HAConnection) -> None: ...

    async def wait_for_data(self, timeout_s: float) -> None: ...

    def config_snapshot(self) -> bytes | None:
        """The configs and progress a slave asks for (None: not ready yet)."""
        ...

    @property
    def config_version(self) -> int:
        """Counts the master's topic and group changes: a connection that has not sent the
        latest sends a snapshot before any more log bytes."""
        ...


class HAConnection:
    def __init__(
        self,
        owner: ConnectionOwner,
        commit_log: CommitLog,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        heartbeat_interval_ms: int,
        housekeeping_interval_ms: int,
        transfer_batch_bytes: int,
    ) -> None:
        self._owner = owner
        self._log = commit_log
        self._reader = reader
        self._writer = writer
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._housekeeping_s = housekeeping_interval_ms / 1000
        self._batch_bytes = transfer_batch_bytes
        peer = writer.get_extra_info("peername")
        self.slave_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        # The slave's last report: the end of the log it holds (-1 before the first).
        self.slave_ack_offset = -1
        self.transfer_from_offset = -1
        self._config_requested = False
        # The config_version the last snapshot sent was taken at; none sent yet, so the first
        # frame of a connection is a snapshot.
        self._config_version_sent = -1

    async def serve(self) -> None:
        """Serve the slave until it goes, falls silent or breaks the protocol."""
        try:
            first = await self._read_report()
            self._start_transfer(first)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read_reports())
                group.create_task(self._transfer())
        except* (HAError, OSError, asyncio.IncompleteReadError, TimeoutError) as failed:
            LOG.warning("HA connection of slave %s closed: %s", self.slave_address,
                        failed.exceptions[0])  # fmt: skip
        finally:
            self._writer.close()

    def close(self) -> None:
        self._writer.close()

    def _start_transfer(self, slave_max_offset: int) -> None:
        log = self._log
        if slave_max_offset > log.max_offset:
            raise HAError(
                f"its log ends at phy_offset {slave_max_offset}, past this master's end "
                f"{log.max_offset}: it holds bytes this master lacks; refused (move the slave's "
                "store aside to have it copy this master again)"
            )
        if slave_max_offset == 0:
            start = log.min_offset  # an empty slave copies from the oldest segment kept
        elif slave_max_offset < log.min_offset:
            raise HAError(
                f"its log ends at phy_offset {slave_max_offset}, before this master's oldest "
                f"kept byte {log.min_offset}; refused (move the slave's store aside)"
            )
        else:
            start = slave_max_offset
        self.transfer_from_offset = start
        LOG.info("slave %s connected; transferring from phy_offset %s", self.slave_address, start)

    async def _read_report(self) -> int:
        data = await within(self._reader.readexactly(REPORT.size), self._housekeeping_s)
        (offset,) = REPORT.unpack(data)
        if offset == CONFIG_REQUEST and self.slave_ack_offset >= 0:
            self._config_requested = True
            return self.slave_ack_offset
        if offset < 0:
            raise HAError(f"reported a negative phy_offset {offset}")
        self.slave_ack_offset = offset
        self._owner.on_ack(self)
        return int(offset)

    async def _read_reports(self) -> None:
        while True:
            offset = await self._read_report()
            if offset > self.transfer_from_offset:
                raise HAError(f"acknowledged phy_offset {offset}, past what was sent")

    async def _transfer(self) -> None:
        writer = self._writer
        last_write_s = time.monotonic()
        while True:
            data = self._read_log(self.transfer_from_offset)
            # Read after the log: a topic or group change moves the version before any put can
            # use it, so bytes read above that need a change find the version moved, and the
            # snapshot, taken after this read, goes before them.
            version = self._owner.config_version
            wanted = self._config_requested or version != self._config_version_sent
            snapshot = self._owner.config_snapshot() if wanted else None
            if snapshot is not None:
                self._config_requested = False
                self._config_version_sent = version
                writer.write(frame(CONFIG_FRAME, snapshot))
            elif data:
                writer.write(frame(self.transfer_from_offset, data))
                self.transfer_from_offset += len(data)
            elif time.monotonic() - last_write_s >= self._heartbeat_s:
                writer.write(frame(self.transfer_from_offset, b""))
            else:
                await self._owner.wait_for_data(HA_TRANSFER_POLL_MS / 1000)
                continue
            last_write_s = time.monotonic()
            await within(writer.drain(), self._housekeeping_s)

    def _read_log(self, phy_offset: int) -> bytes:
        """The log's bytes from ``phy_offset`` to the end of its segment's written part, at
        most a batch."""
        mf = self._log.mapped_file_queue.find_by_offset(phy_offset)
        if mf is None:
            return b""
        pos = phy_offset - mf.file_from_offset
        size = min(mf.wrote_position - pos, self._batch_bytes)
        if size <= 0:
            return b""
        try:
            return mf.read(pos, size)
        except ValueError as e:  # retention deleted the segment while we read it
            raise HAError(f"phy_offset {phy_offset} is no longer kept") from e
