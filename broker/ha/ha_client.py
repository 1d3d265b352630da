"""A slave's side of HA replication (RocketMQ's HAClient).

Connects to its master's HA address, reports where its log ends, and appends the frames the
master sends at exactly their phy_offsets (DefaultMessageStore.append_to_commit_log); its own
dispatcher then builds consume queues and index from those bytes. It reports its log's end after
every append and at least every ha_send_heartbeat_interval_ms, closes a connection silent for
ha_housekeeping_interval_ms, and connects again after a backoff.

Frames cut the master's records anywhere; the client hands the store whole records and whole
blank end markers only, holding the rest of one until its last byte came, so the log never ends
in half a record and the dispatcher never meets one. The part held is one record at most: its
declared size is checked against the bytes left in its segment and this store's largest record
(whose limits must be its master's).

Bytes that do not continue this log (a frame starting elsewhere, or, where a record should
start, something that is not one) mean the master's log is not the one this slave copied: the
slave says so and refuses them rather than writing a log that is no one's. An operator moves the
slave's store aside to have it copy the master again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from broker.ha.protocol import (
    CONFIG_FRAME,
    CONFIG_REQUEST,
    FRAME_HEADER,
    HA_CONFIG_BYTES_MAX,
    HAError,
    cancel_and_wait,
    report,
)
from broker.store.codec.layout import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    TOTAL_AND_MAGIC,
)
from broker.store.config import RECORD_FIXED_BYTES_MAX
from broker.store.message_store import DefaultMessageStore
from rocketbox_api.deadlines import wait_event, within

LOG = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
RECONNECT_BACKOFF_MIN_S = 0.1
RECONNECT_BACKOFF_MAX_S = 5.0


class HAClient:
    def __init__(
        self,
        store: DefaultMessageStore,
        master_ha_address: str | None,
        heartbeat_interval_ms: int,
        housekeeping_interval_ms: int,
        transfer_batch_bytes: int,
        slave_sync_interval_ms: int,
    ) -> None:
        self._store = store
        self._sync_interval_s = slave_sync_interval_ms / 1000
        # Takes the master's configs and progress (slave_synchronize.py); set once they load.
        self.on_config: Callable[[bytes], None] | None = None
        self.master_ha_address = master_ha_address
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._housekeeping_s = housekeeping_interval_ms / 1000
        self._batch_bytes = transfer_batch_bytes
        self._changed = asyncio.Event()
        self.connected = False
        # The furthest master offset heard of (a frame's end, a heartbeat's offset): how far
        # behind this slave is, as far as it knows.
        self.master_offset_seen = 0
        self._pending = bytearray()  # the start of a record whose end has not come yet
        # The most a record or blank end marker can take (this store's limits, which must be
        # its master's): what the pending part is bounded by.
        cfg = store.config
        self._unit_bytes_max = (
            END_FILE_MIN_BLANK_LENGTH
            + RECORD_FIXED_BYTES_MAX
            + (cfg.message_size_bytes_max + cfg.topic_length_max + cfg.properties_length_max)
        )
        self._pending_from = 0

    def set_master(self, master_ha_address: str | None) -> None:
        """A new master (or none): the current connection ends and the next goes there."""
        if master_ha_address != self.master_ha_address:
            LOG.info("HA master is now %s", master_ha_address)
            self.master_ha_address = master_ha_address
            self._changed.set()

    @property
    def behind_bytes(self) -> int:
        return max(0, self.master_offset_seen - self._store.commit_log.max_offset)

    async def run(self) -> None:
        """Replicate until cancelled, connecting again after each failure."""
        backoff_s = RECONNECT_BACKOFF_MIN_S
        while True:
            self._changed.clear()
            address = self.master_ha_address
            if address is not None:
                started_s = time.monotonic()
                try:
                    await self._replicate_until_changed(address)
                except (HAError, OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                    LOG.warning("HA connection to master %s lost: %s", address, e)
                finally:
                    self.connected = False
                if time.monotonic() - started_s > RECONNECT_BACKOFF_MAX_S:
                    backoff_s = RECONNECT_BACKOFF_MIN_S  # it had worked a while: retry soon
            await wait_event(self._changed, backoff_s)
            backoff_s = min(backoff_s * 2, RECONNECT_BACKOFF_MAX_S)

    async def _replicate_until_changed(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        reader, writer = await within(
            asyncio.open_connection(host.strip("[]"), int(port)), CONNECT_TIMEOUT_S
        )
        try:
            self._pending.clear()
            self._pending_from = self._store.commit_log.max_offset
            writer.write(report(self._pending_from))
            await writer.drain()
            self.connected = True
            LOG.info("HA connected to master %s; reported phy_offset %s", address,
                     self._pending_from)  # fmt: skip
            replicate = asyncio.ensure_future(self._replicate(reader, writer))
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                done, _ = await asyncio.wait(
                    {replicate, changed}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                writer.close()  # its reads and writes end at once
                await cancel_and_wait([changed, replicate])
            if replicate in done:
                replicate.result()  # raises what ended it
        finally:
            writer.close()

    async def _replicate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        last_heard_s = last_report_s = time.monotonic()
        last_sync_s = last_heard_s - self._sync_interval_s  # ask for configs at once
        while True:
            if (
                self.on_config is not None
                and time.monotonic() - last_sync_s >= self._sync_interval_s
            ):
                writer.write(report(CONFIG_REQUEST))
                last_sync_s = time.monotonic()
            try:
                header = await within(reader.readexactly(FRAME_HEADER.size), self._heartbeat_s)
            except TimeoutError:
                header = b""
            now_s = time.monotonic()
            if header:
                last_heard_s = now_s
                start, size = FRAME_HEADER.unpack(header)
                if start == CONFIG_FRAME:
                    await self._take_config(reader, size)
                    continue
                if not 0 <= size <= self._batch_bytes:
                    raise HAError(f"a frame of {size} bytes (ha_transfer_batch_bytes="
                                  f"{self._batch_bytes})")  # fmt: skip
                data = await within(reader.readexactly(size), self._housekeeping_s)
                self.master_offset_seen = max(self.master_offset_seen, start + size)
                if size and self._take(start, data):
                    writer.write(report(self._store.commit_log.max_offset))
                    last_report_s = now_s
            elif now_s - last_heard_s >= self._housekeeping_s:
                raise HAError(f"the master was silent for {self._housekeeping_s:g} s")
            if now_s - last_report_s >= self._heartbeat_s:
                writer.write(report(self._store.commit_log.max_offset))
                last_report_s = now_s
            await within(writer.drain(), self._housekeeping_s)

    async def _take_config(self, reader: asyncio.StreamReader, size: int) -> None:
        if not 0 <= size <= HA_CONFIG_BYTES_MAX:
            raise HAError(
                f"a config frame of {size} bytes (HA_CONFIG_BYTES_MAX={HA_CONFIG_BYTES_MAX})"
            )
        payload = await within(reader.readexactly(size), self._housekeeping_s)
        if self.on_config is not None:
            try:
                self.on_config(payload)
            except ValueError as e:
                raise HAError(f"the master's configs: {e}") from e

    def _take(self, start: int, data: bytes) -> bool:
        """Append the whole records ``data`` completes, in one write; True when it appended."""
        expected = self._pending_from + len(self._pending)
        if expected == 0 and self._store.commit_log.mapped_file_queue.last() is None:
            # An empty log starts where the master's oldest kept segment does (its retention
            # may have deleted the ones before); append_data checks it is a segment's start.
            self._pending_from = expected = start
        if start != expected:
            raise HAError(f"a frame at phy_offset {start}, not at this log's end {expected}")
        pending = self._pending
        pending += data
        segment_bytes = self._store.config.mapped_file_size_commit_log_bytes
        cut = 0  # whole records (or a blank end marker) in pending[:cut]
        while len(pending) - cut >= TOTAL_AND_MAGIC.size:
            total, magic = TOTAL_AND_MAGIC.unpack_from(pending, cut)
            at = self._pending_from + cut
            if magic not in _RECORD_MAGICS or not (
                TOTAL_AND_MAGIC.size <= total <= segment_bytes - at % segment_bytes
            ):
                raise HAError(
                    f"no record starts at phy_offset {at} of the master's log "
                    "(its log diverged from this slave's)"
                )
            if total > self._unit_bytes_max:
                raise HAError(
                    f"a record of {total} bytes at phy_offset {at}, past this slave's largest "
                    f"({self._unit_bytes_max}): its message size limits must be its master's"
                )
            if len(pending) - cut < total:
                break
            cut += total
        if not cut:
            return False
        refused = self._store.append_to_commit_log(self._pending_from, bytes(pending[:cut]))
        if refused is not None:
            raise HAError(f"the store refused the master's bytes: {refused}")
        del pending[:cut]
        self._pending_from += cut
        return True


_RECORD_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE)
